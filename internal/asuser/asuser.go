// Package asuser does file-system work in a user's folders on the user's
// behalf. agent-lock runs as root, and those folders are the user's: a root
// process creating files by path there would follow whatever symlinks the
// user (or an agent of theirs, in an earlier session) planted, into /etc
// say, and hand the result to the user. With the thread's file-system ids
// and groups switched to the user's, the kernel checks every step as it
// would for the user, and root's file capabilities are dropped: whatever
// agent-lock makes, opens or removes for the user, the user could have.
package asuser

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// ID is whom the work is done as: a user, their primary group and their
// supplementary groups (a file open to one of those groups is the user's
// to open; one open only to root's groups is not).
type ID struct {
	UID, GID uint32
	Groups   []uint32
}

// Do runs fn on a thread acting as id for file-system access. The thread
// is never handed back: it exits with the goroutine, whatever ids it was
// left with.
func Do(id ID, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := become(id); err != nil {
			ch <- err
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// MkdirAll makes path and its missing parents (0700) as id.
func MkdirAll(id ID, path string) error {
	return Do(id, func() error { return os.MkdirAll(path, 0o700) })
}

// MkdirTemp makes a new folder (0700) named pattern's prefix and a random
// suffix in dir, as id (os.MkdirTemp's pattern).
func MkdirTemp(id ID, dir, pattern string) (string, error) {
	var made string
	err := Do(id, func() error {
		var err error
		made, err = os.MkdirTemp(dir, pattern)
		return err
	})
	return made, err
}

// RemoveAll removes path and what it holds, as id: what the user could not
// remove stays. os.RemoveAll opens each folder relative to its parent
// without following symlinks, so a link swapped in while it runs leads it
// nowhere.
func RemoveAll(id ID, path string) error {
	return Do(id, func() error { return os.RemoveAll(path) })
}

// OpenFile opens path as id with flag (O_NOFOLLOW and O_CLOEXEC are always
// added: a symlink as the last component is refused, not followed) and
// perm for a file it creates.
func OpenFile(id ID, path string, flag int, perm uint32) (*os.File, error) {
	return open(id, path, flag|unix.O_NOFOLLOW, perm)
}

func open(id ID, path string, flag int, perm uint32) (*os.File, error) {
	var f *os.File
	err := Do(id, func() error {
		fd, err := unix.Open(path, flag|unix.O_CLOEXEC, perm)
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		f = os.NewFile(uintptr(fd), path)
		return nil
	})
	return f, err
}

// CreateFile makes the file path (0600) holding content, as id. It fails
// if path exists, whatever it is (a symlink is not followed).
func CreateFile(id ID, path, content string) error {
	return Do(id, func() error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.WriteString(content); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

// ErrTooLarge is ReadFile's answer for a file longer than its limit.
var ErrTooLarge = errors.New("file too large")

// ReadFile reads a regular file of at most limit bytes as id. Symlinks
// are followed as the user would follow them: they lead only where the
// user may read. Anything but a regular file (a FIFO would block, a device
// never end) is an error.
func ReadFile(id ID, path string, limit int64) ([]byte, error) {
	f, err := open(id, path, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: path, Err: errors.New("not a regular file")}
	}
	if st.Size() > limit {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%d bytes, at most %d)", ErrTooLarge, st.Size(), limit)}
	}
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && n != len(b) {
		return nil, err
	}
	return b, nil
}

// Replace writes what r holds to a new file beside path and renames it
// over path, as id: whatever was at path (a file, a symlink, a hard link
// to something else) is replaced as an entry, never written through.
func Replace(id ID, path string, r io.Reader, perm uint32) error {
	return Do(id, func() error {
		tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
		if err != nil {
			return err
		}
		_, werr := io.Copy(tmp, r)
		if err := tmp.Chmod(os.FileMode(perm)); werr == nil {
			werr = err
		}
		if err := tmp.Close(); werr == nil {
			werr = err
		}
		if werr == nil {
			werr = os.Rename(tmp.Name(), path)
		}
		if werr != nil {
			os.Remove(tmp.Name())
		}
		return werr
	})
}

// become switches the calling thread's file-system ids and groups.
// setfsuid reports no errors, only the previous id, so a second call
// confirms the first. The raw setgroups system call changes this thread
// only (the C library's, and Go's syscall package, change every thread).
func become(id ID) error {
	if os.Geteuid() != 0 {
		// Not root: the work is done as this process's own user anyway,
		// and no ids can be switched.
		if uint32(os.Geteuid()) != id.UID {
			return fmt.Errorf("cannot act as user %d without root", id.UID)
		}
		return nil
	}
	groups := make([]int, len(id.Groups))
	for i, g := range id.Groups {
		groups[i] = int(g)
	}
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("could not act as the groups of user %d: %w", id.UID, err)
	}
	unix.Setfsgid(int(id.GID))
	if prev, _ := unix.SetfsgidRetGid(-1); prev != int(id.GID) {
		return fmt.Errorf("could not act as group %d", id.GID)
	}
	unix.Setfsuid(int(id.UID))
	if prev, _ := unix.SetfsuidRetUid(-1); prev != int(id.UID) {
		return fmt.Errorf("could not act as user %d", id.UID)
	}
	return nil
}

// OpenListing opens folder dir for listing its names, on a thread of this
// package acting as id, when the user may search it but not list it: git
// opens names in such a folder (a repository registered in an index, a
// hook), so a look for git's files must see them (ListingAt).
func OpenListing(id ID, dir string) (*os.File, error) {
	if os.Geteuid() == 0 {
		if uid, _ := unix.SetfsuidRetUid(-1); uid != int(id.UID) {
			return nil, fmt.Errorf("asuser: OpenListing on a thread not acting as user %d", id.UID)
		}
	}
	return ListingAt(unix.AT_FDCWD, dir)
}

// ListingAt opens folder name, from dirfd, for listing its names, on a
// thread of this package: the folder is reached as the thread's user,
// without following a symlink at its end, and proved searchable by that
// user; only the open of "." from it for reading uses root's file-system
// ids, and the thread takes its user's ids back before it returns (the
// process ends if it cannot: it would go on as root in the user's
// folders). Root's listing gives names only: everything opened through
// them is opened as the user. Without root it returns ErrNoListing, and
// the user's own refusal when the user may not search it either.
func ListingAt(dirfd int, name string) (*os.File, error) {
	reach, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(reach)
	// A lookup from it checks the user's search permission on it.
	search, err := unix.Openat(reach, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	unix.Close(search)
	if os.Geteuid() != 0 {
		return nil, ErrNoListing
	}
	uid, _ := unix.SetfsuidRetUid(-1)
	gid, _ := unix.SetfsgidRetGid(-1)
	unix.Setfsuid(0)
	unix.Setfsgid(0)
	fd, err := unix.Openat(reach, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	// Back to the user's ids (its groups were never changed), confirmed.
	unix.Setfsgid(gid)
	unix.Setfsuid(uid)
	nowGID, _ := unix.SetfsgidRetGid(-1)
	nowUID, _ := unix.SetfsuidRetUid(-1)
	if nowGID != gid || nowUID != uid {
		fmt.Fprintf(os.Stderr, "agent-lock: could not act as user %d again after listing %s\n", uid, name)
		unix.Exit(2)
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// ErrNoListing is OpenListing's error in a process that is not root: the
// folder is the user's to search, but nobody here may list it.
var ErrNoListing = errors.New("the user may search this folder but not list it, and only root could")

// Thread is one thread acting as id for as long as it is open, for work
// that comes in many small pieces (the tripwire puts protected entries
// back while the agent runs): Do would start a thread for each.
type Thread struct {
	work chan func()
	done chan struct{}
}

// NewThread starts a thread acting as id.
func NewThread(id ID) (*Thread, error) {
	t := &Thread{work: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread exits with the goroutine, whatever
		// ids it was left with.
		if err := become(id); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for {
			select {
			case fn := <-t.work:
				fn()
			case <-t.done:
				return
			}
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return t, nil
}

// Do runs fn on the thread and returns what it returns. After Close it
// returns ErrClosed without running fn.
func (t *Thread) Do(fn func() error) error {
	ch := make(chan error, 1)
	select {
	case t.work <- func() { ch <- fn() }:
		return <-ch
	case <-t.done:
		return ErrClosed
	}
}

// ErrClosed is Thread.Do's answer once the thread is closed.
var ErrClosed = errors.New("asuser: thread closed")

// Close ends the thread once the work it is doing is done.
func (t *Thread) Close() {
	select {
	case <-t.done:
	default:
		close(t.done)
	}
}
