package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/bpfload"
	"github.com/agent-lock/agent-lock/internal/daemon"
	"github.com/agent-lock/agent-lock/internal/dirscan"
	"github.com/agent-lock/agent-lock/internal/engine/bpflsm"
	"github.com/agent-lock/agent-lock/internal/engine/landlockcell"
	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/netcell"
	"github.com/agent-lock/agent-lock/internal/session"
)

// Without sudo: a user's agent-lock asks agent-lock's daemon (root, one
// for the machine) to run the session. The daemon starts the session's
// agent-lock as sudo would have, for the user the kernel says asked
// (internal/daemon), and that agent-lock holds the user's connection:
// headless, it has the user's streams and ends with the client; with a
// pane, it is the pane's session agent-lock, which this one attaches to as
// it attaches to its own.

// daemonSessionArg starts a session's agent-lock for the daemon's caller.
const daemonSessionArg = "__daemon-session"

// daemonStandbyArg starts one ahead, for the next caller (daemon.Standby).
const daemonStandbyArg = "__daemon-standby"

const daemonUsage = `Usage: agent-lock daemon [--socket PATH] [--per-user N] [--total N]

Runs agent-lock's daemon in the foreground (as root): every local user may
then run agent-lock as themselves, without sudo; the daemon starts each
session for the user who asks (as the kernel tells it), as sudo would.
sudo agent-lock install sets it up with systemd instead.

  --socket PATH   where to listen (default ` + daemon.DefaultSocket + `)
  --per-user N    sessions a user may run at once (default 8)
  --total N       sessions the daemon runs at once (default 16: under the
                  BPF LSM each session attaches programs of its own, and
                  so does the next session's set the daemon keeps loaded
                  ahead; the kernel takes at most 38 on one hook)
`

// daemonCmd is `agent-lock daemon`.
func daemonCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sock := fs.String("socket", daemon.DefaultSocket, "")
	perUser := fs.Int("per-user", 8, "")
	total := fs.Int("total", 16, "")
	help := fs.Bool("help", false, "")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *perUser < 1 || *total < 1 {
		fmt.Fprintf(stderr, "agent-lock daemon: bad arguments\n%s", daemonUsage)
		return session.ExitFailed
	}
	if *help {
		fmt.Fprint(stdout, daemonUsage)
		return 0
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "agent-lock daemon: must run as root (it loads the programs): sudo agent-lock daemon, or sudo agent-lock install")
		return session.ExitFailed
	}
	if bin, err := os.Executable(); err != nil {
		fmt.Fprintf(stderr, "agent-lock daemon: where is this binary: %v\n", err)
		return session.ExitFailed
	} else if err := rootsOnly(bin); err != nil {
		fmt.Fprintf(stderr, "agent-lock daemon: %v: it runs as root for every user, so only root may be able to change it (sudo install -m 755 %s /usr/local/bin/agent-lock)\n", err, bin)
		return session.ExitFailed
	}
	// What the daemon inherited (a careless parent's descriptors) must
	// not reach the sessions it starts, nor their agents.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fmt.Fprintf(stderr, "agent-lock daemon: close inherited descriptors: %v\n", err)
		return session.ExitFailed
	}
	ln, made, err := daemon.Listen(*sock)
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock daemon: %v\n", err)
		return session.ExitFailed
	}
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "agent-lock daemon: "+format+"\n", args...) }
	// The next session's programs are loaded ahead, while none asks.
	spares := newSpares(logf)
	defer spares.Close()
	// The Landlock engine's walks for git's files, held from one session
	// of a tree to the next, their changes followed.
	scans, err := landlockcell.Memories()
	if err != nil {
		logf("every session's walk for git's files statx's each folder it remembers: no watch of their changes (%v)", err)
	}
	defer scans.Close()
	srv := &daemon.Server{
		Exe: "/proc/self/exe", SessionArg: daemonSessionArg, StandbyArg: daemonStandbyArg, Version: version(),
		InCell: session.InCell, PerUser: *perUser, Total: *total,
		Log: logf, Spare: spares.Next, SpareWait: spares.Wait, Scan: scans.Scan,
	}
	where := "systemd's socket"
	if made {
		where = *sock
	}
	fmt.Fprintf(stderr, "agent-lock daemon: listening at %s\n", where)
	err = srv.Serve(ctx, ln)
	srv.Wait()
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock daemon: %v\n", err)
		return session.ExitFailed
	}
	return 0
}

