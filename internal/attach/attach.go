// Package attach joins a terminal to a one-terminal session: the session's
// agent-lock (the server, root) listens on a unix socket in the user's
// recordings folder; a client (the agent-lock the user started, or a later
// `agent-lock attach`) hands it the terminal itself (its descriptors, over
// the socket) and waits. The server draws on that terminal and reads its
// keys until the user detaches or the session ends, restores it, and tells
// the client what to print and how to exit. The client forwards only the
// terminal's changes of size (SIGWINCH reaches the terminal's foreground
// job, which is the client's).
//
// The protocol is one JSON object a line: the client's Hello (with the
// descriptors), then Resize lines; the server's End, last.
package attach

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

// Hello is a client's first line; its terminal's input and output travel
// with it (SCM_RIGHTS).
type Hello struct {
	// Env are the client's variables that describe its terminal (TERM,
	// COLORTERM, NO_COLOR, ...): the server draws for that terminal.
	Env []string `json:"env"`
}

// message is a line of the protocol.
type message struct {
	Hello  *Hello `json:"hello,omitempty"`
	Resize bool   `json:"resize,omitempty"`
	End    *End   `json:"end,omitempty"`
}

// End is the server's last word to a client, sent once the terminal is
// restored.
type End struct {
	// Text is printed on the terminal (the session's summary, a warning).
	Text string `json:"text,omitempty"`
	// Code is the client's exit status (the agent's, at the session's
	// end; 0 for a detach).
	Code int `json:"code"`
	// Refused says why the server would not take the terminal.
	Refused string `json:"refused,omitempty"`
}

// TermEnv names the variables a client passes in its Hello.
var TermEnv = []string{"TERM", "COLORTERM", "NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "TERM_PROGRAM",
	"TERM_PROGRAM_VERSION", "TMUX", "LANG", "LC_ALL", "LC_CTYPE", "VTE_VERSION", "KITTY_WINDOW_ID", "WT_SESSION"}

// Listener is a session's socket.
type Listener struct {
	ln    *net.UnixListener
	path  string
	owner asuser.ID
	// Refuse says why a process may not attach (nil: it may); the
	// listener itself refuses every user but the owner and root.
	Refuse func(pid int) error
}

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5).
const soPeerPidfd = 77

// SocketName is the socket of the session whose recording is id.jsonl.
func SocketName(id string) string { return id + ".sock" }

// Listen makes the socket at path as owner (the user's folder is the
// user's: a root bind there would follow what was planted) and listens.
func Listen(path string, owner asuser.ID) (*Listener, error) {
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, fmt.Errorf("socket path %s is longer than a unix socket's %d bytes", path, len(unix.RawSockaddrUnix{}.Path)-1)
	}
	var ln *net.UnixListener
	err := asuser.Do(owner, func() error {
		var err error
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return err
		}
		// The folder is the user's alone already; the socket says so too.
		return os.Chmod(path, 0o600)
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("attach socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	return &Listener{ln: ln, path: path, owner: owner}, nil
}

// Path is where the socket is.
func (l *Listener) Path() string { return l.path }

// Close stops listening and removes the socket, as the user.
func (l *Listener) Close() error {
	err := l.ln.Close()
	asuser.Do(l.owner, func() error { return os.Remove(l.path) })
	return err
}

// Client is an attached terminal, seen from the server.
type Client struct {
	conn *net.UnixConn
	// In and Out are the client's terminal; Env describes it.
	In, Out *os.File
	Env     []string
	// PID is the client's process.
	PID     int
	resizes chan struct{}
	gone    chan struct{}
}

// Accept waits for the next client that may attach; those that may not
// are told why and dropped.
func (l *Listener) Accept() (*Client, error) {
	for {
		conn, err := l.ln.AcceptUnix()
		if err != nil {
			// Out of descriptors or memory, or a client gone before its
			// accept: passing; the session stays attachable.
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) ||
				errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EINTR) {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return nil, err
		}
		c, err := l.handshake(conn)
		if err != nil {
			writeLine(conn, message{End: &End{Refused: err.Error(), Code: 1}})
			conn.Close()
			continue
		}
		return c, nil
	}
}

