package session

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeProc writes a process's stat, status and environ under procfs.
func fakeProc(t *testing.T, procfs string, pid, ppid int, comm string, ruid, euid int, env ...string) {
	t.Helper()
	dir := filepath.Join(procfs, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Fields after the name: state ppid pgrp session tty tpgid flags
	// minflt cminflt majflt cmajflt utime stime cutime cstime priority
	// nice threads itrealvalue starttime.
	stat := fmt.Sprintf("%d (%s) S %d 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, comm, ppid, 1000+pid)
	status := fmt.Sprintf("Name:\t%s\nUid:\t%d\t%d\t%d\t%d\n", comm, ruid, euid, euid, euid)
	for name, content := range map[string]string{"stat": stat, "status": status, "environ": strings.Join(env, "\x00") + "\x00"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSudoCallerEnv: the environment is sudo's, the nearest ancestor the
// user ran setuid root, past agent-lock's own session process and sudo's
// monitor; none when no ancestor is (root's own shell, a user's shell
// that is not setuid, a chain longer than agent-lock's).
func TestSudoCallerEnv(t *testing.T) {
	procfs := t.TempDir()
	user := []string{"PATH=/home/u/.local/bin:/usr/bin", "ANTHROPIC_API_KEY=k"}
	fakeProc(t, procfs, 10, 1, "bash", 1000, 1000, "PATH=/usr/bin")            // the user's shell
	fakeProc(t, procfs, 20, 10, "sudo", 1000, 0, user...)                      // sudo
	fakeProc(t, procfs, 21, 20, "sudo) S 1 (x", 1000, 0, user...)              // its monitor, oddly named
	fakeProc(t, procfs, 30, 21, "agent-lock", 0, 0, "PATH=/usr/sbin:/usr/bin") // the agent-lock the user started
	fakeProc(t, procfs, 40, 1, "bash", 0, 0, "PATH=/root/bin")                 // root's shell
	fakeProc(t, procfs, 50, 10, "python3", 1000, 1000, "PATH=/x")              // the user's own process
	fakeProc(t, procfs, 60, 20, "a", 0, 0)                                     // too deep: 63, 62, 61, 60 are not sudo
	fakeProc(t, procfs, 61, 60, "b", 0, 0)
	fakeProc(t, procfs, 62, 61, "c", 0, 0)
	fakeProc(t, procfs, 63, 62, "d", 0, 0)
	for _, tc := range []struct {
		pid  int
		uid  string
		want []string
	}{
		{30, "1000", user}, // the pane's session process, under the one the user started
		{21, "1000", user},
		{20, "1000", user},
		{30, "1001", nil}, // another user's sudo is not this user's
		{40, "1000", nil},
		{50, "1000", nil},
		{63, "1000", nil},
		{62, "1000", user},
		{99, "1000", nil}, // gone
	} {
		if got := sudoCallerEnv(procfs, tc.pid, tc.uid); !slices.Equal(got, tc.want) {
			t.Errorf("from pid %d, SUDO_UID=%s: %q, want %q", tc.pid, tc.uid, got, tc.want)
		}
	}
}

// TestOverEnv: agent-lock's own variables (what sudo kept, set or was
// asked for) over the caller's, but PATH, which sudo set to root's.
func TestOverEnv(t *testing.T) {
	caller := []string{"PATH=/home/u/bin:/usr/bin", "TERM=dumb", "KEY=k", "HOME=/home/u"}
	own := []string{"PATH=/usr/sbin:/usr/bin", "TERM=xterm", "HOME=/root", "SUDO_UID=1000", "ASKED=1"}
	want := []string{"PATH=/home/u/bin:/usr/bin", "TERM=xterm", "KEY=k", "HOME=/root", "SUDO_UID=1000", "ASKED=1"}
	if got := overEnv(caller, own); !slices.Equal(got, want) {
		t.Errorf("overEnv = %q, want %q", got, want)
	}
}

// TestFindCommand: the agent's PATH is searched, in order, absolute
// folders only; a name with a slash is taken from DIR.
func TestFindCommand(t *testing.T) {
	root := t.TempDir()
	a, b, dir := filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "dir")
	for _, d := range []string{a, b, dir} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(a, "tool"), []byte("#!/bin/sh\n"), 0o644) // not executable
	os.WriteFile(filepath.Join(b, "tool"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\n"), 0o755)
	if p, err := findCommand("tool", dir, a+":"+b); err != nil || p != filepath.Join(b, "tool") {
		t.Errorf("tool on %s:%s: %q, %v", a, b, p, err)
	}
	t.Chdir(dir)
	if p, err := findCommand("tool", dir, ".:"+a); err == nil {
		t.Errorf("a relative PATH folder was searched: %q", p)
	}
	if p, err := findCommand("./tool", dir, ""); err != nil || p != filepath.Join(dir, "tool") {
		t.Errorf("./tool: %q, %v", p, err)
	}
}