// daemonSession is the session's agent-lock the daemon started.
func daemonSession(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, conn, err := daemon.ServeSession()
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock: %v\n", err)
		return session.ExitFailed
	}
	session.ServeCaller(session.Caller{UID: c.UID, GID: c.GID, Groups: c.Groups, Env: c.Env})
	started := adoptSpare(c.Spare, daemon.SpareFD, func(format string, args ...any) {
		fmt.Fprintf(stderr, "agent-lock: "+format+"\n", args...)
	})
	return serveCaller(ctx, c, conn, args, started, nil, stdout, stderr)
}

// daemonStandby is a session's agent-lock the daemon started ahead: it
// takes the programs loaded ahead while it waits, and serves the request
// the daemon hands it as daemonSession would.
func daemonStandby(ctx context.Context, stderr io.Writer) int {
	// The client's ^C and ^\ are the agent's (serveCaller); until a
	// request comes, the daemon ends a standby by closing its end.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGQUIT)
	sb, spare, err := daemon.ServeStandby()
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock: %v\n", err)
		return session.ExitFailed
	}
	// Told to the daemon's log: no user waits yet.
	started := adoptSpare(spare, daemon.StandbySpareFD, func(format string, args ...any) {
		fmt.Fprintf(stderr, "agent-lock daemon: a session started ahead: "+format+"\n", args...)
	})
	// Its reaper too: a Go process's start, which would be the agent's
	// neighbour at its own start.
	if err := session.StartReaperAhead(); err != nil {
		fmt.Fprintf(stderr, "agent-lock daemon: a session started ahead: its reaper (its session starts one): %v\n", err)
	}
	// And its cell's cgroup, with its network's self-test in it.
	cgroupFD, dropCgroup, err := session.MakeCgroupAhead()
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock daemon: a session started ahead: its cgroup (its session makes one): %v\n", err)
	} else {
		defer dropCgroup()
	}
	if err := netcell.StartProbeAhead(cgroupFD); err != nil {
		fmt.Fprintf(stderr, "agent-lock daemon: a session started ahead: its network self-test (its session starts one): %v\n", err)
	}
	if ctx.Err() != nil || sb.Ready() != nil {
		return 0 // ended meanwhile, or the daemon went
	}
	c, args, conn, err := sb.Wait(ctx)
	if errors.Is(err, daemon.ErrNoRequest) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock daemon: a session started ahead: %v\n", err)
		return session.ExitFailed
	}
	session.ServeCaller(session.Caller{UID: c.UID, GID: c.GID, Groups: c.Groups, Env: c.Env})
	return serveCaller(ctx, c, conn, args, func() { started(); sb.Started() }, sb.Scan, os.Stdout, os.Stderr)
}

// serveCaller runs the session a daemon's caller asked for (args are
// agent-lock's) on conn; started is called once its agent runs; scan,
// when set, is the daemon's (session.Options.Scan).
func serveCaller(ctx context.Context, c daemon.Caller, conn *daemon.Conn, args []string, started func(), scan dirscan.Scanner, stdout, stderr io.Writer) int {
	// The client's ^C and ^\ are the agent's: until it runs (and the
	// session passes them on), they must not end this process half way
	// through making the cell.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGQUIT)
	code := func() int {
		o, code, ok := parseRun(args, stdout, stderr)
		if !ok {
			return code
		}
		// The client chose: a pane's session lives on its own (it is
		// detached and attached again); a headless one is the client's,
		// whose going is the terminal closing.
		gone := func() {}
		if c.Pane {
			o.serve = true
		} else {
			o.headless = true
			o.ownTerminal = freeTerminal(os.Stdin)
			gone = func() { syscall.Kill(os.Getpid(), syscall.SIGHUP) }
		}
		go conn.Follow(func(sig syscall.Signal) { syscall.Kill(os.Getpid(), sig) }, gone)
		o.started = started
		o.scan = scan
		return run(ctx, o, stdout, stderr)
	}()
	conn.Exit(code)
	return code
}

