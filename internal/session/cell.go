package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agent-lock/agent-lock/internal/engine"
	"github.com/agent-lock/agent-lock/internal/engine/bpflsm"
	"github.com/agent-lock/agent-lock/internal/engine/landlockcell"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/netcell"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// cell is a cgroup, its network, and the engine that decides there.
type cell struct {
	cg   *cgroup       // nil for a cell alone (alone.go)
	net  *netcell.Cell // the cell's network (net.go); nil alone
	eng  engine.Cell
	warn warner
	// steps are the opening's (report.Step): cgroup, network, then the
	// engine's own and the rest of its opening.
	steps []report.Step
	// agent is the agent's process, once started: alone, its waiter
	// reaps it, not kill.
	agent int
}

// alone says whether the cell has no cgroup and no network programs.
func (c *cell) alone() bool { return c.cg == nil }

// kill kills every process of the cell and waits until none is left.
func (c *cell) kill(timeout time.Duration) error {
	if c.alone() {
		return killChildren(c.agent, timeout)
	}
	return killCgroup(c.cg.Path, timeout)
}

// netEvents, netFailed and netDrain are the network's, nil alone.
func (c *cell) netEvents() <-chan netcell.Event {
	if c.net == nil {
		return nil
	}
	return c.net.Events()
}

func (c *cell) netFailed() <-chan error {
	if c.net == nil {
		return nil
	}
	return c.net.Failed()
}

func (c *cell) netDrain() <-chan netcell.Event {
	if c.net == nil {
		ch := make(chan netcell.Event)
		close(ch)
		return ch
	}
	return c.net.Drain()
}

// Engines.
const (
	EngineAuto     = "auto"
	EngineBPF      = bpflsm.Name
	EngineLandlock = landlockcell.Name
	// EngineFileOpenOnly is the BPF-LSM engine with its file_open hook
	// alone: the reference design (one hook) that make bench measures
	// agent-lock against.
	EngineFileOpenOnly = bpflsm.FileOpenOnlyName
)

// engineNamed is the engine --engine names.
func engineNamed(name string) (engine.Engine, error) {
	switch name {
	case EngineBPF:
		return bpflsm.Engine{}, nil
	case EngineFileOpenOnly:
		return bpflsm.Engine{FileOpenOnly: true}, nil
	case EngineLandlock:
		return landlockcell.Engine{}, nil
	}
	return nil, fmt.Errorf("unknown engine %q: use auto, bpf-lsm or landlock", name)
}

// openCell makes the cgroup and the network, and opens the engine's cell
// there for s (whose Policy and Rules the caller filled: the rules
// resolved as the agent's user, run.open).
func openCell(facts kernel.Facts, name string, s engine.Spec, np netpolicy.Policy, warn warner) (*cell, error) {
	eng, err := engineNamed(name)
	if err != nil {
		return nil, err
	}
	var steps []report.Step
	step := stepper(&steps, time.Now())
	// What the engine refuses before anything is made.
	s.Warn = warn
	if err := eng.Check(facts, s); err != nil {
		return nil, err
	}
	sweep(facts.Cgroup2, warn)
	// Made ahead, by a daemon's session started ahead, with the network's
	// self-test in it.
	var cg *cgroup
	if !s.Throwaway {
		cg = takeCgroupAhead(facts.Cgroup2)
	}
	if cg == nil {
		var err error
		if cg, err = newCgroup(facts.Cgroup2); err != nil {
			return nil, err
		}
	}
	s.Cgroup = engine.Cgroup{ID: cg.ID, Path: cg.Path, FD: cg.FD()}
	s.PinDir = func() string { return pinDir(cg.Path, warn) }
	s.Loaded = cg.matchKills
	// The kernel verifies the engine's programs (most of a start) while
	// the network is made: nothing loaded enforces until Open attaches.
	open := func() (engine.Cell, error) { return eng.Open(facts, s) }
	abandon := func() {}
	if l, ok := eng.(engine.Loader); ok {
		o := l.Load(facts, s)
		open, abandon = o.Open, o.Abandon
	}
	step("cgroup")
	// The network first: its self-test runs this binary in the cell,
	// which the engine's programs would (rightly) refuse; as the cell's
	// first process it also matches the kill count that would kill it at
	// birth (killedAtBirth).
	nc, err := openNet(cg, np, s.Audit, warn)
	network := step("")
	if nc != nil {
		// The programs' load (or the daemon's, made ahead) and the rest.
		d, ahead := nc.Load()
		name := "network_load"
		if ahead {
			name = "network_load_ahead"
		}
		steps = append(steps, report.Step{Name: name, Time: d})
		network -= d
	}
	steps = append(steps, report.Step{Name: "network", Time: max(network, 0)})
	if err != nil {
		abandon()
		// Killing what is in it: the network's self-test, moved in
		// ahead, may be there still.
		cg.drop()
		return nil, err
	}
	ec, err := open()
	if err != nil {
		nc.Close()
		cg.drop()
		return nil, err
	}
	// The engine's own steps, and what it did besides them.
	opened := step("")
	for _, st := range ec.About().Steps {
		steps = append(steps, st)
		opened -= st.Time
	}
	steps = append(steps, report.Step{Name: "engine", Time: max(opened, 0)})
	return &cell{cg: cg, net: nc, eng: ec, warn: warn, steps: steps}, nil
}

