package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/landlock"
	"github.com/agent-lock/agent-lock/internal/netcell"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// cell is a cgroup with the programs loaded for it, and the stream of what
// they decided.
type cell struct {
	cg     *cgroup
	jail   *jail.Jail
	net    *netcell.Cell // the cell's network (net.go)
	events chan jail.Event
	done   chan struct{}

	// The Landlock engine: the ruleset the first process enforces on
	// itself before it execs the agent; nil under the BPF LSM.
	ruleset *os.File
	flags   uint32
	abi     int
	ttys    []string // the agent's terminals by name
	// onlyOpen: EngineFileOpenOnly's cell.
	onlyOpen bool
	// audit: Landlock's own records of what it refused (llaudit.go), nil
	// where there are none to read, and noAudit says why.
	audit   *landlock.AuditLog
	noAudit string
	// auditEscapes counts the refusals reported from those records, which
	// the observers' counters do not see.
	auditEscapes atomic.Uint64
	// auditUntil: when the audit reader stops (unix ns, 0 for not yet);
	// agentPID: the cell's first process, whose domain is the agent's.
	auditUntil atomic.Int64
	agentPID   atomic.Int64
	// tw keeps the protected entries under Landlock (tripwire.go); nil
	// under the BPF LSM, which refuses their changes.
	tw *tripwireRun

	warn warner
}

// Engines.
const (
	EngineAuto     = "auto"
	EngineBPF      = "bpf-lsm"
	EngineLandlock = "landlock"
	// EngineFileOpenOnly is the BPF-LSM engine with its file_open hook
	// alone: the reference design (one hook) that make bench measures
	// agent-lock against. It is not a jail (every door but open(2) stays
	// open), so it is never picked, only named, and it says so.
	EngineFileOpenOnly = "file-open-only"
)

// openCell makes the cgroup and loads the programs: under the BPF LSM the
// hooks that decide; under Landlock the ruleset that decides and the
// observers that report. ttyPaths are the agent's terminals by name, for
// Landlock, which grants by path. bestEffort lets Landlock run without
// what it cannot enforce (LandlockRefusals).
func openCell(facts kernel.Facts, engine string, cfg jail.Config, p policy.Policy, np netpolicy.Policy, ttyPaths []string, bestEffort bool, warn warner) (*cell, error) {
	var ruleset *os.File
	var flags uint32
	var abi int
	// The caller resolved cfg.Rules from p, as the agent's user (run.open).
	rules := cfg.Rules
	switch engine {
	case EngineBPF:
		if !facts.BPFInLSM {
			return nil, notSupported(facts)
		}
	case EngineFileOpenOnly:
		if !facts.BPFInLSM {
			return nil, notSupported(facts)
		}
		cfg.OnlyFileOpen = true
		warn("--engine %s: only the file_open hook is attached, the benchmarks' reference; this is not a jail", EngineFileOpenOnly)
	case EngineLandlock:
		if abi = landlock.ABI(); abi == 0 {
			return nil, fmt.Errorf("%w: Landlock is not available on this kernel (active LSMs %v)", jail.ErrNotSupported, facts.LSMs)
		}
		if cfg.Audit {
			return nil, errors.New("the Landlock engine has no audit mode: Landlock cannot let a refused access through and report it; use --engine bpf-lsm")
		}
		if err := refuseUnenforceable(p, bestEffort, warn); err != nil {
			return nil, err
		}
		lr, err := landlock.FromCell(rules, ttyPaths)
		if err != nil {
			return nil, err
		}
		fd, fl, err := landlock.Ruleset(lr)
		if err != nil {
			return nil, err
		}
		ruleset, flags = os.NewFile(uintptr(fd), "landlock-ruleset"), fl
		cfg.Observe = true
	default:
		return nil, fmt.Errorf("unknown engine %q: use auto, bpf-lsm or landlock", engine)
	}
	sweep(facts.Cgroup2, warn)
	cg, err := newCgroup(facts.Cgroup2)
	if err != nil {
		closeFile(ruleset)
		return nil, err
	}
	// The network first: its self-test runs this binary in the cell,
	// which the engine's programs would (rightly) refuse; and so, first,
	// the kill count that would kill it at birth (matchKills).
	err = cg.matchKillsByTrial()
	var nc *netcell.Cell
	if err == nil {
		nc, err = openNet(cg, np, cfg.Audit, warn)
	}
	if err != nil {
		closeFile(ruleset)
		cg.Close()
		os.Remove(cg.Path)
		return nil, err
	}
	cfg.CgroupID = cg.ID
	cfg.Rules = rules
	cfg.Protect = p.Protect
	if ruleset != nil {
		// The tripwire reports the protected entries' changes, with
		// what it undid: the observers would report the same writes
		// as reached.
		cfg.Rules, cfg.Protect = unprotected(rules), nil
	}
	cfg.Patterns = p.Patterns()
	cfg.Warn = warn
	if !cfg.Observe {
		// Landlock holds without agent-lock by construction; pinning the
		// observers would only keep reports flowing to no one.
		cfg.PinDir = pinDir(cg.Path, warn)
	}
	j, err := jail.Load(cfg)
	if err != nil {
		nc.Close()
		closeFile(ruleset)
		cg.Close()
		os.Remove(cg.Path)
		if errors.Is(err, jail.ErrNotSupported) {
			return nil, fmt.Errorf("%w\n%s", err, advice(facts))
		}
		if cfg.Observe {
			// Landlock would hold, but nobody would see what it refused;
			// the promise is both.
			return nil, fmt.Errorf("the Landlock engine's observers: %w", err)
		}
		return nil, err
	}
	if err := cg.matchKills(j.KillSeq()); err != nil {
		j.Close()
		nc.Close()
		closeFile(ruleset)
		cg.Close()
		os.Remove(cg.Path)
		return nil, err
	}
	c := &cell{cg: cg, jail: j, net: nc, events: make(chan jail.Event, 4096), done: make(chan struct{}),
		ruleset: ruleset, flags: flags, abi: abi, ttys: ttyPaths, warn: warn, onlyOpen: cfg.OnlyFileOpen}
	var readers sync.WaitGroup
	if ruleset != nil {
		c.audit, c.noAudit = openAuditLog(abi)
		if c.audit != nil {
			readers.Go(c.readAudit)
		}
	}
	readers.Go(func() {
		for {
			ev, err := j.Read()
			if err != nil {
				if !errors.Is(err, jail.ErrClosed) && !errors.Is(err, jail.ErrFlushed) {
					warn("%v", err)
				}
				return
			}
			select {
			case c.events <- ev:
			case <-c.done:
				return
			}
		}
	})
	go func() {
		readers.Wait()
		close(c.events)
	}()
	return c, nil
}

