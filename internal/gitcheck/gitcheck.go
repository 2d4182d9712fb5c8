// Package gitcheck looks, when a session ends, at the git files the agent
// made that the user's own git would follow or run commands from, and moves
// aside those that would run a command.
//
// The kernel keeps git's command files (config, hooks, commondir, gitdir,
// config.worktree, .git files) read-only in every repository the agent did
// not make, at any depth, and lets the agent make them only in folders it
// made itself: a repository it starts or clones (jail.h, struct gitname).
// It refuses every hook there but NAME.sample, which git never runs. What
// it cannot judge is what the agent writes into a config, a .git file or a
// commondir: git init, git clone and git config write those as the agent's
// ordinary work, and the same write can set core.fsmonitor, which the
// user's next git status would run. That is judged here, by content, once
// no process of the cell is left: a config the jail made may hold only keys
// that run nothing (an allow-list, so a key git adds later counts as a
// command until it is listed), a pointer the jail made must lead into a git
// directory (a folder named .git, where the kernel kept the hooks).
// A symlink the jail left in a git directory is moved aside too (git leaves
// none). Whatever fails is renamed to NAME.agent-lock (a name git never
// reads) and reported; a config is then written again with the keys that
// passed.
//
// Which files the jail made is the kernel's word (Checker.Made): a file the
// user had is never touched, whatever it holds. Everything here acts as the
// user, on paths found without following symlinks.
package gitcheck

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/dirscan"
)

// Suffix is what a file moved aside is renamed with.
const Suffix = ".agent-lock"

// Finding is one file the agent made that the user's git would have run a
// command from, or followed out of a git directory.
type Finding struct {
	Path string // the file, as found
	// Why says what it held: the keys that run commands, or where a
	// pointer led.
	Why string
	// Moved is where the file is now (Path + Suffix, or with .N or a
	// random suffix when that name was taken; moveAside), empty when it
	// was left (Checker.ReportOnly) or could not be moved (Err).
	Moved string
	Err   error
	// Unchecked says Path was not looked into: its path is too long for
	// the kernel to open by name, or it could not be read (dirscan.Hit's
	// Unread). The user is told where; it is not one of the agent's
	// escapes.
	Unchecked bool
}

// Checker checks the repositories below some roots.
type Checker struct {
	// Made says whether the jail made the file f is open on (O_PATH,
	// not following a symlink).
	Made func(f *os.File) (bool, error)
	// Git is the git program that parses configs (as the user would
	// read them), run as UID and GID; empty when none is installed, and
	// then every config the jail made is moved aside whole.
	Git      string
	UID, GID uint32
	// Groups are the user's supplementary groups, as whom the roots are
	// read.
	Groups []uint32
	// ReportOnly finds and reports, and changes nothing (audit mode).
	ReportOnly bool

	roots   []string
	visited map[string]bool
	named   map[string]bool // unchecked's
	shown   int             // unchecked findings in out
	more    int             // unchecked's past maxNamed, the first firstMore
	out     []Finding

	firstMore string
}

// Check walks roots (without following symlinks) for .git entries and
// checks every git directory they are or lead to, and the git directories
// dirs (a linked worktree's, whatever it is named). It must run as the user
// (asuser); the git it starts runs as UID and GID.
func (c *Checker) Check(roots, dirs []string) []Finding {
	c.roots = roots
	c.visited = map[string]bool{}
	c.named = map[string]bool{}
	c.shown, c.more, c.firstMore = 0, 0, ""
	c.out = nil
	for _, d := range dirs {
		c.gitDir(d)
	}
	for _, root := range roots {
		// Folders the user may not search are left out: the user's git
		// cannot look in them either.
		hits, err := dirscan.Named(asuser.ID{UID: c.UID, GID: c.GID, Groups: c.Groups}, root, ".git", nil)
		if err != nil {
			// No threads of the user's, or out of descriptors: one walk
			// on this thread, which acts as the user already and names
			// what it cannot read.
			hits = walk(root)
		}
		for _, h := range hits {
			switch {
			case h.Unread != nil && !errors.Is(h.Unread, unix.ENAMETOOLONG):
				// Not listed (without root, a folder the user may search
				// but not list): the agent's moved aside whole.
				c.notListed(h.Path, h.Unread)
			case h.Unread != nil:
				c.unchecked(h.Path, h.Unread)
			case h.Dir:
				c.gitDir(h.Path)
			case h.Regular:
				c.pointer(h.Path, "gitdir: ")
			default:
				// git follows a .git symlink as it would the folder;
				// the BPF LSM refuses one, Landlock does not. The
				// user's own is followed, and where it leads checked.
				if c.made(h.Path) {
					c.aside(h.Path, "a .git that is neither a folder nor a file (a symlink to "+quote(readlink(h.Path))+")")
				} else if target, err := filepath.EvalSymlinks(h.Path); err == nil && c.inRoots(target) && c.exists(filepath.Join(target, "HEAD")) {
					// Only where the agent could write: elsewhere "made"
					// may be the user's own change (Landlock's ctime).
					c.gitDir(target)
				}
			}
		}
	}
	if c.more > 0 {
		c.out = append(c.out, Finding{Path: c.firstMore, Unchecked: true,
			Why: fmt.Sprintf("not checked: this and %d more paths not named", c.more-1)})
	}
	return c.out
}

