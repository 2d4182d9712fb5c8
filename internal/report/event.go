package report

import "time"

// Mode is how the jail treats an out-of-bounds operation.
type Mode string

const (
	// Enforce denies out-of-bounds operations.
	Enforce Mode = "enforce"
	// Audit lets them through and reports them.
	Audit Mode = "audit"
)

// Verdict is what the kernel did with one out-of-bounds operation.
type Verdict string

const (
	// Blocked: the kernel denied the operation (enforce mode).
	Blocked Verdict = "blocked"
	// Allowed: audit mode let an out-of-bounds operation through.
	Allowed Verdict = "allowed"
	// InBounds: an operation inside the jail's bounds, allowed (the
	// sampled "open" records of a live view; never an escape).
	InBounds Verdict = "in-bounds"
	// Undone: the engine let a change to a protected entry through (the
	// Landlock engine grants the project whole) and agent-lock's
	// tripwire put the entry back as it was.
	Undone Verdict = "undone"
)

// Start describes a session; it is the first record of a report.
type Start struct {
	Time    time.Time
	Mode    Mode
	Dir     string   // the directory the agent is confined to, absolute
	Agent   []string // the agent's argv
	PID     int      // the agent's process id
	User    string
	UID     int
	Version string // agent-lock's version
	Kernel  string // uname release
	Engine  string // "bpf-lsm" or "landlock (ABI N)"
	TmpDir  string // the private temporary directory given to the agent, if any
	// Limits are the side doors the engine leaves open on this kernel
	// (the Landlock engine's; none for bpf-lsm).
	Limits []string
	// Profiles are the agent profiles whose grants the cell has (see
	// agent-lock profiles), toolchains included.
	Profiles []string
	// WithheldEnv names the environment variables kept from the agent
	// because they look like credentials (names only, never values).
	WithheldEnv []string
	// LoadTime is how long the kernel took to load and verify the
	// engine's programs (the Landlock engine's: its observers).
	LoadTime time.Duration
	// Steps are where the session's start went, in order, up to the
	// agent's exec (Step).
	Steps []Step
	// AgentLockPID and AgentLockStart name the agent-lock process that
	// records the session: its pid and its start time in clock ticks
	// since boot (/proc/PID/stat), so that a reader can tell a session
	// whose agent-lock was killed from one still running.
	AgentLockPID   int
	AgentLockStart uint64
	// GitWalk is the Landlock engine's walk of DIR (and the user's
	// writable grants) for git's files before the agent started; nil
	// under the BPF LSM, which walks nothing.
	GitWalk *GitWalk
}

// GitWalk says how many folders the walk went through and how many of
// them it took from the last session's memory instead of reading them
// (dirscan.Memory).
type GitWalk struct {
	Folders, Remembered int
	// Unlooked: of those remembered, the ones taken without a look (the
	// daemon's watch saw no change in them: dirscan.Watch).
	Unlooked int
}

// Step is one step of a session's start and how long it took, from the
// session's start (agent-lock's own process start not included) to the
// agent's exec. A session records, in order: plan (the policy, resolved
// as the user, the kernel's facts, the private TMPDIR), cgroup (the
// engine's checks, ended sessions' cells swept, the cell's cgroup),
// network (the network cell's programs and its self-test, the cell's first
// process, which matches the cell's kill count by trial), load (what the
// start waited for the kernel to load and verify the engine's programs:
// the load runs beside cgroup and network), attach, register (the rules, through the kernel; the event
// ring), engine (the rest of the engine's opening), self_test (a process
// of the cell refused and reported), reaper, exec (the agent started into
// the cell). The Landlock engine's load, attach and register are its
// observers'. When auto falls back to Landlock, bpf_lsm_refused follows
// plan: the BPF LSM attempt the kernel refused.
type Step struct {
	Name string
	Time time.Duration
}

