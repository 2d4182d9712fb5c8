// Package landlockcell is the engine for kernels without the BPF LSM:
// Landlock decides (a ruleset the cell's first process enforces on itself
// before it execs the agent), jail's tracepoint observers and Landlock's
// own audit records report, and the tripwire keeps the protected entries
// that Landlock, granting DIR whole, cannot refuse.
package landlockcell

import (
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

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/engine"
	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/landlock"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/secretenv"
	"github.com/agent-lock/agent-lock/internal/spec"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// Name is the engine's, as --engine takes it.
const Name = "landlock"

// Engine opens Landlock cells.
type Engine struct {
	// Alone is the cell a user opens without root and without the
	// daemon (alone.go): Landlock alone, enforced by the user's own
	// process; no cgroup, no observers, the network held by port.
	Alone bool
	// Ports are what Alone's ruleset holds of the network.
	Ports *landlock.Ports
}

// Check refuses what Landlock cannot do: run at all on this kernel, audit
// (let a refused access through), or what the policy asks that it cannot
// enforce (Refusals; warnings instead with BestEffort).
func (Engine) Check(f kernel.Facts, s engine.Spec) error {
	if landlock.ABI() == 0 {
		return fmt.Errorf("%w: Landlock is not available on this kernel (active LSMs %v)", engine.ErrNotSupported, f.LSMs)
	}
	if s.Audit {
		return errors.New("the Landlock engine has no audit mode: Landlock cannot let a refused access through and report it; use --engine bpf-lsm")
	}
	return refuseUnenforceable(s.Policy, s.BestEffort, s.Warn)
}

// Open builds the ruleset, loads the observers for s's cgroup and arms the
// tripwire.
func (e Engine) Open(f kernel.Facts, s engine.Spec) (engine.Cell, error) {
	return e.Load(f, s).Open()
}

// Load begins loading the observers for s's cgroup.
func (e Engine) Load(f kernel.Facts, s engine.Spec) engine.Opening {
	// The caller's Check said its warnings; checked again, quietly, so
	// that an Open alone never runs what Landlock cannot enforce.
	quiet := s
	quiet.Warn = nil
	if err := e.Check(f, quiet); err != nil {
		return refused{err}
	}
	// The walk for git's files begins now, beside the network's making.
	scan := s.Scan
	if s.Throwaway {
		scan = nil // nothing of it worth the daemon's memory
	}
	walk := walkGit(s.Policy, s.Rules, s.User, !s.Throwaway, scan)
	if e.Alone {
		return &opening{f: f, s: s, ports: e.Ports, walk: walk}
	}
	// The observers report; the tripwire reports the protected entries'
	// changes, with what it undid, where the observers would report the
	// same writes as reached. Landlock holds without agent-lock by
	// construction: pinning the observers would only keep reports
	// flowing to no one.
	l := jail.Begin(jail.Config{
		CgroupID: s.Cgroup.ID, StreamInBounds: s.StreamInBounds, TTYs: s.TTYs,
		Rules: unprotected(s.Rules), Patterns: s.Policy.Patterns(), Observe: true, Warn: s.Warn,
	})
	return &opening{f: f, s: s, l: l, walk: walk}
}

var _ engine.Loader = Engine{}

// refused is an Opening that Check refused.
type refused struct{ err error }

func (r refused) Open() (engine.Cell, error) { return nil, r.err }
func (refused) Abandon()                     {}

// opening is a cell whose observers are loading.
type opening struct {
	f kernel.Facts
	s engine.Spec
	l *jail.Loading // nil for a cell alone
	// ports: what a cell alone's ruleset holds of the network.
	ports *landlock.Ports
	// walk: the tripwire's search for what it keeps, under way.
	walk *gitWalk
}

func (o *opening) Abandon() {
	if o.l != nil {
		o.l.Abandon()
	}
}

// Open builds the ruleset, attaches the observers once loaded and arms
// the tripwire.
func (o *opening) Open() (engine.Cell, error) {
	f, s := o.f, o.s
	abi := landlock.ABI()
	lr, err := landlock.FromCell(s.Rules, s.TTYPaths)
	if err != nil {
		o.Abandon()
		return nil, err
	}
	fd, flags, err := landlock.Ruleset(lr, o.ports)
	if err != nil {
		o.Abandon()
		return nil, err
	}
	c := &cell{s: s, abi: abi, flags: flags, ruleset: os.NewFile(uintptr(fd), "landlock-ruleset"), walk: o.walk,
		events: make(chan verdict.Event, 4096), done: make(chan struct{}), ports: o.ports}
	if o.l == nil {
		return c.alone()
	}
	j, err := o.l.Attach("")
	if err != nil {
		c.ruleset.Close()
		if errors.Is(err, engine.ErrNotSupported) {
			return nil, fmt.Errorf("%w\n%s", err, engine.Advice(f))
		}
		// Landlock would hold, but nobody would see what it refused;
		// the promise is both.
		return nil, fmt.Errorf("the Landlock engine's observers: %w", err)
	}
	c.j = j
	if s.Loaded != nil {
		if err := s.Loaded(j.KillSeq()); err != nil {
			c.Close()
			return nil, err
		}
	}
	if c.tw, err = armTripwire(c.walk, s.User, s.Cgroup.Path, s.Warn); err != nil {
		if !s.BestEffort {
			c.Close()
			return nil, err
		}
		s.Warn("--best-effort: the protected entries are not kept: %v", err)
	}
	var readers sync.WaitGroup
	c.audit, c.noAudit = openAuditLog(abi)
	if c.audit != nil {
		readers.Go(c.readAudit)
	}
	readers.Go(func() { j.Stream(c.events, c.done, s.Warn) })
	go func() {
		readers.Wait()
		close(c.events)
	}()
	return c, nil
}

// cell is a cgroup whose processes enforce the ruleset.
type cell struct {
	s       engine.Spec
	j       *jail.Jail // the observers; nil for a cell alone (alone.go)
	ruleset *os.File
	flags   uint32
	abi     int
	ports   *landlock.Ports // what a cell alone holds of the network
	// bare: a cell alone without namespaces (the kernel refuses the
	// user one: alone.go).
	bare   bool
	events chan verdict.Event
	done   chan struct{}
	// audit: Landlock's own records of what it refused (audit.go), nil
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
	// walk is the search for what tw keeps (tripwire.go), whose memory
	// for the next session Close waits for.
	walk *gitWalk
	// tw keeps the protected entries (tripwire.go); nil with
	// --best-effort when they could not be.
	tw *tripwireRun
	// envFiles are the environments handed to processes started since
	// the last Started (Command), closed there and at Close.
	mu       sync.Mutex
	envFiles []*os.File
}

// closeEnvFiles closes the environments handed over.
func (c *cell) closeEnvFiles() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.envFiles {
		f.Close()
	}
	c.envFiles = nil
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

func (c *cell) About() engine.About {
	if c.j == nil {
		return c.aboutAlone()
	}
	return engine.About{Name: fmt.Sprintf("%s (ABI %d)", Name, c.abi), LoadTime: c.j.LoadTime(), Steps: c.j.Steps(),
		Limits: append(landlock.Limits(c.abi), auditLimit(c.noAudit)), GitWalk: c.gitWalk()}
}

// gitWalk says what the walk for the tripwire's entries did (nil: no
// memory used, or no tripwire armed).
func (c *cell) gitWalk() *report.GitWalk {
	if c.tw == nil {
		return nil
	}
	return c.walk.stats
}

// Command is agent-lock itself (the running binary, through
// /proc/self/exe, so the agent's user needs no access to where it lies),
// which enforces the ruleset on itself and execs the agent: Go has no hook
// between fork and exec. It also gets IPC namespaces of its own (Landlock
// has no say over SysV IPC and POSIX message queues, which the BPF LSM
// refuses outside the cell) and a mount namespace, for a devpts of its
// own.
//
// That process holds CAP_SYS_ADMIN until it drops it, and a capability
// held only as ambient does not make its exec a secure one: the dynamic
// loader would honour LD_PRELOAD, LD_AUDIT, GCONV_PATH, ... So env, the
// user's (through sudo too: callerenv.go), is not its environment: it
// starts with none, and reads env from a memory file (landlock.EnvFD) to
// exec the agent with, capabilities dropped and the ruleset enforced.
func (c *cell) Command(path string, argv, env []string, attr *syscall.SysProcAttr) (*exec.Cmd, error) {
	envFile, err := landlock.EnvFile(env)
	if err != nil {
		return nil, err
	}
	mode := landlock.AsAgent
	if c.j == nil {
		mode = c.aloneAttr(attr)
	} else {
		attr.UseCgroupFD = true // clone3(CLONE_INTO_CGROUP): in the cell before its first instruction
		attr.CgroupFD = c.s.Cgroup.FD
	}
	if mode != landlock.Bare {
		attr.Cloneflags |= syscall.CLONE_NEWIPC | syscall.CLONE_NEWNS
		// For the cell's own devpts, mounted by that process before it
		// drops every capability (landlock/pts.go).
		attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_SYS_ADMIN)
	}
	cmd := exec.Command("/proc/self/exe")
	start := landlock.Start{Flags: c.flags, TTYs: c.s.TTYPaths, Mode: mode}
	if mode == landlock.AsInit {
		for _, v := range c.s.Views {
			start.Binds = append(start.Binds, landlock.Bind{Src: v.Copy, Target: v.Target})
		}
	}
	cmd.Args = landlock.Argv(start, path, argv)
	cmd.Env = []string{}
	// fd 3: landlock.RulesetFD, fd 4: landlock.EnvFD.
	cmd.ExtraFiles = []*os.File{c.ruleset, envFile}
	cmd.SysProcAttr = attr
	// The child has its own copy once started; this one holds the
	// agent's secrets until then.
	c.mu.Lock()
	c.envFiles = append(c.envFiles, envFile)
	c.mu.Unlock()
	return cmd, nil
}

