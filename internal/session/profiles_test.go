package session_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// standIn is an agent's file layout in a home: where the command is
// installed (its profile is chosen by that name), the login it reads, the
// state it writes, the cache it uses and the variable its key is in.
type standIn struct {
	install, login, state, cache, key string
}

var standIns = map[string]standIn{
	"claude":   {".local/bin/claude", ".claude/.credentials.json", ".claude/projects/p/s.jsonl", ".npm/_cacache/index", "ANTHROPIC_API_KEY"},
	"codex":    {".npm-global/bin/codex", ".codex/auth.json", ".codex/sessions/s.jsonl", ".npm/_cacache/index", "OPENAI_API_KEY"},
	"gemini":   {".npm-global/bin/gemini", ".gemini/oauth_creds.json", ".gemini/tmp/s.json", ".npm/_cacache/index", "GEMINI_API_KEY"},
	"aider":    {".local/bin/aider", ".aider.conf.yml", ".aider/caches/c", ".cache/pip/http/x", "OPENAI_API_KEY"},
	"opencode": {".opencode/bin/opencode", ".local/share/opencode/auth.json", ".local/state/opencode/s", ".cache/opencode/pkg", "ANTHROPIC_API_KEY"},
	"omp":      {".bun/bin/omp", ".omp/agent/auth.json", ".omp/agent/sessions/s", ".npm/_cacache/index", "OPENROUTER_API_KEY"},
}

// home is the test user's home, which the profile tests rewrite.
const home = "/home/jailtest"

// profileRun skips where the profile tests cannot run and returns
// agent-lock and a project directory of the test user's.
func profileRun(t *testing.T) (bin, dir string) {
	t.Helper()
	testenv.NeedVM(t)
	_, dir = testenv.ProjectDir(t, 4242)
	return testenv.AgentLockBin(t), dir
}

