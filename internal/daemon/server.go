package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/dirscan"
)

// Socket options x/sys does not name.
const (
	soPeerGroups = 59 // SO_PEERGROUPS, Linux 4.13
	soPeerPidfd  = 77 // SO_PEERPIDFD, Linux 6.5
)

// Server starts sessions for the users who ask.
type Server struct {
	// Exe is the agent-lock binary a session runs (/proc/self/exe) and
	// SessionArg the argument that makes it a session for a caller
	// (Caller, read by ServeSession).
	Exe, SessionArg string
	// StandbyArg, when set, makes it a standby (ServeStandby): one waits
	// for the next request, started ahead.
	StandbyArg string
	// Version is said to a ping.
	Version string
	// InCell says whether a process runs in a cell: a process in one may
	// not start a session (it would get a cell of its own asking).
	InCell func(pid int) (bool, error)
	// PerUser and Total bound the sessions running at once: each loads
	// programs that run for every process of the machine.
	PerUser, Total int
	Log            func(format string, args ...any)
	// Spare, when set, gives the next session the programs loaded ahead
	// of it: their description (Caller.Spare), their descriptors (passed
	// from SpareFD on) and a function to call once the session started;
	// a nil description when there is none. The verifier is most of a
	// start.
	Spare func() (desc []byte, files []*os.File, done func())
	// SpareWait, when set, waits until the next spares are ready (or ctx
	// ends): a standby takes them when it starts.
	SpareWait func(ctx context.Context)
	// Scan, when set, scans a tree for a standby that took a request
	// (the Landlock engine's walk for git's files): the daemon holds the
	// last walks and follows their changes (dirscan.Memories).
	Scan dirscan.Scanner

	mu       sync.Mutex
	reading  map[uint32]int
	standby  *standby // the one waiting, if any (s.mu)
	starting sync.Mutex
	wg       sync.WaitGroup
	// asking bounds the connections not yet answered: each holds a
	// goroutine, descriptors and up to a frame, for up to askTimeout.
	asking chan struct{}
}

// Bounds on the connections being answered (read, checked and their
// session started) in all, and on a user's being read.
const (
	maxAsking     = 64
	maxAskingUser = 8
	askTimeout    = 10 * time.Second
)

