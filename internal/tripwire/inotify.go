package tripwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// notifier is what the watcher watches with: fanotify, which names the
// process that made each change, or inotify where fanotify cannot watch
// (a file system with no id for its file handles: tmpfs before Linux 6.6,
// some overlays), which does not.
type notifier interface {
	// markDir watches the folder dirfd (a folder on the way, or of a
	// protected tree) and returns the key its events carry.
	markDir(dirfd int, tree bool) (string, error)
	// markFile watches the file name in dirfd itself, not followed.
	markFile(dirfd int, name string) error
	// read waits for events; overflow says some were lost.
	read() (evs []event, overflow bool, err error)
	// queued is how many bytes of events wait to be read.
	queued() int
	close()
	// names says whether events name the process that made them.
	names() bool
}

// inotify is the notifier where fanotify cannot watch. Its event bits are
// fanotify's (IN_CREATE is FAN_CREATE, IN_ISDIR is FAN_ONDIR, ...).
type inotify struct {
	f *os.File
}

func newInotify() (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	return &inotify{f: os.NewFile(uintptr(fd), "inotify")}, nil
}

const (
	inWay  = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO
	inTree = inWay | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE
	inFile = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE
)

func (n *inotify) add(fd int, mask uint32) (int, error) {
	rc, err := n.f.SyscallConn()
	if err != nil {
		return -1, err
	}
	wd := -1
	var aerr error
	rc.Control(func(ifd uintptr) {
		// The descriptor's own magic link: the inode it holds, whatever
		// is at its path now. IN_MASK_ADD: a folder may be both on the
		// way to one entry and in another's tree.
		wd, aerr = unix.InotifyAddWatch(int(ifd), "/proc/self/fd/"+strconv.Itoa(fd), mask|unix.IN_MASK_ADD)
	})
	if aerr != nil {
		return -1, fmt.Errorf("inotify_add_watch: %w", aerr)
	}
	return wd, nil
}

func (n *inotify) markDir(dirfd int, tree bool) (string, error) {
	mask := uint32(inWay)
	if tree {
		mask = inTree
	}
	wd, err := n.add(dirfd, mask|unix.IN_ONLYDIR)
	if err != nil {
		return "", err
	}
	return "wd:" + strconv.Itoa(wd), nil
}

func (n *inotify) markFile(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// A key of its own that no folder has: its events reconcile every
	// entry, as fanotify's through a name the tripwire does not watch.
	_, err = n.add(fd, inFile)
	return err
}

func (n *inotify) read() ([]event, bool, error) {
	buf := make([]byte, 64<<10)
	k, err := n.f.Read(buf)
	if err != nil {
		if errors.Is(err, os.ErrClosed) {
			return nil, false, err
		}
		return nil, false, fmt.Errorf("read inotify events: %w", err)
	}
	var evs []event
	overflow := false
	b := buf[:k]
	const head = int(unsafe.Sizeof(unix.InotifyEvent{}))
	for len(b) >= head {
		wd := int32(binary.LittleEndian.Uint32(b[0:]))
		mask := binary.LittleEndian.Uint32(b[4:])
		l := int(binary.LittleEndian.Uint32(b[12:]))
		if head+l > len(b) {
			return evs, true, nil
		}
		name := b[head : head+l]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		b = b[head+l:]
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			overflow = true
		case mask&unix.IN_IGNORED != 0:
		default:
			evs = append(evs, event{mask: uint64(mask), dir: "wd:" + strconv.Itoa(int(wd)), name: string(name)})
		}
	}
	return evs, overflow, nil
}

func (n *inotify) queued() int {
	rc, err := n.f.SyscallConn()
	if err != nil {
		return 0
	}
	q := 0
	rc.Control(func(fd uintptr) {
		q, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
	})
	return q
}

func (n *inotify) close() { n.f.Close() }

func (n *inotify) names() bool { return false }
