package session_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestGrantsAndDenials: --allow reads, --allow-write writes, and neither
// reaches the home's secrets nor agent-lock's recordings, which are refused
// and reported even under a grant of the whole home. Runs in the test VMs.
func TestGrantsAndDenials(t *testing.T) {
	testenv.NeedVM(t)
	bin := testenv.AgentLockBin(t)
	const home = "/home/jailtest"
	mk := func(rel, content string) {
		p := filepath.Join(home, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if content != "" {
			os.WriteFile(p, []byte(content), 0o600)
		} else {
			os.MkdirAll(p, 0o755)
		}
		for q := p; q != home; q = filepath.Dir(q) {
			os.Chown(q, 4242, 4242)
		}
	}
	mk("g/proj", "")
	mk("g/ref/doc.txt", "REFERENCE\n")
	mk("g/cache", "")
	mk("g/other/secret.txt", "OTHER\n")
	mk(".ssh/id_ed25519", "KEY\n")
	mk(".bash_history", "export TOKEN=x\n")
	mk("g/other/server.pem", "CERT AND KEY\n")
	mk("g/other/id_rsa", "KEY\n")
	mk("g/proj/key.pem", "a test fixture\n")
	mk("g/proj/x.secret", "S\n")
	dir := filepath.Join(home, "g/proj")

	run := func(script string, flags ...string) (map[string]string, []report.Event) {
		t.Helper()
		rep := testenv.ReportPath(t, 4242)
		args := append([]string{"--headless", "--report", rep}, flags...)
		cmd := exec.Command(bin, append(args, dir, "--", "/bin/sh", "-c", script)...)
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("agent-lock %v: %v\n%s", flags, err, out)
		}
		results := map[string]string{}
		b, _ := os.ReadFile(filepath.Join(dir, "results"))
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if k, v, ok := strings.Cut(l, " "); ok {
				results[k] = v
			}
		}
		os.Remove(filepath.Join(dir, "results"))
		var escapes []report.Event
		f, _ := os.Open(rep)
		defer f.Close()
		report.Read(f, func(r report.Record) error {
			if r.Event != nil {
				escapes = append(escapes, *r.Event)
			}
			return nil
		})
		return results, escapes
	}
	try := `try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name ok" >> results; else echo "$name refused" >> results; fi; }
`
	res, _ := run(try+`
try read-ro cat ~/g/ref/doc.txt
try write-ro sh -c 'echo x > ~/g/ref/new'
try write-rw sh -c 'echo x > ~/g/cache/new'
try read-other cat ~/g/other/secret.txt`,
		"--allow", filepath.Join(home, "g/ref"), "--allow-write", filepath.Join(home, "g/cache"))
	want := map[string]string{"read-ro": "ok", "write-ro": "refused", "write-rw": "ok", "read-other": "refused"}
	for k, v := range want {
		if res[k] != v {
			t.Errorf("%s: %q, want %s (all: %v)", k, res[k], v, res)
		}
	}

	// A grant of the whole home, read-write: the secrets and the recordings
	// stay out.
	res, escapes := run(try+`
try read-key cat ~/.ssh/id_ed25519
try read-history cat ~/.bash_history
try list-recordings ls ~/.local/state/agent-lock
try forge-recording sh -c 'echo {} > ~/.local/state/agent-lock/forged.jsonl'
try write-home sh -c 'echo x > ~/g/notes'
try read-other cat ~/g/other/secret.txt
try read-pem cat ~/g/other/server.pem
try rename-pem mv ~/g/other/server.pem ~/g/other/server.txt
try read-idrsa cat ~/g/other/id_rsa
try read-pem-in-dir cat key.pem
try read-user-pattern cat x.secret`,
		"--allow-write", home, "--deny", "*.secret")
	want = map[string]string{"read-key": "refused", "read-history": "refused", "list-recordings": "refused",
		"forge-recording": "refused", "write-home": "ok", "read-other": "ok", "read-pem": "refused",
		"rename-pem": "refused", "read-idrsa": "refused", "read-pem-in-dir": "ok", "read-user-pattern": "refused"}
	for k, v := range want {
		if res[k] != v {
			t.Errorf("under --allow-write ~, %s: %q, want %s (all: %v)", k, res[k], v, res)
		}
	}
	reported := false
	for _, e := range escapes {
		if e.Path == filepath.Join(home, ".ssh/id_ed25519") && e.Op == "read" && e.Verdict == report.Blocked && e.Sensitive {
			reported = true
		}
	}
	if !reported {
		t.Errorf("the refused key read was not reported: %v", escapes)
	}
	for path, rule := range map[string]string{".ssh/id_ed25519": "home secret ~/.ssh", "g/other/server.pem": "deny pattern *.pem",
		"g/other/id_rsa": "deny pattern id_*", "g/proj/x.secret": "deny pattern *.secret"} {
		found := false
		for _, e := range escapes {
			if e.Path == filepath.Join(home, path) && e.Op == "read" {
				found = true
				if e.Rule != rule {
					t.Errorf("the read of ~/%s names rule %q, want %q", path, e.Rule, rule)
				}
			}
		}
		if !found {
			t.Errorf("the refused read of ~/%s was not reported", path)
		}
	}
	if _, err := os.Stat(filepath.Join(home, ".local/state/agent-lock/forged.jsonl")); err == nil {
		t.Error("the agent forged a recording")
	}

	// Bad grants are refused before anything runs.
	for _, bad := range [][]string{{"--allow", "/nonexistent"}, {"--allow-write", "/"}, {"--deny", home + "/g"}} {
		cmd := exec.Command(bin, append(append([]string{"--headless"}, bad...), dir, "--", "true")...)
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), bad[0]) {
			t.Errorf("agent-lock %v: %v\n%s", bad, err, out)
		}
	}
}