// Serve answers ln's clients until ctx ends. Sessions started go on.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	s.asking = make(chan struct{}, maxAsking)
	if s.StandbyArg != "" {
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			s.keepStandby(sctx)
			close(done)
		}()
		defer func() {
			cancel()
			<-done
		}()
	}
	for {
		// A place first, then the next connection: past maxAsking they
		// wait in the socket's backlog, as a busy server's clients do,
		// while a flood's are answered (a user's past maxAskingUser at
		// once) or time out.
		select {
		case s.asking <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		conn, err := ln.AcceptUnix()
		if err != nil {
			<-s.asking
			if ctx.Err() != nil {
				return nil
			}
			// Out of descriptors or memory, or a client gone before
			// its accept: passing, whoever caused it; the daemon goes on.
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) ||
				errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EINTR) {
				if s.Log != nil {
					s.Log("accept: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return err
		}
		s.wg.Go(func() { s.handle(conn) })
	}
}

// Wait waits for the connections being answered (not for the sessions).
func (s *Server) Wait() { s.wg.Wait() }

// peer is who is at the other end of a connection, as the kernel knows it.
type peer struct {
	uid, gid uint32
	groups   []uint32
	pid      int
	pidfd    int
}

func (s *Server) handle(conn *net.UnixConn) {
	defer conn.Close()
	// The place taken before accept is held until the request is
	// answered, not only read: a request read waits on the start of
	// those before it holding up to a megabyte and four descriptors, and
	// a user sending them faster than sessions start would otherwise
	// queue them without bound. A user's bound is on reading alone (a
	// silent connection's ten seconds), so that one user's burst is
	// answered in turn, not refused.
	defer func() { <-s.asking }()
	refuse := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		writeFrame(conn, Reply{V: Version, Error: msg})
		if s.Log != nil {
			s.Log("refused a request: %s", msg)
		}
	}
	p, err := peerOf(conn)
	if err != nil {
		refuse("who is asking: %v", err)
		return
	}
	defer unix.Close(p.pidfd)
	if p.uid == 0 {
		refuse("root runs agent-lock itself: the daemon is for users")
		return
	}
	if !s.ask(p.uid) {
		refuse("too many of your requests are being read at once (at most %d)", maxAskingUser)
		return
	}
	conn.SetReadDeadline(time.Now().Add(askTimeout))
	body, files, err := readFrame(conn, fdsPerRequest)
	s.asked(p.uid)
	if err != nil {
		refuse("the request: %v", err)
		return
	}
	closeFiles := func() {
		for _, f := range files {
			f.Close()
		}
	}
	defer closeFiles()
	conn.SetReadDeadline(time.Time{})
	req, err := DecodeRequest(body)
	if err != nil {
		refuse("%v", err)
		return
	}
	// A process of a cell asking for a cell would get one of its own
	// choosing. Checked after the request came, and the pidfd then
	// proves the process checked is the one that connected (its number
	// not reused meanwhile).
	if in, err := s.InCell(p.pid); in || err != nil {
		if err == nil {
			err = errors.New("a process in an agent-lock cell or another sandbox (no_new_privs) cannot start a session")
		}
		refuse("%v", err)
		return
	}
	if err := unix.PidfdSendSignal(p.pidfd, 0, nil, 0); err != nil {
		refuse("the process that asked is gone")
		return
	}
	if req.Op == OpPing {
		writeFrame(conn, Reply{V: Version, Version: s.Version})
		return
	}
	if len(files) != fdsPerRequest {
		refuse("a session request carries %d descriptors (its folder, standard input, output and error), not %d", fdsPerRequest, len(files))
		return
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(files[0].Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		refuse("a session request's first descriptor must be its working folder")
		return
	}
	// Counted from the processes running, not from what this daemon
	// started: a daemon restarted since still counts the sessions
	// before it. Counted and started under one lock, so that two
	// requests cannot both take the last place.
	s.starting.Lock()
	mine, all := s.sessions(p.uid)
	if mine >= s.PerUser || all >= s.Total {
		s.starting.Unlock()
		refuse("too many sessions running (%d of yours, %d in all; at most %d a user, %d in all): end one first", mine, all, s.PerUser, s.Total)
		return
	}
	pid, ahead, err := s.begin(p, req, files, conn)
	s.starting.Unlock()
	if err != nil {
		refuse("start the session: %v", err)
		return
	}
	if s.Log != nil {
		how := ""
		if ahead {
			how = ", started ahead"
		}
		s.Log("session %d for uid %d (pid %d%s): %q", pid, p.uid, p.pid, how, req.Args)
	}
}

// begin makes a session of the request: the standby's, when one waits and
// takes it, else a process started for it. It returns the session's pid,
// and whether it was the standby.
func (s *Server) begin(p peer, req Request, files []*os.File, conn *net.UnixConn) (int, bool, error) {
	c, name, err := s.caller(p, req)
	if err != nil {
		return 0, false, err
	}
	// A request too large to hand is the request's, not the standby's:
	// it stays for the next.
	if body, err := handoffBody(c, name, req.Args); err == nil {
		if sb := s.take(); sb != nil {
			err := sb.hand(body, files, conn, s.Scan, c)
			if err == nil {
				return sb.cmd.Process.Pid, true, nil
			}
			sb.kill()
			if s.Log != nil {
				s.Log("the session started ahead did not take the request (starting one): %v", err)
			}
		}
	}
	// The spare is taken only for a session that starts (taking one
	// starts the next load); taking it does not wait.
	var spareFiles []*os.File
	if s.Spare != nil {
		var done func()
		c.Spare, spareFiles, done = s.Spare()
		defer done()
	}
	cmd, err := s.start(c, name, req, files, conn, spareFiles)
	if err != nil {
		return 0, false, err
	}
	go cmd.Wait()
	return cmd.Process.Pid, false, nil
}

// sessions counts the sessions' agent-lock processes a daemon started
// (this one or an earlier one) that run now: uid's, and all.
func (s *Server) sessions(uid uint32) (mine, all int) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0
	}
	want := "SUDO_UID=" + strconv.FormatUint(uint64(uid), 10)
	for _, e := range ents {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		// Root's alone: a user's process may name itself anything.
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name(), &st) != nil || st.Uid != 0 {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) < 2 || (args[1] != s.SessionArg && (s.StandbyArg == "" || args[1] != s.StandbyArg)) {
			continue
		}
		// Root's really: a setuid program's process is root's too, with
		// the arguments, name and environment its user gave it, but its
		// real uid is that user's. And not a session's child between its
		// fork and its exec (a helper, the agent), which has the
		// session's arguments, name and environment: 20 sessions starting
		// at once were counted 21.
		if !realRoot(e.Name()) || s.sessionChild(e.Name()) {
			continue
		}
		if args[1] == s.StandbyArg {
			// A standby once it took a request (its name says whose).
			comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
			if u, ok := strings.CutPrefix(strings.TrimSpace(string(comm)), standbyMark); ok {
				all++
				if u == strconv.FormatUint(uint64(uid), 10) {
					mine++
				}
			}
			continue
		}
		all++
		environ, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if slices.Contains(strings.Split(string(environ), "\x00"), want) {
			mine++
		}
	}
	return mine, all
}

// sessionChild says whether process pid's parent is a session or a
// standby (its arguments say so; a child being born has them too).
func (s *Server) sessionChild(pid string) bool {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	// The fields after the name, which may hold anything but ends at
	// the last ')': state, then the parent's pid.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 2 {
		return false
	}
	cmdline, _ := os.ReadFile("/proc/" + f[1] + "/cmdline")
	args := strings.Split(string(cmdline), "\x00")
	return len(args) > 1 && (args[1] == s.SessionArg || (s.StandbyArg != "" && args[1] == s.StandbyArg))
}

// realRoot says whether process pid's real uid is root's (the first of
// status's Uid: line).
func realRoot(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if ids, ok := strings.CutPrefix(l, "Uid:"); ok {
			f := strings.Fields(ids)
			return len(f) > 0 && f[0] == "0"
		}
	}
	return false
}

