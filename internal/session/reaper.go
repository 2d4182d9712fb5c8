package session

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ReaperArg is the hidden subcommand that runs the reaper.
const ReaperArg = "__reaper"

// startReaper starts a second agent-lock process that outlives this one. It
// holds duplicates of the programs' attachments and a pipe from us; when the
// pipe closes, because we exited for any reason, SIGKILL included, it kills
// the jail's cgroup and waits until it is empty, and only then lets the
// programs go. So no jailed process ever runs unconfined, and none outlives
// the session. The jail cannot signal it (task_kill refuses signals to
// processes outside the jail) and it is in its own session, so a ^C or a
// hangup of the terminal does not reach it.
func startReaper(cgroupPath string, links []*os.File) (release func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start reaper: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start reaper: %w", err)
	}
	cmd := exec.Command(self, ReaperArg, cgroupPath)
	cmd.ExtraFiles = append([]*os.File{r}, links...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start reaper: %w", err)
	}
	r.Close()
	for _, l := range links {
		l.Close()
	}
	go cmd.Wait()
	return func() { w.Close() }, nil
}

// Reap is the reaper's main: fd 3 is the pipe from the session, fds 4 and up
// keep the programs attached until this process exits.
func Reap(cgroupPath string) int {
	pipe := os.NewFile(3, "session")
	io.Copy(io.Discard, pipe) // returns when the session's end closes
	if err := killCgroup(cgroupPath, 30*time.Second); err != nil {
		// The pins stay: the cell stays closed until a later sweep.
		fmt.Fprintf(os.Stderr, "agent-lock reaper: %v\n", err)
		quiet()
		return 1
	}
	if base := pinBase(); base != "" {
		os.RemoveAll(filepath.Join(base, filepath.Base(cgroupPath)))
		os.RemoveAll(filepath.Join(base, filepath.Base(cgroupPath)+netPinSuffix))
	}
	quiet()
	return 0
}

// quiet puts standard error (standard input and output are /dev/null
// already: startReaper) on /dev/null before the reaper exits: what is left
// is the detach, seconds of the kernel's when the session has let go of
// its copies first (run.open), on this process's exit, and whoever reads
// agent-lock's output to its end (a pipe, a test) is not to wait for it.
func quiet() {
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		unix.Dup2(int(null.Fd()), 2)
	}
}