func (l *Listener) handshake(conn *net.UnixConn) (*Client, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	pidfd := -1
	raw.Control(func(fd uintptr) {
		if cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); cerr != nil {
			return
		}
		// The process that connected, by a pidfd (Linux 6.5), so that
		// the one Refuse checks is that one, its number not reused;
		// before 6.5, one opened now.
		pidfd, cerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd)
		if errors.Is(cerr, unix.ENOPROTOOPT) {
			pidfd, cerr = unix.PidfdOpen(int(cred.Pid), 0)
		}
	})
	if cerr != nil {
		return nil, cerr
	}
	defer unix.Close(pidfd)
	if cred.Uid != 0 && cred.Uid != l.owner.UID {
		return nil, errors.New("only the user who started the session (or root) can attach to it")
	}
	if l.Refuse != nil {
		if err := l.Refuse(int(cred.Pid)); err != nil {
			return nil, err
		}
		if unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
			return nil, errors.New("the process that connected is gone")
		}
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(2*4))
	var line []byte
	var files []*os.File
	for !strings.Contains(string(line), "\n") {
		n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			files = append(files, rights(oob[:oobn])...)
		}
		// Two descriptors in all: a client sending more, a few at a
		// time, would have this root process hold every one.
		if len(files) > 2 || flags&unix.MSG_CTRUNC != 0 {
			closeAll(files)
			return nil, errors.New("a client sends two descriptors, its terminal's input and output")
		}
		// On a timeout n is -1 (Go passes recvmsg's result on).
		line = append(line, buf[:max(n, 0)]...)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("read the client's hello: %w", err)
		}
		if len(line) > len(buf) {
			closeAll(files)
			return nil, errors.New("the client's hello is too long")
		}
	}
	conn.SetReadDeadline(time.Time{})
	first, rest, _ := strings.Cut(string(line), "\n")
	var m message
	if err := json.Unmarshal([]byte(first), &m); err != nil || m.Hello == nil || len(files) != 2 {
		closeAll(files)
		return nil, errors.New("a client must say hello with its terminal")
	}
	for _, f := range files {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
			closeAll(files)
			return nil, errors.New("attach needs a terminal: standard input and output must be one")
		}
	}
	c := &Client{conn: conn, In: files[0], Out: files[1], Env: m.Hello.Env, PID: int(cred.Pid),
		resizes: make(chan struct{}, 1), gone: make(chan struct{})}
	go c.read(rest)
	return c, nil
}

// read follows the client's lines until it goes.
func (c *Client) read(rest string) {
	defer close(c.gone)
	sc := bufio.NewScanner(io.MultiReader(strings.NewReader(rest), c.conn))
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Resize {
			select {
			case c.resizes <- struct{}{}:
			default:
			}
		}
	}
}

// Resizes signals the client's terminal's changes of size.
func (c *Client) Resizes() <-chan struct{} { return c.resizes }

// Gone is closed when the client is: its terminal closed, or it was killed.
func (c *Client) Gone() <-chan struct{} { return c.gone }

// End tells the client its last word and lets go of its terminal.
func (c *Client) End(e End) {
	c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	writeLine(c.conn, message{End: &e})
	c.Close()
}

// Close lets go of the client without a word.
func (c *Client) Close() {
	c.In.Close()
	c.Out.Close()
	c.conn.Close()
}

func writeLine(conn *net.UnixConn, m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = conn.Write(append(b, '\n'))
	return err
}

func rights(oob []byte) []*os.File {
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
			files = append(files, os.NewFile(uintptr(fd), "terminal"))
		}
	}
	return files
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// Attach hands the terminal (in, out) to the session listening at path and
// waits for its end. The terminal's state is saved first and put back if
// the server goes without restoring it (a crash).
//
// When ctx ends (the terminal closed: SIGHUP) the client goes, and the
// server ends the session.
func Attach(ctx context.Context, path string, in, out *os.File) (End, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return End{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	saved, err := unix.IoctlGetTermios(int(in.Fd()), unix.TCGETS)
	if err != nil {
		return End{}, errors.New("attach needs a terminal: standard input is not one")
	}
	var env []string
	for _, k := range TermEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	// Listen for changes of size before saying hello: once the server has
	// the terminal it reads its size, and a change between then and a
	// later Notify would be lost (SIGWINCH's default is to be ignored).
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	hello, _ := json.Marshal(message{Hello: &Hello{Env: env}})
	if _, _, err := conn.WriteMsgUnix(append(hello, '\n'), unix.UnixRights(int(in.Fd()), int(out.Fd())), nil); err != nil {
		// A server that refuses says why and closes without reading the
		// hello, so the write may fail: its word is the error to give.
		if end, ok := lastWord(conn); ok && end.Refused != "" {
			return end, errors.New(end.Refused)
		}
		return End{}, err
	}
	go func() {
		for range winch {
			if writeLine(conn, message{Resize: true}) != nil {
				return
			}
		}
	}()
	if end, ok := serverEnd(conn); ok {
		if end.Refused != "" {
			return end, errors.New(end.Refused)
		}
		return end, nil
	}
	if ctx.Err() != nil {
		return End{}, ctx.Err()
	}
	// The server went without its last word: whatever it left the
	// terminal in (raw, the alternate screen, mouse reports) is undone.
	unix.IoctlSetTermios(int(in.Fd()), unix.TCSETS, saved)
	out.WriteString("\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\x1b[?25h\x1b[?1049l\r\n")
	return End{}, errors.New("the session's agent-lock went without a word (see its log beside the recording)")
}

// serverEnd reads the server's lines until its last word, if it says one.
func serverEnd(conn *net.UnixConn) (End, bool) {
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.End != nil {
			return *m.End, true
		}
	}
	return End{}, false
}

// lastWord is what a server that went away said last, if anything.
func lastWord(conn *net.UnixConn) (End, bool) {
	conn.SetReadDeadline(time.Now().Add(time.Second))
	return serverEnd(conn)
}

// Find is the socket of session id among dirs, if it has one.
func Find(dirs []string, id string) (string, bool) {
	for _, d := range dirs {
		p := filepath.Join(d, SocketName(id))
		if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeSocket != 0 {
			return p, true
		}
	}
	return "", false
}
