package session_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestCellOutlivesItsSupervisors kills agent-lock and its reaper together
// (as `pkill -9 agent-lock` would), under each engine doctor proves: the
// agent must stay confined; `watch --list` must show the session as ended;
// the next agent-lock run must kill it, remove its TMPDIR and say so. Runs
// in the test VMs, and natively for the Landlock engine (make native).
func TestCellOutlivesItsSupervisors(t *testing.T) {
	testenv.NeedVM(t)
	bin := testenv.AgentLockBin(t)
	const uid = 4242 // the VM's jailtest user
	for _, engine := range testenv.Engines(t, bin) {
		t.Run(engine, func(t *testing.T) { outlives(t, bin, engine, uid) })
	}
}

func outlives(t *testing.T, bin, engine string, uid int) {
	root, dir := testenv.ProjectDir(t, uid)
	secret := filepath.Join(root, "secret")
	os.WriteFile(secret, []byte("SECRET\n"), 0o644)

	// The agent: a background loop that, each 100 ms, writes a tick, and a
	// LEAK line if it can read the outside file. (The agent itself dies with
	// agent-lock, by its parent-death signal; what it spawned does not.)
	// A shell file of the user's, so that the session makes its copies'
	// folder, which the next run must sweep too.
	profile := filepath.Join("/home/jailtest", ".profile")
	if err := os.WriteFile(profile, []byte("export OUTLIVES=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(profile, uid, uid)
	t.Cleanup(func() { os.Remove(profile) })
	script := `(while :; do echo tick >> ticks; cat "$1" >/dev/null 2>&1 && echo LEAK >> ticks; sleep 0.1; done) & wait`
	cmd := exec.Command(bin, "--headless", "--engine", engine, "--report", "/dev/null", dir, "--", "/bin/sh", "-c", script, "agent", secret)
	cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
	// A file, not a pipe: the orphan keeps its end of a pipe open, and
	// Wait would wait for it.
	out, err := os.Create(filepath.Join(root, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ticks := filepath.Join(dir, "ticks")
	waitFor(t, "the agent to start", func() bool { return lines(ticks) > 0 })
	home := "/home/jailtest"
	// The start record follows the agent's exec, which the ticks show:
	// trixie's guest once read the recording between the two.
	var rec, tmp string
	waitFor(t, "the session's start record", func() bool {
		rec = testenv.NewestRecording(t, filepath.Join(home, ".local/state/agent-lock"))
		r, err := testenv.ReadReport(rec)
		if err == nil && r.Start != nil {
			tmp = r.Start.TmpDir
		}
		return tmp != ""
	})

	// Kill every agent-lock process at once: stopped first, so that the
	// reaper cannot see agent-lock die (and kill the cell, as it should)
	// between the two kills (CI saw it once, on forky, Landlock).
	pids := testenv.PidsOf(bin)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	cmd.Wait()
	time.Sleep(500 * time.Millisecond)
	if len(testenv.PidsOf(bin)) != 0 {
		t.Fatal("agent-lock processes survived SIGKILL")
	}
	n := lines(ticks)
	waitFor(t, "the orphaned agent to run on", func() bool { return lines(ticks) > n+3 })
	if b, _ := os.ReadFile(ticks); bytes.Contains(b, []byte("LEAK")) {
		t.Fatal("the orphaned agent read outside its cell")
	}

	// The session is over, although its agent runs on.
	list, err := exec.Command("setpriv", "--reuid=4242", "--regid=4242", "--init-groups",
		"env", "HOME="+home, bin, "watch", "--list").CombinedOutput()
	id := strings.TrimSuffix(filepath.Base(rec), ".jsonl")
	if err != nil || !regexp.MustCompile(regexp.QuoteMeta(id)+`\s+ended \(agent-lock was killed`).Match(list) {
		t.Errorf("watch --list does not show the killed session as ended: %v\n%s", err, list)
	}
	if _, err := os.Stat(tmp); err != nil {
		t.Fatalf("the killed session's TMPDIR is already gone: %v", err)
	}
	rc, _ := filepath.Glob(filepath.Join(os.TempDir(), "agent-lock-"+strconv.Itoa(cmd.Process.Pid)+"-rc-*"))
	if len(rc) != 1 {
		t.Fatalf("the killed session's copies of the shell files: %v, want one folder", rc)
	}

	// The next run sweeps the orphan away, and says what it cleaned.
	next := exec.Command(bin, "--headless", "--engine", engine, "--report", "/dev/null", dir, "--", "true")
	next.Env = cmd.Env
	b, err := next.CombinedOutput()
	if err != nil {
		t.Fatalf("next run: %v\n%s", err, b)
	}
	for _, want := range []string{"cleaned up after agent-lock " + strconv.Itoa(cmd.Process.Pid) + ", which was killed",
		"its TMPDIR " + tmp + " removed", "its copies of your shell files " + rc[0] + " removed"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the next run does not say %q:\n%s", want, b)
		}
	}
	for _, p := range []string{tmp, rc[0]} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the killed session's %s is still there: %v", p, err)
		}
	}
	n = lines(ticks)
	time.Sleep(time.Second)
	if m := lines(ticks); m != n {
		t.Fatalf("the orphaned agent still runs after the next session (%d ticks, then %d)", n, m)
	}
	if b, _ := os.ReadFile(ticks); bytes.Contains(b, []byte("LEAK")) {
		t.Fatal("the orphaned agent read outside its cell")
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for i := 0; i < 300; i++ {
		if ok() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func lines(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}
