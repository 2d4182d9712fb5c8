package tripwire

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

// What the tripwire keeps of the entries' contents: enough for config
// files, hooks and editor settings many times over. A larger file is
// recorded by its hash: a change to it is reported, not undone (Arm warns).
const (
	maxFile  = 8 << 20
	maxKept  = 64 << 20
	maxDepth = 64 // folders below an entry that the tripwire records
)

type kind byte

const (
	absent kind = iota
	file
	dir
	symlink
	other // a FIFO, socket or device
)

// node is one recorded name: what it was, and for a protected tree, what
// was in it.
type node struct {
	kind     kind
	mode     uint32 // permission bits with setuid, setgid, sticky
	uid, gid uint32
	dev, ino uint64
	size     int64
	ctime    unix.Timespec
	sum      [sha256.Size]byte
	data     []byte // the content, when kept
	kept     bool
	why      string // why the content is not kept
	target   string // a symlink's
	kids     map[string]*node
	unread   bool // a folder that could not be listed: its contents are not recorded
}

// watched is an armed entry.
type watched struct {
	Entry
	root  int // the root, O_PATH, opened once at Arm
	parts []string
	// anc are the folders on the way (parts but the last), as they were;
	// top is the entry itself.
	anc []*node
	top *node
	// dirs are the watched folders' handles and what names there concern
	// this entry ("" for every name: a folder of the protected tree).
	dirs map[string]string
}

func kindOf(st *unix.Stat_t) kind {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return file
	case unix.S_IFDIR:
		return dir
	case unix.S_IFLNK:
		return symlink
	}
	return other
}

// lstatAt is the name in dirfd, not followed; nil if absent.
func lstatAt(dirfd int, name string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &st, nil
}

func found(st *unix.Stat_t) kind {
	if st == nil {
		return absent
	}
	return kindOf(st)
}

func statNode(st *unix.Stat_t) *node {
	if st == nil {
		return &node{kind: absent}
	}
	return &node{kind: kindOf(st), mode: st.Mode & 0o7777, uid: st.Uid, gid: st.Gid,
		dev: st.Dev, ino: st.Ino, size: st.Size, ctime: st.Ctim}
}

