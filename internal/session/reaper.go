package session

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
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
	if c := takeReaperAhead(); c != nil {
		sent, err := handReaper(c, cgroupPath, links)
		if err == nil {
			for _, l := range links {
				l.Close()
			}
			return func() { c.Close() }, nil
		}
		c.Close()
		if sent {
			// It may hold the cell, and kill it at this close: the
			// session cannot go on in it.
			return nil, fmt.Errorf("start reaper: %w", err)
		}
		// Given nothing, it ends at the close.
	}
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

// reaperAhead is the connection to a reaper started before its session
// needed it (StartReaperAhead), if any.
var reaperAhead struct {
	sync.Mutex
	c *net.UnixConn
}

// StartReaperAhead starts the reaper of this process's next session now,
// to wait for its cell: a daemon's session started ahead (daemon.Standby)
// does it while no request waits, so that the reaper's start (a Go
// process's, a tenth of a second under emulation) is not done beside the
// agent's. A reaper given no cell ends with this process.
func StartReaperAhead() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "reaper"), os.NewFile(uintptr(fds[1]), "session")
	fc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return err
	}
	cmd := exec.Command(self, ReaperArg, reaperWaits)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stderr = os.Stderr
	err = cmd.Start()
	// Its end is its alone: its death is this end's EOF.
	theirs.Close()
	if err != nil {
		fc.Close()
		return err
	}
	go cmd.Wait()
	c := fc.(*net.UnixConn)
	// Until it runs (a byte says so): a session that took it at once
	// would wait for its start all the same.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.ReadFull(c, make([]byte, 1))
	c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return fmt.Errorf("the reaper did not start: %w", err)
	}
	reaperAhead.Lock()
	defer reaperAhead.Unlock()
	if reaperAhead.c != nil {
		reaperAhead.c.Close()
	}
	reaperAhead.c = c
	return nil
}

func takeReaperAhead() *net.UnixConn {
	reaperAhead.Lock()
	defer reaperAhead.Unlock()
	c := reaperAhead.c
	reaperAhead.c = nil
	return c
}

// reaperWaits is the reaper's argument, in place of a cgroup's path, that
// makes it wait for one (handReaper).
const reaperWaits = "-"

// maxReaperFDs bounds the descriptors handed to a reaper: standard error
// and the links (under a hundred).
const maxReaperFDs = 250

// handReaper gives the reaper c leads its cell: the cgroup's path, this
// process's standard error and the links, in one message; it returns once
// the reaper said it holds them (a byte back), as a reaper started for the
// cell holds them from its start.
func handReaper(c *net.UnixConn, cgroupPath string, links []*os.File) (sent bool, err error) {
	if len(links)+1 > maxReaperFDs {
		return false, fmt.Errorf("%d links: a reaper takes at most %d", len(links), maxReaperFDs-1)
	}
	fds := []int{2}
	for _, l := range links {
		fds = append(fds, int(l.Fd()))
	}
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(cgroupPath)))
	msg = append(msg, cgroupPath...)
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	defer c.SetWriteDeadline(time.Time{})
	n, _, err := c.WriteMsgUnix(msg, unix.UnixRights(fds...), nil)
	if n == 0 && err != nil {
		return false, err
	}
	if err == nil && n < len(msg) {
		_, err = c.Write(msg[n:])
	}
	if err != nil {
		return true, err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return true, fmt.Errorf("the reaper did not take the cell: %w", err)
	}
	return true, nil
}

// takeCell is a waiting reaper's: the cell handed to it on fd 3, its
// standard error made the session's; it returns the connection, whose
// end is the session's, and the cgroup's path ("" when the session ended
// without handing one).
func takeCell() (*os.File, string, error) {
	f := os.NewFile(3, "session")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, "", err
	}
	c, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, "", errors.New("fd 3 is not a unix socket")
	}
	if _, err := c.Write([]byte{0}); err != nil {
		return nil, "", err
	}
	buf := make([]byte, 2+4096)
	oob := make([]byte, unix.CmsgSpace(maxReaperFDs*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	// Held until this process exits: the links keep the programs on.
	var fds []int
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	switch {
	case err != nil:
		return nil, "", err
	case n == 0:
		return nil, "", nil
	case flags&unix.MSG_CTRUNC != 0 || len(fds) == 0:
		return nil, "", errors.New("the cell's descriptors did not all come")
	}
	for n < 2 || n < 2+int(binary.BigEndian.Uint16(buf)) {
		m, err := c.Read(buf[n:])
		if err != nil {
			return nil, "", fmt.Errorf("the cell's path: %w", err)
		}
		n += m
	}
	unix.Dup2(fds[0], 2)
	unix.Close(fds[0])
	// What can fail first: past the answer, this process alone may hold
	// the links.
	file, err := c.File()
	if err != nil {
		c.Close()
		return nil, "", err
	}
	_, err = c.Write([]byte{1})
	c.Close()
	if err != nil {
		file.Close()
		return nil, "", err
	}
	return file, string(buf[2 : 2+int(binary.BigEndian.Uint16(buf))]), nil
}

// Reap is the reaper's main: fd 3 is the pipe from the session, fds 4 and up
// keep the programs attached until this process exits. Started ahead
// (reaperWaits), fd 3 is a socket on which the cell comes first.
func Reap(cgroupPath string) int {
	pipe := os.NewFile(3, "session")
	if cgroupPath == reaperWaits {
		var err error
		if pipe, cgroupPath, err = takeCell(); err != nil {
			// Its session, told nothing back, starts one of its own.
			fmt.Fprintf(os.Stderr, "agent-lock reaper: %v\n", err)
			return 1
		}
		if cgroupPath == "" {
			return 0
		}
	}
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