// walk finds the .git entries below root as dirscan.Named does, on the
// calling thread.
func walk(root string) []dirscan.Hit {
	var hits []dirscan.Hit
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if unread(p, d, err) != nil {
			hits = append(hits, dirscan.Hit{Path: p, Unread: unread(p, d, err)})
			return skipDir(d, err)
		}
		if err != nil || d.Name() != ".git" || p == root {
			return nil
		}
		h := dirscan.Hit{Path: p, Dir: d.IsDir(), Regular: d.Type().IsRegular()}
		if len(p) >= unix.PathMax {
			h.Unread = unix.ENAMETOOLONG
		}
		hits = append(hits, h)
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	return hits
}

// made says whether the jail made the entry at p (not following it).
func (c *Checker) made(p string) bool {
	f, err := os.OpenFile(p, os.O_RDONLY|pathFlags, 0)
	if tooLong(p, err) {
		c.unchecked(p, unix.ENAMETOOLONG)
		return false
	}
	if err != nil {
		return false
	}
	defer f.Close()
	m, err := c.Made(f)
	if err != nil {
		c.out = append(c.out, Finding{Path: p, Why: "cannot tell whether the agent made it", Err: err})
		return false
	}
	return m
}

// pointer checks a file that names a git directory (a .git file,
// "gitdir: DIR"; a commondir, "DIR"), relative to the folder it is in. One
// the jail made must lead into a folder named .git; every one is followed,
// so that what the jail made where it leads is checked too.
func (c *Checker) pointer(p, prefix string) {
	b, err := readSmall(p)
	if err != nil {
		return
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	target, ok := strings.CutPrefix(strings.TrimRight(string(line), "\r"), prefix)
	if !ok || target == "" {
		if c.made(p) {
			c.aside(p, "names no git directory: "+quote(string(line)))
		}
		return
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(p), target)
	}
	target = filepath.Clean(target)
	if c.made(p) && !inGitDir(target) {
		c.aside(p, "leads out of git directories, to "+target)
		return
	}
	if st, err := os.Lstat(target); (err == nil && st.IsDir()) || (tooLong(target, err) && there(target)) {
		c.gitDir(target)
	}
}

// tooLong says err is a path's being too long to open (p's, or one in
// the folder p).
func tooLong(p string, err error) bool {
	return errors.Is(err, unix.ENAMETOOLONG) || len(p) >= unix.PathMax
}

// there says whether the entry at p, whose path is too long to look at,
// is there, by its name in its folder when that folder's opens; true when
// it cannot tell.
func there(p string) bool {
	fd, err := unix.Open(filepath.Dir(p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return false
	}
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstatat(fd, filepath.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW) != unix.ENOENT
}

// unread is why a WalkDir callback's folder p could not be looked into,
// nil when it was, or when it is the user's git's to skip too
// (dirscan.Skipped): a folder whose path is too long (met, or failing to
// list), or one that failed to list otherwise.
func unread(p string, d fs.DirEntry, err error) error {
	switch {
	case err == nil:
		if d != nil && d.IsDir() && len(p) >= unix.PathMax {
			return unix.ENAMETOOLONG
		}
		return nil
	case tooLong(p, err):
		return unix.ENAMETOOLONG
	}
	return unlisted(p, err)
}

// unlisted is why the user's git may reach what agent-lock could not list
// at folder p (err listing it), nil if it may not: a folder the user may
// search but not list (git opens names in it), one that failed otherwise
// than by being gone or not the user's (dirscan.Skipped).
func unlisted(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EACCES):
		if !dirscan.Searchable(p) {
			return nil // git cannot look in it either
		}
		return unix.EACCES
	case dirscan.Skipped(err):
		return nil
	}
	return err
}

