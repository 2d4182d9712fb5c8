// Package dirscan finds entries by name in a user's tree, reading its
// folders on several threads at once, each acting as the user. The
// Landlock engine's tripwire looks for git's files at every depth of the
// project before the agent starts, and the end of a session looks again:
// in a tree of tens of thousands of folders (a monorepo, node_modules)
// one thread reading them in turn was most of a start, and the folders'
// reads are independent. A Memory (memory.go) lets the next scan of the
// same tree take the folders unchanged since from the last one's.
package dirscan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

// Hit is an entry found.
type Hit struct {
	Path string
	// Dir says it is a folder (symlinks are never followed: a link to
	// one is not).
	Dir bool
	// Regular says it is a regular file.
	Regular bool
	// Unread, when set, says Path could not be looked into, and why: a
	// folder whose path is too long for the kernel to take by name
	// (unix.ENAMETOOLONG; so is an entry of the name whose own path is);
	// one the user may search but not list, in a process that is not
	// root (unix.EACCES; root lists it: asuser.OpenListing); or one that
	// failed to open or to list otherwise than by being gone or not the
	// user's to search (a dead network mount: EIO, ENOTCONN). Callers name
	// it, never leave it out as they leave out what the user may not
	// search: git cannot work past PATH_MAX, but would once the tree is
	// moved higher; it opens names in a folder it may search; a mount may
	// come back. The root itself may be one.
	Unread error
}

// errThreads is Named's error when it cannot have threads of its own act
// as the user; nothing was read.
var errThreads = errors.New("no thread of its own could act as the user")

// hit is the entry of the name at p.
func hit(p string, dir, regular bool) Hit {
	h := Hit{Path: p, Dir: dir, Regular: regular}
	if len(p) >= unix.PathMax {
		h.Unread = unix.ENAMETOOLONG
	}
	return h
}

// maxThreads bounds the threads of one scan: past a few, the folders'
// reads wait on the same locks.
const maxThreads = 8

// Named returns every entry called name below root, in the order of their
// paths, without going into the entries found, nor into the folders skip
// names (by path), nor through symlinks. It reads as id (asuser): what the
// user may not search is left out, as the user's own git cannot look
// there either, and so is what is gone or replaced as it is read. A folder
// the user may search but not list, where git still opens names, is
// listed with root's listing (asuser.OpenListing) in a process that is
// root, and is a Hit (Unread) otherwise, with its entry of the name. A
// folder that cannot be looked into for another reason is a Hit
// (Unread; root itself may be one), but one that fails for want of
// descriptors or memory, this process's own lack, fails the scan.
func Named(id asuser.ID, root, name string, skip []string) ([]Hit, error) {
	return named(id, root, name, skip, nil)
}

// named is Named, with the folders mem remembers taken from it (nil: none).
func named(id asuser.ID, root, name string, skip []string, mem *Memory) ([]Hit, error) {
	s := &scan{id: id, name: name, skip: skip, stack: []task{{path: root}}, pending: 1, mem: mem, fs: map[uint64]bool{}, settled: time.Now().Add(-Settle).UnixNano()}
	s.cond = sync.NewCond(&s.mu)
	n := min(runtime.GOMAXPROCS(0), maxThreads)
	errs := make(chan error, n)
	for range n {
		go func() {
			t, err := asuser.NewThread(id)
			if err != nil {
				s.abort()
				errs <- fmt.Errorf("%w: %w", errThreads, err)
				return
			}
			defer t.Close()
			errs <- t.Do(func() error { s.work(); return nil })
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		first = s.err
	}
	if first != nil {
		return nil, first
	}
	slices.SortFunc(s.hits, func(a, b Hit) int { return compare(a.Path, b.Path) })
	return s.hits, nil
}

// compare orders paths as a walk in lexical order meets them: a folder's
// entries right after it ("a/b" before "a-b").
func compare(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		switch {
		case a[i] == '/':
			return -1
		case b[i] == '/':
			return 1
		case a[i] < b[i]:
			return -1
		default:
			return 1
		}
	}
	return len(a) - len(b)
}