// record records the entry and the folders on its way; budget is what
// contents may still be kept, in bytes.
func (e *watched) record(budget *int64) error {
	e.anc = make([]*node, len(e.parts)-1)
	cur := e.root
	var opened []int
	defer func() {
		for _, fd := range opened {
			unix.Close(fd)
		}
	}()
	for i, name := range e.parts[:len(e.parts)-1] {
		st, err := lstatAt(cur, name)
		if err != nil {
			return err
		}
		n := statNode(st)
		if n.kind == symlink {
			if n.target, err = readlinkAt(cur, name); err != nil {
				return err
			}
		}
		e.anc[i] = n
		if n.kind != dir {
			// Nothing lies below: the rest of the way, and the entry,
			// are absent (below a symlink: not this entry's).
			for j := i + 1; j < len(e.anc); j++ {
				e.anc[j] = &node{kind: absent}
			}
			e.top = &node{kind: absent}
			return nil
		}
		fd, err := unix.Openat(cur, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		opened = append(opened, fd)
		cur = fd
	}
	top, err := recordNode(cur, e.parts[len(e.parts)-1], e.DirOnly, 0, budget)
	if err != nil {
		return err
	}
	e.top = top
	return nil
}

// deep says whether the entry's contents are its own: all but a DirOnly
// name that is (or, absent, would be) a folder. n is the top as found, or
// nil for as recorded.
func (e *watched) deep(n *node) bool {
	if !e.DirOnly {
		return true
	}
	if n == nil {
		n = e.top
	}
	// A DirOnly name that is a file (a linked worktree's .git) is kept
	// as it is, like any protected file.
	return n != nil && n.kind != dir && n.kind != absent
}

// recordNode records name in dirfd and, unless nameOnly, what a folder
// holds.
func recordNode(dirfd int, name string, nameOnly bool, depth int, budget *int64) (*node, error) {
	st, err := lstatAt(dirfd, name)
	if err != nil {
		return nil, err
	}
	n := statNode(st)
	switch n.kind {
	case file:
		n.sum, n.data, n.why = readFile(dirfd, name, min(maxFile, *budget))
		n.kept = n.why == ""
		*budget -= int64(len(n.data))
	case symlink:
		if n.target, err = readlinkAt(dirfd, name); err != nil {
			return nil, err
		}
	case dir:
		if nameOnly {
			return n, nil
		}
		if depth >= maxDepth {
			return nil, fmt.Errorf("%s: more than %d folders deep", name, maxDepth)
		}
		names, err := listAt(dirfd, name)
		if errors.Is(err, asuser.ErrNoListing) {
			// The agent may make names in it (a hook git runs), and
			// nobody here may list it to keep them.
			return nil, fmt.Errorf("%s: you may search it but not list it, and only root could (through the daemon or sudo); make it readable (chmod u+r)", name)
		}
		if err != nil {
			// The user may not search it: neither may the agent, which
			// may still replace it as a whole. Its existence and mode
			// are what the tripwire keeps.
			n.unread = true
			return n, nil
		}
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		defer unix.Close(fd)
		n.kids = map[string]*node{}
		for _, k := range names {
			if n.kids[k], err = recordNode(fd, k, false, depth+1, budget); err != nil {
				return nil, err
			}
		}
	}
	return n, nil
}

// readFile hashes a regular file and returns its content if it is at
// most limit bytes; why says why not.
func readFile(dirfd int, name string, limit int64) (sum [sha256.Size]byte, data []byte, why string) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return sum, nil, "unreadable: " + err.Error()
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return sum, nil, "not a regular file"
	}
	h := sha256.New()
	if fi.Size() > limit {
		if _, err := io.Copy(h, f); err != nil {
			return sum, nil, "unreadable: " + err.Error()
		}
		copy(sum[:], h.Sum(nil))
		return sum, nil, fmt.Sprintf("%d bytes: agent-lock keeps copies of %d MiB of protected files, %d MiB each at most", fi.Size(), maxKept>>20, maxFile>>20)
	}
	data, err = io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return sum, nil, "unreadable: " + err.Error()
	}
	if int64(len(data)) > limit {
		return sha256.Sum256(data), nil, "grew past the size agent-lock keeps a copy of"
	}
	return sha256.Sum256(data), data, ""
}

