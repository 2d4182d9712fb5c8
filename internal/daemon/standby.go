package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A standby is a session's agent-lock the daemon starts before anyone
// asks: the next request is handed to it instead of starting a process
// then. A Go process's start, and its taking of the programs loaded ahead
// (Server.Spare: it takes them while it waits), are about a fifth of a
// session's start under emulation, where a guest's CPUs take turns on one
// host thread and only work done before the request leaves the start.
//
// It is started as a session is (root, a session of its own, the system's
// PATH), with its end of a socket to the daemon at standbyFD and the
// spare's descriptors from StandbySpareFD on. The daemon sends it the
// spare's description (standbySpare), and later the request (handoff)
// with the caller's folder, connection and streams; it answers once it
// took them (standbyNote.Taken) and once the agent runs (Started: the
// next standby is started only then, so that it does not slow this
// session's start). While idle it ends when the daemon's end closes.

const (
	standbyFD = 3
	// StandbySpareFD is the first of a standby's spare descriptors.
	StandbySpareFD = 4
	// handoffFDs are a handoff's descriptors: the caller's folder, its
	// connection, and its standard input, output and error.
	handoffFDs = 5
	// standbyMark begins the name (comm) of a standby that took a
	// request, the caller's uid after it: sessions counts it by it, as
	// it counts the sessions started for a request by SUDO_UID.
	standbyMark = "al-"
	// handTimeout bounds a standby's answer to a handoff: it waits for
	// nothing but the daemon, so a late one is broken.
	handTimeout = 5 * time.Second
	// startBound is how long the next standby waits for the last one's
	// agent to start before it is started anyway.
	startBound = 30 * time.Second
)

type standbySpare struct {
	Spare json.RawMessage `json:"spare,omitempty"`
}

type handoff struct {
	Caller Caller   `json:"caller"`
	Name   string   `json:"name"`
	Args   []string `json:"args"`
}

type standbyNote struct {
	Taken   bool `json:"taken,omitempty"`
	Started bool `json:"started,omitempty"`
}

// systemPath is a session's PATH: the system's alone.
const systemPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// standby is the daemon's side of one.
type standby struct {
	cmd     *exec.Cmd
	c       *net.UnixConn
	exited  chan struct{}
	started chan struct{} // closed once its agent runs, or it ended
}

// keepStandby keeps one standby waiting until ctx ends: a new one once
// the last took a request and its agent runs, and once the spares it
// would take are ready (SpareWait).
func (s *Server) keepStandby(ctx context.Context) {
	for ctx.Err() == nil {
		if s.SpareWait != nil {
			s.SpareWait(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		sb, err := s.startStandby()
		if err != nil {
			if s.Log != nil {
				s.Log("no session started ahead (each starts its own): %v", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
			continue
		}
		s.mu.Lock()
		s.standby = sb
		s.mu.Unlock()
		select {
		case <-sb.started:
		case <-ctx.Done():
			if s.take() == sb {
				// Idle: its end closed, it ends.
				sb.c.Close()
			}
			return
		}
		if s.take() == sb {
			// Ended while idle.
			if s.Log != nil {
				s.Log("the session started ahead ended before any request (%v): starting another", sb.cmd.ProcessState)
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
	}
}

// take takes the standby waiting, if any.
func (s *Server) take() *standby {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.standby
	s.standby = nil
	return sb
}

// startStandby starts a standby with the spares ready now.
func (s *Server) startStandby() (*standby, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "standby"), os.NewFile(uintptr(fds[1]), "daemon")
	defer theirs.Close()
	fc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, err
	}
	c := fc.(*net.UnixConn)
	var spare []byte
	var spareFiles []*os.File
	if s.Spare != nil {
		var done func()
		spare, spareFiles, done = s.Spare()
		defer done()
	}
	cmd := exec.Command(s.Exe, s.StandbyArg)
	cmd.Args[0] = "agent-lock"
	cmd.ExtraFiles = append([]*os.File{theirs}, spareFiles...)
	cmd.Env = []string{systemPath}
	// Until it takes a request, what it says is the daemon's to log.
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		c.Close()
		return nil, err
	}
	sb := &standby{cmd: cmd, c: c, exited: make(chan struct{}), started: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(sb.exited)
	}()
	c.SetWriteDeadline(time.Now().Add(handTimeout))
	err = writeFrame(c, standbySpare{Spare: spare})
	c.SetWriteDeadline(time.Time{})
	if err != nil {
		sb.kill()
		return nil, err
	}
	return sb, nil
}

// kill ends a standby that did not take a request as it should.
func (sb *standby) kill() {
	sb.cmd.Process.Kill()
	sb.c.Close()
	<-sb.exited
}

// hand gives sb the request: the caller, its arguments, and its folder,
// connection and streams (files as a request carries them). Once it
// answers that it took it, it is the caller's session, counted as such.
func (sb *standby) hand(c Caller, name string, args []string, files []*os.File, conn *net.UnixConn) error {
	cc, err := conn.File()
	if err != nil {
		return err
	}
	defer cc.Close()
	sb.c.SetDeadline(time.Now().Add(handTimeout))
	err = writeFrame(sb.c, handoff{Caller: c, Name: name, Args: args},
		int(files[0].Fd()), int(cc.Fd()), int(files[1].Fd()), int(files[2].Fd()), int(files[3].Fd()))
	var n standbyNote
	if err == nil {
		var body []byte
		if body, _, err = readFrame(sb.c, 0); err == nil {
			err = json.Unmarshal(body, &n)
		}
	}
	sb.c.SetDeadline(time.Time{})
	if err == nil && !n.Taken {
		err = errors.New("it did not say it took it")
	}
	if err != nil {
		return err
	}
	go func() {
		defer close(sb.started)
		stop := time.AfterFunc(startBound, func() { sb.c.Close() })
		defer stop.Stop()
		for {
			body, _, err := readFrame(sb.c, 0)
			if err != nil {
				return
			}
			if json.Unmarshal(body, &n) == nil && n.Started {
				return
			}
		}
	}()
	return nil
}

// Standby is a standby's own side.
type Standby struct {
	c *net.UnixConn
	// std are the standard streams it started with, kept from the
	// collector: their finalizers would close the caller's.
	std []*os.File
}

// ServeStandby takes what the daemon started this standby with: it
// returns the spare's description (its descriptors from StandbySpareFD
// on). Only root's process can have been started so.
func ServeStandby() (*Standby, json.RawMessage, error) {
	if err := unix.CloseRange(standbyFD, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("the daemon's descriptors: %w", err)
	}
	f := os.NewFile(standbyFD, "daemon")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("the daemon's connection: %w", err)
	}
	c, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, nil, errors.New("the daemon's connection is not a unix socket")
	}
	body, _, err := readFrame(c, 0)
	var sp standbySpare
	if err == nil {
		err = json.Unmarshal(body, &sp)
	}
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("the daemon's first word: %w", err)
	}
	return &Standby{c: c}, sp.Spare, nil
}

