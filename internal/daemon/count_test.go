package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestSessionsCountNoChild: a session's child between its fork and its
// exec has the session's arguments and environment; it is not a session
// of its own (20 sessions starting at once were counted 21, and the last
// refused). Here a shell named as a session runs a subshell, a fork that
// never execs.
func TestSessionsCountNoChild(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sessions are root's processes")
	}
	const arg = "__count-test-session"
	dir := t.TempDir()
	// sh runs the file named like the session argument: its command line
	// is "sh <arg>", and so is its subshell's.
	os.WriteFile(filepath.Join(dir, arg), []byte("(sleep 30; :) & wait\n"), 0o644)
	cmd := exec.Command("/bin/sh", arg)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SUDO_UID=4243"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The subshell and its sleep too: left, they would be counted by
	// the next run.
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	s := &Server{SessionArg: arg}
	// The subshell is there once the shell has a child.
	for range 100 {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid) + "/children"); len(b) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if mine, all := s.sessions(4243); mine != 1 || all != 1 {
		t.Errorf("one session and its child counted %d (%d in all), want 1", mine, all)
	}
}
