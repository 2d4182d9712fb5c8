package landlockcell

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/dirscan"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/spec"
	"github.com/agent-lock/agent-lock/internal/tripwire"
)

// Under the Landlock engine, which grants the project directory whole,
// the protected entries are kept by the tripwire (internal/tripwire):
// recorded before the agent starts, put back as soon as a change is seen,
// and checked once more when nothing of the cell runs any more.

// TripwireEntries are the entries the Landlock engine's tripwire keeps by
// the policy: those the BPF-LSM engine protects in DIR (less --unprotect;
// a .git may be made as a directory, as git init does, never as anything
// else), git's at the top of every writable grant of the user's
// (grantRoots), and git's links in a linked worktree's git directory (InGit
// rule roots). Git's files in the repositories below DIR's top and the
// grants' are found when the session starts (gitEntries).
func TripwireEntries(p policy.Policy, rules []spec.Rule) []tripwire.Entry {
	var out []tripwire.Entry
	for _, e := range p.Protect {
		out = append(out, tripwire.Entry{Root: p.Dir, Path: e.Path, DirOnly: e.Git && e.Path == ".git", Rule: "protected " + e.Path})
	}
	for _, g := range grantRoots(p, rules) {
		for _, e := range p.Protect {
			if e.Git {
				out = append(out, tripwire.Entry{Root: g, Path: e.Path, DirOnly: e.Path == ".git",
					Rule: "protected " + filepath.Join(g, e.Path)})
			}
		}
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

// Repositories are the repositories below the tops of DIR and of the
// user's writable grants whose git files a session starting now would
// keep (gitEntries), and how many more it would leave out. It reads the
// user's folders: the caller runs it as the user id.
func Repositories(id asuser.ID, p policy.Policy, rules []spec.Rule) (repos []string, more int, err error) {
	roots := append([]string{p.Dir}, grantRoots(p, rules)...)
	for _, root := range roots {
		entries, m, _, err := gitEntries(id, root, nil, roots...)
		if err != nil {
			return nil, 0, err
		}
		more += m
		for _, e := range entries {
			if e.DirOnly && filepath.Base(e.Path) == ".git" {
				repos = append(repos, filepath.Dir(filepath.Join(e.Root, e.Path)))
			}
		}
	}
	return repos, more, nil
}

// grantRoots are the folders outside DIR that the user granted the agent
// to write (--allow-write, a policy file's allow-write): the BPF LSM
// protects git's files in their repositories as in DIR's, so the tripwire
// keeps them. Not a profile's grants (the agent's own state, ~/.claude),
// nor a linked worktree's git directory (kept by its links), nor a file,
// nor a grant of the home or above it (broadGrants): walking it at every
// start would cost the whole home.
func grantRoots(p policy.Policy, rules []spec.Rule) []string {
	var out []string
	for _, r := range rules {
		if !userGrant(p, r) || broad(p, r.Path) ||
			slices.ContainsFunc(out, func(o string) bool { return spec.Under(r.Path, o) }) {
			continue
		}
		out = append(out, r.Path)
	}
	return out
}

// userGrant says whether r is a folder outside DIR the user granted the
// agent to write.
func userGrant(p policy.Policy, r spec.Rule) bool {
	return r.Access&spec.Write != 0 && r.Access&spec.Grant != 0 && r.Access&(spec.Named|spec.InGit) == 0 &&
		!spec.Under(r.Path, p.Dir) && p.Protect != nil
}

// broad says whether a grant of path holds the user's home (or is /).
func broad(p policy.Policy, path string) bool {
	return path == "/" || (p.Home != "" && spec.Under(p.Home, path))
}

// broadGrants are the user's writable grants whose git files the tripwire
// does not keep: those that hold the home.
func broadGrants(p policy.Policy, rules []spec.Rule) []string {
	var out []string
	for _, r := range rules {
		if userGrant(p, r) && broad(p, r.Path) {
			out = append(out, r.Path)
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
	// kept are the entries' paths; since is when the walk for them began
	// (walkGit: before the recording, so that more counts as changed).
	// A git file in DIR or a writable grant (roots) that is none of them
	// and changed since (a repository the agent made, git init at DIR's
	// top included) is the agent's: gitcheck judges it when the cell is
	// dead (madeSince).
	kept  []keptPath
	roots []string
	since time.Time
	// gitDirs are the git directories (.git folders) there were at the
	// start, by path, with their inode then.
	gitDirs map[string]uint64
	escapes atomic.Uint64
	warn    func(format string, args ...any)

	mu      sync.Mutex
	rep     report.Writer
	pending []tripwire.Change
	byPath  map[string]*undo
	order   []string
	more    int             // changes to paths beyond maxUndoPaths
	outside map[string]bool // paths changed outside the cell, said once
}

// keptPath is an entry's path; a DirOnly entry keeps its name only.
type keptPath struct {
	path    string
	dirOnly bool
}

// keeps says whether path is an entry the tripwire keeps, or lies in one.
func (t *tripwireRun) keeps(path string) bool {
	for _, k := range t.kept {
		if path == k.path || (!k.dirOnly && strings.HasPrefix(path, k.path+"/")) {
			return true
		}
	}
	return false
}

// scanMemories is root's folder of the walks for git's files that the
// next session's start takes the unchanged folders from.
var scanMemories = "/run/agent-lock/scans"

// Memories are the walks a daemon holds for the sessions it starts
// (engine.Spec.Scan): kept in scanMemories too, for a session it does
// not start and its own next start.
func Memories() (*dirscan.Memories, error) {
	return dirscan.NewMemories(scanMemories)
}

// maxGitRepos bounds the repositories below DIR whose git files the
// tripwire keeps: each costs a few watches and its hooks' contents.
const maxGitRepos = 64

// gitEntries are the entries for git's files that the BPF LSM protects by
// name at any depth and policy.Protected names at DIR's top only: those of
// the repositories below DIR's top (a .git folder, or a .git file, which
// names one), and the links of the linked worktrees and submodules in
// every git directory found, DIR's own included. It leaves out the trees
// of skip (the other roots' own). It runs as the user id (the caller's
// thread for the few reads of DIR's own .git, dirscan's for the walk),
// and returns how many repositories it left out past maxGitRepos. scan
// is the walk for the .git entries below dir (nil: dirscan.Named's, for
// id, dir, ".git" and skip; or a memory's for the same).
func gitEntries(id asuser.ID, dir string, scan func() ([]dirscan.Hit, error), skip ...string) (out []tripwire.Entry, more int, unread []string, err error) {
	var repos int
	add := func(path, rule string, dirOnly bool) {
		out = append(out, tripwire.Entry{Root: dir, Path: path, DirOnly: dirOnly, Rule: "protected " + rule})
	}
	links := func(gitDir string) {
		for _, sub := range []string{"worktrees", "modules"} {
			root := filepath.Join(dir, gitDir, sub)
			filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !d.IsDir() || p == root {
					return nil
				}
				if _, err := os.Lstat(filepath.Join(p, "HEAD")); err != nil {
					return nil
				}
				rel, _ := filepath.Rel(dir, p)
				names := policy.WorktreeProtected
				if sub == "modules" {
					names = []string{"config", "config.worktree", "hooks"}
				}
				for _, n := range names {
					add(rel+"/"+n, rel+"/"+n, false)
				}
				return fs.SkipDir
			})
		}
	}
	if st, err := os.Lstat(filepath.Join(dir, ".git")); err == nil && st.IsDir() {
		links(".git")
	}
	if scan == nil {
		scan = func() ([]dirscan.Hit, error) { return dirscan.Named(id, dir, ".git", skip) }
	}
	hits, err := scan()
	if err != nil {
		return nil, 0, nil, err
	}
	for _, h := range hits {
		if h.Path == filepath.Join(dir, ".git") {
			continue // DIR's own: policy.Protected's names, and links above
		}
		if h.Unread != nil {
			// The walk could not look into it (a path past PATH_MAX,
			// a dead mount, a folder the user may not list): said at
			// the start, and named by the end's check (gitcheck).
			unread = append(unread, h.Path)
			continue
		}
		if repos++; repos > maxGitRepos {
			more++
			continue
		}
		rel, _ := filepath.Rel(dir, h.Path)
		top := filepath.Dir(rel)
		if !h.Dir {
			// A .git file (a submodule's checkout, a linked worktree)
			// names the git directory: its content is kept.
			add(rel, rel, false)
			add(top+"/.gitmodules", top+"/.gitmodules", false)
			continue
		}
		add(rel, rel, true)
		for _, n := range []string{"hooks", "config", "config.worktree", "commondir", "gitdir"} {
			add(rel+"/"+n, rel+"/"+n, false)
		}
		add(top+"/.gitmodules", top+"/.gitmodules", false)
		links(rel)
	}
	return out, more, unread, nil
}

// gitDirInodes are the inodes of DIR's .git folder and of those the
// entries name (.git folders below DIR's top), as they are now.
func gitDirInodes(dir string, entries []tripwire.Entry) map[string]uint64 {
	out := map[string]uint64{}
	paths := []string{filepath.Join(dir, ".git")}
	for _, e := range entries {
		if e.DirOnly && filepath.Base(e.Path) == ".git" {
			paths = append(paths, filepath.Join(e.Root, e.Path))
		}
	}
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			out[p] = st.Ino
		}
	}
	return out
}

