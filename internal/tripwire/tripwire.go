// Package tripwire keeps the protected entries of a project (.git/hooks,
// .git/config, .envrc, .vscode, ...) as they were when a session began,
// where the engine cannot refuse changes to them: Landlock grants the
// project directory whole, so an agent may plant a hook or a
// core.fsmonitor that the user's own git would run, unjailed, after the
// session. The tripwire records each entry (content, mode, owner, link
// target, or its absence) before the agent starts, watches the entries and
// the folders on their way with fanotify while it runs, and puts back
// what changed as soon as it sees it, reporting the change with the
// process the kernel names. Check, once nothing of the cell runs any more,
// compares every entry once more, so that whatever was missed live is put
// back before the user's tools see it.
//
// Everything it does in the user's folders is done as the user
// (asuser.Thread), relative to descriptors opened without following
// symlinks: a link the agent planted leads the restore nowhere.
package tripwire

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

// Entry is one protected name.
type Entry struct {
	// Root is the resolved directory the entry lies in (the project
	// directory, a git worktree's git directory). The agent cannot
	// replace it: its parent lies outside what the agent may write.
	Root string
	// Path is relative to Root, slash-separated.
	Path string
	// DirOnly watches the name only: it may be made as a directory (git
	// init makes .git), never as anything else, and what lies below is
	// not this entry's.
	DirOnly bool
	// Rule names the entry in reports ("protected .git/hooks").
	Rule string
}

// Change is one change to a protected entry and what was done about it.
type Change struct {
	Time time.Time
	// PID is the process that made it, as the kernel said; 0 when
	// unknown (found by Check, or after the kernel's queue overflowed).
	// Comm is its name, read when the change was seen ("" if gone).
	PID  int
	Comm string
	// Op is what the change was: create, mkdir, symlink, link, write,
	// rename, unlink, rmdir, chmod.
	Op   string
	Path string // absolute
	Rule string
	// Undone: the entry is as it was again; Action says how ("removed",
	// "put back", "mode put back").
	Undone bool
	Action string
	// Kept: the user's own change (Options.Keep), now the entry's record.
	Kept bool
	// Err says why the change could not be undone.
	Err error
}

// Options are what the watcher reports to and asks.
type Options struct {
	// Report receives each change once it has been dealt with, from the
	// watcher's goroutine while it runs and from Check's caller.
	Report func(Change)
	// Keep says whether a change made by process pid is the user's own
	// (a process alive outside the cell: the user's git in another
	// terminal), to be recorded as the entry's new state rather than
	// undone. Nil undoes every change.
	Keep func(pid int) bool
	// Warn receives the watcher's own warnings.
	Warn func(format string, args ...any)
}

// Watcher watches armed entries.
type Watcher struct {
	o       Options
	user    *asuser.Thread
	entries []*watched
	fan     notifier // nil: no live watch, Check only

	batches chan batch
	// inflight: the reader has events it has not passed on yet.
	inflight atomic.Bool
	checks   chan chan []Change
	stop     chan struct{}
	done     chan struct{}
	closed   sync.Once

	mu  sync.Mutex
	all []Change
}

// Arm records entries as id sees them and starts watching them. An entry
// it cannot record is an error (the agent must not start with a promise
// the tripwire cannot keep); a live watch it cannot set up is a warning:
// Check still puts everything back when the session ends.
func Arm(entries []Entry, id asuser.ID, o Options) (*Watcher, error) {
	if o.Report == nil {
		o.Report = func(Change) {}
	}
	if o.Warn == nil {
		o.Warn = func(string, ...any) {}
	}
	user, err := asuser.NewThread(id)
	if err != nil {
		return nil, fmt.Errorf("tripwire: %w", err)
	}
	w := &Watcher{o: o, user: user, batches: make(chan batch, 64), checks: make(chan chan []Change),
		stop: make(chan struct{}), done: make(chan struct{})}
	roots := map[string]int{}
	var budget int64 = maxKept
	err = user.Do(func() error {
		for _, e := range entries {
			if err := checkPath(e.Path); err != nil {
				return err
			}
			fd, ok := roots[e.Root]
			if !ok {
				fd, err = unix.Open(e.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					return fmt.Errorf("tripwire: open %s: %w", e.Root, err)
				}
				roots[e.Root] = fd
			}
			we := &watched{Entry: e, root: fd, parts: strings.Split(e.Path, "/")}
			if err := we.record(&budget); err != nil {
				return fmt.Errorf("tripwire: record %s: %w", e.Rule, err)
			}
			w.entries = append(w.entries, we)
		}
		return nil
	})
	if err != nil {
		for _, fd := range roots {
			unix.Close(fd)
		}
		user.Close()
		return nil, err
	}
	for _, e := range w.entries {
		e.warnHashed(w.o.Warn)
	}
	w.fan = w.watchWith(user)
	if w.fan != nil {
		go w.read()
	}
	go w.fix()
	return w, nil
}

