// Package daemon is agent-lock's privileged helper and its protocol: a
// root process listening on a unix socket that any local user may use, so
// that a user runs agent-lock as themselves, with no sudo. For each
// request it starts a session's agent-lock (root, as sudo would have) on
// the caller's behalf: the caller is known by the kernel (SO_PEERCRED,
// SO_PEERGROUPS, a pidfd), never by what the request says, and the session
// runs the agent as that user, with that user's groups and environment,
// in a cell the user asked for. A request only ever restricts: it gets a
// cell around a command the user could have run unconfined.
//
// The daemon keeps nothing of a session once it started it: the session's
// agent-lock holds the caller's connection, follows the client on it
// (signals; the client's end ends a headless session) and writes the exit
// status there last. So a daemon that dies or restarts leaves every
// session running as it was, confined.
//
// The protocol is frames: a 4-byte big-endian length, then that many bytes
// of JSON. The client's first frame is a Request, with its descriptors
// (SCM_RIGHTS); then Signal frames. The server's frames are Replies.
package daemon

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Version is the protocol's; a request of another is refused with what to do.
const Version = 1

// MaxFrame bounds a frame: a request holds the user's arguments and
// environment, which the kernel bounds at exec in the same way.
const MaxFrame = 1 << 20

// Bounds on a request's parts, below MaxFrame's.
const (
	maxArgs   = 4096
	maxEnv    = 8192
	maxString = 128 << 10
)

// DefaultSocket is where the daemon listens (the systemd socket unit's path).
const DefaultSocket = "/run/agent-lock/agent-lock.sock"

// SocketEnv names another socket for the client (a test's daemon).
const SocketEnv = "AGENT_LOCK_SOCKET"

// Ops.
const (
	// OpRun runs a session whose agent has the client's standard streams,
	// for as long as the client is there.
	OpRun = "run"
	// OpPane runs a one-terminal session's agent-lock, which lives on its
	// own (its terminal is attached and detached over its own socket).
	OpPane = "pane"
	// OpPing asks the daemon's version.
	OpPing = "ping"
)

// Request is a client's first frame. Its descriptors, for OpRun and OpPane:
// the client's working folder (O_PATH), then its standard input, output
// and error.
type Request struct {
	V  int    `json:"v"`
	Op string `json:"op"`
	// Args are agent-lock's arguments as the user gave them.
	Args []string `json:"args,omitempty"`
	// Env is the user's environment, for the agent (filtered as always).
	Env []string `json:"env,omitempty"`
}

// fdsPerRequest are a session request's descriptors.
const fdsPerRequest = 4

// Signal is a client's later frame: a signal for the session's
// agent-lock, which passes it on as it would one sent to itself.
type Signal struct {
	Signal int `json:"signal"`
}

// Reply is a server's frame: an error, the daemon's version (OpPing), or
// the session's exit status, last.
type Reply struct {
	V       int    `json:"v"`
	Error   string `json:"error,omitempty"`
	Version string `json:"version,omitempty"`
	Exit    *int   `json:"exit,omitempty"`
}

// DecodeRequest reads a request frame's body. It is the daemon's hostile
// input: anything but a well-formed request of this version is an error
// that says what was wrong.
func DecodeRequest(b []byte) (Request, error) {
	var head struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return Request{}, fmt.Errorf("a request must be a JSON object: %w", err)
	}
	if head.V != Version {
		return Request{}, fmt.Errorf("protocol version %d, this daemon speaks %d: the client and the daemon are different agent-lock builds; restart the daemon (sudo systemctl restart agent-lock.socket agent-lock)", head.V, Version)
	}
	var r Request
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		return Request{}, fmt.Errorf("a version %d request: %w", Version, err)
	}
	return r, r.check()
}

func (r Request) check() error {
	switch r.Op {
	case OpPing:
		if len(r.Args) > 0 || len(r.Env) > 0 {
			return errors.New("a ping has no arguments")
		}
		return nil
	case OpRun, OpPane:
	default:
		return fmt.Errorf("unknown op %q: use run, pane or ping", r.Op)
	}
	if len(r.Args) > maxArgs {
		return fmt.Errorf("%d arguments: at most %d", len(r.Args), maxArgs)
	}
	for _, a := range r.Args {
		if err := checkString("an argument", a); err != nil {
			return err
		}
	}
	if len(r.Env) > maxEnv {
		return fmt.Errorf("%d environment variables: at most %d", len(r.Env), maxEnv)
	}
	for _, kv := range r.Env {
		if err := checkString("an environment variable", kv); err != nil {
			return err
		}
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("environment entry %.40q is not NAME=value", kv)
		}
	}
	return nil
}

func checkString(what, s string) error {
	if len(s) > maxString {
		return fmt.Errorf("%s of %d bytes: at most %d", what, len(s), maxString)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%s holds a NUL byte", what)
	}
	return nil
}

// writeFrame sends v as a frame, with fds.
func writeFrame(c *net.UnixConn, v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("a frame of %d bytes: at most %d (too many or too long arguments or variables)", len(b), MaxFrame)
	}
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	msg = append(msg, b...)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.WriteMsgUnix(msg, oob, nil)
	if err == nil && n < len(msg) {
		_, err = c.Write(msg[n:])
	}
	return err
}

// readFrame reads a frame's body and the descriptors that came with its
// first bytes (at most maxFDs: more, or a truncated set, is an error and
// every one received is closed).
func readFrame(c *net.UnixConn, maxFDs int) ([]byte, []*os.File, error) {
	head := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace((maxFDs+1)*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(head, oob)
	files := received(oob[:oobn])
	fail := func(err error) ([]byte, []*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, err
	}
	if err != nil {
		return fail(err)
	}
	if n == 0 {
		return fail(io.EOF)
	}
	if flags&unix.MSG_CTRUNC != 0 || len(files) > maxFDs {
		return fail(fmt.Errorf("more descriptors than the %d a request carries", maxFDs))
	}
	if n < 4 {
		if _, err := io.ReadFull(c, head[n:]); err != nil {
			return fail(fmt.Errorf("a frame's length: %w", err))
		}
	}
	size := binary.BigEndian.Uint32(head)
	if size == 0 || size > MaxFrame {
		return fail(fmt.Errorf("a frame of %d bytes: at most %d", size, MaxFrame))
	}
	// Read as it comes, not allocated as claimed: a claim costs nothing.
	body, err := io.ReadAll(io.LimitReader(c, int64(size)))
	if err == nil && len(body) < int(size) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return fail(fmt.Errorf("a frame of %d bytes: %w", size, err))
	}
	return body, files, nil
}

// received are the descriptors in oob, close-on-exec.
func received(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "from the client"))
		}
	}
	return files
}