// task is a folder to read; known says the folder at its path is the
// one the memory names there (its parent was taken from the memory: its
// entries, and so the folders their names lead to, are those the memory
// holds), which it must be to be taken unlooked (Memory.unlooked).
type task struct {
	path  string
	known bool
}

// scan is the shared state of one Named: the folders still to read
// (stack), how many are queued or being read (pending: the scan is over
// at zero), and what was found.
type scan struct {
	id   asuser.ID
	name string
	skip []string

	mu      sync.Mutex
	cond    *sync.Cond
	stack   []task
	pending int
	stopped bool
	hits    []Hit
	err     error // the first folder that failed to open (abort)

	// mem, when set, has the last scan's folders and takes this one's
	// (mem.fresh, under mu); settled: the ctime (ns) before which a folder
	// read now is remembered.
	mem     *Memory
	settled int64
	fs      map[uint64]bool // by device: remembers' answers
}

func (s *scan) abort() {
	s.fail(nil)
}

// fail stops the scan, for err when it is not nil.
func (s *scan) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.stopped = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

// work reads folders until none is left, a few at a time (half the
// stack, at most maxBatch): a folder taken from a memory costs one statx,
// less than taking the lock for it.
func (s *scan) work() {
	type result struct {
		dir string
		f   *folder
	}
	var batch []task
	var found []result
	for {
		s.mu.Lock()
		for len(s.stack) == 0 && s.pending > 0 && !s.stopped {
			s.cond.Wait()
		}
		if s.pending == 0 || s.stopped {
			s.mu.Unlock()
			return
		}
		n := min((len(s.stack)+1)/2, maxBatch)
		batch = append(batch[:0], s.stack[len(s.stack)-n:]...)
		s.stack = s.stack[:len(s.stack)-n]
		s.mu.Unlock()

		var subdirs []task
		var hits []Hit
		found = found[:0]
		for _, t := range batch {
			sub, h, f := s.read(t)
			subdirs = append(subdirs, sub...)
			hits = append(hits, h...)
			if f != nil {
				found = append(found, result{t.path, f})
			}
		}

		s.mu.Lock()
		for _, r := range found {
			s.mem.remember(r.dir, r.f)
		}
		s.hits = append(s.hits, hits...)
		s.stack = append(s.stack, subdirs...)
		s.pending += len(subdirs) - len(batch)
		if len(subdirs) > 0 || s.pending == 0 {
			s.cond.Broadcast()
		}
		s.mu.Unlock()
	}
}

