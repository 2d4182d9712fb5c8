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
	if os.Getenv("AGENT_LOCK_VM") != "1" || os.Geteuid() != 0 {
		t.Skip("runs in the test VMs (make vmtest)")
	}
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
	dir := filepath.Join(home, "g/proj")

	run := func(script string, flags ...string) (map[string]string, []report.Event) {
		t.Helper()
		rep := filepath.Join(t.TempDir(), "r.jsonl")
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
try read-other cat ~/g/other/secret.txt`,
		"--allow-write", home)
	want = map[string]string{"read-key": "refused", "read-history": "refused", "list-recordings": "refused",
		"forge-recording": "refused", "write-home": "ok", "read-other": "ok"}
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