// ask counts a request of uid's being read; asked ends it.
func (s *Server) ask(uid uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reading == nil {
		s.reading = map[uint32]int{}
	}
	if s.reading[uid] >= maxAskingUser {
		return false
	}
	s.reading[uid]++
	return true
}

func (s *Server) asked(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reading[uid]--
}

// caller is what a session is told of p, and p's user name.
func (s *Server) caller(p peer, req Request) (Caller, string, error) {
	name := strconv.FormatUint(uint64(p.uid), 10)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	} else {
		return Caller{}, "", fmt.Errorf("uid %d has no account: %w", p.uid, err)
	}
	return Caller{UID: p.uid, GID: p.gid, Groups: p.groups, Env: req.Env, Pane: req.Op == OpPane}, name, nil
}

// start runs the session's agent-lock for c: root, as sudo would have
// started it (SUDO_UID, SUDO_GID, SUDO_USER, and a PATH of the system's
// alone), in the caller's folder, with the caller's streams, the Caller
// (fd 3), the folder (fd 4), the connection (fd 5) and the spare load's
// descriptors (from SpareFD on).
func (s *Server) start(c Caller, name string, req Request, files []*os.File, conn *net.UnixConn, spareFiles []*os.File) (*exec.Cmd, error) {
	cf, err := c.file()
	if err != nil {
		return nil, err
	}
	defer cf.Close()
	cc, err := conn.File()
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	cmd := exec.Command(s.Exe, append([]string{s.SessionArg}, req.Args...)...)
	cmd.Args[0] = "agent-lock"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[1], files[2], files[3]
	cmd.ExtraFiles = append([]*os.File{cf, files[0], cc}, spareFiles...)
	cmd.Env = []string{
		systemPath,
		"SUDO_UID=" + strconv.FormatUint(uint64(c.UID), 10),
		"SUDO_GID=" + strconv.FormatUint(uint64(c.GID), 10),
		"SUDO_USER=" + name,
	}
	// A session of its own: the daemon's end, or its group's signals, are
	// not the session's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd, cmd.Start()
}

// peerOf is the connection's peer as the kernel recorded it at connect.
func peerOf(conn *net.UnixConn) (peer, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var p peer
	var perr error
	raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			perr = err
			return
		}
		p.uid, p.gid, p.pid = cred.Uid, cred.Gid, int(cred.Pid)
		p.groups, perr = peerGroups(int(fd))
		if perr != nil {
			return
		}
		// The pidfd of the process that connected (Linux 6.5): it fails
		// once that process is gone. Only a kernel without it gets one
		// opened now, which a number reused since the connect could
		// mislead (the pid space must wrap meanwhile); there the BPF LSM
		// refuses a cell's connect itself.
		p.pidfd, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd)
		if errors.Is(err, unix.ENOPROTOOPT) {
			p.pidfd, err = unix.PidfdOpen(p.pid, 0)
		}
		perr = err
	})
	return p, perr
}

// peerGroups are the peer's supplementary groups at connect: the agent
// gets these, not the user's groups in the user database (a caller that
// dropped a group keeps it dropped).
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 256)
	for {
		n := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, soPeerGroups,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if errno == unix.ERANGE && int(n/4) > len(buf) {
			buf = make([]uint32, n/4)
			continue
		}
		if errno != 0 {
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", errno)
		}
		return buf[:n/4], nil
	}
}

// Caller is what a session's agent-lock is told of who asked: the
// kernel's account of the peer, and the request's environment.
type Caller struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	Env    []string `json:"env"`
	Pane   bool     `json:"pane"`
	// Spare describes the programs loaded ahead for this session
	// (Server.Spare), passed from SpareFD on; none when empty.
	Spare json.RawMessage `json:"spare,omitempty"`
}

// file is c in a memory file.
func (c Caller) file() (*os.File, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("agent-lock-caller", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "agent-lock-caller")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Listen is the daemon's socket: systemd's, when it started the daemon
// for its socket unit (LISTEN_FDS), else one made at path, which any
// local user may connect to (what a request can do is the daemon's to
// decide, not the socket's mode).
func Listen(path string) (ln *net.UnixListener, made bool, err error) {
	if os.Getenv("LISTEN_PID") == strconv.Itoa(os.Getpid()) && os.Getenv("LISTEN_FDS") == "1" {
		f := os.NewFile(3, "systemd socket")
		defer f.Close()
		unix.CloseOnExec(3)
		l, err := net.FileListener(f)
		if err != nil {
			return nil, false, fmt.Errorf("systemd's socket: %w", err)
		}
		ul, ok := l.(*net.UnixListener)
		if !ok {
			l.Close()
			return nil, false, errors.New("systemd's socket is not a unix socket")
		}
		return ul, false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, false, err
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, false, fmt.Errorf("a daemon already listens at %s", path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, false, fmt.Errorf("%s exists and is not a socket", path)
		}
		os.Remove(path)
	}
	ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, false, err
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, false, err
	}
	return ln, true, nil
}
