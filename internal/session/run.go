package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/engine"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/recording"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/secretenv"
	"github.com/agent-lock/agent-lock/internal/spec"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// Run jails the agent and returns its exit status: the cell is opened and
// proven (open), the agent started in it (start), followed to its end
// (supervise), and what it did summed up (finish).
func Run(ctx context.Context, o Options) (int, error) {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	r := &run{o: o, began: time.Now(), warn: newWarner(o.Warnings)}
	r.step = stepper(&r.steps, r.began)
	defer r.close()
	if err := r.open(ctx); err != nil {
		return 0, err
	}
	cmd, done, err := r.start()
	if err != nil {
		return 0, err
	}
	status := r.supervise(ctx, cmd, done)
	return status, r.finish(status)
}

// run is one session, from its cell's opening to its summary.
type run struct {
	o     Options
	began time.Time
	warn  warner
	// undo are the steps taken back when Run returns, last first.
	undo []func()

	agent    Agent
	plan     Plan
	facts    kernel.Facts
	pol      policy.Policy // the plan's, with the private TMPDIR
	view     agentView
	cell     *cell
	baseline verdict.Counters
	// agentPgid is the agent's process group, for the terminal's keys;
	// term the signals that end the session.
	agentPgid atomic.Int64
	term      chan os.Signal
	// releaseTerminal gives the terminal back to agent-lock.
	releaseTerminal func()
	opens           sampler
	// steps are where the start went (report.Step); step ends one.
	steps []report.Step
	step  func(name string) time.Duration
}

func (r *run) later(f func()) { r.undo = append(r.undo, f) }

func (r *run) close() {
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
}

// open plans the session, opens its cell and proves it before anything of
// the agent's runs; from its end on, agent-lock may die in any way: the
// reaper kills the cell and only then lets the programs go.
func (r *run) open(ctx context.Context) error {
	o, warn := r.o, r.warn
	if err := cleanStart(warn); err != nil {
		return fail(ExitFailed, err)
	}
	invoking := func() (Agent, error) { return invokingUser(o.Getenv, o.AllowRoot) }
	if o.Alone {
		invoking = Self
	}
	agent, err := invoking()
	if err != nil {
		return fail(ExitFailed, err)
	}
	r.agent = agent
	// As the user: the plan resolves the user's paths (DIR, the grants,
	// the command on PATH), which root must not follow for them. A first
	// run: the agent's own folders (~/.codex, ...) are made, as the user,
	// so that the cell can grant them.
	if o.Plan != nil {
		r.plan = *o.Plan
	} else if r.plan, err = Prepare(o, agent); err != nil {
		return err
	}
	for _, n := range r.plan.Notes {
		warn("%s", n)
	}
	if r.facts, err = kernel.Probe(); err != nil {
		return fail(ExitFailed, fmt.Errorf("probe kernel: %w", err))
	}
	tmp, err := privateTmp(agent)
	if err != nil {
		return fail(ExitFailed, err)
	}
	// As the user: what the agent left in it is the user's, and a root
	// removal would be root acting in a tree the agent shaped.
	r.later(holdFolder(tmp)) // let go after the removal (later runs last first)
	r.later(func() { asuser.RemoveAll(agent.ID(), tmp) })

	ttys, ttyNames := terminals()
	if o.Terminal != nil {
		ttys, ttyNames = terminal(o.Terminal)
	}
	// In-bounds opens are streamed as a sample (see inbounds_due in the
	// BPF code) so that a live view shows the agent's work, not only its
	// escapes.
	s := engine.Spec{Audit: o.Audit, TTYs: ttys, TTYPaths: ttyNames, StreamInBounds: true,
		User: agent.ID(), BestEffort: o.BestEffort, AllowUnix: o.AllowUnix, Scan: o.Scan}
	r.pol = r.plan.Policy
	r.pol.TmpDir = tmp
	view, removeCopies := shellSetup(agent, &r.pol, warn)
	r.view = view
	r.later(removeCopies)
	if o.Alone {
		// Its mounts need root here: the cell's first process makes
		// them, in a user namespace of its own.
		for _, c := range view.rc {
			s.Views = append(s.Views, engine.View{Copy: c.Copy, Target: c.Target})
		}
	}
	s.Policy = r.pol
	if s.Rules, err = userRules(r.pol, agent.ID()); err != nil {
		return fail(ExitFailed, fmt.Errorf("resolve the cell's paths as %s: %w", agent.Name, err))
	}
	r.step("plan")
	open := openEngine
	if o.Alone {
		open = openAlone
	}
	c, err := open(r.facts, o.Engine, s, r.plan.Net, warn)
	if err != nil {
		return fail(ExitFailed, err)
	}
	r.step("")
	r.steps = append(r.steps, c.steps...)
	r.cell = c
	// The reaper lets go after the cell has closed: its copies of the
	// links are then the last, and the kernel's detach (for each hook an
	// RCU-tasks grace period, one hook after another under ftrace's lock:
	// about 7 s a session under emulation) runs in the reaper, after this
	// session has ended, not before the user's prompt comes back.
	var releaseReaper func()
	r.later(func() {
		c.close()
		if releaseReaper != nil {
			releaseReaper()
		}
	})

	// The live self-test: a program that loads but never fires is not a
	// jail, so prove it refuses (or, in audit, reports) before the agent runs.
	if err := c.probe(ctx, o.Audit); err != nil {
		return fail(ExitFailed, fmt.Errorf("self-test failed, not starting the agent: %w", err))
	}
	r.step("self_test")
	if r.baseline, err = c.counters(); err != nil {
		return fail(ExitFailed, err)
	}
	if c.alone() {
		// No programs to keep: the ruleset holds the agent's processes
		// whatever becomes of this one.
		return nil
	}
	links, err := c.eng.Links()
	if err != nil {
		return fail(ExitFailed, err)
	}
	netLinks, err := c.net.LinkFiles()
	if err != nil {
		return fail(ExitFailed, err)
	}
	if releaseReaper, err = startReaper(c.cg.Path, append(links, netLinks...)); err != nil {
		return fail(ExitFailed, err)
	}
	r.step("reaper")
	return nil
}