// ErrNoRequest says the daemon ended its standby before handing it one.
var ErrNoRequest = errors.New("the daemon ended before handing a request")

// Wait waits for the request and makes this process its session, as
// ServeSession does one started for it: in the caller's folder, its
// streams standard ones (os.Stdin, os.Stdout and os.Stderr made again),
// the caller's ids in SUDO_UID, SUDO_GID and SUDO_USER, and named as the
// caller's session (standbyMark). It returns the caller, agent-lock's
// arguments and the connection.
func (s *Standby) Wait() (Caller, []string, *Conn, error) {
	body, files, err := readFrame(s.c, handoffFDs)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = ErrNoRequest
		}
		return Caller{}, nil, nil, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var h handoff
	if err := json.Unmarshal(body, &h); err != nil {
		return Caller{}, nil, nil, fmt.Errorf("the daemon's handoff: %w", err)
	}
	if len(files) != handoffFDs {
		return Caller{}, nil, nil, fmt.Errorf("the daemon's handoff carried %d descriptors, not %d", len(files), handoffFDs)
	}
	if err := unix.Fchdir(int(files[0].Fd())); err != nil {
		return Caller{}, nil, nil, fmt.Errorf("the caller's folder: %w", err)
	}
	for i, f := range files[2:] {
		if err := unix.Dup3(int(f.Fd()), i, 0); err != nil {
			return Caller{}, nil, nil, fmt.Errorf("the caller's streams: %w", err)
		}
	}
	// Made again: Go decides at a file's making whether the poller
	// serves it (a pipe's or a terminal's the client made is
	// non-blocking), and the first were /dev/null's.
	s.std = []*os.File{os.Stdin, os.Stdout, os.Stderr}
	os.Stdin, os.Stdout, os.Stderr = os.NewFile(0, "/dev/stdin"), os.NewFile(1, "/dev/stdout"), os.NewFile(2, "/dev/stderr")
	uid := strconv.FormatUint(uint64(h.Caller.UID), 10)
	for k, v := range map[string]string{"SUDO_UID": uid, "SUDO_GID": strconv.FormatUint(uint64(h.Caller.GID), 10), "SUDO_USER": h.Name} {
		os.Setenv(k, v)
	}
	if err := os.WriteFile("/proc/self/comm", []byte(standbyMark+uid), 0); err != nil {
		return Caller{}, nil, nil, fmt.Errorf("name this session: %w", err)
	}
	fc, err := net.FileConn(files[1])
	if err != nil {
		return Caller{}, nil, nil, fmt.Errorf("the client's connection: %w", err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return Caller{}, nil, nil, errors.New("the client's connection is not a unix socket")
	}
	if err := writeFrame(s.c, standbyNote{Taken: true}); err != nil {
		uc.Close()
		return Caller{}, nil, nil, fmt.Errorf("answer the daemon: %w", err)
	}
	return h.Caller, h.Args, &Conn{c: uc}, nil
}

// Started tells the daemon that the session's agent runs.
func (s *Standby) Started() {
	writeFrame(s.c, standbyNote{Started: true})
	s.c.Close()
}