// Event is one out-of-bounds operation as the kernel reported it, or (with
// Verdict InBounds, in an "open" record) a sample of the in-bounds ones.
type Event struct {
	Time      time.Time
	PID, TID  uint32
	Comm      string // the task's comm, at most 15 bytes in the kernel
	Op        string // read, write, exec, create, unlink, rename, ptrace, signal, connect, ...
	Path      string // the object operated on; empty for ops without one
	Path2     string // the other end of a rename or link; optional
	TargetPID uint32 // the target of ptrace or signal; optional
	Verdict   Verdict
	Sensitive bool // Path or Path2 holds keys, credentials or history; see [Sensitive]
	// Rule names what decided, as the kernel reported it: "protected
	// .git/hooks", "home secret ~/.ssh", "--deny PATH"; empty when no rule
	// covers the target (outside every grant) or the kind of operation
	// decided (ptrace, signals, mounts).
	Rule string
	// Repeats is how many times the same escape was refused since it was
	// last reported, which this report stands for too: the kernel
	// coalesces repeats within a tenth of a second.
	Repeats uint32
	// Host, Addr and Port are a network reach's (ops connect, send,
	// resolve): the name asked for or carried (TLS SNI, HTTP Host) or
	// that the address was handed out for, the address, the port. Path
	// then shows them as one target ("api.example.com:443").
	Host string
	Addr string
	Port uint16
}

// Summary closes a report.
type Summary struct {
	Time     time.Time
	ExitCode int
	InBounds uint64 // operations inside the jail's bounds
	System   uint64 // operations on system paths the policy allows
	Escapes  uint64 // out-of-bounds operations, blocked or (in audit) allowed
	Lost     uint64 // events the ring buffer dropped; non-zero means the report is incomplete
	// Repeats are the escapes coalesced into an earlier report of the
	// same one: among Escapes, not reported one by one. Escapes is the
	// reported escapes plus Repeats plus Lost.
	Repeats  uint64
	Duration time.Duration
	// Hooks is the kernel's own account of the programs' runs and time,
	// when its BPF statistics are on (sysctl kernel.bpf_stats_enabled=1,
	// as make bench sets): where the jail's cost goes, hook by hook.
	Hooks []HookStat
	// Undone are the protected entries the tripwire (the Landlock
	// engine's) found changed and put back as they were; LeftChanged
	// those it could not, with why. One per entry path, as it ended.
	Undone, LeftChanged []Undo
}

// Undo is a protected entry the tripwire found changed, and what became
// of it.
type Undo struct {
	Path string
	Rule string // "protected .git/hooks"
	Op   string // the first change seen: create, write, rename, ...
	// Count is how many times it was found changed.
	Count int
	// Action is what was done the last time ("removed", "put back as it
	// was"); Why, in LeftChanged, why it could not be undone.
	Action, Why string
}

// HookStat is one program's runs and total time in the kernel.
type HookStat struct {
	Name string
	Runs uint64
	Time time.Duration
}

// Progress is the kernel's running tallies, written while the session runs
// (at most once a second, when they changed) so that a live view shows
// in-bounds and system traffic, not only escapes.
type Progress struct {
	Time     time.Time
	InBounds uint64
	System   uint64
	Escapes  uint64
	Lost     uint64
}

// Writer writes one session's report. Implementations are safe for
// concurrent use and flush every record, because report files are tailed
// live.
type Writer interface {
	Start(Start) error
	Escape(Event) error
	// Open writes a sample of the agent's in-bounds operations (Verdict
	// InBounds), for the live view. The kernel sends at most a few a
	// second: tallies come from Progress and Summary, never from these.
	Open(Event) error
	Progress(Progress) error
	Summary(Summary) error
}

// The escapes that agent-lock refuses, not the kernel: the agent's terminal
// is an emulator, and what the agent writes to the user's clipboard through
// it (OSC 52), or asks of it, stays there; a session's socket serves no
// process of a cell.
const (
	OpClipboard     = "clipboard"
	OpClipboardRead = "clipboard-read"
	// ClipboardPath is what such an escape reached for.
	ClipboardPath = "(terminal clipboard)"
	// OpAttach: a process of the cell tried to attach to a session's
	// terminal (agent-lock attach's socket), which agent-lock refused.
	OpAttach = "attach"
)

// RecordType is the "type" of a JSON-lines record.
type RecordType string

const (
	TypeStart    RecordType = "start"
	TypeEscape   RecordType = "escape"
	TypeOpen     RecordType = "open"
	TypeSummary  RecordType = "summary"
	TypeProgress RecordType = "progress"
)

// Record is one parsed JSON-lines record: Type and the one pointer that
// matches it. Records of a type this version does not know carry only Type.
type Record struct {
	Type     RecordType
	Start    *Start
	Event    *Event // an escape
	Open     *Event // an in-bounds sample (TypeOpen), never an escape
	Summary  *Summary
	Progress *Progress
}
