package session_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestCellOutlivesItsSupervisors kills agent-lock and its reaper together
// (as `pkill -9 agent-lock` would): the agent must stay confined, and the
// next agent-lock run must kill it. Runs in the test VMs only (it needs BPF
// LSM and the built binary).
func TestCellOutlivesItsSupervisors(t *testing.T) {
	if os.Getenv("AGENT_LOCK_VM") != "1" || os.Geteuid() != 0 {
		t.Skip("runs in the test VMs (make vmtest)")
	}
	bin := testenv.AgentLockBin(t)
	const uid = 4242 // the VM's jailtest user
	root, dir := testenv.ProjectDir(t, uid)
	secret := filepath.Join(root, "secret")
	os.WriteFile(secret, []byte("SECRET\n"), 0o644)

	// The agent: a background loop that, each 100 ms, writes a tick, and a
	// LEAK line if it can read the outside file. (The agent itself dies with
	// agent-lock, by its parent-death signal; what it spawned does not.)
	script := `(while :; do echo tick >> ticks; cat "$1" >/dev/null 2>&1 && echo LEAK >> ticks; sleep 0.1; done) & wait`
	cmd := exec.Command(bin, "--headless", "--report", "/dev/null", dir, "--", "/bin/sh", "-c", script, "agent", secret)
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

	// Kill every agent-lock process at once.
	for _, pid := range testenv.PidsOf(bin) {
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

	// The next run sweeps the orphan away.
	next := exec.Command(bin, "--headless", "--report", "/dev/null", dir, "--", "true")
	next.Env = cmd.Env
	if b, err := next.CombinedOutput(); err != nil {
		t.Fatalf("next run: %v\n%s", err, b)
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