// unprotected are rules without their protected entries.
func unprotected(rules []spec.Rule) []spec.Rule {
	out := make([]spec.Rule, len(rules))
	for i, r := range rules {
		r.Access &^= spec.Protect
		out[i] = r
	}
	return out
}

func closeFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// engine names what decides, for the report.
func (c *cell) engine() string {
	if c.ruleset != nil {
		return fmt.Sprintf("%s (ABI %d)", EngineLandlock, c.abi)
	}
	if c.onlyOpen {
		return EngineFileOpenOnly
	}
	return EngineBPF
}

// loadTime is how long the kernel took to load and verify the cell's
// programs (0 under Landlock).
func (c *cell) loadTime() time.Duration {
	if c.jail == nil {
		return 0
	}
	return c.jail.LoadTime()
}

// limits are the side doors this cell's engine leaves open.
func (c *cell) limits() []string {
	if c.ruleset != nil {
		return append(landlock.Limits(c.abi), auditLimit(c.noAudit))
	}
	if c.onlyOpen {
		return []string{"only open(2) is decided (the benchmarks' one-hook reference): every other door is open"}
	}
	return nil
}

// command is the process that runs path as argv in the cell, started into
// the cell's cgroup with attr (which command completes). Under Landlock it
// is agent-lock itself (the running binary, through /proc/self/exe, so the
// agent's user needs no access to where it lies), which enforces the
// ruleset on itself and execs the agent: Go has no hook between fork and
// exec. It also gets IPC namespaces of its own (Landlock has no say over
// SysV IPC and POSIX message queues, which the BPF LSM refuses outside the
// cell) and a mount namespace, for a devpts of its own.
func (c *cell) command(path string, argv []string, attr *syscall.SysProcAttr) *exec.Cmd {
	attr.UseCgroupFD = true // clone3(CLONE_INTO_CGROUP): in the cell before its first instruction
	attr.CgroupFD = c.cg.FD()
	if c.ruleset == nil {
		cmd := exec.Command(path, argv[1:]...)
		cmd.Args = argv
		cmd.SysProcAttr = attr
		return cmd
	}
	attr.Cloneflags |= syscall.CLONE_NEWIPC | syscall.CLONE_NEWNS
	// For the cell's own devpts, mounted by that process before it
	// drops every capability (landlock/pts.go).
	attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_SYS_ADMIN)
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = landlock.Argv(c.flags, c.ttys, path, argv)
	cmd.ExtraFiles = []*os.File{c.ruleset} // fd 3: landlock.RulesetFD
	cmd.SysProcAttr = attr
	return cmd
}

func notSupported(f kernel.Facts) error {
	return fmt.Errorf("%w: bpf is not in the active LSM list (%v)\n%s", jail.ErrNotSupported, f.LSMs, advice(f))
}

func advice(f kernel.Facts) string {
	var s string
	for _, a := range f.Advice() {
		s += "  - " + a + "\n"
	}
	return s
}