// madeSince is gitcheck's word under Landlock, which keeps no marks: a
// file the tripwire does not keep (in a repository that was not there
// when the session started, DIR's own made by git init included) that
// changed since it started, or lies in a folder of a git directory that
// did, by their ctime, which no one can set back.
func (t *tripwireRun) madeSince(f *os.File) (bool, error) {
	path, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return false, err
	}
	if t.keeps(path) {
		return false, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false, err
	}
	if t.changed(st) {
		return true, nil
	}
	// A folder moved into a git directory (a hooks folder, a git
	// directory made elsewhere and moved to .git) brings files whose own
	// ctime is older than the move: the folders on the way up to the git
	// directory, which the move changed, say so.
	i := strings.LastIndex(path, "/.git/")
	if i < 0 {
		return false, nil
	}
	top := path[:i+len("/.git")]
	// A git directory there was at the start changes with every git
	// command (index.lock): its own ctime says nothing, the folders
	// below it do.
	last := len(top)
	if ino, ok := t.gitDirs[top]; ok && unix.Lstat(top, &st) == nil && st.Ino == ino {
		last++
	}
	for d := filepath.Dir(path); len(d) >= last; d = filepath.Dir(d) {
		if err := unix.Lstat(d, &st); err == nil && t.changed(st) {
			return true, nil
		}
	}
	return false, nil
}

