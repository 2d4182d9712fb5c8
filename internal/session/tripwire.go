package session

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/spec"
	"github.com/agent-lock/agent-lock/internal/tripwire"
)

// Under the Landlock engine, which grants the project directory whole,
// the protected entries are kept by the tripwire (internal/tripwire):
// recorded before the agent starts, put back as soon as a change is seen,
// and checked once more when nothing of the cell runs any more.

// TripwireEntries are the entries the Landlock engine's tripwire keeps: those the BPF-LSM
// engine protects in DIR (less --unprotect; a .git may be made as a
// directory, as git init does, never as anything else), and git's links
// in a linked worktree's git directory (InGit rule roots). Git's files in
// repositories below DIR's top are not among them: the BPF LSM finds those
// at any depth, the tripwire only what it recorded before the start (a
// stated limit of the Landlock engine).
func TripwireEntries(p policy.Policy, rules []spec.Rule) []tripwire.Entry {
	var out []tripwire.Entry
	for _, e := range p.Protect {
		out = append(out, tripwire.Entry{Root: p.Dir, Path: e.Path, DirOnly: e.Git && e.Path == ".git", Rule: "protected " + e.Path})
	}
	for _, r := range rules {
		if r.Access&spec.InGit == 0 || r.Access&spec.Write == 0 || !strings.HasPrefix(r.Name, "git worktree /") {
			continue
		}
		for _, name := range policy.WorktreeProtected {
			out = append(out, tripwire.Entry{Root: r.Path, Path: name,
				Rule: "protected " + filepath.Join(r.Path, name)})
		}
	}
	return out
}

// tripwireRun is a session's tripwire: the watcher, the escapes it
// reported, what became of each entry path (for the summary), and the
// changes found before the start record was written (reports begin with
// it).
type tripwireRun struct {
	w *tripwire.Watcher
	// gitDir is DIR's .git when it was missing at the start: a repository
	// the agent makes there (git init) is its own, so git's files in it
	// are not kept live, and checkGit looks at them when the cell is dead.
	gitDir  string
	escapes atomic.Uint64
	warn    warner

	mu      sync.Mutex
	rep     report.Writer
	pending []tripwire.Change
	byPath  map[string]*undo
	order   []string
	more    int             // changes to paths beyond maxUndoPaths
	kept    map[string]bool // paths changed outside the cell, said once
}

// undo is what became of one path.
type undo struct {
	report.Undo
	ok bool // the last change was undone
}

// maxUndoPaths bounds the summary's list: an agent making names in a
// protected folder in a loop must not grow it without bound.
const maxUndoPaths = 1000

// armTripwire records the protected entries, as the agent's user, and
// watches them. An entry it cannot record stops the session: the promise
// would not be kept.
func armTripwire(p policy.Policy, rules []spec.Rule, id asuser.ID, cg string, warn warner) (*tripwireRun, error) {
	t := &tripwireRun{warn: warn}
	entries := TripwireEntries(p, rules)
	dotgit := filepath.Join(p.Dir, ".git")
	if err := asuser.Do(id, func() error { _, err := os.Lstat(dotgit); return err }); errors.Is(err, fs.ErrNotExist) {
		t.gitDir = dotgit
		entries = slices.DeleteFunc(entries, func(e tripwire.Entry) bool {
			return e.Root == p.Dir && strings.HasPrefix(e.Path, ".git/")
		})
	}
	if len(entries) == 0 {
		return t, nil
	}
	w, err := tripwire.Arm(entries, id, tripwire.Options{
		Report: t.report,
		Keep:   func(pid int) bool { return outsideCell(pid, cg) },
		Warn:   func(f string, a ...any) { warn(f, a...) },
	})
	if err != nil {
		return nil, fmt.Errorf("%w; the protected entries cannot be kept under the Landlock engine: "+
			"use --engine bpf-lsm, or --unprotect the entry", err)
	}
	t.w = w
	return t, nil
}