// drain returns the events still in the ring buffer once no jailed process
// is left to add to it.
func (c *cell) drain() <-chan jail.Event {
	if err := c.jail.Flush(); err != nil {
		// Without the flush the reader waits for events that no longer
		// come; the counters still say how many there were.
		c.warn("flush events: %v", err)
		none := make(chan jail.Event)
		close(none)
		return none
	}
	if c.audit != nil {
		// Audit records reach us through the kernel's audit thread, a
		// moment after the refusal: wait that moment, no more.
		c.auditUntil.Store(time.Now().Add(drainWait).UnixNano())
	}
	return c.events
}

// counters are the kernel's tallies, with the refusals reported from
// Landlock's audit records among the escapes (the observers do not see
// those).
func (c *cell) counters() (jail.Counters, error) {
	n, err := c.jail.Counters()
	n.Escapes += c.auditEscapes.Load() + c.tw.count()
	if err != nil {
		return n, err
	}
	nn, err := c.net.Counters()
	n.InBounds += nn.Allowed
	n.Escapes += nn.Refused
	n.Lost += nn.Lost
	return n, err
}

// drainWait bounds how long the audit reader waits for Landlock's last
// records once the agent is gone.
const drainWait = time.Second

func (c *cell) close() {
	close(c.done)
	c.tw.close()
	closeFile(c.ruleset)
	if c.audit != nil {
		c.audit.Close()
	}
	// Kill before detaching: a process of the cell must never run free.
	killCgroup(c.cg.Path, 30*time.Second)
	c.net.Close()
	c.jail.Close()
	c.cg.Close()
}

// probe proves the loaded programs fire: a process of the cell must run a
// system binary (the system set works) and must be refused, and reported,
// reading a file outside the cell. In audit mode the read must succeed and
// still be reported.
func (c *cell) probe(ctx context.Context, audit bool) error {
	dir, err := os.MkdirTemp("", "agent-lock-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	target := filepath.Join(dir, "outside")
	if err := os.WriteFile(target, []byte("agent-lock probe\n"), 0o644); err != nil {
		return err
	}
	run := func(name string, args ...string) (*exec.Cmd, error) {
		path, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("probe needs %s: %w", name, err)
		}
		cmd := c.command(path, append([]string{name}, args...), &syscall.SysProcAttr{})
		cmd.Dir = "/"
		// Not CommandContext: the caller's ctx ending kills the cell.
		stop := context.AfterFunc(ctx, func() { killCgroup(c.cg.Path, time.Second) })
		defer stop()
		return cmd, cmd.Run()
	}
	if _, err := run("true"); err != nil {
		if bornKilled(err) {
			return fmt.Errorf("a process started into the cell was killed before it ran `true` (%w): nothing in the cell kills, so the kernel did; on Linux 6.14 and later it kills a process cloned into a cgroup whose cgroup.kill count differs from its parent's cgroup's, which agent-lock matched for its own cgroup (%s): start agent-lock from another cgroup (for example with systemd-run --scope)", err, ownCgroup())
		}
		return fmt.Errorf("a jailed process could not run `true` (the system set is not readable): %w%s", err, c.pendingEscapes())
	}
	cmd, err := run("cat", target)
	if err == nil && !audit {
		return errors.New("a jailed process read a file outside the cell: the programs are loaded but do not enforce")
	}
	if err != nil && audit {
		return fmt.Errorf("in audit mode a jailed process could not read a file: %w", err)
	}
	pid := uint32(cmd.Process.Pid)
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				return errors.New("the event stream closed during the self-test")
			}
			if ev.PID == pid && ev.Op == "read" && ev.Path == target && (ev.Denied || ev.Audit) {
				return nil
			}
		case <-timeout:
			return errors.New("the refusal was not reported within 5s: the jail's reports do not arrive")
		}
	}
}

// pendingEscapes describes refusals already queued, to explain a failed probe.
func (c *cell) pendingEscapes() string {
	var s string
	for i := 0; i < 8; i++ {
		select {
		case ev := <-c.events:
			s += fmt.Sprintf("\n  refused: %s %s (%s)", ev.Op, ev.Path, ev.Comm)
		case <-time.After(200 * time.Millisecond):
			return s
		}
	}
	return s
}

// SelfTest builds a throwaway cell around a temporary directory and probes
// it, for `agent-lock doctor`.
func SelfTest(ctx context.Context, facts kernel.Facts, engine string) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	dir, err := os.MkdirTemp("", "agent-lock-doctor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The network as a session without a profile gets it: nothing granted.
	p := policy.Policy{Dir: dir}
	c, err := openCell(facts, engine, jail.Config{Rules: p.Rules()}, p, netpolicy.Policy{}, nil, false, newWarner(nil))
	if err != nil {
		return err
	}
	defer c.close()
	return c.probe(ctx, false)
}
