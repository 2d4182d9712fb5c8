// Package dirscan finds entries by name in a user's tree, reading its
// folders on several threads at once, each acting as the user. The
// Landlock engine's tripwire looks for git's files at every depth of the
// project before the agent starts, and the end of a session looks again:
// in a tree of tens of thousands of folders (a monorepo, node_modules)
// one thread reading them in turn was most of a start, and the folders'
// reads are independent.
package dirscan

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

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
}

// maxThreads bounds the threads of one scan: past a few, the folders'
// reads wait on the same locks.
const maxThreads = 8

// Named returns every entry called name below root (root itself is never
// one), in the order of their paths, without going into the entries
// found, nor into the folders skip names (by path), nor through symlinks.
// It reads as id (asuser): what the user cannot read is left out, as the
// user's own git would find it. Folders it cannot read are skipped.
func Named(id asuser.ID, root, name string, skip []string) ([]Hit, error) {
	s := &scan{name: name, skip: skip, stack: []string{root}, pending: 1}
	s.cond = sync.NewCond(&s.mu)
	n := min(runtime.GOMAXPROCS(0), maxThreads)
	errs := make(chan error, n)
	for range n {
		go func() {
			t, err := asuser.NewThread(id)
			if err != nil {
				s.abort()
				errs <- err
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

// scan is the shared state of one Named: the folders still to read
// (stack), how many are queued or being read (pending: the scan is over
// at zero), and what was found.
type scan struct {
	name string
	skip []string

	mu      sync.Mutex
	cond    *sync.Cond
	stack   []string
	pending int
	stopped bool
	hits    []Hit
}

func (s *scan) abort() {
	s.mu.Lock()
	s.stopped = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

// work reads folders until none is left.
func (s *scan) work() {
	for {
		s.mu.Lock()
		for len(s.stack) == 0 && s.pending > 0 && !s.stopped {
			s.cond.Wait()
		}
		if s.pending == 0 || s.stopped {
			s.mu.Unlock()
			return
		}
		dir := s.stack[len(s.stack)-1]
		s.stack = s.stack[:len(s.stack)-1]
		s.mu.Unlock()

		subdirs, hits := s.read(dir)

		s.mu.Lock()
		s.hits = append(s.hits, hits...)
		s.stack = append(s.stack, subdirs...)
		s.pending += len(subdirs) - 1
		if len(subdirs) > 0 || s.pending == 0 {
			s.cond.Broadcast()
		}
		s.mu.Unlock()
	}
}

// read lists dir: its folders to read next and its entries named s.name.
func (s *scan) read(dir string) (subdirs []string, hits []Hit) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	ents, _ := f.ReadDir(-1)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.Name() == s.name:
			hits = append(hits, Hit{Path: p, Dir: e.IsDir(), Regular: e.Type().IsRegular()})
		case e.IsDir() && !slices.Contains(s.skip, p):
			subdirs = append(subdirs, p)
		}
	}
	return subdirs, hits
}