// watchWith sets up the live watch: fanotify, else inotify (no process
// named), else none (Check only), saying which when it is not fanotify.
func (w *Watcher) watchWith(user *asuser.Thread) notifier {
	try := func(n notifier) error {
		err := user.Do(func() error {
			for _, e := range w.entries {
				if err := e.mark(n); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			n.close()
			for _, e := range w.entries {
				e.dirs = nil
			}
		}
		return err
	}
	if liveWatch == "" {
		w.o.Warn("the tripwire cannot watch the protected entries live (off for a test): they are checked, and put back, when the session ends")
		return nil
	}
	var ferr error
	if liveWatch != "inotify" {
		f, err := newFanotify()
		if err == nil {
			err = try(f)
		}
		if err == nil {
			return f
		}
		ferr = err
	}
	in, err := newInotify()
	if err == nil {
		err = try(in)
	}
	if err == nil {
		if ferr != nil {
			w.o.Warn("the tripwire watches the protected entries with inotify (fanotify cannot here: %v): "+
				"its reports name no process, and a change of yours from outside the cell is undone too", ferr)
		}
		return in
	}
	w.o.Warn("the tripwire cannot watch the protected entries live (fanotify: %v; inotify: %v): they are checked, and put back, when the session ends", ferr, err)
	return nil
}

// liveWatch is what the watch uses: "fanotify" (and inotify where it
// cannot), or, in tests, "inotify" only or "" for none (Check alone).
var liveWatch = "fanotify"

// Live says whether changes are seen while the agent runs (else only by
// Check).
func (w *Watcher) Live() bool { return w.fan != nil }

// Entries is how many entries are armed.
func (w *Watcher) Entries() int { return len(w.entries) }

// Check puts back, and returns, whatever differs from the records now,
// after what the watcher still had to deal with. Call it once nothing of
// the cell can change anything any more.
func (w *Watcher) Check() []Change {
	reply := make(chan []Change, 1)
	select {
	case w.checks <- reply:
		return <-reply
	case <-w.done:
		return nil
	}
}

// maxChanges bounds what Changes keeps.
const maxChanges = 10000

// Changes are the changes seen since Arm, in order (the first
// maxChanges).
func (w *Watcher) Changes() []Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Change(nil), w.all...)
}

// Close stops watching. It checks nothing: call Check first.
func (w *Watcher) Close() {
	w.closed.Do(func() {
		close(w.stop)
		if w.fan != nil {
			w.fan.close()
		}
		<-w.done
		w.user.Do(func() error {
			seen := map[int]bool{}
			for _, e := range w.entries {
				if !seen[e.root] {
					seen[e.root] = true
					unix.Close(e.root)
				}
			}
			return nil
		})
		w.user.Close()
	})
}

// batch is what one read of the kernel's queue said.
type batch struct {
	events   []event
	overflow bool
}

// read passes the kernel's events on until the watcher closes.
func (w *Watcher) read() {
	for {
		evs, overflow, err := w.fan.read()
		w.inflight.Store(true)
		if err != nil {
			w.inflight.Store(false)
			select {
			case <-w.stop:
			default:
				w.o.Warn("tripwire: %v: protected entries are checked when the session ends", err)
			}
			return
		}
		self := os.Getpid()
		var b batch
		b.overflow = overflow
		comms := map[int]string{}
		for _, e := range evs {
			if e.pid == self {
				continue // the tripwire's own restores
			}
			if e.pid > 0 {
				c, ok := comms[e.pid]
				if !ok {
					c = comm(e.pid)
					comms[e.pid] = c
				}
				e.comm = c
			}
			b.events = append(b.events, e)
		}
		if len(b.events) == 0 && !b.overflow {
			w.inflight.Store(false)
			continue
		}
		select {
		case w.batches <- b:
			w.inflight.Store(false)
		case <-w.stop:
			return
		}
	}
}

