package session

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

// fakeProc writes a process's stat, status and environ under procfs; it
// started at tick start.
func fakeProc(t *testing.T, procfs string, pid, ppid int, start uint64, comm string, ruid, euid int, env ...string) {
	t.Helper()
	dir := filepath.Join(procfs, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Fields after the name: state ppid pgrp session tty tpgid flags
	// minflt cminflt majflt cmajflt utime stime cutime cstime priority
	// nice threads itrealvalue starttime.
	stat := fmt.Sprintf("%d (%s) S %d 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, comm, ppid, start)
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
// that is not setuid, a chain longer than agent-lock's), nor when a
// "parent" started after its child (its number was reused).
func TestSudoCallerEnv(t *testing.T) {
	procfs := t.TempDir()
	user := []string{"PATH=/home/u/.local/bin:/usr/bin", "ANTHROPIC_API_KEY=k"}
	for _, p := range []struct {
		pid, ppid  int
		comm       string
		ruid, euid int
		env        []string
	}{
		{10, 1, "bash", 1000, 1000, []string{"PATH=/usr/bin"}},   // the user's shell
		{20, 10, "sudo", 1000, 0, user},                          // sudo
		{21, 20, "sudo) S 1 (x", 1000, 0, user},                  // its monitor, oddly named
		{30, 21, "agent-lock", 0, 0, []string{"PATH=/usr/sbin"}}, // the agent-lock the user started
		{31, 30, "agent-lock", 0, 0, []string{"PATH=/usr/sbin"}}, // its session's (the pane)
		{40, 1, "bash", 0, 0, []string{"PATH=/root/bin"}},        // root's shell
		{41, 40, "agent-lock", 0, 0, nil},
		{50, 10, "python3", 1000, 1000, []string{"PATH=/x"}}, // the user's own process
		{51, 50, "agent-lock", 0, 0, nil},
		{60, 20, "a", 0, 0, nil}, // a chain too long: 63's four ancestors are not sudo
		{61, 60, "b", 0, 0, nil},
		{62, 61, "c", 0, 0, nil},
		{63, 62, "d", 0, 0, nil},
		{64, 63, "e", 0, 0, nil},
		{72, 71, "agent-lock", 0, 0, nil},
	} {
		fakeProc(t, procfs, p.pid, p.ppid, uint64(1000+p.pid), p.comm, p.ruid, p.euid, p.env...)
	}
	// 72's parent died; its number went to a process of the user's
	// started since, setuid root.
	fakeProc(t, procfs, 71, 20, 2000, "sudo", 1000, 0, user...)
	for _, tc := range []struct {
		pid  int
		uid  string
		want []string
	}{
		{30, "1000", user},
		{31, "1000", user},
		{30, "1001", nil}, // another user's sudo is not this user's
		{41, "1000", nil},
		{51, "1000", nil},
		{64, "1000", nil},
		{63, "1000", user},
		{72, "1000", nil},
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
	// env -i sudo ...: no PATH of the caller's, sudo's then.
	want = []string{"KEY=k", "PATH=/usr/sbin:/usr/bin"}
	if got := overEnv([]string{"KEY=k"}, []string{"PATH=/usr/sbin:/usr/bin"}); !slices.Equal(got, want) {
		t.Errorf("overEnv without the caller's PATH = %q, want %q", got, want)
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

// TestLookPathAsTheUser: the command is looked up as the agent's user: a
// folder on PATH that only root may search, or a file only root may run,
// is passed over.
func TestLookPathAsTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to look as another user")
	}
	root := t.TempDir()
	os.Chmod(filepath.Dir(root), 0o755) // TempDir's parent is root's alone
	os.Chmod(root, 0o755)
	private, rootOnly, open := filepath.Join(root, "private"), filepath.Join(root, "rootonly"), filepath.Join(root, "open")
	for _, d := range []string{private, rootOnly, open} {
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "tool"), []byte("#!/bin/sh\n"), 0o755)
	}
	os.Chmod(private, 0o700)
	os.Chmod(filepath.Join(rootOnly, "tool"), 0o744)
	search := private + ":" + rootOnly + ":" + open
	id := asuser.ID{UID: 4242, GID: 4242}
	if p, err := lookPath("tool", root, search, id); err != nil || p != filepath.Join(open, "tool") {
		t.Errorf("as uid 4242 on %s: %q, %v; want %s", search, p, err, filepath.Join(open, "tool"))
	}
	// As root the first is found: the test is real.
	if p, err := findCommand("tool", root, search); err != nil || p != filepath.Join(private, "tool") {
		t.Errorf("as root: %q, %v", p, err)
	}
}