// start starts the agent in the cell, as the user, and records the start;
// done gives its exit status.
func (r *run) start() (*exec.Cmd, <-chan int, error) {
	o, agent, c, warn := r.o, r.agent, r.cell, r.warn
	dir, argv := r.plan.Policy.Dir, r.plan.Argv
	attr := &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: agent.UID, Gid: agent.GID, Groups: agent.Groups},
		Pdeathsig:  syscall.SIGKILL,
	}
	if o.Alone {
		attr.Credential = nil // the agent's own user already
	}
	if o.Terminal != nil {
		// Its standard input (fd 0 in the child) becomes the new
		// session's controlling terminal.
		attr.Setsid, attr.Setctty, attr.Ctty = true, true, 0
		o.Stdin, o.Stdout, o.Stderr = o.Terminal, o.Terminal, o.Terminal
	}
	env, withheld := secretenv.Filter(agentEnv(r.plan.Env, agent, r.pol.TmpDir, dir),
		append(r.plan.Profiles.Env, o.PassEnv...))
	env, socks := c.eng.Env(env)
	if len(socks) > 0 {
		withheld = slices.Compact(slices.Sorted(slices.Values(append(withheld, socks...))))
	}
	cmd, err := c.command(r.plan.Path, argv, env, attr)
	if err != nil {
		return nil, nil, fail(ExitFailed, err)
	}
	cmd.Dir = dir
	// attr is cmd's: what jobControl sets in it, the start does.
	foregrounded := jobControl(attr, o.Stdin == nil)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if o.Stdin != nil {
		cmd.Stdin = o.Stdin
	}
	if o.Stdout != nil {
		cmd.Stdout = o.Stdout
	}
	if o.Stderr != nil {
		cmd.Stderr = o.Stderr
	}
	// Terminal keys (^C, ^\) are for the agent (terminal.go); agent-lock
	// ends when the agent does, or on SIGTERM or SIGHUP (the terminal
	// closed), which it passes on and follows with the cell's end.
	r.later(forwardKeys(func() int { return int(r.agentPgid.Load()) }))
	r.term = make(chan os.Signal, 1)
	signal.Notify(r.term, syscall.SIGTERM, syscall.SIGHUP)
	r.later(func() { signal.Stop(r.term) })

	view := &r.view
	if o.Alone {
		view = nil // its mount namespace needs root: the cell's first process makes it
	}
	started, done := startNoNewPrivs(cmd, view, warn)
	err = <-started
	// After the start: the agent must not inherit the ignored SIGTTOU.
	r.releaseTerminal = holdTerminal(foregrounded)
	r.later(r.releaseTerminal)
	if err != nil {
		code := ExitCannotExec
		if errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		// The kernel may have refused the exec: say what it reported.
		return nil, nil, fail(code, fmt.Errorf("%s: %w", argv[0], err))
	}
	r.step("exec")
	if o.Started != nil {
		o.Started()
	}
	r.agentPgid.Store(int64(cmd.Process.Pid))
	c.agent = cmd.Process.Pid
	c.eng.Started(cmd.Process.Pid)

	mode := report.Enforce
	if o.Audit {
		mode = report.Audit
	}
	self, _ := recording.ProcessStart(os.Getpid())
	about := c.eng.About()
	o.Report.Start(report.Start{
		AgentLockPID: os.Getpid(), AgentLockStart: self,
		Time: r.began, Mode: mode, Dir: dir, Agent: argv, PID: cmd.Process.Pid,
		User: agent.Name, UID: int(agent.UID), Version: o.Version,
		Kernel: r.facts.Release, Engine: about.Name, Limits: about.Limits, TmpDir: r.pol.TmpDir, WithheldEnv: withheld,
		Profiles: r.plan.Profiles.Profiles, LoadTime: about.LoadTime, Steps: r.steps, GitWalk: about.GitWalk,
	})
	c.eng.Reporting(o.Report)
	return cmd, done, nil
}