// fix deals with each batch, and with Check's requests.
func (w *Watcher) fix() {
	defer close(w.done)
	for {
		select {
		case b := <-w.batches:
			w.handle(b)
		case reply := <-w.checks:
			// What the kernel still holds, or the reader has read but
			// not passed on, is dealt with first, to name its process.
			deadline := time.Now().Add(time.Second)
			for {
				select {
				case b := <-w.batches:
					w.handle(b)
					continue
				default:
				}
				if w.fan == nil || (!w.inflight.Load() && w.fan.queued() == 0) || time.Now().After(deadline) {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			reply <- w.reconcile(w.entries, nil)
		case <-w.stop:
			return
		}
	}
}

// handle reconciles the entries a batch concerns, its events naming the
// processes and hinting at the operations.
func (w *Watcher) handle(b batch) {
	seen := map[*watched]*seenBy{}
	see := func(e *watched, ev event) {
		s := seen[e]
		if s == nil {
			s = &seenBy{hints: map[string]uint64{}, by: map[string]event{}}
			seen[e] = s
		}
		s.hints[ev.name] |= ev.mask
		if _, ok := s.by[ev.name]; !ok {
			s.by[ev.name] = ev // the first event for a name: what made it
		}
		// One process of the cell among them is enough for the change
		// to be undone: the first such is the one reported.
		if k := w.keeps(ev.pid); s.first.pid == 0 || (s.keep && !k) {
			s.first, s.keep = ev, k
		}
	}
	for _, ev := range b.events {
		known := false
		for _, e := range w.entries {
			k, hit := e.concerns(ev)
			known = known || k
			if hit {
				see(e, ev)
			}
		}
		if !known {
			// A folder the tripwire does not watch: a protected file
			// written through a hard link made elsewhere. Any entry may
			// be concerned.
			for _, e := range w.entries {
				see(e, ev)
			}
		}
	}
	var todo []*watched
	for _, e := range w.entries {
		if seen[e] != nil || b.overflow {
			todo = append(todo, e)
		}
	}
	if len(todo) > 0 {
		w.reconcile(todo, seen)
	}
}

// seenBy is what a batch said of an entry: the names its events named,
// with their operations, and the process to report.
type seenBy struct {
	hints map[string]uint64
	by    map[string]event
	first event
	keep  bool
}

// keeps says whether pid's changes are the user's own.
func (w *Watcher) keeps(pid int) bool {
	return pid > 0 && w.o.Keep != nil && w.o.Keep(pid)
}

// reconcile brings entries back to their records (or, for the user's own
// changes, records them anew) and reports what it found. seen may be nil
// (Check: no process to name).
func (w *Watcher) reconcile(todo []*watched, seen map[*watched]*seenBy) []Change {
	var out []Change
	for _, e := range todo {
		s := seen[e]
		if s == nil {
			s = &seenBy{}
		}
		var found []Change
		err := w.user.Do(func() error {
			if s.keep {
				found = e.rerecord()
			} else {
				found = e.fix(s.hints, true)
			}
			if w.fan == nil {
				return nil
			}
			// New folders on the way, a file put back (a new inode):
			// watched from now on.
			marked := len(e.dirs)
			afterFix()
			if err := e.mark(w.fan); err != nil {
				return err
			}
			if len(e.dirs) > marked && !s.keep {
				// A folder on the way that is new was not watched
				// while fix looked (mkdir .claude, then its
				// settings.json): what was made in it meanwhile is
				// looked at again, now that it is watched.
				found = append(found, e.fix(s.hints, true)...)
			}
			return nil
		})
		if err != nil && !errors.Is(err, asuser.ErrClosed) {
			w.o.Warn("tripwire: watch %s: %v", e.Rule, err)
		}
		for _, c := range found {
			c.Time = time.Now()
			c.Rule = e.Rule
			// The process that touched the changed name, else the
			// first of the cell's that touched the entry.
			ev, ok := s.by[filepath.Base(c.Path)]
			if !ok || (!s.keep && w.keeps(ev.pid)) {
				ev = s.first
			}
			if ev.pid > 0 {
				c.PID, c.Comm = ev.pid, ev.comm
			}
			c.Kept = s.keep
			out = append(out, c)
		}
	}
	if len(out) > 0 {
		w.mu.Lock()
		// Bounded: an agent changing an entry in a loop makes a change a
		// round; the caller keeps its own account from Report.
		w.all = append(w.all, out[:min(len(out), maxChanges-len(w.all))]...)
		w.mu.Unlock()
		for _, c := range out {
			w.o.Report(c)
		}
	}
	return out
}

// afterFix runs between reconcile's fix and its marks: tests make their
// change there.
var afterFix = func() {}

// comm is a process's name, "" once it is gone.
func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func checkPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") {
		return fmt.Errorf("tripwire: entry %q: give it relative to its root", p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("tripwire: entry %q: empty, . or .. component", p)
		}
	}
	return nil
}