// freeTerminal says whether f is a terminal that no session holds as its
// controlling one (the client's relay): only such a terminal becomes the
// agent's. Taking one a session holds would take it from that session's
// processes (the user's shell, or another user's on a terminal passed
// along): Go's Setctty asks to steal it, which a process holding
// CAP_SYS_ADMIN may; without, the agent's start fails.
//
// The kernel answers TIOCGSID only to the terminal's own session, so the
// processes are asked instead: a terminal is held when one of them has it
// as its controlling terminal (stat's tty_nr).
func freeTerminal(f *os.File) bool {
	if !isTerminal(f) {
		return false
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	// tty_nr's encoding: minor's low 8 bits, major, minor's high bits.
	major, minor := unix.Major(st.Rdev), unix.Minor(st.Rdev)
	ttyNr := strconv.FormatUint(uint64(minor&0xff|major<<8|(minor&^0xff)<<12), 10)
	procs, err := session.Processes()
	if err != nil {
		return false
	}
	for _, f := range procs {
		if len(f) > 4 && f[4] == ttyNr { // tty_nr
			return false
		}
	}
	return true
}

// viaDaemon runs the session o asks for through the daemon: agent-lock
// runs as the user.
func viaDaemon(ctx context.Context, o options, stdout, stderr io.Writer) int {
	sock := daemon.SocketPath()
	failed := func(err error) int {
		if errors.Is(err, daemon.ErrNoDaemon) {
			err = fmt.Errorf("%v, and without it agent-lock needs root to load its programs: run it with sudo, or start the daemon once (sudo agent-lock install, or sudo agent-lock daemon)", err)
		}
		fmt.Fprintf(stderr, "agent-lock: %v\n", err)
		return session.ExitFailed
	}
	dir, err := daemon.OpenDir()
	if err != nil {
		return failed(err)
	}
	defer dir.Close()
	if !o.headless && isTerminal(stdout) && isTerminal(os.Stdin) {
		return startPane(ctx, func(w *os.File) (func() int, error) {
			devnull, err := os.Open(os.DevNull)
			if err != nil {
				return nil, err
			}
			defer devnull.Close()
			s, err := daemon.Start(sock, daemon.OpPane, o.args, os.Environ(), dir, devnull, w, w)
			if err != nil {
				return nil, err
			}
			return func() int {
				code, err := s.Wait()
				if err != nil {
					return failed(err)
				}
				return code
			}, nil
		}, stdout, stderr, failed)
	}
	// On a terminal the agent gets one of its own, relayed to this one:
	// the session's agent-lock is not in this terminal's session, and
	// only a terminal no session holds can be the agent's controlling
	// terminal (job control, ^C from the keyboard, /dev/tty).
	in, out, errf := os.Stdin, os.Stdout, os.Stderr
	var rl *relay
	if isTerminal(os.Stdin) && isTerminal(stdout) {
		if rl, err = newRelay(); err != nil {
			return failed(err)
		}
		defer rl.close()
		in, out, errf = rl.slave, rl.slave, rl.slave
	}
	s, err := daemon.Start(sock, daemon.OpRun, o.args, os.Environ(), dir, in, out, errf)
	if rl != nil {
		// The session holds it now; its end is the relay's.
		rl.slave.Close()
	}
	if err != nil {
		return failed(err)
	}
	// The terminal's keys reach this process's group, not the session's:
	// passed on, as the session's agent-lock passes them to the agent.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for sig := range sigs {
			s.Signal(sig.(syscall.Signal))
		}
	}()
	code, err := s.Wait()
	if rl != nil {
		rl.drain()
	}
	if err != nil {
		return failed(err)
	}
	return code
}

// relay is a pseudo-terminal whose other end is this one's: what is typed
// here goes to it (raw: its own line discipline does the editing, the
// echo and ^C), what it writes comes here, and its size follows this
// terminal's.
type relay struct {
	master, slave *os.File
	state         *term.State
	written       chan struct{}
	winch         chan os.Signal
}