// changed says whether st's inode changed since the recording began.
func (t *tripwireRun) changed(st unix.Stat_t) bool {
	return !time.Unix(st.Ctim.Unix()).Before(t.since)
}

// undo is what became of one path.
type undo struct {
	report.Undo
	ok bool // the last change was undone
}

// maxUndoPaths bounds the summary's list: an agent making names in a
// protected folder in a loop must not grow it without bound.
const maxUndoPaths = 1000

// gitWalk is the search of DIR and the user's writable grants for the
// entries the tripwire keeps (git's files at any depth among them),
// begun while the network is made (Load: the two take the two cores of a
// small machine) and waited for by armTripwire.
type gitWalk struct {
	done  chan struct{}
	since time.Time
	roots []string
	// entries: what to keep; gitDirs: the git directories found, by
	// inode; warns: what to tell the user, said by armTripwire (Warn is
	// the session's, not to be called from here).
	entries []tripwire.Entry
	gitDirs map[string]uint64
	warns   []string
	err     error
	// stats: the walk's folders, and those taken from the last
	// session's memory (nil without one); keeping: the memories being
	// written for the next session.
	stats   *report.GitWalk
	keeping sync.WaitGroup
}

// walkGit begins the walk for p and rules, as the user id.
// With remember, a session run as root takes the folders unchanged since
// the last session's walk from its memory, and keeps one for the next.
func walkGit(p policy.Policy, rules []spec.Rule, id asuser.ID, remember bool, scan dirscan.Scanner) *gitWalk {
	// A second of margin: a file system's clock is coarser than ours.
	w := &gitWalk{done: make(chan struct{}), since: time.Now().Add(-time.Second), gitDirs: map[string]uint64{}}
	go func() {
		defer close(w.done)
		w.err = w.walk(p, rules, id, remember && os.Geteuid() == 0, scan)
	}()
	return w
}