// start sends the changes found so far, and all later ones, to rep.
func (t *tripwireRun) start(rep report.Writer) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.rep = rep
	pending := t.pending
	t.pending = nil
	t.mu.Unlock()
	for _, c := range pending {
		t.write(rep, c)
	}
}

func (t *tripwireRun) report(c tripwire.Change) {
	t.mu.Lock()
	if !c.Kept {
		t.tally(c)
	}
	rep := t.rep
	if rep == nil {
		t.pending = append(t.pending, c)
	}
	t.mu.Unlock()
	if rep != nil {
		t.write(rep, c)
	}
}

// write reports one change: an escape, undone or (if it could not be)
// allowed; the user's own change is no escape, only said.
func (t *tripwireRun) write(rep report.Writer, c tripwire.Change) {
	if c.Kept {
		// Once a path: an editor outside rewrites its settings often.
		t.mu.Lock()
		seen := t.kept[c.Path]
		if t.kept == nil {
			t.kept = map[string]bool{}
		}
		t.kept[c.Path] = true
		t.mu.Unlock()
		if !seen {
			t.warn("%s changed by %s (pid %d), outside the cell: kept as yours", c.Path, orUnknown(c.Comm), c.PID)
		}
		return
	}
	t.escapes.Add(1)
	e := report.Event{Time: c.Time, PID: uint32(c.PID), TID: uint32(c.PID), Comm: c.Comm, Op: c.Op, Path: c.Path,
		Rule: c.Rule, Verdict: report.Undone, Sensitive: report.Sensitive(c.Path)}
	if !c.Undone {
		e.Verdict = report.Allowed
		t.warn("%s was changed and could not be put back: %v", c.Path, c.Err)
	}
	rep.Escape(e)
}

func orUnknown(s string) string {
	if s == "" {
		return "a process now gone"
	}
	return s
}

// count is the escapes the tripwire reported.
func (t *tripwireRun) count() uint64 {
	if t == nil {
		return 0
	}
	return t.escapes.Load()
}

// tally folds a change into the summary's account, t.mu held.
func (t *tripwireRun) tally(c tripwire.Change) {
	u := t.byPath[c.Path]
	if u == nil {
		if len(t.byPath) >= maxUndoPaths {
			t.more++
			return
		}
		if t.byPath == nil {
			t.byPath = map[string]*undo{}
		}
		u = &undo{Undo: report.Undo{Path: c.Path, Rule: c.Rule, Op: c.Op}}
		t.byPath[c.Path] = u
		t.order = append(t.order, c.Path)
	}
	u.Count++
	u.Action, u.Why, u.ok = c.Action, "", c.Undone
	if c.Err != nil {
		u.Why = c.Err.Error()
	}
}

// finish checks every entry once more (nothing of the cell runs any more),
// stops the watch and returns what the summary says was undone and what
// was left changed, one line per entry path as it ended.
func (t *tripwireRun) finish() (undone, left []report.Undo) {
	if t == nil || t.w == nil {
		return nil, nil
	}
	t.w.Check()
	t.w.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.order {
		if u := t.byPath[p]; u.ok {
			undone = append(undone, u.Undo)
		} else {
			left = append(left, u.Undo)
		}
	}
	if t.more > 0 {
		t.warn("the tripwire found %d more changes than its summary lists (every one was reported as an escape)", t.more)
	}
	return undone, left
}

// close stops the watch without the end's check: the agent never ran.
func (t *tripwireRun) close() {
	if t != nil && t.w != nil {
		t.w.Close()
	}
}

// outsideCell says whether process pid is alive outside the cell's cgroup
// cg: the user's own. A process gone before agent-lock could tell is
// taken for the cell's (its change is undone).
func outsideCell(pid int, cg string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			return !(rel != "/" && strings.HasSuffix(cg, rel))
		}
	}
	return false
}
