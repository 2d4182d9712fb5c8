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

// worktreeScript commits in a linked worktree, then tries to rewrite what
// the user's own git would follow out of it: the worktree's link to the
// repository, its config, the repository's config and hooks.
const worktreeScript = `G=$(sed 's/^gitdir: //' .git); C=$(cd "$G" && cd "$(cat commondir)" && pwd)
echo x > f && git add f && git -c user.name=a -c user.email=a@b commit -qm wt-commit && echo commit-ok
git log --oneline | grep -q wt-commit && echo log-ok
(echo "$HOME" > "$G/commondir") 2>/dev/null && echo commondir-written
(echo "[core]" > "$G/config.worktree") 2>/dev/null && echo config.worktree-written
(echo "[core] hooksPath=/tmp" >> "$C/config") 2>/dev/null && echo config-written
(echo x > "$C/hooks/pre-commit") 2>/dev/null && echo hook-written
(echo "gitdir: $HOME" > .git) 2>/dev/null && echo pointer-written
true`

// mainScript works in the repository's main worktree, which has a linked
// worktree elsewhere: it adds a worktree of its own inside DIR and commits
// there, then tries to rewrite the linked worktree's links back to the
// repository (git in that worktree would follow them to a config of the
// agent's).
const mainScript = `export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b
git worktree add -q inner -b inner && cd inner && echo y > y && git add y && git commit -qm inner-commit && cd .. &&
git worktree list | grep -q inner && git worktree remove inner && echo inner-ok
(echo "$HOME" > .git/worktrees/wt/commondir) 2>/dev/null && echo main-commondir-written
(echo "/tmp/x/.git" > .git/worktrees/wt/gitdir) 2>/dev/null && echo main-gitdir-written
true`

