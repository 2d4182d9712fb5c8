package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// The descriptors a session's agent-lock is started with (Server.start).
const (
	callerFD = 3
	dirFD    = 4
	connFD   = 5
	// SpareFD is the first of the spare load's descriptors (Caller.Spare).
	SpareFD = 6
)

// Conn is a session's agent-lock's end of its client's connection.
type Conn struct {
	c *net.UnixConn
}

// ServeSession takes what the daemon started this session's agent-lock
// with: it moves into the caller's folder and returns the caller and the
// connection. Only root's process can have been started so: as anyone
// else, the session fails for want of privilege whatever the descriptors.
func ServeSession() (Caller, *Conn, error) {
	// The spare load's descriptors, whether or not this process takes
	// them, must not reach anything it starts.
	if err := unix.CloseRange(SpareFD, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return Caller{}, nil, fmt.Errorf("the daemon's descriptors: %w", err)
	}
	cf := os.NewFile(callerFD, "caller")
	defer cf.Close()
	var c Caller
	b, err := io.ReadAll(io.NewSectionReader(cf, 0, MaxFrame+1))
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		return c, nil, fmt.Errorf("the daemon's account of the caller: %w", err)
	}
	dir := os.NewFile(dirFD, "folder")
	err = unix.Fchdir(int(dir.Fd()))
	dir.Close()
	if err != nil {
		return c, nil, fmt.Errorf("the caller's folder: %w", err)
	}
	f := os.NewFile(connFD, "client")
	defer f.Close()
	uc, err := unixConn(f, "the client's connection")
	if err != nil {
		return c, nil, err
	}
	return c, &Conn{c: uc}, nil
}

// unixConn is the unix socket f holds (f stays the caller's to close);
// what names it in errors.
func unixConn(f *os.File, what string) (*net.UnixConn, error) {
	fc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, fmt.Errorf("%s is not a unix socket", what)
	}
	return uc, nil
}

// Follow passes the client's signals to signal and calls gone when the
// client is: its end closed, or it sent what no client sends.
func (c *Conn) Follow(signal func(syscall.Signal), gone func()) {
	for {
		body, _, err := readFrame(c.c, 0)
		var s Signal
		if err == nil {
			err = json.Unmarshal(body, &s)
		}
		if err != nil {
			gone()
			return
		}
		switch sig := syscall.Signal(s.Signal); sig {
		case syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP:
			signal(sig)
		}
	}
}

// Exit tells the client the session's exit status, its last word.
func (c *Conn) Exit(code int) {
	writeFrame(c.c, Reply{V: Version, Exit: &code})
	c.c.Close()
}
