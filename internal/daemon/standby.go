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
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/dirscan"
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
// spare's description (standbySpare); it answers once it is ready (its
// spares taken, its helpers running: standbyNote.Ready), and only then is
// it given a request. The request comes with the caller's folder,
// connection and streams (handoff); it answers once it took them
// (Taken) and once the agent runs (Started: the next standby is started
// only then, so that it does not slow this session's start). While idle
// it ends when the daemon's end closes.

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
	// readyBound bounds a standby's getting ready: its Go start, its
	// taking of the spares and its helpers' starts (seconds under
	// emulation at the most).
	readyBound = 2 * time.Minute
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
	Ready   bool `json:"ready,omitempty"`
	Taken   bool `json:"taken,omitempty"`
	Started bool `json:"started,omitempty"`
	// Scan asks the daemon for a scan (Standby.Scan), before Started.
	Scan *scanAsk `json:"scan,omitempty"`
}

// scanAsk is a dirscan.Scanner's arguments, and scanAnswer its results
// (Err: its error's words; the standby then scans itself), for the ask
// of the same Seq. Paths are bytes: a file's name need not be UTF-8,
// which JSON's strings would change.
type scanAsk struct {
	Seq    int      `json:"seq"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	Root   []byte   `json:"root"`
	Name   []byte   `json:"name"`
	Skip   [][]byte `json:"skip"`
}

type scanAnswer struct {
	Seq   int           `json:"seq"`
	Hits  []scanHit     `json:"hits"`
	Stats dirscan.Stats `json:"stats"`
	Err   string        `json:"err,omitempty"`
}

// scanHit is a dirscan.Hit; Unread its errno (EIO for an error that is
// none).
type scanHit struct {
	Path    []byte `json:"path"`
	Dir     bool   `json:"dir,omitempty"`
	Regular bool   `json:"regular,omitempty"`
	Unread  int    `json:"unread,omitempty"`
}

// answerScan runs scan for a, asked by the standby that took c's request,
// as its frame to the standby: an error, or one too large for a frame, is
// said in Err. The scan is as c's user only: the standby acts for no one
// else.
func answerScan(scan dirscan.Scanner, c Caller, a *scanAsk) scanAnswer {
	if scan == nil {
		return scanAnswer{Seq: a.Seq, Err: "this daemon scans nothing"}
	}
	if a.UID != c.UID || a.GID != c.GID || !slices.Equal(a.Groups, c.Groups) {
		return scanAnswer{Seq: a.Seq, Err: fmt.Sprintf("a scan as %d:%d %v for a session of %d:%d %v", a.UID, a.GID, a.Groups, c.UID, c.GID, c.Groups)}
	}
	skip := make([]string, len(a.Skip))
	for i, s := range a.Skip {
		skip[i] = string(s)
	}
	hits, st, err := scan(asuser.ID{UID: a.UID, GID: a.GID, Groups: a.Groups}, string(a.Root), string(a.Name), skip)
	if err != nil {
		return scanAnswer{Seq: a.Seq, Err: err.Error()}
	}
	ans := scanAnswer{Seq: a.Seq, Stats: st, Hits: make([]scanHit, 0, len(hits))}
	size := 0
	for _, h := range hits {
		sh := scanHit{Path: []byte(h.Path), Dir: h.Dir, Regular: h.Regular}
		if h.Unread != nil {
			sh.Unread = int(unix.EIO)
			var e unix.Errno
			if errors.As(h.Unread, &e) {
				sh.Unread = int(e)
			}
		}
		if size += len(h.Path)*4/3 + 64; size > MaxFrame {
			return scanAnswer{Seq: a.Seq, Err: fmt.Sprintf("%d entries found: too many for an answer", len(hits))}
		}
		ans.Hits = append(ans.Hits, sh)
	}
	return ans
}

// systemPath is a session's PATH: the system's alone.
const systemPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// standby is the daemon's side of one.
type standby struct {
	cmd    *exec.Cmd
	c      *net.UnixConn
	exited chan struct{}
	// done is closed once the next may be started: its agent runs, it
	// ended, a handoff to it failed, or startBound passed since it took
	// a request.
	done     chan struct{}
	doneOnce sync.Once
}

func (sb *standby) finish() { sb.doneOnce.Do(func() { close(sb.done) }) }

// keepStandby keeps one standby waiting until ctx ends: a new one once
// the last took a request and its agent runs (or it ended, or failed),
// and once the spares it would take are ready (SpareWait).
func (s *Server) keepStandby(ctx context.Context) {
	pause := func() {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
	}
	for ctx.Err() == nil {
		if s.SpareWait != nil {
			s.SpareWait(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		sb, err := s.startStandby(ctx)
		if err != nil {
			if s.Log != nil {
				s.Log("no session started ahead (each starts its own): %v", err)
			}
			pause()
			continue
		}
		s.mu.Lock()
		s.standby = sb
		s.mu.Unlock()
		if s.Log != nil {
			s.Log("a session is ready ahead (pid %d)", sb.cmd.Process.Pid)
		}
		select {
		case <-sb.done:
		case <-sb.exited:
		case <-ctx.Done():
			if s.take() == sb {
				// Idle: its end closed, it ends.
				sb.c.Close()
			}
			return
		}
		if s.take() == sb {
			// Gone while idle.
			sb.kill()
			if s.Log != nil {
				s.Log("the session started ahead ended before any request (%v): starting another", sb.cmd.ProcessState)
			}
			pause()
			continue
		}
		select {
		case <-sb.done:
		case <-ctx.Done():
			return
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

// startStandby starts a standby with the spares ready now, and returns
// once it said it is ready (or failed: it died, readyBound passed, or
// ctx ended).
func (s *Server) startStandby(ctx context.Context) (*standby, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "standby"), os.NewFile(uintptr(fds[1]), "daemon")
	c, err := unixConn(mine, "the standby's socket")
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, err
	}
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
	err = cmd.Start()
	// Its end is its alone: its death is this end's EOF.
	theirs.Close()
	if err != nil {
		c.Close()
		return nil, err
	}
	sb := &standby{cmd: cmd, c: c, exited: make(chan struct{}), done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(sb.exited)
	}()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(time.Now().Add(readyBound))
	err = writeFrame(c, standbySpare{Spare: spare})
	var n standbyNote
	if err == nil {
		var body []byte
		if body, _, err = readFrame(c, 0); err == nil {
			err = json.Unmarshal(body, &n)
		}
	}
	c.SetDeadline(time.Time{})
	if err == nil && !n.Ready {
		err = errors.New("it did not say it was ready")
	}
	if err != nil {
		sb.kill()
		return nil, fmt.Errorf("the session started ahead: %w", err)
	}
	return sb, nil
}

// kill ends a standby that did not take a request as it should.
func (sb *standby) kill() {
	sb.cmd.Process.Kill()
	sb.c.Close()
	<-sb.exited
	sb.finish()
}

// handoffBody is the request as a standby is handed it, or an error when
// it would not fit a frame (a process started for it takes it instead).
func handoffBody(c Caller, name string, args []string) (json.RawMessage, error) {
	b, err := json.Marshal(handoff{Caller: c, Name: name, Args: args})
	if err == nil && len(b) > MaxFrame {
		err = fmt.Errorf("a handoff of %d bytes", len(b))
	}
	return b, err
}

// hand gives sb the request (body, handoffBody's), with its folder,
// connection and streams (files as a request carries them). Once it
// answers that it took it, it is the caller's session, counted as such.
// On an error the caller kills it.
//
// Until its agent runs, it may ask for scans as c's user (scan's, each
// answered by a goroutine of its own: a slow one, a tree's first or one
// below a hung mount, must not keep the next standby from starting).
func (sb *standby) hand(body json.RawMessage, files []*os.File, conn *net.UnixConn, scan dirscan.Scanner, c Caller) error {
	cc, err := conn.File()
	if err != nil {
		return err
	}
	defer cc.Close()
	sb.c.SetDeadline(time.Now().Add(handTimeout))
	err = writeFrame(sb.c, body,
		int(files[0].Fd()), int(cc.Fd()), int(files[1].Fd()), int(files[2].Fd()), int(files[3].Fd()))
	var n standbyNote
	if err == nil {
		var b []byte
		if b, _, err = readFrame(sb.c, 0); err == nil {
			err = json.Unmarshal(b, &n)
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
		defer sb.finish()
		sb.follow(scan, c)
	}()
	return nil
}

// follow reads what sb says once it took c's request, answering its
// scans, until its agent runs, it ends, or startBound passes.
func (sb *standby) follow(scan dirscan.Scanner, c Caller) {
	defer sb.c.Close()
	stop := time.AfterFunc(startBound, func() { sb.c.Close() })
	defer stop.Stop()
	for {
		b, _, err := readFrame(sb.c, 0)
		if err != nil {
			return
		}
		var n standbyNote
		if json.Unmarshal(b, &n) != nil || n.Started {
			return
		}
		if ask := n.Scan; ask != nil {
			// One at a time (the standby waits for each answer, and
			// asks no more once one failed): writes do not interleave.
			go func() {
				defer func() {
					// A scan's fault is one session's: it walks
					// itself; the daemon serves the others.
					if r := recover(); r != nil {
						writeFrame(sb.c, scanAnswer{Seq: ask.Seq, Err: fmt.Sprint("the daemon's scan failed: ", r)})
					}
				}()
				writeFrame(sb.c, answerScan(scan, c, ask))
			}()
		}
	}
}

// Standby is a standby's own side.
type Standby struct {
	c *net.UnixConn
	// mu: one scan at a time, and none once Started closed c, nor once
	// one failed (broken: its answer, if it comes, would be read as the
	// next one's); seq numbers the asks.
	mu      sync.Mutex
	started bool
	broken  bool
	seq     int
}

// startStd are a standby's standard streams as it started, made again
// (Wait): kept from the collector, whose finalizers would close the
// caller's streams that took their descriptors.
var startStd []*os.File

// ServeStandby takes what the daemon started this standby with: it
// returns the spare's description (its descriptors from StandbySpareFD
// on). Only root's process can have been started so.
func ServeStandby() (*Standby, json.RawMessage, error) {
	if err := unix.CloseRange(standbyFD, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("the daemon's descriptors: %w", err)
	}
	f := os.NewFile(standbyFD, "daemon")
	c, err := unixConn(f, "the daemon's connection")
	f.Close()
	if err != nil {
		return nil, nil, err
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

// Ready tells the daemon that this standby may be handed a request.
func (s *Standby) Ready() error {
	return writeFrame(s.c, standbyNote{Ready: true})
}

// ErrNoRequest says the daemon ended its standby before handing it one
// (or ctx ended first).
var ErrNoRequest = errors.New("the daemon ended before handing a request")

// Wait waits for the request and makes this process its session, as
// ServeSession does one started for it: in the caller's folder, its
// streams standard ones (os.Stdin, os.Stdout and os.Stderr made again),
// the caller's ids in SUDO_UID, SUDO_GID and SUDO_USER, and named as the
// caller's session (standbyMark). It returns the caller, agent-lock's
// arguments and the connection.
func (s *Standby) Wait(ctx context.Context) (Caller, []string, *Conn, error) {
	// Ended meanwhile (SIGTERM, SIGHUP): no request is taken.
	stop := context.AfterFunc(ctx, func() { s.c.Close() })
	body, files, err := readFrame(s.c, handoffFDs)
	if !stop() || err != nil {
		for _, f := range files {
			f.Close()
		}
		if err == nil || errors.Is(err, io.EOF) || ctx.Err() != nil {
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
	// What can fail first, while this process's streams are still the
	// daemon's (its log).
	if err := unix.Fchdir(int(files[0].Fd())); err != nil {
		return Caller{}, nil, nil, fmt.Errorf("the caller's folder: %w", err)
	}
	uc, err := unixConn(files[1], "the client's connection")
	if err != nil {
		return Caller{}, nil, nil, err
	}
	uid := strconv.FormatUint(uint64(h.Caller.UID), 10)
	if err := os.WriteFile("/proc/self/comm", []byte(standbyMark+uid), 0); err != nil {
		uc.Close()
		return Caller{}, nil, nil, fmt.Errorf("name this session: %w", err)
	}
	for k, v := range map[string]string{"SUDO_UID": uid, "SUDO_GID": strconv.FormatUint(uint64(h.Caller.GID), 10), "SUDO_USER": h.Name} {
		os.Setenv(k, v)
	}
	for i, f := range files[2:] {
		if err := unix.Dup3(int(f.Fd()), i, 0); err != nil {
			uc.Close()
			return Caller{}, nil, nil, fmt.Errorf("the caller's streams: %w", err)
		}
	}
	// Made again: Go decides at a file's making whether the poller
	// serves it (a pipe's or a terminal's the client made is
	// non-blocking), and the first were /dev/null's.
	startStd = []*os.File{os.Stdin, os.Stdout, os.Stderr}
	os.Stdin, os.Stdout, os.Stderr = os.NewFile(0, "/dev/stdin"), os.NewFile(1, "/dev/stdout"), os.NewFile(2, "/dev/stderr")
	if err := writeFrame(s.c, standbyNote{Taken: true}); err != nil {
		uc.Close()
		return Caller{}, nil, nil, fmt.Errorf("answer the daemon: %w", err)
	}
	return h.Caller, h.Args, &Conn{c: uc}, nil
}

// Started tells the daemon that the session's agent runs.
func (s *Standby) Started() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
	writeFrame(s.c, standbyNote{Started: true})
	s.c.Close()
}

// scanBound bounds a scan's answer: the daemon's first walk of a large
// tree under emulation takes seconds; past it the session scans itself.
var scanBound = 20 * time.Second

// Scan is a dirscan.Scanner: the daemon's (Server.Scan), for a standby
// that took a request, until its agent runs.
func (s *Standby) Scan(id asuser.ID, root, name string, skip []string) ([]dirscan.Hit, dirscan.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.broken {
		return nil, dirscan.Stats{}, errors.New("the daemon scans no more for this session")
	}
	s.seq++
	s.c.SetDeadline(time.Now().Add(scanBound))
	defer s.c.SetDeadline(time.Time{})
	ask := &scanAsk{Seq: s.seq, UID: id.UID, GID: id.GID, Groups: id.Groups, Root: []byte(root), Name: []byte(name)}
	for _, p := range skip {
		ask.Skip = append(ask.Skip, []byte(p))
	}
	a, err := s.ask(ask)
	if err != nil {
		s.broken = true
		return nil, dirscan.Stats{}, err
	}
	if a.Err != "" {
		return nil, dirscan.Stats{}, fmt.Errorf("the daemon's scan: %s", a.Err)
	}
	hits := make([]dirscan.Hit, len(a.Hits))
	for i, h := range a.Hits {
		hits[i] = dirscan.Hit{Path: string(h.Path), Dir: h.Dir, Regular: h.Regular}
		if h.Unread != 0 {
			hits[i].Unread = unix.Errno(h.Unread)
		}
	}
	return hits, a.Stats, nil
}

// ask sends a and reads its answer (s.mu held).
func (s *Standby) ask(a *scanAsk) (scanAnswer, error) {
	var ans scanAnswer
	if err := writeFrame(s.c, standbyNote{Scan: a}); err != nil {
		return ans, err
	}
	b, _, err := readFrame(s.c, 0)
	if err == nil {
		err = json.Unmarshal(b, &ans)
	}
	if err == nil && ans.Seq != a.Seq {
		err = fmt.Errorf("the daemon answered scan %d, not %d", ans.Seq, a.Seq)
	}
	return ans, err
}
