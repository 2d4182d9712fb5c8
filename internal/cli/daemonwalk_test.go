package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/dirscan"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestDaemonWalkWatched: the daemon holds the Landlock engine's walk for
// git's files from one session of a tree to the next, and follows its
// folders' changes (dirscan.Watch): the second session takes the folders
// without a look, and a repository made since in one of them is still
// found and kept by the third (the hook the agent plants there is
// undone), whose walk takes the unchanged folders without a look (the
// test is real). On a kernel without unique mount ids (before 6.8) the
// daemon statx's each folder instead, and the hook is undone all the
// same.
func TestDaemonWalkWatched(t *testing.T) {
	bin, _ := lifecycleSetup(t)
	root, dir := testenv.ProjectDir(t, uid)
	sock := filepath.Join(root, "daemon", "agent-lock.sock")
	_, dlog := startDaemonLog(t, bin, sock)
	asUser := func(args ...string) *exec.Cmd { return daemonUser(dir, root, sock, args...) }
	sh := func(script string) {
		t.Helper()
		if out, err := asUser("sh", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	sessions := 0
	session := func(script string) (string, map[string]string, *report.GitWalk) {
		t.Helper()
		// Served by the session the daemon started ahead, as a user's.
		for i := 0; ; i++ {
			l := dlog()
			if strings.LastIndex(l, "a session is ready ahead") > strings.LastIndex(l, "agent-lock daemon: session ") {
				break
			}
			if i == 600 {
				t.Fatalf("no session ready ahead:\n%s", l)
			}
			time.Sleep(200 * time.Millisecond)
		}
		rep := testenv.ReportPath(t, uid)
		out, err := asUser(bin, "--headless", "--engine", "landlock", "--report", rep, ".", "--", "sh", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("agent-lock: %v\n%s", err, out)
		}
		if sessions++; strings.Count(dlog(), ", started ahead): ") != sessions {
			t.Fatalf("session %d was not one started ahead:\n%s", sessions, dlog())
		}
		undone := map[string]string{}
		var walk *report.GitWalk
		f, err := os.Open(rep)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		report.Read(f, func(r report.Record) error {
			if r.Event != nil && r.Event.Verdict == report.Undone {
				rel, _ := filepath.Rel(dir, r.Event.Path)
				undone[rel] = r.Event.Op
			}
			if r.Start != nil {
				walk = r.Start.GitWalk
			}
			return nil
		})
		return string(out), undone, walk
	}
	var st unix.Statx_t
	unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_MNT_ID_UNIQUE, &st)
	watched := st.Mask&unix.STATX_MNT_ID_UNIQUE != 0

	sh(`mkdir -p a/b/c a/b/d e/f && git init -q e/f`)
	// Older than the file system clock's margin: remembered.
	time.Sleep(dirscan.Settle + 200*time.Millisecond)
	session("true")
	// The project, a, a/b, a/b/c, a/b/d, e, e/f.
	_, _, walk := session("true")
	if walk == nil || walk.Folders != 7 || walk.Remembered != 7 || (watched && walk.Unlooked < 6) || (!watched && walk.Unlooked != 0) {
		t.Errorf("the second session's walk: %+v; want 7 folders from the memory, all but the project's top at most without a look (watched: %v)", walk, watched)
	}
	sh(`git init -q a/b/c`)
	hook := "a/b/c/.git/hooks/pre-commit"
	// Not chmod: the tripwire may have removed it by then.
	out, undone, walk := session(`printf '#!/bin/sh\nexit 0\n' > ` + hook + ` && echo planted`)
	if !strings.Contains(out, "planted") {
		t.Fatalf("the agent did not plant the hook: the test would prove nothing\n%s", out)
	}
	// a/b/c changed: read again; the project's top statx'd; the rest
	// without a look.
	if walk == nil || walk.Folders != 7 || (watched && walk.Unlooked != 5) {
		t.Errorf("the third session's walk: %+v; want 7 folders, 5 without a look (watched: %v)", walk, watched)
	}
	if _, err := os.Lstat(filepath.Join(dir, hook)); err == nil {
		t.Error("the hook planted in the repository made between the sessions is still there")
	}
	if undone[hook] != "create" {
		t.Errorf("the hook planted in the repository made between the sessions: undone %v, want %s by create\n%s", undone, hook, out)
	}
}

// daemonUser is args run as the test user in dir, HOME home, with the
// daemon listening at sock.
func daemonUser(dir, home, sock string, args ...string) *exec.Cmd {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "AGENT_LOCK_SOCKET=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return cmd
}
