// Package dashboard is agent-lock's live terminal view of a session: what
// the kernel let the agent touch and what it refused. Board aggregates the
// kernel's reports in plain Go (bounded, testable without a terminal); Model
// draws a Board with Bubble Tea.
package dashboard

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/agent-lock/agent-lock/internal/report"
)

const (
	// DefaultMaxPaths bounds the distinct outside paths a Board keeps; later
	// paths are counted in an "N more" row. A runaway agent walking the whole
	// file system must not grow the dashboard without bound.
	DefaultMaxPaths = 5000
	// maxRecent is how many decisions the live panel can show.
	maxRecent = 256
	// maxRecentEscapes is how many escapes the one-terminal live view can
	// show, however many in-bounds samples came after them.
	maxRecentEscapes = 64
	// maxActors is how many distinct processes a target remembers.
	maxActors = 16
	// rateWindow is how many one-second buckets the sparkline spans.
	rateWindow = 60
)

// Target is everything the agent tried on one outside path.
type Target struct {
	Path        string
	Count       uint64
	Sensitive   bool
	First, Last time.Time
	// Ops counts each operation tried on the path (read, write, exec, ...).
	Ops map[string]uint64
	// Actors are the distinct processes that tried, first seen first, at
	// most maxActors; MoreActors says others tried too.
	Actors     []report.Actor
	MoreActors bool
	// Verdicts counts what the kernel did: blocked, or allowed in audit;
	// Undone, what the tripwire put back (the Landlock engine).
	Blocked, Reached, Undone uint64
	// Rule is the rule the kernel last named for it ("home secret
	// ~/.ssh", "protected .git/hooks"), if any.
	Rule string
	// Addr is a network target's address, as last reached (its Path is
	// the name and port).
	Addr string
}

// MainOp is the operation tried most often on the target (ties: by name).
func (t *Target) MainOp() string {
	best, n := "", uint64(0)
	for op, c := range t.Ops {
		if c > n || (c == n && op < best) {
			best, n = op, c
		}
	}
	return best
}

// Board is the aggregate state of one session. It is not safe for
// concurrent use: the dashboard's update loop owns it.
type Board struct {
	Start   *report.Start
	Summary *report.Summary

	// Tallies, as the kernel decided them. InBounds and System come from the
	// session's counters, which arrive with the summary.
	InBounds, System, Blocked, Reached uint64
	// Undone counts the changes to protected entries the Landlock
	// engine's tripwire put back.
	Undone uint64
	// repeatsSeen are the repeats the events carried (report.Event.Repeats).
	repeatsSeen uint64

	maxPaths int
	targets  map[string]*Target
	ranked   []*Target // sorted lazily; nil when stale
	// MorePaths counts the events on paths that arrived once the board held
	// maxPaths of them: the "N more" row.
	MorePaths uint64

	recent    [maxRecent]report.Event
	nRecent   int // events written into recent, ever
	escapes   [maxRecentEscapes]report.Event
	nEscapes  int // events written into escapes, ever
	rate      [rateWindow]uint64
	rateSec   int64 // the Unix second of rate's newest bucket
	lastEvent time.Time
}

// NewBoard returns an empty Board keeping at most maxPaths distinct paths
// (DefaultMaxPaths if maxPaths <= 0).
func NewBoard(maxPaths int) *Board {
	if maxPaths <= 0 {
		maxPaths = DefaultMaxPaths
	}
	return &Board{maxPaths: maxPaths, targets: make(map[string]*Target)}
}

// Apply folds one report record into the board.
func (b *Board) Apply(r report.Record) {
	switch {
	case r.Start != nil:
		s := *r.Start
		b.Start = &s
	case r.Event != nil:
		b.Add(*r.Event)
	case r.Open != nil:
		// Whatever the record says, an open is no escape.
		e := *r.Open
		e.Verdict = report.InBounds
		b.Add(e)
	case r.Progress != nil:
		// The kernel's running tallies; escapes are counted from the
		// events themselves, which carry the verdicts.
		if b.Summary == nil {
			// The rate counts every decision: escapes as their events
			// arrive, in-bounds and system operations by how much the
			// tallies grew since the last progress record.
			p := r.Progress
			if now, before := p.InBounds+p.System, b.InBounds+b.System; now > before {
				b.tick(p.Time, now-before)
			}
			b.InBounds, b.System = p.InBounds, p.System
		}
	case r.Summary != nil:
		s := *r.Summary
		b.Summary = &s
		b.InBounds, b.System = s.InBounds, s.System
		// The repeats the kernel counted after their escape's last
		// report are in no event: counted here, as what the session
		// did with them (no target: which one they repeated is in no
		// record).
		if s.Repeats > b.repeatsSeen {
			if b.Audit() {
				b.Reached += s.Repeats - b.repeatsSeen
			} else {
				b.Blocked += s.Repeats - b.repeatsSeen
			}
			b.repeatsSeen = s.Repeats
		}
	}
}