// TestGitWorktree: DIR may be a linked worktree whose git directory lies
// outside it; the agent commits there (objects, refs and logs of the
// repository, the worktree's HEAD and index), and may not rewrite the
// worktree's commondir or config.worktree, DIR's .git pointer to it, nor
// the repository's config or hooks (refused and reported). The other side
// of the link: in the main worktree the agent adds a worktree of its own
// and commits there with no refusal, and may not rewrite the links of the
// user's linked worktree. Unjailed every one of those writes works, so the
// test is real. Under the Landlock engine the commits work too, and the
// worktrees' links are writable (Landlock grants a directory whole: a
// documented limit). Runs in the test VMs with both engines, and natively
// with the Landlock engine.
func TestGitWorktree(t *testing.T) {
	testenv.NeedVM(t)
	bin := testenv.AgentLockBin(t)
	const home = "/home/jailtest"
	base := filepath.Join(home, "wt-test")
	asUser := func(dir, script string) string {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return string(out)
	}
	fresh := func() string {
		t.Helper()
		os.RemoveAll(base)
		os.Mkdir(base, 0o755)
		os.Chown(base, 4242, 4242)
		asUser(base, `git init -q repo && cd repo && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m init &&
			mkdir -p .git/hooks && git worktree add -q ../wt`)
		return filepath.Join(base, "wt")
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	written := []string{"commondir-written", "config.worktree-written", "config-written", "hook-written", "pointer-written"}
	mainWritten := []string{"main-commondir-written", "main-gitdir-written"}

	out := asUser(fresh(), worktreeScript)
	for _, w := range append([]string{"commit-ok", "log-ok"}, written...) {
		if !strings.Contains(out, w) {
			t.Fatalf("unjailed, %s is missing, so the test would prove nothing:\n%s", w, out)
		}
	}
	fresh()
	out = asUser(filepath.Join(base, "repo"), mainScript)
	for _, w := range append([]string{"inner-ok"}, mainWritten...) {
		if !strings.Contains(out, w) {
			t.Fatalf("unjailed, in the main worktree %s is missing, so the test would prove nothing:\n%s", w, out)
		}
	}

	engines := []string{"bpf-lsm", "landlock"}
	if err := exec.Command(bin, "doctor", "--engine", "bpf-lsm").Run(); err != nil {
		// This kernel cannot run the BPF-LSM jail (our build machines'):
		// the VM matrix covers it.
		engines = []string{"landlock"}
	}
	t.Logf("engines: %v", engines)
	for _, engine := range engines {
		dir := fresh()
		rep := testenv.ReportPath(t, 4242)
		cmd := exec.Command(bin, "--engine", engine, "--headless", "--report", rep, dir, "--", "/bin/sh", "-c", worktreeScript)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin")
		b, err := cmd.CombinedOutput()
		out := string(b)
		if err != nil {
			t.Fatalf("%s: agent-lock: %v\n%s", engine, err, out)
		}
		for _, w := range []string{"commit-ok", "log-ok"} {
			if !strings.Contains(out, w) {
				t.Errorf("%s: git in the worktree failed (%s missing):\n%s", engine, w, out)
			}
		}
		var escapes []report.Event
		f, _ := os.Open(rep)
		report.Read(f, func(r report.Record) error {
			if r.Event != nil && r.Event.Verdict == report.Blocked {
				escapes = append(escapes, *r.Event)
			}
			return nil
		})
		f.Close()
		for _, w := range written {
			leaks := engine == "landlock" && (w == "commondir-written" || w == "config.worktree-written" || w == "pointer-written")
			if strings.Contains(out, w) != leaks {
				t.Errorf("%s: %s: got %v, want %v:\n%s", engine, w, strings.Contains(out, w), leaks, out)
			}
		}
		wants := []string{"/wt/commondir", "/wt/config.worktree", "/repo/.git/config", "/repo/.git/hooks/pre-commit", "/wt/.git"}

		// The main worktree, with the user's linked worktree outside DIR.
		fresh()
		repo := filepath.Join(base, "repo")
		rep = testenv.ReportPath(t, 4242)
		cmd = exec.Command(bin, "--engine", engine, "--headless", "--report", rep, repo, "--", "/bin/sh", "-c", mainScript)
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin")
		b, err = cmd.CombinedOutput()
		out = string(b)
		if err != nil {
			t.Fatalf("%s: agent-lock in the main worktree: %v\n%s", engine, err, out)
		}
		if !strings.Contains(out, "inner-ok") {
			t.Errorf("%s: a worktree of the agent's own failed:\n%s", engine, out)
		}
		for _, w := range mainWritten {
			if strings.Contains(out, w) != (engine == "landlock") {
				t.Errorf("%s: %s: got %v:\n%s", engine, w, strings.Contains(out, w), out)
			}
		}
		var mainEscapes []report.Event
		f, _ = os.Open(rep)
		report.Read(f, func(r report.Record) error {
			if r.Event != nil && r.Event.Verdict == report.Blocked {
				mainEscapes = append(mainEscapes, *r.Event)
			}
			return nil
		})
		f.Close()
		if engine == "bpf-lsm" {
			for _, want := range wants {
				found := false
				for _, e := range escapes {
					found = found || strings.HasSuffix(e.Path, want)
				}
				if !found {
					t.Errorf("bpf-lsm: no blocked record for ...%s: %+v", want, escapes)
				}
			}
			// Exactly the two links refused: the agent's own worktree
			// took none.
			for _, want := range []string{"/repo/.git/worktrees/wt/commondir", "/repo/.git/worktrees/wt/gitdir"} {
				found := false
				for _, e := range mainEscapes {
					found = found || strings.HasSuffix(e.Path, want)
				}
				if !found {
					t.Errorf("bpf-lsm: in the main worktree, no blocked record for ...%s: %+v", want, mainEscapes)
				}
			}
			if len(mainEscapes) != 2 {
				t.Errorf("bpf-lsm: in the main worktree, %d refusals, want the 2 links: %+v", len(mainEscapes), mainEscapes)
			}
		}
	}
}