// hashAt hashes a regular file's content.
func hashAt(dirfd int, name string) (sum [sha256.Size]byte, err error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return sum, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// listAt lists a folder's names, not following name if it is a symlink.
func listAt(dirfd int, name string) ([]string, error) {
	var f *os.File
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
		f = os.NewFile(uintptr(fd), name)
	case err == unix.EACCES:
		// A folder the user may search but not list: the agent may
		// still make names in it (a hook), and git opens them. Root's
		// listing, names only; the rest is recorded as the user.
		if f, err = asuser.ListingAt(dirfd, name); err != nil {
			if errors.Is(err, asuser.ErrNoListing) {
				return nil, err
			}
			return nil, unix.EACCES
		}
	default:
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// warnHashed warns of the entry's files recorded by hash only.
func (e *watched) warnHashed(warn func(string, ...any)) {
	var hashed []string
	var walk func(n *node, path string)
	walk = func(n *node, path string) {
		if n == nil {
			return
		}
		if n.kind == file && !n.kept {
			hashed = append(hashed, path+" ("+n.why+")")
		}
		for _, k := range sortedKids(n) {
			walk(n.kids[k], path+"/"+k)
		}
	}
	walk(e.top, e.Path)
	if len(hashed) > 0 {
		more := ""
		if len(hashed) > 3 {
			more = fmt.Sprintf(" and %d more", len(hashed)-3)
			hashed = hashed[:3]
		}
		warn("the tripwire keeps no copy of %s%s: a change to them is reported, not undone", strings.Join(hashed, ", "), more)
	}
}

func sortedKids(n *node) []string {
	var ks []string
	for k := range n.kids {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// fix compares the entry with its record and, with apply, puts back what
// differs; it returns what differed and what was done. Without apply it
// only describes (for the user's own changes, recorded anew).
func (e *watched) fix(hints map[string]uint64, apply bool) []Change {
	var out []Change
	cur := e.root
	var opened []int
	defer func() {
		for _, fd := range opened {
			unix.Close(fd)
		}
	}()
	prefix := e.Root
	for i, name := range e.parts[:len(e.parts)-1] {
		rec, path := e.anc[i], prefix+"/"+name
		st, err := lstatAt(cur, name)
		if err != nil {
			return append(out, Change{Op: "write", Path: path, Err: err})
		}
		f := found(st)
		switch rec.kind {
		case dir:
			if f != dir {
				c := Change{Op: op(f, st, rec, hints[name]), Path: path}
				if apply {
					c.Err = replaceDir(cur, name, f, rec.mode)
					c.Undone, c.Action = c.Err == nil, "put back, a folder again"
				}
				out = append(out, c)
				if c.Err != nil || !apply {
					return out
				}
			}
		case symlink:
			if f != symlink || readlinkOr(cur, name) != rec.target {
				c := Change{Op: op(f, st, rec, hints[name]), Path: path}
				if apply {
					c.Err = putSymlink(cur, name, rec.target, f == dir)
					c.Undone, c.Action = c.Err == nil, "put back, the symlink it was"
				}
				out = append(out, c)
			}
			return out // what lies beyond a symlink is not this entry's
		default:
			switch f {
			case symlink:
				// A symlink on the way leads the entry's name elsewhere.
				c := Change{Op: "symlink", Path: path}
				if apply {
					c.Err = removeAt(cur, name, 0)
					c.Undone, c.Action = c.Err == nil, "removed"
				}
				return append(out, c)
			case dir:
				// Made during the session: the entry below must still be
				// as it was (absent).
			default:
				return out // nothing can lie below
			}
		}
		fd, err := unix.Openat(cur, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			// Changed again meanwhile: the next event, or Check, sees it.
			return append(out, Change{Op: "rename", Path: path, Err: fmt.Errorf("changed again while being put back: %w", err)})
		}
		opened = append(opened, fd)
		cur, prefix = fd, path
	}
	last := e.parts[len(e.parts)-1]
	return append(out, e.fixNode(cur, last, prefix+"/"+last, e.top, hints, apply, true)...)
}

func readlinkOr(dirfd int, name string) string {
	t, _ := readlinkAt(dirfd, name)
	return t
}

// fixNode is fix for one recorded name and, deep, what it holds; report
// false keeps quiet about what a folder that was itself put back holds.
func (e *watched) fixNode(dirfd int, name, path string, rec *node, hints map[string]uint64, apply, report bool) []Change {
	st, err := lstatAt(dirfd, name)
	if err != nil {
		return []Change{{Op: "write", Path: path, Err: err}}
	}
	f := found(st)
	var out []Change
	add := func(c Change) {
		if report {
			out = append(out, c)
		}
	}
	deep := rec != e.top || e.deep(nil)
	switch {
	case !deep:
		// A DirOnly name: a folder, or (if it was absent) nothing.
		if f == dir || (f == absent && rec.kind == absent) {
			return nil
		}
		c := Change{Op: op(f, st, rec, hints[name]), Path: path}
		if apply {
			if rec.kind == dir {
				c.Err = replaceDir(dirfd, name, f, rec.mode)
				c.Action = "put back, a folder again"
			} else {
				c.Err = removeAt(dirfd, name, 0)
				c.Action = "removed"
			}
			c.Undone = c.Err == nil
		}
		add(c)
		return out
	case rec.kind == absent:
		if f == absent {
			return nil
		}
		c := Change{Op: op(f, st, rec, hints[name]), Path: path}
		if apply {
			c.Err = removeAt(dirfd, name, 0)
			c.Undone, c.Action = c.Err == nil, "removed"
		}
		add(c)
		return out
	case rec.kind == file:
		if f == file && same(st, rec) {
			return nil
		}
		if f == file {
			// The same content rewritten (git rewrites its config whole
			// for a setting it already has) is as it was, unless the
			// new inode has another name too (a hard link the agent
			// could write through later): then it is replaced.
			sum, err := hashAt(dirfd, name)
			if err == nil && sum == rec.sum && (st.Ino == rec.ino || st.Nlink == 1) {
				return append(out, e.fixMeta(dirfd, name, path, st, rec, apply, report)...)
			}
		}
		c := Change{Op: op(f, st, rec, hints[name]), Path: path}
		if apply {
			if !rec.kept {
				c.Err = fmt.Errorf("no copy was kept (%s)", rec.why)
			} else {
				c.Err = putFile(dirfd, name, rec, f == dir)
				c.Undone, c.Action = c.Err == nil, "put back as it was"
			}
			if c.Err == nil {
				refresh(dirfd, name, rec)
			}
		}
		add(c)
		return out
	case rec.kind == symlink:
		if f == symlink && readlinkOr(dirfd, name) == rec.target {
			return nil
		}
		c := Change{Op: op(f, st, rec, hints[name]), Path: path}
		if apply {
			c.Err = putSymlink(dirfd, name, rec.target, f == dir)
			c.Undone, c.Action = c.Err == nil, "put back, the symlink it was"
		}
		add(c)
		return out
	case rec.kind == dir:
		quiet := !report
		if f != dir {
			c := Change{Op: op(f, st, rec, hints[name]), Path: path}
			if apply {
				c.Err = replaceDir(dirfd, name, f, rec.mode)
				c.Undone, c.Action = c.Err == nil, "put back with what it held"
			}
			add(c)
			if c.Err != nil || !apply {
				return out
			}
			quiet = true // its contents come back with it
		} else if st.Mode&0o7777 != rec.mode || st.Gid != rec.gid {
			out = append(out, e.fixMeta(dirfd, name, path, st, rec, apply, !quiet)...)
		}
		if rec.unread {
			return out
		}
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return append(out, Change{Op: "rename", Path: path, Err: fmt.Errorf("changed again while being put back: %w", err)})
		}
		defer unix.Close(fd)
		names, err := listAt(fd, ".")
		if err != nil {
			return append(out, Change{Op: "chmod", Path: path, Err: fmt.Errorf("cannot list it: %w", err)})
		}
		for _, k := range names {
			if _, ok := rec.kids[k]; !ok {
				out = append(out, e.fixNode(fd, k, path+"/"+k, &node{kind: absent}, hints, apply, !quiet)...)
			}
		}
		for _, k := range sortedKids(rec) {
			out = append(out, e.fixNode(fd, k, path+"/"+k, rec.kids[k], hints, apply, !quiet)...)
		}
		if apply {
			refresh(dirfd, name, rec)
		}
		return out
	default:
		if f == rec.kind && st.Ino == rec.ino {
			return nil
		}
		c := Change{Op: op(f, st, rec, hints[name]), Path: path}
		if apply {
			c.Err = errors.New("a FIFO, socket or device cannot be put back")
		}
		add(c)
		return out
	}
}

// fixMeta puts back a file's or folder's mode and group.
func (e *watched) fixMeta(dirfd int, name, path string, st *unix.Stat_t, rec *node, apply, report bool) []Change {
	if st.Mode&0o7777 == rec.mode && st.Gid == rec.gid {
		refresh(dirfd, name, rec)
		return nil
	}
	op := "chmod"
	if st.Mode&0o7777 == rec.mode {
		op = "chown"
	}
	c := Change{Op: op, Path: path}
	if apply {
		c.Err = setMeta(dirfd, name, rec.mode, rec.gid)
		c.Undone, c.Action = c.Err == nil, "mode put back"
		if c.Err == nil {
			refresh(dirfd, name, rec)
		}
	}
	if !report {
		return nil
	}
	return []Change{c}
}

// same says whether a file is as recorded without reading it: the same
// inode, size and mode, its ctime (any write, chmod or link moves it)
// unchanged.
func same(st *unix.Stat_t, rec *node) bool {
	return st.Ino == rec.ino && st.Dev == rec.dev && st.Size == rec.size && st.Ctim == rec.ctime &&
		st.Mode&0o7777 == rec.mode && st.Gid == rec.gid
}

// refresh takes a name's new identity into its record once it is as
// recorded again (a file put back is a new inode).
func refresh(dirfd int, name string, rec *node) {
	st, err := lstatAt(dirfd, name)
	if err != nil || st == nil {
		return
	}
	rec.dev, rec.ino, rec.size, rec.ctime = st.Dev, st.Ino, st.Size, st.Ctim
}

// op names what was done to a name, from what is there now against the
// record, and the kernel's events for that name.
func op(f kind, st *unix.Stat_t, rec *node, hint uint64) string {
	moved := hint&(unix.FAN_MOVED_TO|unix.FAN_MOVED_FROM) != 0
	switch {
	case f == absent && moved:
		return "rename"
	case f == absent && rec.kind == dir:
		return "rmdir"
	case f == absent:
		return "unlink"
	case moved:
		return "rename"
	case f == rec.kind && f == file && st.Ino == rec.ino:
		return "write"
	case f == rec.kind && f == file:
		return "rename" // another inode under the name: replaced
	case f == dir:
		return "mkdir"
	case f == symlink:
		return "symlink"
	case f == file && st.Nlink > 1:
		return "link"
	case f == other:
		return "mknod"
	}
	return "create"
}

// Restoring, as the user, relative to descriptors, never following a
// symlink: every name is opened or changed with *at calls in a folder
// reached without following one.

func tmpName(name string) string {
	var b [6]byte
	rand.Read(b[:])
	n := name
	if len(n) > 100 {
		n = n[:100]
	}
	return "." + n + ".agent-lock-" + hex.EncodeToString(b[:])
}

// putFile puts a file's recorded content and mode back under name: a new
// file beside it, renamed over whatever is there (a folder is removed
// first), so nothing is written through a link.
func putFile(dirfd int, name string, rec *node, isDir bool) error {
	tmp := tmpName(name)
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.Write(rec.data)
	if werr == nil {
		werr = unix.Fchmod(fd, rec.mode)
	}
	if werr == nil {
		unix.Fchown(fd, -1, int(rec.gid)) // the user's own groups only; else the user's group stays
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr == nil && isDir {
		werr = removeAt(dirfd, name, 0)
	}
	if werr == nil {
		werr = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if werr != nil {
		unix.Unlinkat(dirfd, tmp, 0)
	}
	return werr
}

func putSymlink(dirfd int, name, target string, isDir bool) error {
	tmp := tmpName(name)
	if err := unix.Symlinkat(target, dirfd, tmp); err != nil {
		return err
	}
	var err error
	if isDir {
		err = removeAt(dirfd, name, 0)
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
	}
	return err
}

// replaceDir makes name an (empty) folder of mode again, removing what is
// there first.
func replaceDir(dirfd int, name string, f kind, mode uint32) error {
	if f != absent {
		if err := removeAt(dirfd, name, 0); err != nil {
			return err
		}
	}
	if err := unix.Mkdirat(dirfd, name, 0o700); err != nil {
		return err
	}
	return setMeta(dirfd, name, mode, ^uint32(0))
}

// setMeta sets name's mode (and group, unless ^0) through a descriptor of
// the name itself: chmod by path would follow a symlink swapped in.
func setMeta(dirfd int, name string, mode, gid uint32) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if kindOf(&st) == symlink {
		return errors.New("a symlink took its place")
	}
	proc := "/proc/self/fd/" + strconv.Itoa(fd)
	if gid != ^uint32(0) && st.Gid != gid {
		unix.Fchownat(unix.AT_FDCWD, proc, -1, int(gid), 0)
	}
	return unix.Chmod(proc, mode)
}

// removeAt removes name from dirfd and, for a folder, what it holds; where
// that fails (a tree too deep, a folder the user cannot empty) it moves
// the name aside in the same folder, so the protected name is free.
func removeAt(dirfd int, name string, depth int) error {
	err := remove(dirfd, name, depth)
	if err == nil || depth > 0 {
		return err
	}
	aside := tmpName(name) + "-removed"
	if rerr := unix.Renameat(dirfd, name, dirfd, aside); rerr != nil {
		return fmt.Errorf("%v; moving it aside: %v", err, rerr)
	}
	return nil
}

func remove(dirfd int, name string, depth int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	if depth >= 2*maxDepth {
		return errors.New("too deep to remove")
	}
	names, lerr := listAt(dirfd, name)
	if lerr != nil {
		// Not listable: the user's folder, so its mode may be made so.
		if setMeta(dirfd, name, 0o700, ^uint32(0)) != nil {
			return lerr
		}
		if names, lerr = listAt(dirfd, name); lerr != nil {
			return lerr
		}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	for _, k := range names {
		if err := remove(fd, k, depth+1); err != nil {
			unix.Close(fd)
			return err
		}
	}
	unix.Close(fd)
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// rerecord takes the entry as it is now for its record (the user's own
// change), and says what differed.
func (e *watched) rerecord() []Change {
	out := e.fix(nil, false)
	budget := int64(maxKept) // a user's own change: kept whole, as far as one file may be
	if err := e.record(&budget); err != nil {
		for i := range out {
			out[i].Err = err
		}
	}
	for i := range out {
		out[i].Action = "recorded as it is now"
	}
	return out
}

// concerns says whether a kernel event may have changed the entry: it
// names a folder of the entry's tree, or the next name on the way.
func (e *watched) concerns(ev event) (known, hit bool) {
	next, ok := e.dirs[ev.dir]
	switch {
	case !ok:
		return false, false
	case next == "":
		return true, true
	case ev.mask&maskWay == 0:
		// A folder on the way reports names made, removed and moved
		// only: this came from the mark on a protected file, written
		// through another name.
		return false, false
	}
	return true, ev.name == next || ev.name == "." || ev.name == ""
}

// mark watches the folders on the way as they are now, the entry's tree
// and its files, and learns the folders' handles.
func (e *watched) mark(f notifier) error {
	if e.dirs == nil {
		e.dirs = map[string]string{}
	}
	// Marked again each time (adding a mark is idempotent): an inode
	// number says nothing of a new inode that reuses it.
	markDir := func(fd int, next string) error {
		k, err := f.markDir(fd, next == "")
		if err != nil {
			return err
		}
		if old, ok := e.dirs[k]; !ok || old != "" {
			e.dirs[k] = next
		}
		return nil
	}
	cur := e.root
	var opened []int
	defer func() {
		for _, fd := range opened {
			unix.Close(fd)
		}
	}()
	for i, name := range e.parts {
		if err := markDir(cur, name); err != nil {
			return err
		}
		if i == len(e.parts)-1 {
			break
		}
		fd, err := unix.Openat(cur, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil // not a folder (now): nothing below to watch
		}
		opened = append(opened, fd)
		cur = fd
	}
	if !e.deep(nil) {
		return nil
	}
	var tree func(dirfd int, name string, depth int) error
	tree = func(dirfd int, name string, depth int) error {
		st, err := lstatAt(dirfd, name)
		if err != nil || st == nil || depth > maxDepth {
			return err
		}
		switch kindOf(st) {
		case file:
			if err := f.markFile(dirfd, name); err != nil {
				return err
			}
		case dir:
			fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil
			}
			defer unix.Close(fd)
			if err := markDir(fd, ""); err != nil {
				return err
			}
			names, err := listAt(fd, ".")
			if err != nil {
				return nil
			}
			for _, k := range names {
				if err := tree(fd, k, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return tree(cur, e.parts[len(e.parts)-1], 0)
}
