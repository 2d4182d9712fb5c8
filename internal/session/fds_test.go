package session

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestCleanStart: a descriptor inherited without close-on-exec does not
// reach a child once cleanStart ran, and is named in a warning; one handed
// on on purpose (ExtraFiles) still is.
func TestCleanStart(t *testing.T) {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0) // no O_CLOEXEC: as inherited
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	open := func(n int, extra ...*os.File) bool {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf("test -e /proc/self/fd/%d", n))
		cmd.ExtraFiles = extra
		err := cmd.Run()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		return err == nil
	}
	if !open(fd) {
		t.Fatalf("fd %d did not reach the child before cleanStart: the test proves nothing", fd)
	}
	var warned []string
	if err := cleanStart(func(f string, a ...any) { warned = append(warned, fmt.Sprintf(f, a...)) }); err != nil {
		t.Fatal(err)
	}
	if open(fd) {
		t.Errorf("fd %d reached the child after cleanStart", fd)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], strconv.Itoa(fd)) {
		t.Errorf("warnings %q do not name fd %d", warned, fd)
	}
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !open(3, f) {
		t.Error("a descriptor handed on on purpose (ExtraFiles) did not reach the child")
	}
	warned = nil
	if err := cleanStart(func(f string, a ...any) { warned = append(warned, fmt.Sprintf(f, a...)) }); err != nil || warned != nil {
		t.Errorf("a second cleanStart, with nothing inherited: %v %q", err, warned)
	}
}
