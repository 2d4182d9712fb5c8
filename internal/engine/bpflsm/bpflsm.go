// Package bpflsm is the engine that decides with BPF LSM hooks (jail):
// every door the hooks guard, refused in the kernel and reported by the
// hook that refused it. FileOpenOnly is the same loader with its file_open
// hook alone, the one-hook reference the benchmarks measure against.
package bpflsm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/agent-lock/agent-lock/internal/engine"
	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// Names, as --engine takes them.
const (
	Name = "bpf-lsm"
	// FileOpenOnlyName: only the file_open hook is attached. It is not a
	// jail (every door but open(2) stays open), so it is never picked,
	// only named, and it says so.
	FileOpenOnlyName = "file-open-only"
)

// Engine opens BPF-LSM cells; FileOpenOnly attaches file_open alone.
type Engine struct{ FileOpenOnly bool }

// Check says whether this kernel runs BPF LSM programs, as far as its
// active LSMs tell (only a load tells for sure).
func (e Engine) Check(f kernel.Facts, _ engine.Spec) error {
	if !f.BPFInLSM {
		return fmt.Errorf("%w: bpf is not in the active LSM list (%v)\n%s", jail.ErrNotSupported, f.LSMs, engine.Advice(f))
	}
	return nil
}

// Open loads and attaches the hooks for s's cgroup.
func (e Engine) Open(f kernel.Facts, s engine.Spec) (engine.Cell, error) {
	if err := e.Check(f, s); err != nil {
		return nil, err
	}
	return e.Load(f, s).Open()
}

// Load begins loading the hooks for s's cgroup.
func (e Engine) Load(f kernel.Facts, s engine.Spec) engine.Opening {
	cfg := jail.Config{
		CgroupID: s.Cgroup.ID, Audit: s.Audit, StreamInBounds: s.StreamInBounds, TTYs: s.TTYs,
		Rules: s.Rules, Protect: s.Policy.Protect, Patterns: s.Policy.Patterns(),
		OnlyFileOpen: e.FileOpenOnly, Warn: s.Warn,
	}
	return &opening{e: e, f: f, s: s, l: jail.Begin(cfg)}
}

var _ engine.Loader = Engine{}

// opening is a cell whose hooks are loading.
type opening struct {
	e Engine
	f kernel.Facts
	s engine.Spec
	l *jail.Loading
}

func (o *opening) Abandon() { o.l.Abandon() }

// Open attaches the hooks once loaded.
func (o *opening) Open() (engine.Cell, error) {
	s := o.s
	if o.e.FileOpenOnly {
		s.Warn("--engine %s: only the file_open hook is attached, the benchmarks' reference; this is not a jail", FileOpenOnlyName)
	}
	var pinDir string
	if s.PinDir != nil {
		pinDir = s.PinDir()
	}
	j, err := o.l.Attach(pinDir)
	if err != nil {
		if pinDir != "" {
			os.RemoveAll(pinDir)
		}
		if errors.Is(err, jail.ErrNotSupported) {
			return nil, fmt.Errorf("%w\n%s", err, engine.Advice(o.f))
		}
		return nil, err
	}
	if s.Loaded != nil {
		if err := s.Loaded(j.KillSeq()); err != nil {
			j.Close()
			return nil, err
		}
	}
	c := &cell{j: j, s: s, onlyOpen: o.e.FileOpenOnly, events: make(chan verdict.Event, 4096), done: make(chan struct{})}
	go func() {
		j.Stream(c.events, c.done, s.Warn)
		close(c.events)
	}()
	return c, nil
}

// cell is a cgroup under the hooks.
type cell struct {
	j        *jail.Jail
	s        engine.Spec
	onlyOpen bool
	events   chan verdict.Event
	done     chan struct{}
}

func (c *cell) About() engine.About {
	a := engine.About{Name: Name, LoadTime: c.j.LoadTime(), Steps: c.j.Steps()}
	if c.onlyOpen {
		a.Name = FileOpenOnlyName
		a.Limits = []string{"only open(2) is decided (the benchmarks' one-hook reference): every other door is open"}
	}
	return a
}

func (c *cell) Command(path string, argv, env []string, attr *syscall.SysProcAttr) (*exec.Cmd, error) {
	attr.UseCgroupFD = true // clone3(CLONE_INTO_CGROUP): in the cell before its first instruction
	attr.CgroupFD = c.s.Cgroup.FD
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args = argv
	cmd.Env = env
	cmd.SysProcAttr = attr
	return cmd, nil
}

// Env keeps everything: the hooks refuse connecting to the user's sockets
// by path.
func (c *cell) Env(env []string) (kept, withheld []string) { return env, nil }

func (c *cell) Started(int) {}

func (c *cell) Reporting(report.Writer) {}

func (c *cell) Events() <-chan verdict.Event { return c.events }

func (c *cell) Drain() <-chan verdict.Event {
	events, _ := c.j.Drain(c.events, c.s.Warn)
	return events
}

// Finish: the hooks refused every change they guard, so there is nothing
// to undo.
func (c *cell) Finish() (undone, left []report.Undo) { return nil, nil }

func (c *cell) Counters() (verdict.Counters, error) { return c.j.Counters() }

func (c *cell) HookStats() []verdict.HookStat { return c.j.HookStats() }

// GitScope: the kernel marks what the jail made, and counts the git
// command files among them; with none made there is nothing to look at.
// A linked worktree's git directory lies outside DIR and is looked at as
// it is.
func (c *cell) GitScope(dir string, writable []string, made uint64) *engine.GitScope {
	if c.onlyOpen || made == 0 {
		return nil
	}
	g := &engine.GitScope{Made: c.j.Made, Roots: append([]string{dir}, writable...)}
	if wt, ok := policy.FindGitWorktree(dir); ok {
		g.GitDirs = append(g.GitDirs, wt.GitDir)
	}
	return g
}

func (c *cell) Links() ([]*os.File, error) { return c.j.LinkFiles() }

func (c *cell) Close() {
	close(c.done)
	c.j.Close()
}
