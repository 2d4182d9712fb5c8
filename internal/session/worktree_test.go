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
true`

// TestGitWorktree: DIR may be a linked worktree whose git directory lies
// outside it; the agent commits there (objects, refs and logs of the
// repository, the worktree's HEAD and index), and may not rewrite the
// worktree's commondir or config.worktree, nor the repository's config or
// hooks (refused and reported). Unjailed every one of those writes works,
// so the test is real. Under the Landlock engine the commit works too, and
// the worktree's own entries are writable (Landlock grants a directory
// whole: a documented limit). Runs in the test VMs with both engines, and
// natively with the Landlock engine.
func TestGitWorktree(t *testing.T) {
	if (os.Getenv("AGENT_LOCK_VM") != "1" && os.Getenv("AGENT_LOCK_NATIVE") != "1") || os.Geteuid() != 0 {
		t.Skip("runs in the test VMs (make vmtest) and natively as root (make native)")
	}
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
	written := []string{"commondir-written", "config.worktree-written", "config-written", "hook-written"}

	out := asUser(fresh(), worktreeScript)
	for _, w := range append([]string{"commit-ok", "log-ok"}, written...) {
		if !strings.Contains(out, w) {
			t.Fatalf("unjailed, %s is missing, so the test would prove nothing:\n%s", w, out)
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
			leaks := engine == "landlock" && (w == "commondir-written" || w == "config.worktree-written")
			if strings.Contains(out, w) != leaks {
				t.Errorf("%s: %s: got %v, want %v:\n%s", engine, w, strings.Contains(out, w), leaks, out)
			}
		}
		if engine == "bpf-lsm" {
			for _, want := range []string{"/wt/commondir", "/wt/config.worktree", "/repo/.git/config", "/repo/.git/hooks/pre-commit"} {
				found := false
				for _, e := range escapes {
					found = found || strings.HasSuffix(e.Path, want)
				}
				if !found {
					t.Errorf("bpf-lsm: no blocked record for ...%s: %+v", want, escapes)
				}
			}
		}
	}
}