func newRelay() (*relay, error) {
	master, slave, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("a terminal for the agent: %w", err)
	}
	pty.InheritSize(os.Stdin, master)
	state, err := term.MakeRaw(os.Stdin.Fd())
	if err != nil {
		master.Close()
		slave.Close()
		return nil, fmt.Errorf("this terminal: %w", err)
	}
	r := &relay{master: master, slave: slave, state: state, written: make(chan struct{}), winch: make(chan os.Signal, 1)}
	go io.Copy(master, os.Stdin)
	go func() {
		io.Copy(os.Stdout, master)
		close(r.written)
	}()
	signal.Notify(r.winch, syscall.SIGWINCH)
	go func() {
		for range r.winch {
			pty.InheritSize(os.Stdin, master)
		}
	}()
	return r, nil
}

// drain waits, briefly, for the last of what the session wrote: its
// summary comes just before its exit status.
func (r *relay) drain() {
	select {
	case <-r.written:
	case <-time.After(2 * time.Second):
	}
}

// close gives this terminal back as it was.
func (r *relay) close() {
	signal.Stop(r.winch)
	term.Restore(os.Stdin.Fd(), r.state)
	r.master.Close()
}

// Spares keeps the programs of the next session loaded ahead, for the
// daemon: the engine's (jail.Keeper: of the engine auto would pick here,
// the BPF LSM's hooks or, where this kernel refused them, the Landlock
// engine's observers; a session of the other engine loads its own), and
// the network's (netcell.Ahead), which every session uses.
type Spares struct {
	jail *jail.Keeper
	net  *bpfload.Keeper[*netcell.Loaded]
	// warm ends warmNetwork's once it is made; closed says Close came
	// first (it then ends itself).
	warm struct {
		sync.Mutex
		end    func()
		closed bool
	}
}

// startBound is the longest the next spares wait for the session that
// took the last to start its agent: more than the slowest start measured
// under emulation.
const startBound = 30 * time.Second

// spareDesc is what a session is told of its spares (Caller.Spare): each
// one's description, the engine's descriptors first, then the network's,
// then Started's.
type spareDesc struct {
	Jail    json.RawMessage `json:",omitempty"`
	JailFDs int             `json:",omitempty"`
	Net     json.RawMessage `json:",omitempty"`
	NetFDs  int             `json:",omitempty"`
	// Started is a pipe's end the session closes once its agent runs
	// (or with its end): the next spares are loaded only then.
	Started bool `json:",omitempty"`
}

// newSpares starts the first loads; log says how each ended.
func newSpares(log func(format string, args ...any)) *Spares {
	netReady := func(p *netcell.Loaded, err error) {
		if err != nil {
			log("the next session's network programs could not be loaded ahead (it loads its own): %v", err)
			return
		}
		log("the next session's network programs are ready, loaded in %v", p.LoadTime().Round(time.Millisecond))
	}
	s := &Spares{
		jail: jail.NewKeeper(bpflsm.RefusedThisBoot, log),
		net:  bpfload.NewKeeper(netcell.Ahead, (*netcell.Loaded).Close, netReady),
	}
	go func() {
		end := warmNetwork(log)
		s.warm.Lock()
		defer s.warm.Unlock()
		if s.warm.closed {
			end()
			return
		}
		s.warm.end = end
	}()
	return s
}

// warmNetwork keeps the network's hooks on (netcell.Warm) in an empty
// cgroup of its own beside the cells, and returns what ends it.
func warmNetwork(log func(format string, args ...any)) func() {
	facts, err := kernel.Probe()
	if err != nil || facts.Cgroup2 == "" {
		return func() {}
	}
	base := filepath.Join(facts.Cgroup2, "agent-lock")
	os.Mkdir(base, 0o755)
	// Those of daemons gone: their programs went with them. (A daemon
	// of another pid namespace sharing this hierarchy, whose pid this
	// one cannot see, loses its warm-up: only its cells' starts slow.)
	old, _ := filepath.Glob(filepath.Join(base, "warm-*"))
	for _, p := range old {
		if pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "warm-")); err == nil && unix.Kill(pid, 0) == unix.ESRCH {
			os.Remove(p)
		}
	}
	p := filepath.Join(base, fmt.Sprintf("warm-%d", os.Getpid()))
	// One left by a daemon of this pid before is empty: this one's now.
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		log("the network's hooks are not kept on (each session turns them on): %v", err)
		return func() {}
	}
	w, err := netcell.Warm(p)
	if err != nil {
		os.Remove(p)
		log("the network's hooks are not kept on (each session turns them on): %v", err)
		return func() {}
	}
	return func() {
		w.Close()
		os.Remove(p)
	}
}