// supervise reports what the cell decided while the agent runs, and ends
// the session on a cancelled ctx (the dashboard's q), SIGTERM or SIGHUP, or
// a network that failed; it returns the agent's exit status.
func (r *run) supervise(ctx context.Context, cmd *exec.Cmd, done <-chan int) int {
	c, rep := r.cell, r.o.Report
	// end asks the agent's group to stop with sig and, after a grace in
	// which it may save its work, kills the cell; a second request passes
	// its signal on and changes nothing else.
	var ending sync.Once
	end := func(sig syscall.Signal) {
		syscall.Kill(-cmd.Process.Pid, sig)
		ending.Do(func() {
			go func() {
				time.Sleep(endGrace)
				c.kill(time.Second)
			}()
		})
	}
	events, netEvents := c.events(), c.netEvents()
	stop := ctx.Done()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	var last verdict.Counters
	for {
		select {
		case <-stop:
			stop = nil
			end(syscall.SIGTERM)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			writeEvent(rep, r.view.named(ev), &r.opens)
		case ev, ok := <-netEvents:
			if !ok {
				netEvents = nil
				continue
			}
			writeNetEvent(rep, ev, &r.opens)
		case err := <-c.netFailed():
			// Fail closed: without its resolver or forwarder the cell's
			// network is dead anyway; end the cell rather than leave an
			// agent working half blind.
			r.warn("%v: ending the session", err)
			c.kill(time.Second)
		case s := <-r.term:
			end(s.(syscall.Signal))
		case <-progress.C:
			// Live tallies for the dashboard; a failed read only costs
			// the view its in-bounds numbers, the summary reads them again.
			if now, err := c.counters(); err == nil && now != last {
				last = now
				n := now.Sub(r.baseline)
				rep.Progress(report.Progress{Time: time.Now(), InBounds: n.InBounds,
					System: n.System, Escapes: n.Escapes, Lost: n.Lost})
			}
		case status := <-done:
			return status
		}
	}
}

// finish ends the cell and writes the summary: everything the agent left
// behind dies, still confined, the terminal is agent-lock's again, and
// the last reports and the tallies are read.
func (r *run) finish(status int) error {
	c, rep, warn := r.cell, r.o.Report, r.warn
	if err := c.kill(30 * time.Second); err != nil {
		warn("%v", err)
	}
	r.releaseTerminal()
	for ev := range c.eng.Drain() {
		writeEvent(rep, r.view.named(ev), &r.opens)
	}
	for ev := range c.netDrain() {
		writeNetEvent(rep, ev, &r.opens)
	}
	undone, left := c.eng.Finish()
	final, err := c.counters()
	if err != nil {
		return fail(ExitFailed, err)
	}
	n := final.Sub(r.baseline)
	// Last, with no process of the cell left to change them: the git
	// files the agent made that the user's git would run.
	n.Escapes += uint64(checkGit(c, r.pol, r.agent, r.o.Audit, n.GitMade, rep, warn))
	var hooks []report.HookStat
	for _, h := range c.eng.HookStats() {
		hooks = append(hooks, report.HookStat{Name: h.Name, Runs: h.Runs, Time: h.Time})
	}
	rep.Summary(report.Summary{
		Time: time.Now(), ExitCode: status, InBounds: n.InBounds, System: n.System,
		Escapes: n.Escapes, Lost: n.Lost, Repeats: n.Repeats, Duration: time.Since(r.began), Hooks: hooks,
		Undone: undone, LeftChanged: left,
	})
	return nil
}

// userRules resolves p's paths as the user: root follows nothing of the
// user's (DIR's .git file and the worktree it names, a grant's links), and
// a path the user could not reach grants nothing.
func userRules(p policy.Policy, id asuser.ID) ([]spec.Rule, error) {
	var rules []spec.Rule
	err := asuser.Do(id, func() error { rules = p.Rules(); return nil })
	return rules, err
}
