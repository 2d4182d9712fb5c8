// Package engine is what a session knows of the engines that decide: a
// cell's description in no engine's terms (Spec), the interface every
// engine implements (Engine, Cell); what a cell reports is package
// verdict's. The engines live in packages of their own (bpflsm,
// landlockcell), import this one and jail (the BPF object both load: the
// hooks that decide, or the observers that report), and never each other.
package engine

import (
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/dirscan"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/spec"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// ErrNotSupported means the running kernel cannot run an engine; auto
// then tries the next one.
var ErrNotSupported = kernel.ErrNotSupported

// Advice is what to change for this kernel to run the BPF LSM, a line
// each, for an ErrNotSupported's message.
func Advice(f kernel.Facts) string {
	var s string
	for _, a := range f.Advice() {
		s += "  - " + a + "\n"
	}
	return s
}

// Spec is a cell to open.
type Spec struct {
	// Policy is the session's (DIR, grants, denials, protected entries,
	// patterns); Rules are its rules as the agent's user resolved them.
	Policy policy.Policy
	Rules  []spec.Rule
	// User is the agent's user, as whom the engine touches the user's
	// files.
	User asuser.ID
	// Cgroup is the cell's, made by the caller.
	Cgroup Cgroup
	// TTYs are the agent's terminals by device number (kernel encoding)
	// and TTYPaths by name.
	TTYs     []uint32
	TTYPaths []string
	// Audit lets refused accesses through and reports them.
	Audit bool
	// StreamInBounds reports a sample of the in-bounds opens too.
	StreamInBounds bool
	// BestEffort runs without what the engine cannot enforce, saying so.
	BestEffort bool
	// Throwaway is a cell around a folder made for it and removed after
	// (the self-test's): nothing of its walks is worth remembering.
	Throwaway bool
	// Scan, when set, scans a tree for the engine (the daemon's, which
	// holds the last walks and follows their changes: dirscan.Memories);
	// when it fails, or is nil, the engine scans itself.
	Scan dirscan.Scanner
	// AllowUnix are the unix sockets the agent may be told of.
	AllowUnix []string
	// Views are files to mount over others in the agent's view (the
	// user's shell files by their scrubbed copies) where the session
	// cannot, having no root: a cell alone's first process mounts them
	// in its own user namespace. Under root the session mounts them.
	Views []View
	// PinDir returns where to pin what keeps the cell closed should every
	// process holding it die ("" for nowhere); called only by an engine
	// whose cell is not closed without it.
	PinDir func() string
	// Loaded is told the kill count the engine's loader saw
	// (jail.KillSeq), which the cgroup must match before anything starts
	// in it.
	Loaded func(killSeq uint32) error
	Warn   func(format string, args ...any)
}

// View is the file Copy mounted over Target.
type View struct{ Copy, Target string }

// Cgroup is the cell's cgroup.
type Cgroup struct {
	ID   uint64
	Path string
	FD   int
}

// Engine opens cells.
type Engine interface {
	// Check says why this engine cannot open s's cell on this kernel
	// (ErrNotSupported when the kernel lacks it), before anything is made.
	Check(f kernel.Facts, s Spec) error
	Open(f kernel.Facts, s Spec) (Cell, error)
}

// Loader is an engine whose slow part, the kernel verifying its programs,
// can begin as soon as the cell's cgroup exists, beside the network's
// set-up: Load begins it (s complete but for what the network adds to
// nothing here), and the Opening's Open ends as Engine.Open would. The
// caller has run Check.
type Loader interface {
	Load(f kernel.Facts, s Spec) Opening
}

// Opening is a cell being opened (Loader). Until Open nothing of it
// enforces or reports; Abandon frees it when the start fails before.
type Opening interface {
	Open() (Cell, error)
	Abandon()
}

// Cell is an open cell: what decides, its reports and what it keeps.
type Cell interface {
	// About says what decides, for the report.
	About() About
	// Command is the process that runs path as argv with env in the cell;
	// attr completes it (credentials, terminal). It starts in the cell's
	// cgroup, confined before its first instruction. env is the agent's,
	// the user's to choose (their own environment, through sudo too):
	// only the agent may run with it, never a process of agent-lock's
	// that holds a privilege.
	Command(path string, argv, env []string, attr *syscall.SysProcAttr) (*exec.Cmd, error)
	// Env is what of env the agent gets, and the names withheld.
	Env(env []string) (kept, withheld []string)
	// Started tells the cell that the agent, pid, runs: at once, for
	// what the cell reads of its processes.
	Started(pid int)
	// Reporting says that the session's report has begun in w (its
	// start record is written): what the cell reports beside its events
	// goes there from now on.
	Reporting(w report.Writer)
	// Events are the cell's reports as they come; closed after Close, or
	// once Drain's are read.
	Events() <-chan verdict.Event
	// Drain returns Events, which now ends with the reports already
	// made: no process of the cell is left to make more.
	Drain() <-chan verdict.Event
	// Finish is the end's account of what the engine undid and left
	// changed, once nothing of the cell runs.
	Finish() (undone, left []report.Undo)
	// Counters are the cell's tallies so far.
	Counters() (verdict.Counters, error)
	// HookStats are the kernel's statistics of the engine's programs.
	HookStats() []verdict.HookStat
	// GitScope is where the git files the agent made are to be looked
	// for, dir being DIR and writable the writable grants, given made
	// (Counters.GitMade); nil for nowhere. It reads the user's files: the
	// caller runs it as the user.
	GitScope(dir string, writable []string, made uint64) *GitScope
	// Links are duplicates of what keeps the programs attached, for the
	// reaper.
	Links() ([]*os.File, error)
	// Close lets the cell go: the caller killed every process in it.
	Close()
}

// About is what decides.
type About struct {
	Name string
	// Limits are the side doors this engine leaves open.
	Limits []string
	// LoadTime is how long the kernel took to load and verify the
	// programs.
	LoadTime time.Duration
	// Steps are the engine's opening, in order (report.Step): the load
	// and what follows it.
	Steps []report.Step
	// GitWalk is the Landlock engine's walk for git's files (nil for
	// none).
	GitWalk *report.GitWalk
}

// GitScope is where gitcheck looks.
type GitScope struct {
	// Made says whether the agent made the file f is open on.
	Made func(f *os.File) (bool, error)
	// Roots are walked for repositories; GitDirs are git directories
	// checked as they are.
	Roots, GitDirs []string
}
