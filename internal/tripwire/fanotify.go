package tripwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The live watch: one fanotify group reporting the folder and name of each
// change (FAN_REPORT_DFID_NAME), with marks on the watched inodes only: the
// folders on the way to each entry (names made, removed or moved there),
// the folders of a protected tree (everything in them), and each protected
// file itself (a write through a hard link made during the session names
// another folder). Inode marks, not a mark on the whole file system: the
// user's other work on the same disk costs nothing.
type fanotify struct {
	f *os.File
}

// Masks: what a folder on the way reports, what a folder of a protected
// tree reports, what a protected file itself reports.
const (
	maskWay  = unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO | unix.FAN_ONDIR
	maskTree = maskWay | unix.FAN_MODIFY | unix.FAN_ATTRIB | unix.FAN_CLOSE_WRITE | unix.FAN_EVENT_ON_CHILD
	maskFile = unix.FAN_MODIFY | unix.FAN_ATTRIB | unix.FAN_CLOSE_WRITE
)

func newFanotify() (*fanotify, error) {
	// Unlimited marks and queue: a protected tree may be large, and a
	// lost event costs a reconciliation of every entry, not a miss.
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_REPORT_DFID_NAME|
		unix.FAN_UNLIMITED_MARKS|unix.FAN_UNLIMITED_QUEUE, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fanotify_init: %w", err)
	}
	// Non-blocking, through Go's poller: Close wakes a pending Read.
	return &fanotify{f: os.NewFile(uintptr(fd), "fanotify")}, nil
}

// mark watches the folder dirfd (way or tree) and returns its handle.
func (f *fanotify) markDir(dirfd int, tree bool) (string, error) {
	mask := uint64(maskWay)
	if tree {
		mask = maskTree
	}
	if err := f.mark(mask, dirfd, "."); err != nil {
		return "", err
	}
	return handleKey(dirfd)
}

// markFile watches the file name in dirfd itself (not followed).
func (f *fanotify) markFile(dirfd int, name string) error {
	return f.mark(maskFile, dirfd, name)
}

func (f *fanotify) mark(mask uint64, dirfd int, name string) error {
	rc, err := f.f.SyscallConn()
	if err != nil {
		return err
	}
	var merr error
	if err := rc.Control(func(fd uintptr) {
		merr = unix.FanotifyMark(int(fd), unix.FAN_MARK_ADD|unix.FAN_MARK_DONT_FOLLOW, mask, dirfd, name)
	}); err != nil {
		return err
	}
	if merr != nil {
		return fmt.Errorf("fanotify_mark: %w", merr)
	}
	return nil
}

// handleKey names the inode behind fd as the kernel's events name it:
// file system id, handle type and handle.
func handleKey(fd int) (string, error) {
	h, _, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		return "", fmt.Errorf("name_to_handle_at: %w", err)
	}
	var sf unix.Statfs_t
	if err := unix.Fstatfs(fd, &sf); err != nil {
		return "", err
	}
	return key(sf.Fsid.Val, h.Type(), h.Bytes()), nil
}

func key(fsid [2]int32, typ int32, handle []byte) string {
	b := make([]byte, 12, 12+len(handle))
	binary.LittleEndian.PutUint32(b[0:], uint32(fsid[0]))
	binary.LittleEndian.PutUint32(b[4:], uint32(fsid[1]))
	binary.LittleEndian.PutUint32(b[8:], uint32(typ))
	return string(append(b, handle...))
}

// event is one change the kernel reported: in which folder (by handle),
// which name there ("." for the folder itself), what, by whom.
type event struct {
	mask uint64
	pid  int
	comm string // read as soon as the event was: a short process is gone by the time it is dealt with
	dir  string
	name string
}

// read waits for events and returns them; overflow says the kernel lost
// some.
func (f *fanotify) read() ([]event, bool, error) {
	buf := make([]byte, 64<<10)
	n, err := f.f.Read(buf)
	if err != nil {
		if errors.Is(err, os.ErrClosed) {
			return nil, false, err
		}
		return nil, false, fmt.Errorf("read fanotify events: %w", err)
	}
	evs, overflow := parse(buf[:n])
	return evs, overflow, nil
}

func (f *fanotify) close() { f.f.Close() }

func (f *fanotify) names() bool { return true }

// queued is how many bytes of events the kernel holds for the next read.
func (f *fanotify) queued() int {
	rc, err := f.f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
	})
	return n
}

// parse decodes a read's events: struct fanotify_event_metadata, then
// info records; a DFID_NAME record is a header, the file system id, a
// struct file_handle and the name, NUL-terminated.
func parse(b []byte) (evs []event, overflow bool) {
	const metaLen = int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))
	for len(b) >= metaLen {
		m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&b[0]))
		if m.Event_len < uint32(metaLen) || int(m.Event_len) > len(b) {
			return evs, true // a broken record: treat as lost events
		}
		rec := b[m.Metadata_len:m.Event_len]
		if m.Mask&unix.FAN_Q_OVERFLOW != 0 {
			overflow = true
		}
		if m.Fd >= 0 {
			unix.Close(int(m.Fd)) // not asked for (FID groups send none)
		}
		ev := event{mask: m.Mask, pid: int(m.Pid)}
		for len(rec) >= 4 {
			typ, l := rec[0], int(binary.LittleEndian.Uint16(rec[2:]))
			if l < 4 || l > len(rec) {
				break
			}
			info := rec[4:l]
			if (typ == unix.FAN_EVENT_INFO_TYPE_DFID_NAME || typ == unix.FAN_EVENT_INFO_TYPE_DFID) && len(info) >= 16 {
				fsid := [2]int32{int32(binary.LittleEndian.Uint32(info[0:])), int32(binary.LittleEndian.Uint32(info[4:]))}
				hb := int(binary.LittleEndian.Uint32(info[8:]))
				ht := int32(binary.LittleEndian.Uint32(info[12:]))
				if 16+hb <= len(info) {
					ev.dir = key(fsid, ht, info[16:16+hb])
					if typ == unix.FAN_EVENT_INFO_TYPE_DFID_NAME {
						name := info[16+hb:]
						for i, c := range name {
							if c == 0 {
								name = name[:i]
								break
							}
						}
						ev.name = string(name)
					}
				}
			}
			rec = rec[l:]
		}
		if m.Mask&unix.FAN_Q_OVERFLOW == 0 {
			evs = append(evs, ev)
		}
		b = b[m.Event_len:]
	}
	return evs, overflow
}