// skipDir is what a WalkDir callback returns for an entry it records
// as not read: a folder is not read (which would call it again, with the
// error), and a file must not skip the rest of its folder.
func skipDir(d fs.DirEntry, err error) error {
	if err == nil && d != nil && d.IsDir() {
		return fs.SkipDir
	}
	return nil
}

// listed says whether folder p was listed (err: os.ReadDir's), naming it
// when it was not and the user's git may still reach what is in it.
func (c *Checker) listed(p string, err error) bool {
	if err == nil {
		return true
	}
	c.notListed(p, err)
	return false
}

// maxNamed bounds the paths Check names as not checked: an agent could
// make thousands; past it they are counted.
const maxNamed = 16

// unchecked records p as not looked into, for err (unix.ENAMETOOLONG: its
// path is too long to open by name).
func (c *Checker) unchecked(p string, err error) {
	if c.named[p] {
		return // a git directory's walks both meet a deep module's
	}
	c.named[p] = true
	if c.shown >= maxNamed {
		if c.more++; c.more == 1 {
			c.firstMore = p
		}
		return
	}
	c.shown++
	why := "not checked: it could not be read (" + err.Error() + ")"
	switch {
	case errors.Is(err, unix.EACCES):
		why = "not checked: you may not list it, and git opens what is in it by name"
	case errors.Is(err, unix.ENAMETOOLONG) && len(p) >= unix.PathMax:
		why = fmt.Sprintf("not checked: its path is %d bytes, more than the kernel opens by name (%d)", len(p), unix.PathMax-1)
	case errors.Is(err, unix.ENAMETOOLONG):
		why = "not checked: a name in its path is longer than the file system takes"
	}
	c.out = append(c.out, Finding{Path: p, Unchecked: true, Why: why})
}

// gitDir checks a git directory: its configs and links, its hooks, and
// the git directories of its submodules and linked worktrees.
func (c *Checker) gitDir(g string) {
	if c.visited[g] {
		return
	}
	c.visited[g] = true
	if len(g) >= unix.PathMax {
		c.unchecked(g, unix.ENAMETOOLONG) // nothing in it opens by name
		return
	}
	defer func() {
		for p := range c.named {
			if p == g || strings.HasPrefix(p, g+"/") {
				c.asideWhole(g)
				return
			}
		}
	}()
	for _, name := range []string{"config", "config.worktree"} {
		p := filepath.Join(g, name)
		st, err := os.Lstat(p)
		if tooLong(p, err) {
			if there(p) {
				c.unchecked(p, unix.ENAMETOOLONG)
			}
			continue
		}
		if err == nil && c.made(p) {
			if !st.Mode().IsRegular() {
				c.aside(p, "not a file")
				continue
			}
			c.config(p, g)
		}
	}
	if p := filepath.Join(g, "commondir"); c.exists(p) {
		c.pointer(p, "")
	}
	if p := filepath.Join(g, "gitdir"); c.exists(p) && c.made(p) {
		// A linked worktree's way back to its .git file, which git
		// worktree repair rewrites: it must name one.
		if b, err := readSmall(p); err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), "/.git") {
			c.aside(p, "names no .git file")
		}
	}
	// git leaves no symlink in a git directory (git init's test of
	// whether it may make them is removed at once): one the jail made
	// may lead git out of the names the kernel kept (modules/NAME to a
	// folder with hooks of the agent's).
	c.walkDir(g, func(p string, d fs.DirEntry) bool {
		if d.Type()&fs.ModeSymlink != 0 && c.made(p) {
			c.aside(p, "a symlink in a git directory, to "+quote(readlink(p)))
		}
		return true
	})
	if ents, err := c.readDir(filepath.Join(g, "hooks")); c.listed(filepath.Join(g, "hooks"), err) {
		for _, e := range ents {
			p := filepath.Join(g, "hooks", e.Name())
			if !strings.HasSuffix(e.Name(), ".sample") && !movedName.MatchString(e.Name()) && c.made(p) {
				c.aside(p, "a hook git would run")
			}
		}
	}
	if ents, err := c.readDir(filepath.Join(g, "worktrees")); c.listed(filepath.Join(g, "worktrees"), err) {
		for _, e := range ents {
			if e.IsDir() {
				c.gitDir(filepath.Join(g, "worktrees", e.Name()))
			}
		}
	}
	// A submodule's git directory is modules/NAME, and a name may hold
	// slashes: every folder below modules with a HEAD is one.
	mods := filepath.Join(g, "modules")
	if _, err := os.Lstat(mods); err != nil && !tooLong(mods, err) {
		return
	}
	c.walkDir(mods, func(p string, d fs.DirEntry) bool {
		if !d.IsDir() {
			return false
		}
		if c.exists(filepath.Join(p, "HEAD")) {
			c.gitDir(p)
			return false
		}
		return true
	})
}