// stepper times a start's steps into steps: each call ends the step
// begun at the last (or at stepper's) and, named, records it; it returns
// the step's time.
func stepper(steps *[]report.Step, from time.Time) func(name string) time.Duration {
	last := from
	return func(name string) time.Duration {
		now := time.Now()
		d := now.Sub(last)
		last = now
		if name != "" {
			*steps = append(*steps, report.Step{Name: name, Time: d})
		}
		return d
	}
}

// events are the engine's reports.
func (c *cell) events() <-chan verdict.Event { return c.eng.Events() }

// command is the process that runs path as argv with env in the cell,
// completed by attr.
func (c *cell) command(path string, argv, env []string, attr *syscall.SysProcAttr) (*exec.Cmd, error) {
	return c.eng.Command(path, argv, env, attr)
}

// counters are the engine's tallies and the network's.
func (c *cell) counters() (verdict.Counters, error) {
	n, err := c.eng.Counters()
	if err != nil || c.net == nil {
		return n, err
	}
	nn, err := c.net.Counters()
	n.InBounds += nn.Allowed
	n.Escapes += nn.Refused
	n.Lost += nn.Lost
	return n, err
}

func (c *cell) close() {
	// Kill before detaching: a process of the cell must never run free.
	// Should the kill not empty the cell (processes that outran it),
	// nothing is detached: where the bpf file system is, the pins keep
	// the programs on the cgroup and the next agent-lock run kills what
	// is left and unpins (sweep); where it is not, nothing outlasts this
	// process, and the warning says so.
	if c.alone() {
		if err := c.kill(30 * time.Second); err != nil {
			c.warn("%v", err)
		}
		c.eng.Close()
		return
	}
	if err := killCgroup(c.cg.Path, 30*time.Second); err != nil {
		if pinBase() != "" {
			c.warn("the cell's processes outlived its kill (%v): its programs stay pinned on it, and the next agent-lock run kills them", err)
		} else {
			c.warn("the cell's processes outlived its kill (%v), and with no bpf file system to pin its programs to, they come off when agent-lock ends: kill them (cgroup %s)", err, c.cg.Path)
		}
		return
	}
	c.eng.Close()
	c.net.Close()
	c.cg.Close()
}

// probe proves the loaded programs fire: a process of the cell must run a
// system binary (the system set works) and must be refused, and reported,
// reading a file outside the cell. In audit mode the read must succeed and
// still be reported.
func (c *cell) probe(ctx context.Context, audit bool) error {
	// Named as a session's TMPDIR is, after this process: should it be
	// killed meanwhile, the next run's sweep removes the folder.
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-probe-", scratchPrefix, os.Getpid()))
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	target := filepath.Join(dir, "outside")
	if err := os.WriteFile(target, []byte("agent-lock probe\n"), 0o644); err != nil {
		return err
	}
	// One process, not a `true` first and the read then: each start in
	// the cell is an exec of this binary and of the command (a tenth of a
	// second emulated), and the read's own failure says what a `true`
	// would have.
	path, err := exec.LookPath("cat")
	if err != nil {
		return fmt.Errorf("probe needs cat: %w", err)
	}
	// The refusal's words in one language, to tell it from a failure to
	// run at all: agent-lock's own locale out (the Landlock engine's
	// environment keeps duplicates, and C's getenv takes the first).
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "LANG" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_")
	})
	cmd, err := c.command(path, []string{"cat", target}, append(env, "LC_ALL=C"), &syscall.SysProcAttr{})
	if err != nil {
		return err
	}
	cmd.Dir = "/"
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// Not CommandContext: the caller's ctx ending kills the cell.
	stop := context.AfterFunc(ctx, func() { c.kill(time.Second) })
	err = cmd.Run()
	stop()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case bornKilled(err):
		return fmt.Errorf("a process started into the cell was killed before it ran `cat` (%w): nothing in the cell kills, so the kernel did; on Linux 6.14 and later it kills a process cloned into a cgroup whose cgroup.kill count differs from its parent's cgroup's, which agent-lock matched for its own cgroup (%s): start agent-lock from another cgroup (for example with systemd-run --scope)", err, ownCgroup())
	case err == nil && !audit:
		return errors.New("a jailed process read a file outside the cell: the programs are loaded but do not enforce")
	case err != nil && audit:
		return fmt.Errorf("in audit mode a jailed process could not read a file: %w", err)
	case err != nil && !(strings.Contains(stderr.String(), filepath.Base(target)) && strings.Contains(stderr.String(), "Permission denied")):
		return fmt.Errorf("a jailed process could not run `cat` (the system set is not readable): %w: %s%s", err, strings.TrimSpace(stderr.String()), c.pendingEscapes())
	}
	if c.alone() {
		return nil // refused; nothing observes to report it
	}
	pid := uint32(cmd.Process.Pid)
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-c.events():
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
		case ev := <-c.events():
			s += fmt.Sprintf("\n  refused: %s %s (%s)", ev.Op, ev.Path, ev.Comm)
		case <-time.After(200 * time.Millisecond):
			return s
		}
	}
	return s
}

// SelfTest builds a throwaway cell around a temporary directory and probes
// it, for `agent-lock doctor`.
func SelfTest(ctx context.Context, facts kernel.Facts, name string) error {
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
	c, err := openCell(facts, name, engine.Spec{Policy: p, Rules: p.Rules(), Throwaway: true}, netpolicy.Policy{}, newWarner(nil))
	if err != nil {
		return err
	}
	defer c.close()
	return c.probe(ctx, false)
}
