// Package verdict is what a cell reports, whichever engine decides: each
// decision (Event), the kernel's tallies (Counters) and its programs'
// statistics (HookStat).
package verdict

import "time"

// Event is one decision as the kernel reported it.
type Event struct {
	Time       time.Time
	PID, TID   uint32
	UID        uint32
	Op         string
	Class      string
	Denied     bool // the kernel refused it
	Audit      bool // it would have been refused; audit mode let it through
	InBounds   bool // an allowed in-bounds access (live stream only)
	Truncated  bool // the path's head was cut (longer than the report buffer)
	Unresolved bool
	Protected  bool   // refused: a protected file in the project directory
	Rule       string // the rule that decided (Rule.Name, "protected PATH"), "" for none
	Path       string // as seen from agent-lock's mount namespace
	Path2      string // the other end of a rename or link
	TargetPID  uint32
	Detail     uint32 // signal number, ioctl request, ptrace mode
	Comm       string
	// Repeats is how many times the same escape (process, operation,
	// target, verdict) was refused since it was last reported: the kernel
	// coalesces a storm of one refusal into a report now and then.
	Repeats uint32
}

// Counters are totals kept by the kernel, summed over CPUs.
type Counters struct {
	InBounds, System, Escapes, Lost, ForkDenied uint64
	// GitMade counts git's command files (and .git files) the jail made
	// in folders it made (jail.h CNT_GIT_MADE): what the user's git may
	// run from them is to be checked when the session ends.
	GitMade uint64
	// Repeats counts the escapes coalesced into an earlier report (among
	// Escapes, not reported one by one).
	Repeats uint64
}

// Sub returns c - o.
func (c Counters) Sub(o Counters) Counters {
	return Counters{c.InBounds - o.InBounds, c.System - o.System, c.Escapes - o.Escapes,
		c.Lost - o.Lost, c.ForkDenied - o.ForkDenied, c.GitMade - o.GitMade, c.Repeats - o.Repeats}
}

// HookStat is one program's runs and total time.
type HookStat struct {
	Name string
	Runs uint64
	Time time.Duration
}