// inRoots says whether p lies below one of the roots.
func (c *Checker) inRoots(p string) bool {
	return slices.ContainsFunc(c.roots, func(r string) bool { return strings.HasPrefix(p, r+"/") })
}

// walkDir calls visit for each entry below dir, in lexical order, going
// into the folders visit says to (never through a symlink), listing each
// as readDir does; a folder it cannot list is c.notListed.
func (c *Checker) walkDir(dir string, visit func(p string, d fs.DirEntry) bool) {
	if st, err := os.Lstat(dir); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		return // the walk's start too: a symlink the jail made is judged apart
	}
	ents, err := c.readDir(dir)
	if err != nil {
		c.notListed(dir, err)
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if e.IsDir() && len(p) >= unix.PathMax {
			c.notListed(p, unix.ENAMETOOLONG) // nothing in it opens by name
			continue
		}
		if visit(p, e) && e.IsDir() {
			c.walkDir(p, visit)
		}
	}
}

// readDir lists folder p as the user, and, when the user may search it
// but not list it (git opens names in it), with root's listing
// (asuser.OpenListing: names only; the rest is done as the user).
func (c *Checker) readDir(p string) ([]fs.DirEntry, error) {
	ents, err := os.ReadDir(p)
	if !errors.Is(err, unix.EACCES) {
		return ents, err
	}
	l, lerr := asuser.OpenListing(asuser.ID{UID: c.UID, GID: c.GID, Groups: c.Groups}, p)
	if lerr != nil {
		return nil, err
	}
	defer l.Close()
	ents, err = l.ReadDir(-1)
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}

// notListed deals with folder p, which could not be listed (err), where
// the user's git may still reach (unlisted): the agent's is moved aside
// whole (never a root), anything else named.
func (c *Checker) notListed(p string, err error) {
	why := unlisted(p, err)
	if tooLong(p, err) {
		why = unix.ENAMETOOLONG
	}
	switch {
	case why == nil:
	case errors.Is(why, unix.EACCES) && !slices.Contains(c.roots, p) && c.made(p):
		f := Finding{Path: p, Why: "a folder the agent made that you may not list (git opens what is in it by name)"}
		if !c.ReportOnly {
			f.Moved, f.Err = moveAside(p)
		}
		c.out = append(c.out, f)
	default:
		c.unchecked(p, why)
	}
}

// movedName matches the names moveAside gives, which git never reads.
var movedName = regexp.MustCompile(`\.agent-lock(\.[0-9a-f]+)?$`)

// config checks a config the jail made, in git directory g.
func (c *Checker) config(p, g string) {
	entries, err := c.parse(p)
	if err != nil {
		c.aside(p, "git cannot read it ("+err.Error()+")")
		return
	}
	var keep []entry
	var bad []string
	for _, e := range entries {
		if c.inert(e, g) {
			keep = append(keep, e)
		} else if !slices.Contains(bad, e.name()) {
			bad = append(bad, e.name())
		}
	}
	if len(bad) == 0 {
		return
	}
	sort.Strings(bad)
	why := "sets " + strings.Join(bad, ", ")
	if !c.aside(p, why) {
		return
	}
	// git reads the rest as before: the repository's format, its
	// remotes and branches.
	if err := writeConfig(p, keep); err != nil {
		c.out[len(c.out)-1].Err = fmt.Errorf("write %s again without them: %w", p, err)
	}
}

// aside moves p to p + Suffix and records the finding; it says whether p
// is gone from where git reads it.
func (c *Checker) aside(p, why string) bool {
	f := Finding{Path: p, Why: why}
	if !c.ReportOnly {
		f.Moved, f.Err = moveAside(p)
	}
	c.out = append(c.out, f)
	return f.Moved != ""
}