// TestProfiles: for each agent profile, a stand-in installed where the agent
// is, under the agent's name, reads its login, writes its state, reads its
// install, uses the caches and finds its API key, with no refusal; it
// reaches for ~/.ssh, another repository and the shell history and is
// refused and reported each time; a secret variable it has no use for is
// withheld. Runs in the test VMs and natively, with the engine agent-lock
// picks (the BPF LSM in the VMs, Landlock on the development machines).
func TestProfiles(t *testing.T) {
	bin, dir := profileRun(t)
	write := func(rel, content string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(home, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		for q := p; q != home; q = filepath.Dir(q) {
			os.Chown(q, 4242, 4242)
		}
	}
	for name, s := range standIns {
		t.Run(name, func(t *testing.T) {
			if out, err := exec.Command("find", home, "-mindepth", "1", "-delete").CombinedOutput(); err != nil {
				t.Fatalf("empty the home: %v %s", err, out)
			}
			write(".ssh/id_ed25519", "KEY\n", 0o600)
			write("other-repo/README", "OTHER\n", 0o644)
			write(".bash_history", "export X=1\n", 0o600)
			write(s.login, "LOGIN\n", 0o600)
			write(s.state, "", 0o644)
			write(s.cache, "", 0o644)
			write(s.install, `#!/bin/sh
cat ~/`+s.login+` >/dev/null && echo login-ok
echo state >> ~/`+s.state+` && echo state-ok
cat "$0" >/dev/null && echo install-ok
echo cache >> ~/`+s.cache+` && echo cache-ok
[ -n "$`+s.key+`" ] && echo key-ok
cat ~/.ssh/id_ed25519 2>/dev/null && echo LEAK-ssh
cat ~/other-repo/README 2>/dev/null && echo LEAK-repo
cat ~/.bash_history 2>/dev/null && echo LEAK-history
[ -n "$GITHUB_TOKEN" ] && echo LEAK-env
echo done
`, 0o755)
			rep := testenv.ReportPath(t, 4242)
			args := []string{"--headless", "--report", rep}
			cmd := exec.Command(bin, append(args, dir, "--", filepath.Join(home, s.install))...)
			cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", s.key+"=sk-test", "GITHUB_TOKEN=ghp_test")
			outB, err := cmd.Output()
			out := string(outB)
			if err != nil {
				t.Fatalf("agent-lock: %v\n%s", err, out)
			}
			for _, want := range []string{"login-ok", "state-ok", "install-ok", "cache-ok", "key-ok", "done"} {
				if !strings.Contains(out, want+"\n") {
					t.Errorf("the stand-in did not print %s:\n%s", want, out)
				}
			}
			if strings.Contains(out, "LEAK") {
				t.Errorf("the stand-in reached past its profile:\n%s", out)
			}
			f, err := os.Open(rep)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var start *report.Start
			refused := map[string]bool{}
			report.Read(f, func(r report.Record) error {
				if r.Start != nil {
					start = r.Start
				}
				if e := r.Event; e != nil {
					rel := strings.TrimPrefix(e.Path, home+"/")
					switch rel {
					case ".ssh/id_ed25519", "other-repo/README", ".bash_history":
						refused[rel] = e.Verdict == report.Blocked
					default:
						t.Errorf("refused what the profile grants: %s %s %s [%s]", e.Verdict, e.Op, e.Path, e.Rule)
					}
				}
				return nil
			})
			for _, rel := range []string{".ssh/id_ed25519", "other-repo/README", ".bash_history"} {
				if !refused[rel] {
					t.Errorf("the reach for ~/%s was not reported blocked", rel)
				}
			}
			if start == nil || len(start.Profiles) == 0 || start.Profiles[0] != name {
				t.Errorf("start record names profiles %v, want %s first", start.Profiles, name)
			}
			if start != nil && !strings.Contains(strings.Join(start.WithheldEnv, " "), "GITHUB_TOKEN") {
				t.Errorf("GITHUB_TOKEN not listed as withheld: %v", start.WithheldEnv)
			}
		})
	}
}

// TestProfilesFirstRun: an agent run for the first time has no folder of
// its own yet; agent-lock makes it (the user's, 0700) so the cell can grant
// it, and the agent saves its login there with no refusal.
func TestProfilesFirstRun(t *testing.T) {
	bin, dir := profileRun(t)
	if out, err := exec.Command("find", home, "-mindepth", "1", "-delete").CombinedOutput(); err != nil {
		t.Fatalf("empty the home: %v %s", err, out)
	}
	install := filepath.Join(home, ".npm-global/bin/codex")
	os.MkdirAll(filepath.Dir(install), 0o755)
	if err := os.WriteFile(install, []byte(`#!/bin/sh
mkdir -p ~/.codex/sessions && echo '{}' > ~/.codex/auth.json && echo s >> ~/.codex/sessions/s.jsonl && echo saved
`), 0o755); err != nil {
		t.Fatal(err)
	}
	exec.Command("chown", "-R", "4242:4242", filepath.Join(home, ".npm-global")).Run()
	rep := testenv.ReportPath(t, 4242)
	cmd := exec.Command(bin, "--headless", "--report", rep, dir, "--", install)
	cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "saved\n") {
		t.Fatalf("agent-lock: %v\n%s", err, out)
	}
	fi, err := os.Stat(filepath.Join(home, ".codex"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4242 || st.Gid != 4242 || fi.Mode().Perm() != 0o700 {
		t.Errorf("~/.codex: owner %d:%d mode %v, want 4242:4242 0700", st.Uid, st.Gid, fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(filepath.Join(home, ".codex/auth.json")); string(b) != "{}\n" {
		t.Errorf("auth.json: %q", b)
	}
	f, err := os.Open(rep)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	report.Read(f, func(r report.Record) error {
		if e := r.Event; e != nil {
			t.Errorf("refused on a first run: %s %s %s [%s]", e.Verdict, e.Op, e.Path, e.Rule)
		}
		return nil
	})
}

// TestRealClaudeCode: Claude Code as npm installs it (the pinned package
// `make agents` fetches from the registry), in the test user's npm prefix
// (~/.npm-global), started jailed by its command name as a new user would:
// agent-lock picks the claude profile, Claude Code prints its version and
// its help, and nothing it did was refused. It needs no login for either.
func TestRealClaudeCode(t *testing.T) {
	testenv.NeedVM(t)
	pkg, err := filepath.Abs("../../.build/agents/claude-code/node_modules/@anthropic-ai/claude-code")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pkg, "bin/claude.exe")); err != nil {
		t.Fatalf("Claude Code is not fetched (make agents): %v", err)
	}
	bin := testenv.AgentLockBin(t)
	_, dir := testenv.ProjectDir(t, 4242)
	const home = "/home/jailtest"
	prefix := filepath.Join(home, ".npm-global")
	t.Cleanup(func() { os.RemoveAll(prefix) })
	dst := filepath.Join(prefix, "lib/node_modules/@anthropic-ai/claude-code")
	os.RemoveAll(prefix)
	os.MkdirAll(filepath.Dir(dst), 0o755)
	os.MkdirAll(filepath.Join(prefix, "bin"), 0o755)
	if out, err := exec.Command("cp", "-a", pkg, dst).CombinedOutput(); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	claude := filepath.Join(prefix, "bin/claude")
	if err := os.Symlink("../lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe", claude); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", "-h", "4242:4242", prefix).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	for _, tc := range []struct{ arg, want string }{{"--version", "(Claude Code)"}, {"--help", "Usage: claude"}} {
		rep := testenv.ReportPath(t, 4242)
		args := []string{"--headless", "--report", rep}
		cmd := exec.Command(bin, append(args, dir, "--", claude, tc.arg)...)
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("claude %s: %v, want %q in:\n%s", tc.arg, err, tc.want, out)
		}
		f, err := os.Open(rep)
		if err != nil {
			t.Fatal(err)
		}
		report.Read(f, func(r report.Record) error {
			if r.Start != nil && strings.Join(r.Start.Profiles, " ") != "claude node" {
				t.Errorf("claude %s: profiles %v, want claude and node", tc.arg, r.Start.Profiles)
			}
			if e := r.Event; e != nil {
				t.Errorf("claude %s: refused %s %s [%s]", tc.arg, e.Op, e.Path, e.Rule)
			}
			return nil
		})
		f.Close()
	}
	// Claude Code saves ~/.claude.json under a lock (~/.claude.json.lock)
	// through a temporary file next to it (~/.claude.json.tmp.PID.N)
	// renamed over it, and makes it on first use. The claude profile grants
	// it by name with those siblings, and agent-lock makes it ({}) as the
	// user where it is missing: under the BPF LSM the first save replaces
	// it and the second replaces what the first made, with nothing
	// refused. Landlock grants by identity: the file made before the cell
	// opened is granted, the lock and the temporary file are refused (and
	// reported), and on EACCES Claude Code saves in place.
	engine := "bpf-lsm"
	if err := exec.Command(bin, "doctor", "--engine", "bpf-lsm").Run(); err != nil {
		engine = "landlock"
	}
	cfg := filepath.Join(home, ".claude.json")
	os.Remove(cfg)
	t.Cleanup(func() { os.Remove(cfg) })
	servers := []string{"agentlocktest", "agentlocktest2"}
	if engine == "landlock" {
		servers = servers[:1]
	}
	for _, name := range servers {
		rep := testenv.ReportPath(t, 4242)
		save := exec.Command(bin, "--headless", "--report", rep, dir, "--", claude, "mcp", "add", "-s", "user", name, "--", "/bin/true")
		save.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
		out, err := save.CombinedOutput()
		if b, _ := os.ReadFile(cfg); err != nil || !strings.Contains(string(b), `"`+name+`"`) {
			t.Errorf("%s: claude mcp add -s user %s: %v; ~/.claude.json is %q:\n%s", engine, name, err, b, out)
		}
		f, err := os.Open(rep)
		if err != nil {
			t.Fatal(err)
		}
		report.Read(f, func(r report.Record) error {
			if e := r.Event; e != nil && (engine == "bpf-lsm" || !strings.HasPrefix(e.Path, cfg+".")) {
				t.Errorf("%s: claude mcp add: refused %s %s [%s]", engine, e.Op, e.Path, e.Rule)
			}
			return nil
		})
		f.Close()
	}
	if b, _ := os.ReadFile(cfg); !strings.Contains(string(b), `"agentlocktest"`) {
		t.Errorf("%s: the second save lost the first's server: %s", engine, b)
	}
	if fi, err := os.Stat(cfg); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 4242 {
		t.Errorf("%s: ~/.claude.json is not the user's: %v", engine, err)
	}

	// Without its profile the same command is refused: the grant is what
	// made it work.
	cmd := exec.Command(bin, "--headless", "--profile", "none", dir, "--", claude, "--version")
	cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
	if out, err := cmd.CombinedOutput(); err == nil || strings.Contains(string(out), "(Claude Code)") {
		t.Errorf("claude --version ran with --profile none: %v\n%s", err, out)
	}
}