// Add folds one kernel decision into the board. An in-bounds sample only
// joins the live stream: the tallies of in-bounds work come from the
// kernel's counters (Progress, Summary), of which the samples are a few.
func (b *Board) Add(e report.Event) {
	if e.Verdict == report.InBounds {
		b.recent[b.nRecent%maxRecent] = e
		b.nRecent++
		return
	}
	// A report stands for the repeats the kernel coalesced into it too.
	n := 1 + uint64(e.Repeats)
	b.repeatsSeen += uint64(e.Repeats)
	switch e.Verdict {
	case report.Allowed:
		b.Reached += n
	case report.Undone:
		b.Undone += n
	default:
		b.Blocked += n
	}
	b.recent[b.nRecent%maxRecent] = e
	b.nRecent++
	b.escapes[b.nEscapes%maxRecentEscapes] = e
	b.nEscapes++
	b.tick(e.Time, n)
	if e.Time.After(b.lastEvent) {
		b.lastEvent = e.Time
	}

	t := b.targets[e.Path]
	if t == nil {
		if len(b.targets) >= b.maxPaths {
			b.MorePaths++
			return
		}
		t = &Target{Path: e.Path, First: e.Time, Ops: make(map[string]uint64)}
		b.targets[e.Path] = t
	}
	t.Count += n
	t.Ops[e.Op] += n
	t.Sensitive = t.Sensitive || e.Sensitive
	if e.Rule != "" {
		t.Rule = e.Rule
	}
	if e.Addr != "" {
		t.Addr = e.Addr
	}
	switch e.Verdict {
	case report.Allowed:
		t.Reached += n
	case report.Undone:
		t.Undone += n
	default:
		t.Blocked += n
	}
	if e.Time.Before(t.First) {
		t.First = e.Time
	}
	if e.Time.After(t.Last) {
		t.Last = e.Time
	}
	a := report.Actor{Comm: e.Comm, PID: e.PID}
	if !slices.Contains(t.Actors, a) {
		if len(t.Actors) < maxActors {
			t.Actors = append(t.Actors, a)
		} else {
			t.MoreActors = true
		}
	}
	b.ranked = nil
}

// tick counts n decisions in the rate bucket of t's second.
func (b *Board) tick(t time.Time, n uint64) {
	sec := t.Unix()
	switch {
	case b.rateSec == 0:
		b.rateSec = sec
	case sec > b.rateSec:
		shift := sec - b.rateSec
		if shift >= rateWindow {
			b.rate = [rateWindow]uint64{}
		} else {
			copy(b.rate[:], b.rate[shift:])
			clear(b.rate[rateWindow-shift:])
		}
		b.rateSec = sec
	case b.rateSec-sec >= rateWindow:
		return // older than the window
	}
	b.rate[rateWindow-1-(b.rateSec-sec)] += n
}

// Rate returns the decisions per second over the last n seconds up to now,
// oldest first. Seconds after the newest event count as idle.
func (b *Board) Rate(now time.Time, n int) []uint64 {
	n = min(n, rateWindow)
	out := make([]uint64, n)
	if b.rateSec == 0 {
		return out
	}
	lag := now.Unix() - b.rateSec // seconds since the newest bucket
	for i := range n {
		// out[i] is the second now-(n-1-i), which is age seconds before the newest bucket.
		age := int64(n-1-i) - lag
		if age >= 0 && age < rateWindow {
			out[i] = b.rate[rateWindow-1-age]
		}
	}
	return out
}

// Targets returns the outside paths ranked: most attempts first, then
// sensitive first, then by path.
func (b *Board) Targets() []*Target {
	if b.ranked == nil {
		b.ranked = make([]*Target, 0, len(b.targets))
		for _, t := range b.targets {
			b.ranked = append(b.ranked, t)
		}
		slices.SortFunc(b.ranked, func(x, y *Target) int {
			if c := cmp.Compare(y.Count, x.Count); c != 0 {
				return c
			}
			if x.Sensitive != y.Sensitive {
				if x.Sensitive {
					return -1
				}
				return 1
			}
			return cmp.Compare(x.Path, y.Path)
		})
	}
	return b.ranked
}

// Recent returns up to n of the latest decisions, newest last.
func (b *Board) Recent(n int) []report.Event {
	n = min(n, b.nRecent, maxRecent)
	out := make([]report.Event, 0, n)
	for i := b.nRecent - n; i < b.nRecent; i++ {
		out = append(out, b.recent[i%maxRecent])
	}
	return out
}

// RecentEscapes returns up to n of the latest escapes, newest first.
func (b *Board) RecentEscapes(n int) []report.Event {
	n = min(n, b.nEscapes, maxRecentEscapes)
	out := make([]report.Event, 0, n)
	for i := b.nEscapes - 1; i >= b.nEscapes-n; i-- {
		out = append(out, b.escapes[i%maxRecentEscapes])
	}
	return out
}

// Escapes is the number of out-of-bounds attempts, blocked, reached or
// undone.
func (b *Board) Escapes() uint64 { return b.Blocked + b.Reached + b.Undone }

// Audit reports whether the session lets out-of-bounds operations through.
func (b *Board) Audit() bool { return b.Start != nil && b.Start.Mode == report.Audit }

// Landlock says whether the session runs under the Landlock engine, which
// leaves open what Start.Limits lists.
func (b *Board) Landlock() bool {
	return b.Start != nil && strings.HasPrefix(b.Start.Engine, "landlock")
}

// Unobserved says whether nothing reports what the cell refuses: Landlock
// alone, with no daemon for the observers (the engine's name ends so).
func (b *Board) Unobserved() bool {
	return b.Landlock() && strings.HasSuffix(b.Start.Engine, ", alone")
}