// TestProtectedFiles: in a project that is a git repository, the agent
// commits, but cannot plant a hook, rewrite .git/config, move .git away,
// make a .git pointer elsewhere or write an .envrc; --unprotect lifts one
// entry; each refusal is reported with the rule that made it. Runs in the
// test VMs.
func TestProtectedFiles(t *testing.T) {
	testenv.NeedVM(t)
	bin := testenv.AgentLockBin(t)
	_, dir := testenv.ProjectDir(t, 4242)
	git := "GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@x git -c safe.directory='*'"
	setup := exec.Command("/bin/sh", "-c", git+" init -q -b main && mkdir lib && echo x > f && echo y > lib/g && "+git+" add f lib && "+git+" commit -qm first")
	setup.Dir = dir
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("git setup: %v\n%s", err, out)
	}
	if out, err := exec.Command("chown", "-R", "4242:4242", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	configBefore, _ := os.ReadFile(filepath.Join(dir, ".git/config"))

	script := `export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@x
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name ok" >> results; else echo "$name refused" >> results; fi; }
try commit sh -c 'echo y >> f && git add f && git commit -qm second && git log --oneline | grep -q second'
try branch sh -c 'git checkout -qb topic && git checkout -q main && git branch -qD topic'
try read-config cat .git/config
try hook sh -c 'echo evil > .git/hooks/pre-commit'
try config git config core.fsmonitor evil
try envrc sh -c 'echo evil > .envrc'
try vscode sh -c 'mkdir -p .vscode && echo {} > .vscode/settings.json'
try move-git mv .git .git-real
try gitfile sh -c 'echo "gitdir: /tmp/x" > lib/.git'
try rename-onto-git sh -c 'mkdir g && mv g lib/.git'
`
	rep := testenv.ReportPath(t, 4242)
	cmd := exec.Command(bin, "--headless", "--report", rep, "--unprotect", ".vscode", dir, "--", "/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("agent-lock: %v\n%s", err, out)
	}
	results := map[string]string{}
	b, _ := os.ReadFile(filepath.Join(dir, "results"))
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			results[k] = v
		}
	}
	want := map[string]string{"commit": "ok", "branch": "ok", "read-config": "ok", "hook": "refused",
		"config": "refused", "envrc": "refused", "vscode": "ok", "move-git": "refused", "gitfile": "refused",
		"rename-onto-git": "refused"}
	for k, v := range want {
		if results[k] != v {
			t.Errorf("%s: %q, want %s (all: %v)", k, results[k], v, results)
		}
	}
	// The user's .git stays where it is, as it was; nothing may take the
	// name .git in a folder of the user's but mkdir, which brings no
	// config along.
	if after, _ := os.ReadFile(filepath.Join(dir, ".git/config")); string(after) != string(configBefore) {
		t.Errorf(".git/config changed:\n%s", after)
	}
	for _, p := range []string{".git/hooks/pre-commit", ".envrc"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s was made", p)
		}
	}
	f, err := os.Open(rep)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rules := map[string]string{} // path -> rule
	var opens int
	var sum *report.Summary
	report.Read(f, func(r report.Record) error {
		if e := r.Open; e != nil {
			// The in-bounds samples a live view shows: in DIR, never
			// escapes.
			opens++
			if e.Verdict != report.InBounds || (e.Path != dir && !strings.HasPrefix(e.Path, dir+"/")) {
				t.Errorf("in-bounds sample %+v", *e)
			}
			return nil
		}
		if r.Summary != nil {
			sum = r.Summary
		}
		if e := r.Event; e != nil && e.Verdict == report.Blocked {
			rules[strings.TrimPrefix(e.Path, dir+"/")] = e.Rule
			if e.Path2 != "" {
				rules[strings.TrimPrefix(e.Path2, dir+"/")] = e.Rule
			}
		}
		return nil
	})
	if opens == 0 || sum == nil || sum.InBounds < uint64(opens) {
		t.Errorf("%d in-bounds samples, summary %+v: want some, each counted in the summary", opens, sum)
	}
	for path, rule := range map[string]string{".git/hooks/pre-commit": "protected .git/hooks",
		".git/config": "protected .git/config", ".git": "protected .git", "lib/.git": "protected .git",
		".envrc": "protected .envrc"} {
		if rules[path] != rule {
			t.Errorf("refusal of %s: rule %q, want %q (all: %v)", path, rules[path], rule, rules)
		}
	}
	for path := range rules {
		if strings.HasPrefix(path, ".vscode") || path == "f" || strings.HasPrefix(path, ".git/objects") {
			t.Errorf("refused %s, which the agent may write", path)
		}
	}

	// An --unprotect that names nothing protected is an error that lists
	// what is.
	cmd = exec.Command(bin, "--headless", "--unprotect", "src", dir, "--", "true")
	cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--unprotect src: not a protected path") || !strings.Contains(string(out), ".git/hooks") {
		t.Errorf("agent-lock --unprotect src: %v\n%s", err, out)
	}
}
