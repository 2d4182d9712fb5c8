package dirscan

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

// Stats is what a scan with a memory did: the folders it went through,
// those it took from the memory, and of those the ones it took without
// a look (its Watch saw no change in them).
type Stats struct {
	Folders, Remembered, Unlooked int
}

// A Scanner scans root for name as id, skipping skip, as Memory.Scan
// does: the daemon's (Memories.Scan, asked for by a session it started).
type Scanner func(id asuser.ID, root, name string, skip []string) ([]Hit, Stats, error)

// Memories are the memories of a process that scans for one session
// after another (the daemon): held in its own memory as well as kept in
// the store, so that a scan neither reads nor decodes one, and followed
// by a Watch, so that it need not even statx the folders no change was
// reported in.
type Memories struct {
	store string
	watch *Watch // nil: every remembered folder is statx'd

	// scanning bounds the scans under way (a tree's folders that never
	// answer, a hung mount, would hold a scan's threads for ever).
	scanning chan struct{}

	mu   sync.Mutex
	held map[string]*held // by keyOf
	// pending: the Keeps under way (keepAfter).
	pending sync.WaitGroup
}

// keepAfter is how long after a scan Memories keep it.
var keepAfter = 2 * time.Second

type held struct {
	mu       sync.Mutex // one scan at a time, and Keep
	m        *Memory
	used     time.Time
	scanning bool // (Memories.mu)
}

// Bounds on what Memories hold: memories, and their folders in all
// (about 200 bytes each; a memory of the most folders maxBytes allows is
// about 150,000).
const (
	maxHeld        = 16
	maxHeldFolders = 300_000
)

// ErrBusy says a scan was not made: as many are under way as Memories
// make at once, or one of the same tree. The caller walks itself.
var ErrBusy = errors.New("dirscan: the daemon is busy with other scans")

// maxScanning bounds Memories' scans under way.
const maxScanning = 2

// NewMemories holds memories kept in store; its error, when not nil, says
// why they are not followed by a Watch (they still serve).
func NewMemories(store string) (*Memories, error) {
	w, err := NewWatch()
	return &Memories{store: store, watch: w, held: map[string]*held{}, scanning: make(chan struct{}, maxScanning)}, err
}

// Close stops the Watch, once the memories are kept.
func (ms *Memories) Close() {
	ms.pending.Wait()
	if ms.watch != nil {
		ms.watch.Close()
	}
}

// Scan is a Scanner: it scans with the memory of the last scan of the same
// tree for the same user, name and skips, held or recalled from the
// store, and keeps what it read (in the store after it returns).
func (ms *Memories) Scan(id asuser.ID, root, name string, skip []string) ([]Hit, Stats, error) {
	select {
	case ms.scanning <- struct{}{}:
		defer func() { <-ms.scanning }()
	default:
		return nil, Stats{}, ErrBusy
	}
	of := keyOf(id, root, name, skip)
	ms.mu.Lock()
	h := ms.held[of]
	if h == nil {
		h = &held{}
		ms.held[of] = h
	}
	if h.scanning {
		ms.mu.Unlock()
		return nil, Stats{}, ErrBusy // of the same tree: a session's own walk
	}
	h.scanning = true
	h.used = time.Now()
	ms.mu.Unlock()
	defer func() {
		ms.mu.Lock()
		h.scanning = false
		ms.mu.Unlock()
	}()

	h.mu.Lock() // a Keep's at most, short: a scan's is not waited for
	if h.m == nil {
		h.m = Recall(ms.store, id, root, name, skip)
		h.m.watch = ms.watch
	}
	m := h.m
	hits, err := m.Scan()
	folders, recalled := m.Recalled()
	st := Stats{Folders: folders, Remembered: recalled, Unlooked: m.Unlooked()}
	h.mu.Unlock()
	if err != nil {
		return nil, st, err
	}
	// The store's copy, for a session the daemon does not start (sudo)
	// and for the daemon's next start, and the keys of a whole scan
	// (Memory.keys), a while after the scan's answer: meanwhile the
	// session it was for starts, on the same processors.
	ms.pending.Add(1)
	time.AfterFunc(keepAfter, func() {
		defer ms.pending.Done()
		h.mu.Lock()
		defer h.mu.Unlock()
		m.Keep()
		m.keys()
	})
	ms.bound()
	return hits, st, nil
}

// bound lets go of the least recently used memories past maxHeld and
// maxHeldFolders.
func (ms *Memories) bound() {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	type use struct {
		of   string
		h    *held
		at   time.Time
		size int
	}
	var all []use
	for of, h := range ms.held {
		if !h.mu.TryLock() {
			continue // being scanned: it is the most recent
		}
		size := 0
		if h.m != nil {
			size = len(h.m.dirs)
		}
		h.mu.Unlock()
		all = append(all, use{of, h, h.used, size})
	}
	slices.SortFunc(all, func(a, b use) int { return b.at.Compare(a.at) })
	folders := 0
	for i, u := range all {
		folders += u.size
		if i >= maxHeld || folders > maxHeldFolders {
			delete(ms.held, u.of)
		}
	}
}