// Env withholds the user's sockets where Landlock cannot refuse
// connecting to them (withholdSockets).
func (c *cell) Env(env []string) (kept, withheld []string) {
	if c.abi >= 9 {
		return env, nil
	}
	// As the user: the sockets' paths are the user's to name (their
	// environment), and root must not follow their links.
	err := asuser.Do(c.s.User, func() error {
		kept, withheld = withholdSockets(env, c.abi, c.s.AllowUnix, c.s.Warn)
		return nil
	})
	if err != nil {
		// Nothing resolved, nothing granted: every one is withheld.
		c.s.Warn("the agent's unix socket variables are withheld: %v", err)
		return secretenv.Sockets(env, nil, filepath.Clean)
	}
	return kept, withheld
}

func (c *cell) Started(pid int) {
	c.agentPID.Store(int64(pid))
	c.closeEnvFiles()
}

// Reporting sends the tripwire's changes found so far, and later ones, to
// w.
func (c *cell) Reporting(w report.Writer) { c.tw.start(w) }

func (c *cell) Events() <-chan verdict.Event { return c.events }

// drainWait bounds how long the audit reader waits for Landlock's last
// records once the agent is gone.
const drainWait = time.Second

func (c *cell) Drain() <-chan verdict.Event {
	if c.j == nil {
		return c.events // closed: nothing observes
	}
	events, ok := c.j.Drain(c.events, c.s.Warn)
	if ok && c.audit != nil {
		// Audit records reach us through the kernel's audit thread, a
		// moment after the refusal: wait that moment, no more.
		c.auditUntil.Store(time.Now().Add(drainWait).UnixNano())
	}
	return events
}

