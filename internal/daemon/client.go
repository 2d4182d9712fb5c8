package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// SocketPath is the daemon's socket for this client: SocketEnv's, else the
// default.
func SocketPath() string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	return DefaultSocket
}

// ErrNoDaemon means nothing listens at the socket.
var ErrNoDaemon = errors.New("no agent-lock daemon is running")

func dial(path string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w at %s", ErrNoDaemon, path)
		}
		return nil, fmt.Errorf("the agent-lock daemon at %s: %w", path, err)
	}
	return c, nil
}

// Ping returns the daemon's version.
func Ping(path string) (string, error) {
	c, err := dial(path)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := writeFrame(c, Request{V: Version, Op: OpPing}); err != nil {
		return "", err
	}
	r, err := reply(c)
	if err != nil {
		return "", err
	}
	return r.Version, nil
}

// Session is a session the daemon started for this client.
type Session struct {
	c *net.UnixConn
}

// Start asks the daemon at path for a session (OpRun or OpPane) with
// agent-lock's arguments args and the environment env, in the folder dir,
// with stdin, stdout and stderr.
func Start(path, op string, args, env []string, dir, stdin, stdout, stderr *os.File) (*Session, error) {
	c, err := dial(path)
	if err != nil {
		return nil, err
	}
	err = writeFrame(c, Request{V: Version, Op: op, Args: args, Env: env},
		int(dir.Fd()), int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("ask the daemon at %s: %w", path, err)
	}
	return &Session{c: c}, nil
}

// Signal passes sig to the session's agent-lock.
func (s *Session) Signal(sig syscall.Signal) error {
	return writeFrame(s.c, Signal{Signal: int(sig)})
}

// Wait returns the session's exit status, or why there is none (the
// daemon refused, or the session's agent-lock died without a word).
func (s *Session) Wait() (int, error) {
	defer s.c.Close()
	r, err := reply(s.c)
	if err != nil {
		return 0, err
	}
	return *r.Exit, nil
}

// Close lets go of the session: a headless one ends.
func (s *Session) Close() { s.c.Close() }

// reply reads the server's reply: an error it said is returned as such.
func reply(c *net.UnixConn) (Reply, error) {
	body, _, err := readFrame(c, 0)
	if err != nil {
		return Reply{}, fmt.Errorf("the session ended without a word (%v): its report, if it began, is in agent-lock watch", err)
	}
	var r Reply
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("the daemon's reply: %w", err)
	}
	if r.Error != "" {
		return r, errors.New(r.Error)
	}
	if r.Exit == nil && r.Version == "" {
		return r, errors.New("the daemon's reply said nothing")
	}
	return r, nil
}

// OpenDir is the current folder, to hand to the daemon.
func OpenDir() (*os.File, error) {
	fd, err := unix.Open(".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the current folder: %w", err)
	}
	return os.NewFile(uintptr(fd), "."), nil
}
