package jail_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWalkCache: file_open keeps each folder's walk up to its rule root
// (cache.h). A folder moved out of DIR by a process outside the cell, while
// a cell process sits in it, must be judged where it now is: the kept walk
// of the folder (and of its subfolder) says "in DIR" and must not be used.
// Each round reads the file with the folder inside (kept), moves it out
// (refused and reported), and back (allowed again).
func TestWalkCache(t *testing.T) {
	c := newCell(t, false)
	a := filepath.Join(c.dir, "a")
	sub := filepath.Join(a, "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(sub, "f"), []byte("FILE-IN-A\n"), 0o644)
	for _, p := range []string{a, sub, filepath.Join(sub, "f")} {
		os.Chown(p, testUID, testUID)
	}
	moved := filepath.Join(c.out, "a")
	// The reader sits in a/b and reads f there, by its name, when asked.
	const script = `cd "$DIR/a/b" && while read x; do if cat f >/dev/null 2>&1; then echo yes; else echo no; fi; done`
	for _, jailed := range []bool{false, true} {
		var cmd *exec.Cmd
		if jailed {
			cmd = c.command(script)
		} else {
			cmd = exec.Command("/bin/sh", "-c", script)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "DIR=" + c.dir}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testUID, Gid: testUID}}
		}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		outp, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		answers := bufio.NewScanner(outp)
		ask := func() string {
			in.Write([]byte("x\n"))
			if !answers.Scan() {
				t.Fatalf("the reader ended: %v", answers.Err())
			}
			return answers.Text()
		}
		for round := 0; round < 20; round++ {
			if got := ask(); got != "yes" {
				t.Fatalf("round %d (jailed %v): reading f with its folder in DIR: %s", round, jailed, got)
			}
			ask() // twice: the second read takes the kept walk
			if err := os.Rename(a, moved); err != nil {
				t.Fatal(err)
			}
			want := "no"
			if !jailed {
				want = "yes" // the test is real: the file is readable there
			}
			if got := ask(); got != want {
				t.Fatalf("round %d (jailed %v): reading f with its folder moved out of DIR: %s, want %s", round, jailed, got, want)
			}
			if err := os.Rename(moved, a); err != nil {
				t.Fatal(err)
			}
		}
		in.Close()
		cmd.Wait()
	}
	if ev := findEvent(c.events(), "read", filepath.Join(moved, "b", "f")); ev == nil {
		t.Error("a read of the moved folder's file was not reported")
	}
}