func (w *gitWalk) walk(p policy.Policy, rules []spec.Rule, id asuser.ID, remember bool, scan dirscan.Scanner) error {
	entries := TripwireEntries(p, rules)
	w.roots = append([]string{p.Dir}, grantRoots(p, rules)...)
	for _, g := range broadGrants(p, rules) {
		w.warns = append(w.warns, fmt.Sprintf("--allow-write %s holds your home: git's files in the repositories there, outside the project, are not kept "+
			"under the Landlock engine (the walk would cover the whole home at every start); the BPF-LSM engine protects them", g))
	}
	for _, root := range w.roots {
		var nested []tripwire.Entry
		var more int
		var unread []string
		var scanErr error
		// The daemon's scan, when it serves this session: it holds the
		// last walk, and saw what changed since. Otherwise the last
		// session's walk of root, if this one runs as root (root's own
		// files, read and written on this goroutine's thread, not the
		// user's: dirscan.Memory).
		var stats *dirscan.Stats
		var walkRoot func() ([]dirscan.Hit, error)
		if scan != nil {
			if hits, st, err := scan(id, root, ".git", w.roots); err == nil {
				stats = &st
				walkRoot = func() ([]dirscan.Hit, error) { return hits, nil }
			}
		}
		var mem *dirscan.Memory
		if walkRoot == nil && remember {
			mem = dirscan.Recall(scanMemories, id, root, ".git", w.roots)
			walkRoot = func() ([]dirscan.Hit, error) {
				hits, err := mem.Scan()
				if err == nil {
					folders, recalled := mem.Recalled()
					stats = &dirscan.Stats{Folders: folders, Remembered: recalled}
				}
				return hits, err
			}
		}
		err := asuser.Do(id, func() error {
			if nested, more, unread, scanErr = gitEntries(id, root, walkRoot, w.roots...); scanErr != nil {
				return nil
			}
			maps.Copy(w.gitDirs, gitDirInodes(root, nested))
			_, err := os.Lstat(filepath.Join(root, ".git"))
			return err
		})
		if scanErr == nil && err != nil && !errors.Is(err, fs.ErrNotExist) {
			scanErr = err // not even acting as the user
		}
		if scanErr != nil {
			// The repositories below root would go unkept.
			return fmt.Errorf("look for git's files below %s: %w", root, scanErr)
		}
		if errors.Is(err, fs.ErrNotExist) {
			entries = slices.DeleteFunc(entries, func(e tripwire.Entry) bool {
				return e.Root == root && strings.HasPrefix(e.Path, ".git/")
			})
		}
		if stats != nil {
			if w.stats == nil {
				w.stats = &report.GitWalk{}
			}
			w.stats.Folders += stats.Folders
			w.stats.Remembered += stats.Remembered
			w.stats.Unlooked += stats.Unlooked
		}
		if mem != nil {
			// Beside the rest of the start, as root; the cell's Close
			// waits for it. Not kept (/run not writable), it costs the
			// next start a whole walk, nothing else: not worth a
			// warning.
			w.keeping.Go(func() { mem.Keep() })
		}
		entries = append(entries, nested...)
		if len(unread) > 0 {
			w.warns = append(w.warns, fmt.Sprintf("git's files below %s are not kept: agent-lock could not look into it (%d such; its path too long, unreadable, or not yours to list); the check at the session's end names them",
				unread[0], len(unread)))
		}
		if more > 0 {
			w.warns = append(w.warns, fmt.Sprintf("git's files in %d more repositories below %s are not kept (the tripwire keeps %d): the check at the session's end looks at what changed there", more, root, maxGitRepos))
		}
	}
	w.entries = entries
	return nil
}

// armTripwire records the protected entries walk found (walkGit's, begun
// for the same policy, rules and user), as the agent's user, and watches
// them. An entry it cannot record stops the session: the promise would
// not be kept.
func armTripwire(walk *gitWalk, id asuser.ID, cg string, warn func(format string, args ...any)) (*tripwireRun, error) {
	<-walk.done
	for _, m := range walk.warns {
		warn("%s", m)
	}
	if walk.err != nil {
		return nil, walk.err
	}
	t := &tripwireRun{warn: warn, since: walk.since, roots: walk.roots, gitDirs: walk.gitDirs}
	entries := walk.entries
	for _, e := range entries {
		t.kept = append(t.kept, keptPath{filepath.Join(e.Root, e.Path), e.DirOnly})
	}
	if len(entries) == 0 {
		return t, nil
	}
	w, err := tripwire.Arm(entries, id, tripwire.Options{
		Report: t.report,
		Keep:   keeper(cg),
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
		seen := t.outside[c.Path]
		if t.outside == nil {
			t.outside = map[string]bool{}
		}
		t.outside[c.Path] = true
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

// wait waits (2 s at most) for the memories the walk is writing for the
// next session: written by now, but for a session that ended at once.
func (w *gitWalk) wait() {
	if w == nil {
		return
	}
	<-w.done
	kept := make(chan struct{})
	go func() { w.keeping.Wait(); close(kept) }()
	select {
	case <-kept:
	case <-time.After(2 * time.Second):
	}
}

// keeper is the tripwire's Keep for the cell's cgroup cg: a change by a
// process outside it is the user's own. A cell alone (cg "") has no
// cgroup to tell by: every change is undone, as when the tripwire cannot
// name the process.
func keeper(cg string) func(pid int) bool {
	if cg == "" {
		return nil
	}
	return func(pid int) bool { return outsideCell(pid, cg) }
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