// Next is daemon.Server.Spare: the spares' description and descriptors,
// and what frees the daemon's copies once the session started. Either may
// be missing (loading still): the session loads that one itself. The next
// ones are loaded once the session's agent runs (spareDesc.Started).
func (s *Spares) Next() (desc []byte, files []*os.File, done func()) {
	free := func() { closeFiles(files) }
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, free
	}
	started := make(chan struct{})
	eof := make(chan struct{})
	go func() {
		// EOF: every copy of w closed, the session's included.
		io.Copy(io.Discard, r)
		r.Close()
		close(eof)
	}()
	go func() {
		// Or a bound: a session that never reaches its agent (a pane
		// nobody attaches, a folder that never answers) must not keep
		// every other user's next start from its spares.
		select {
		case <-eof:
		case <-time.After(startBound):
		}
		close(started)
	}()
	var d spareDesc
	if sp := s.jail.Take(started); sp != nil {
		// The descriptors handed are duplicates: they keep the objects.
		h, fs, err := sp.Hand()
		sp.Close()
		if err == nil {
			if d.Jail, err = json.Marshal(h); err == nil {
				files, d.JailFDs = fs, len(fs)
			}
		}
		if err != nil {
			closeFiles(fs)
		}
	}
	if p, ok := s.net.Take(started); ok {
		h, fs, err := p.Hand()
		p.Close()
		if err == nil {
			if d.Net, err = json.Marshal(h); err == nil {
				files, d.NetFDs = append(files, fs...), len(fs)
			}
		}
		if err != nil {
			closeFiles(fs)
		}
	}
	files, d.Started = append(files, w), true
	desc, err = json.Marshal(d)
	if err != nil {
		free()
		return nil, nil, func() {}
	}
	return desc, files, free
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// Wait is daemon.Server.SpareWait: it waits until the loads under way
// ended (or ctx did).
func (s *Spares) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.jail.Wait()
		s.net.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Close frees the spares held.
func (s *Spares) Close() {
	s.jail.Close()
	s.net.Close()
	// Not waiting for a warm-up under way (an idle load): it ends itself.
	s.warm.Lock()
	defer s.warm.Unlock()
	s.warm.closed = true
	if s.warm.end != nil {
		s.warm.end()
		s.warm.end = nil
	}
}

// adoptSpare takes the programs the daemon loaded ahead for this session
// (desc, descriptors from fd on): the engine's start and the network's
// use them. A spare that cannot be taken is only slower: its programs are
// loaded again. It returns what tells the daemon that the agent runs
// (spareDesc.Started).
func adoptSpare(desc []byte, fd int, warn func(format string, args ...any)) (started func()) {
	started = func() {}
	if len(desc) == 0 {
		return started
	}
	var d spareDesc
	if err := json.Unmarshal(desc, &d); err != nil {
		warn("the programs loaded ahead: %v (loading them again)", err)
		return started
	}
	if d.Jail != nil {
		if err := jail.Adopt(d.Jail, fd); err != nil {
			warn("the programs loaded ahead: %v (loading them again)", err)
		}
	}
	if d.Net != nil {
		if err := netcell.Adopt(d.Net, fd+d.JailFDs); err != nil {
			warn("the network programs loaded ahead: %v (loading them again)", err)
		}
	}
	if d.Started {
		// Close-on-exec already (daemon.ServeSession): nothing the
		// session starts holds it.
		f := os.NewFile(uintptr(fd+d.JailFDs+d.NetFDs), "started")
		return func() { f.Close() }
	}
	return started
}
