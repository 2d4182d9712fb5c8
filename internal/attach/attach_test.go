package attach

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

func me() asuser.ID { return asuser.ID{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())} }

// terminal is a pseudo-terminal's slave, standing for the user's terminal.
func terminal(t *testing.T) *os.File {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close(); master.Close() })
	return slave
}

func listen(t *testing.T) *Listener {
	t.Helper()
	ln, err := Listen(filepath.Join(t.TempDir(), SocketName("s1")), me())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func rdev(t *testing.T, f *os.File) uint64 {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Rdev
}

// The client hands its terminal over, its changes of size follow, and the
// server's last word is what the client prints and exits with.
func TestAttachHandsTheTerminalOver(t *testing.T) {
	ln := listen(t)
	if st, err := os.Stat(ln.Path()); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the socket is not the user's alone: %v %v", st.Mode(), err)
	}
	tty := terminal(t)
	t.Setenv("TERM", "xterm-test")
	type result struct {
		end End
		err error
	}
	done := make(chan result, 1)
	go func() {
		end, err := Attach(context.Background(), ln.Path(), tty, tty)
		done <- result{end, err}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if rdev(t, c.In) != rdev(t, tty) || rdev(t, c.Out) != rdev(t, tty) {
		t.Error("the server did not get the client's terminal")
	}
	if !strings.Contains(strings.Join(c.Env, " "), "TERM=xterm-test") {
		t.Errorf("the client's terminal is not described: %q", c.Env)
	}
	if c.PID != os.Getpid() {
		t.Errorf("the client's pid is %d, want %d", c.PID, os.Getpid())
	}
	// SIGWINCH reaches the client (the terminal's foreground job); the
	// server hears of it.
	unix.Kill(os.Getpid(), unix.SIGWINCH)
	select {
	case <-c.Resizes():
	case <-time.After(10 * time.Second):
		t.Error("the client's SIGWINCH never reached the server")
	}
	c.End(End{Text: "summary", Code: 42})
	r := <-done
	if r.err != nil || r.end.Text != "summary" || r.end.Code != 42 {
		t.Errorf("Attach = %+v, %v; want the server's last word", r.end, r.err)
	}
	select {
	case <-c.Gone():
	case <-time.After(10 * time.Second):
		t.Error("the server does not see the client go")
	}
}

// Refused: a process the server's check refuses (one in a cell), and a
// client whose descriptors are not a terminal.
func TestAttachRefusals(t *testing.T) {
	ln := listen(t)
	ln.Refuse = func(pid int) error { return errors.New("a process in an agent-lock cell cannot attach to a session") }
	go ln.Accept()
	tty := terminal(t)
	if _, err := Attach(context.Background(), ln.Path(), tty, tty); err == nil || !strings.Contains(err.Error(), "cell cannot attach") {
		t.Errorf("a refused process attached: %v", err)
	}

	ln = listen(t)
	go ln.Accept()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: ln.Path(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	hello, _ := json.Marshal(message{Hello: &Hello{}})
	conn.WriteMsgUnix(append(hello, '\n'), unix.UnixRights(int(r.Fd()), int(w.Fd())), nil)
	var m message
	if err := json.NewDecoder(conn).Decode(&m); err != nil || m.End == nil || !strings.Contains(m.End.Refused, "needs a terminal") {
		t.Errorf("pipes were taken for a terminal: %+v %v", m.End, err)
	}

	if _, err := Attach(context.Background(), ln.Path(), r, w); err == nil {
		t.Error("Attach without a terminal did not refuse")
	}
}

// A server that goes without its last word leaves the terminal as it was.
func TestAttachRestoresAfterACrash(t *testing.T) {
	ln := listen(t)
	tty := terminal(t)
	before, _ := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	done := make(chan error, 1)
	go func() {
		_, err := Attach(context.Background(), ln.Path(), tty, tty)
		done <- err
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	raw := *before
	raw.Lflag &^= unix.ECHO | unix.ICANON
	unix.IoctlSetTermios(int(c.In.Fd()), unix.TCSETS, &raw)
	c.Close()
	if err := <-done; err == nil {
		t.Error("Attach returned no error for a server that went without a word")
	}
	after, _ := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if after.Lflag != before.Lflag {
		t.Errorf("the terminal was left raw: lflag %#x, was %#x", after.Lflag, before.Lflag)
	}
}

// Another user is refused by the session itself, even where the socket's
// folder and mode would let them connect (they do not: the folder is the
// user's, the socket 0600); root is not (TestAttachHandsTheTerminalOver
// attaches as the test's user, root under make test).
func TestAttachOtherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to connect as another user")
	}
	ln := listen(t)
	go ln.Accept()
	for d := filepath.Dir(ln.Path()); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	os.Chmod(ln.Path(), 0o666)
	cmd := exec.Command("/usr/bin/python3", "-c", `import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
print(s.makefile().readline(), end="")`, ln.Path())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4243, Gid: 4243}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "only the user who started the session (or root) can attach") {
		t.Errorf("another user's connection (%v):\n%s", err, out)
	}
}

// A client that says nothing is dropped when its time is up, and told;
// the server goes on to the next (a timed-out read's length is -1, which
// once ended the session's agent-lock).
func TestAttachSilentClient(t *testing.T) {
	ln := listen(t)
	type accepted struct {
		c   *Client
		err error
	}
	next := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		next <- accepted{c, err}
	}()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: ln.Path(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	var m message
	if err := json.NewDecoder(conn).Decode(&m); err != nil || m.End == nil || !strings.Contains(m.End.Refused, "hello") {
		t.Errorf("a silent client was not told: %+v %v", m.End, err)
	}
	tty := terminal(t)
	done := make(chan error, 1)
	go func() {
		_, err := Attach(context.Background(), ln.Path(), tty, tty)
		done <- err
	}()
	a := <-next
	if a.err != nil {
		t.Fatalf("after a silent client: %v", a.err)
	}
	a.c.End(End{Code: 0})
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// A client that sends more than its two descriptors, a few at a time, is
// refused at the third (each one held would be the session's to hold).
func TestAttachTooManyDescriptors(t *testing.T) {
	ln := listen(t)
	go ln.Accept()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: ln.Path(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tty := terminal(t)
	for range 3 {
		conn.WriteMsgUnix([]byte(" "), unix.UnixRights(int(tty.Fd()), int(tty.Fd())), nil)
		time.Sleep(50 * time.Millisecond)
	}
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	var m message
	if err := json.NewDecoder(conn).Decode(&m); err != nil || m.End == nil || !strings.Contains(m.End.Refused, "two descriptors") {
		t.Errorf("six descriptors were taken: %+v %v", m.End, err)
	}
}