// moveAside renames p to p + Suffix in its folder, by the folder's
// descriptor (p's own path with the suffix may be too long), replacing
// nothing: when the name is taken (the agent can make it), to p +
// Suffix + ".1" to ".9", then a random suffix. It returns where p is now,
// "" on failure.
func moveAside(p string) (string, error) {
	fd, err := unix.Open(filepath.Dir(p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	name := filepath.Base(p) + Suffix
	for i := 0; ; i++ {
		to := name
		switch {
		case i > 0 && i < 10:
			to = fmt.Sprintf("%s.%d", name, i)
		case i >= 10:
			// Past the names anyone looks at first, names no one can
			// make ahead.
			var b [8]byte
			rand.Read(b[:])
			to = fmt.Sprintf("%s.%x", name, b)
		}
		err := unix.Renameat2(fd, filepath.Base(p), fd, to, unix.RENAME_NOREPLACE)
		if err == nil {
			return filepath.Join(filepath.Dir(p), to), nil
		}
		if err != unix.EEXIST || i == 20 {
			return "", &os.LinkError{Op: "rename", Old: p, New: filepath.Join(filepath.Dir(p), to), Err: err}
		}
	}
}

// asideWhole moves aside a git directory the jail made that holds what
// could not be checked (unchecked, since gitDir began): git works in a
// repository whose work tree's path is up to about 4,080 bytes, and opens
// its files by relative paths past PATH_MAX, where agent-lock cannot
// (a config.worktree, a hook). The whole directory goes, by its name in
// its folder (its own path with the suffix may be too long), and the
// findings below it give way to this one.
func (c *Checker) asideWhole(g string) {
	if !c.made(g) {
		return
	}
	c.out = slices.DeleteFunc(c.out, func(f Finding) bool {
		below := f.Unchecked && strings.HasPrefix(f.Path, g+"/")
		if below {
			c.shown--
		}
		return below
	})
	f := Finding{Path: g, Why: "a git directory the agent made, holding what agent-lock could not check"}
	if !c.ReportOnly {
		f.Moved, f.Err = moveAside(g)
	}
	if f.Moved != "" {
		// What was moved aside in it is now below its new name.
		for i := range c.out {
			if m, ok := strings.CutPrefix(c.out[i].Moved, g+"/"); ok {
				c.out[i].Moved = filepath.Join(f.Moved, m)
			}
		}
	}
	c.out = append(c.out, f)
}

// entry is one key of a config, as git lists it.
type entry struct {
	section, sub, key, value string
}

func (e entry) name() string {
	if e.sub != "" {
		return e.section + "." + e.sub + "." + e.key
	}
	return e.section + "." + e.key
}

// parse lists a config's keys with git itself, so that they are read as the
// user's git would: `git config --file P --list --null` (includes are not
// followed; they are keys of their own). Git runs as the user, in no
// repository, with no global or system config of the user's.
func (c *Checker) parse(p string) ([]entry, error) {
	if c.Git == "" {
		return nil, errors.New("no git to read it with")
	}
	cmd := exec.Command(c.Git, "config", "--file", p, "--list", "--null")
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CEILING_DIRECTORIES=/", "LC_ALL=C"}
	if uint32(os.Geteuid()) != c.UID {
		cmd.SysProcAttr = credential(c.UID, c.GID)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var entries []entry
	for _, rec := range strings.Split(string(out), "\x00") {
		if rec == "" {
			continue
		}
		k, v, _ := strings.Cut(rec, "\n")
		first, last := strings.Index(k, "."), strings.LastIndex(k, ".")
		if first < 0 {
			return nil, fmt.Errorf("key %q", k)
		}
		e := entry{section: k[:first], key: k[last+1:], value: v}
		if first != last {
			e.sub = k[first+1 : last]
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// writeConfig writes entries as a new config at p, which must not exist.
func writeConfig(p string, entries []entry) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|pathNoFollow, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	last := ""
	for _, e := range entries {
		head := "[" + e.section + "]"
		if e.sub != "" {
			head = "[" + e.section + " " + quote(e.sub) + "]"
		}
		if head != last {
			fmt.Fprintln(w, head)
			last = head
		}
		fmt.Fprintf(w, "\t%s = %s\n", e.key, quote(e.value))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// quote is a value or subsection as git's config syntax quotes it.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`, "\b", `\b`)
	return `"` + r.Replace(s) + `"`
}

// inGitDir says whether p lies at or below a folder named .git.
func inGitDir(p string) bool {
	return strings.HasSuffix(p, "/.git") || strings.Contains(p, "/.git/")
}

func readlink(p string) string {
	t, _ := os.Readlink(p)
	return t
}

// exists is exists, naming p when it is there but its path is too long
// to open.
func (c *Checker) exists(p string) bool {
	_, err := os.Lstat(p)
	if tooLong(p, err) && there(p) {
		c.unchecked(p, unix.ENAMETOOLONG)
	}
	return err == nil
}

// readSmall reads a pointer file (a few hundred bytes at most; more is not
// a pointer git would follow).
func readSmall(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|pathNoFollow, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return nil, err
	}
	return b[:n], nil
}