func (c *cell) Finish() (undone, left []report.Undo) { return c.tw.finish() }

// Counters are the observers' tallies, with the refusals reported from
// Landlock's audit records and the tripwire's among the escapes (the
// observers see neither).
func (c *cell) Counters() (verdict.Counters, error) {
	if c.j == nil {
		return verdict.Counters{Escapes: c.tw.count()}, nil
	}
	n, err := c.j.Counters()
	n.Escapes += c.auditEscapes.Load() + c.tw.count()
	return n, err
}

func (c *cell) HookStats() []verdict.HookStat {
	if c.j == nil {
		return nil
	}
	return c.j.HookStats()
}

// GitScope: Landlock keeps no marks of what the agent made; git's files in
// DIR and the user's writable grants that changed since the start and that
// the tripwire did not keep are the agent's (tripwireRun.madeSince): the
// repositories it made. Without the tripwire (--best-effort) there is no
// start to compare with.
func (c *cell) GitScope(string, []string, uint64) *engine.GitScope {
	if c.tw == nil {
		return nil
	}
	return &engine.GitScope{Made: c.tw.madeSince, Roots: c.tw.roots}
}

func (c *cell) Links() ([]*os.File, error) {
	if c.j == nil {
		return nil, nil
	}
	return c.j.LinkFiles()
}

func (c *cell) Close() {
	close(c.done)
	c.tw.close()
	c.walk.wait()
	c.ruleset.Close()
	c.closeEnvFiles()
	if c.audit != nil {
		c.audit.Close()
	}
	if c.j != nil {
		c.j.Close()
	}
}