// unlisted is what a folder the user may not list holds for the walk:
// nothing when the user may not search it either (git cannot look in it
// either); when the user may, its entry of the name, which git opens by
// name, and the folder itself (Unread): git reaches a repository below it
// by its path, which the walk cannot list.
func (s *scan) unlisted(dir string) []Hit {
	var st unix.Stat_t
	err := unix.Fstatat(unix.AT_FDCWD, filepath.Join(dir, s.name), &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.EACCES || err == unix.EPERM {
		return nil
	}
	hits := []Hit{{Path: dir, Unread: unix.EACCES}}
	if err == nil {
		mode := st.Mode & unix.S_IFMT
		hits = append(hits, hit(filepath.Join(dir, s.name), mode == unix.S_IFDIR, mode == unix.S_IFREG))
	}
	return hits
}

// Searchable says whether the user (this thread's) may search folder p:
// git opens names in one the user may search, listed or not.
func Searchable(p string) bool {
	var st unix.Stat_t
	return unix.Fstatat(unix.AT_FDCWD, p+"/.", &st, unix.AT_SYMLINK_NOFOLLOW) != unix.EACCES
}

// Skipped says err is a folder's not being the user's to read, or its
// being gone or replaced by a file or a symlink since its folder was read:
// the user's git leaves it out too.
func Skipped(err error) bool {
	for _, e := range []unix.Errno{unix.EACCES, unix.EPERM, unix.ENOENT, unix.ENOTDIR, unix.ELOOP, unix.ESTALE} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// openDir opens a folder to list, again when a signal interrupted it
// (FUSE and CIFS mounts return EINTR; os.Open retries it too).
func openDir(dir string) (int, error) {
	for {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// errnoOf is the system's error inside err, or err.
func errnoOf(err error) error {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return err
}

// join is filepath.Join for a clean folder and a name, without Join's
// cleaning: the taking of a remembered folder's folders is most of a
// scan that reads none.
func join(dir, name string) string {
	if strings.HasSuffix(dir, "/") {
		return dir + name
	}
	return dir + "/" + name
}

// maxBatch bounds the folders one thread takes at once.
const maxBatch = 32

// read lists dir: its folders to read next and its entries named s.name,
// and, with a memory, the folder to remember (nil: none).
func (s *scan) read(t task) (subdirs []task, hits []Hit, f *folder) {
	dir := t.path
	if s.mem != nil {
		s.mem.visited.Add(1)
		if f := s.recall(t); f != nil {
			for _, n := range f.subdirs {
				subdirs = append(subdirs, task{path: join(dir, n), known: true})
			}
			if f.hit != hitNone {
				hits = append(hits, hit(filepath.Join(dir, s.name), f.hit == hitDir, f.hit == hitRegular))
			}
			return subdirs, hits, f
		}
	}
	var d *os.File
	byRoot := false // listed with root's listing
	fd, err := openDir(dir)
	switch {
	case err == nil:
		d = os.NewFile(uintptr(fd), dir)
	case err == unix.EACCES:
		// Git opens names in a folder the user may search: root lists
		// it, and what is in it is read as the user (asuser).
		l, lerr := asuser.OpenListing(s.id, dir)
		switch {
		case lerr == nil:
			d, byRoot = l, true
		case errors.Is(lerr, unix.EMFILE) || errors.Is(lerr, unix.ENFILE) || errors.Is(lerr, unix.ENOMEM):
			s.fail(&os.PathError{Op: "open", Path: dir, Err: lerr})
			return nil, nil, nil
		case Skipped(lerr) && !errors.Is(lerr, unix.EACCES):
			return nil, nil, nil // gone or replaced since its folder was read
		default:
			// Without root, or root refused (a container's root): named,
			// unless the user may not search it either.
			return nil, s.unlisted(dir), nil
		}
	case Skipped(err):
		return nil, nil, nil
	case err == unix.EMFILE || err == unix.ENFILE || err == unix.ENOMEM:
		s.fail(&os.PathError{Op: "open", Path: dir, Err: err})
		return nil, nil, nil
	default:
		return nil, []Hit{{Path: dir, Unread: err}}, nil
	}
	defer d.Close()
	// The folder's ctime before its entries are read: any change after
	// it moves it (memory.go).
	var st unix.Statx_t
	if s.mem != nil && unix.Statx(int(d.Fd()), "", unix.AT_EMPTY_PATH, statxMask, &st) == nil &&
		identified(&st) && ctimeOf(&st) < s.settled && s.remembers(devOf(&st), dir) {
		f = folderOf(&st)
		s.mem.follow(f, int(d.Fd()))
	}
	ents, err := d.ReadDir(-1)
	if err != nil {
		// Listed in part: what was read is used, the folder is named,
		// and not remembered.
		f = nil
		hits = append(hits, Hit{Path: dir, Unread: errnoOf(err)})
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.Name() == s.name:
			if byRoot && e.IsDir() && !Searchable(p) {
				f = nil  // the next scan must look again: its mode may change
				continue // another's, closed to the user: git cannot use it either
			}
			h := hit(p, e.IsDir(), e.Type().IsRegular())
			hits = append(hits, h)
			if f != nil {
				f.hit = hitOf(h)
			}
		case e.IsDir() && !slices.Contains(s.skip, p):
			subdirs = append(subdirs, task{path: p})
			if f != nil {
				f.subdirs = append(f.subdirs, e.Name())
			}
		}
	}
	return subdirs, hits, f
}
