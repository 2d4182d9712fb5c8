package report

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultMaxEntries is the number of distinct (path, op) pairs a Tally keeps
// when it is not told otherwise.
const DefaultMaxEntries = 10000

// MaxActors is the number of distinct (comm, pid) pairs an Entry remembers.
// A fork loop hammering one path must not grow an entry without bound.
const MaxActors = 16

// Actor is a task that tried an operation.
type Actor struct {
	Comm string
	PID  uint32
}

// Entry is the tally of one (path, op) pair.
type Entry struct {
	Path, Op    string
	Count       uint64
	First, Last time.Time
	// Actors are the distinct (comm, pid) pairs that tried, in the order
	// first seen, at most MaxActors of them; MoreActors says others tried
	// too.
	Actors     []Actor
	MoreActors bool
	Sensitive  bool // any of the events was sensitive
}

// Other counts the events a full Tally could not give an entry of their own.
type Other struct {
	Count       uint64
	First, Last time.Time
}

type key struct{ path, op string }

// Tally aggregates escapes by (path, op) so that a runaway agent retrying the
// same read ten thousand times shows as one line with a count. Memory is
// bounded: once it holds its maximum number of entries, events for new
// (path, op) pairs are counted in Other instead. Path2 does not split
// entries: a rename is tallied under its source.
//
// The zero Tally is ready to use with DefaultMaxEntries. A Tally is safe for
// concurrent use.
type Tally struct {
	mu      sync.Mutex
	max     int
	entries map[key]*Entry
	other   Other
	total   uint64
}

// NewTally returns a Tally holding at most maxEntries distinct (path, op)
// pairs; maxEntries <= 0 means DefaultMaxEntries.
func NewTally(maxEntries int) *Tally {
	return &Tally{max: maxEntries}
}

// Add counts one event, and the repeats the kernel coalesced into it.
func (t *Tally) Add(e Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 1 + uint64(e.Repeats)
	t.total += n
	k := key{e.Path, e.Op}
	en := t.entries[k]
	if en == nil {
		if t.entries == nil {
			if t.max <= 0 {
				t.max = DefaultMaxEntries
			}
			t.entries = make(map[key]*Entry)
		}
		if len(t.entries) >= t.max {
			t.other.Count += n
			widen(&t.other.First, &t.other.Last, e.Time)
			return
		}
		// Clone: the strings may share a larger buffer the caller reuses or
		// that we would otherwise keep alive.
		k = key{strings.Clone(e.Path), strings.Clone(e.Op)}
		en = &Entry{Path: k.path, Op: k.op, First: e.Time, Last: e.Time}
		t.entries[k] = en
	}
	en.Count += n
	widen(&en.First, &en.Last, e.Time)
	en.Sensitive = en.Sensitive || e.Sensitive
	for _, a := range en.Actors {
		if a.PID == e.PID && a.Comm == e.Comm {
			return
		}
	}
	if len(en.Actors) < MaxActors {
		en.Actors = append(en.Actors, Actor{strings.Clone(e.Comm), e.PID})
	} else {
		en.MoreActors = true
	}
}

// widen stretches [first, last] to include t. Events can arrive slightly out
// of order (per-CPU ring buffer reservations), so both ends move.
func widen(first, last *time.Time, t time.Time) {
	if first.IsZero() || t.Before(*first) {
		*first = t
	}
	if t.After(*last) {
		*last = t
	}
}

// Top returns copies of the n entries with the highest counts, most recent
// first among equal counts; n <= 0 returns all of them.
func (t *Tally) Top(n int) []Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ranked []*Entry
	if n <= 0 || n >= len(t.entries) {
		ranked = make([]*Entry, 0, len(t.entries))
		for _, en := range t.entries {
			ranked = append(ranked, en)
		}
		slices.SortFunc(ranked, rank)
	} else {
		// A dashboard asks for a screenful of 10,000 entries several times
		// a second: keep the best n in order instead of sorting them all.
		ranked = make([]*Entry, 0, n+1)
		for _, en := range t.entries {
			if len(ranked) == n && rank(en, ranked[n-1]) >= 0 {
				continue
			}
			i, _ := slices.BinarySearchFunc(ranked, en, rank)
			ranked = slices.Insert(ranked, i, en)
			if len(ranked) > n {
				ranked = ranked[:n]
			}
		}
	}
	top := make([]Entry, len(ranked))
	for i, en := range ranked {
		top[i] = *en
		top[i].Actors = slices.Clone(en.Actors)
	}
	return top
}

// rank orders entries by count, then recency, then path and op, so that Top
// is deterministic.
func rank(a, b *Entry) int {
	if c := cmp.Compare(b.Count, a.Count); c != 0 {
		return c
	}
	if c := b.Last.Compare(a.Last); c != 0 {
		return c
	}
	if c := strings.Compare(a.Path, b.Path); c != 0 {
		return c
	}
	return strings.Compare(a.Op, b.Op)
}

// Other returns the events counted beyond the entry cap.
func (t *Tally) Other() Other {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.other
}

// Total returns the number of events added, Other included.
func (t *Tally) Total() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Len returns the number of distinct (path, op) entries held.
func (t *Tally) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}
