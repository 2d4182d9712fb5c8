package dirscan

import (
	"encoding/binary"
	"errors"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Watch follows, for a process that lives across sessions (the
// daemon), every change of the entries of the folders its scans
// remembered, and of those folders' own attributes: a fanotify group
// with a mark on each such folder (an inode mark: no event for anything
// outside them, and none for their files' own changes), reporting the
// folder each change was made in (FAN_REPORT_DIR_FID: no name, so that
// the kernel merges a folder's events while they wait). A remembered
// folder that no change was reported in since it was read is taken
// without a look, not even a statx (memory.go says when that holds): in
// a tree of tens of thousands of folders, the whole walk of a start
// (issue 18's target). A mark on the whole file system would report
// every create, delete, rename and chmod of the machine's: measured, it
// made a tar extraction and removal on tmpfs about 40% slower; making
// and removing 20,000 files in a followed folder, the worst case, took
// 1.04 to 1.19 times as long as in another (tmpfs, run's drainEvery).
//
// Why no change can pass unseen: a folder is marked before it is read
// (or found unchanged by its ctime), and the kernel queues a change's
// event before the system call that made it returns, so a change made
// before sync is among the events sync reads; an entry made, removed or
// renamed in a folder (the folder's create, delete, moved_from and
// moved_to events: a rename reports both folders) and a folder's mode,
// owner or ACL (its attrib event) are all a change of the folder the
// event names. What fanotify does not report, mounts, the scan checks
// itself (mountsBelow). A queue that overflowed, or more folders changed
// than last holds, makes every folder read before it untrusted (floor):
// they are statx'd, as without a Watch. Marks pin their folders' inodes
// in the kernel's memory: past maxMarks they are all removed at once and
// the folders marked again as scans read them (gen).
type Watch struct {
	fd int

	mu sync.Mutex
	// seq counts the events read (the folders named by them); last is,
	// by folder (handleKey), the seq of the last event naming it; floor:
	// a folder read before it is not trusted.
	seq, floor uint64
	// marks: the marks added since gen began (a folder marked again is
	// counted again: an upper bound).
	marks int
	gen   uint32
	last  map[string]uint64
	buf   []byte
	// log is the folders named since logFrom, in order: what changed
	// since a seq, without a look at every folder (Memory.still).
	log     []change
	logFrom uint64

	stop chan struct{}
	done chan struct{}
}

// watchMask: the changes of a folder's entries, and of a folder itself.
const watchMask = unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO |
	unix.FAN_ATTRIB | unix.FAN_ONDIR

// change is a folder an event named, and the event's seq.
type change struct {
	seq uint64
	key string
}

// maxLog bounds a Watch's log: past it, its older half is dropped.
const maxLog = 1 << 16

// maxChanged bounds the folders a Watch remembers a change of (about
// 100 bytes each): past it, it forgets them all and trusts nothing read
// before (floor).
const maxChanged = 1 << 18

// watchedFS are the file systems a Watch marks: local ones whose file
// handles fanotify and name_to_handle_at give alike, one file system id
// for the whole of it (not btrfs: a subvolume has its own).
var watchedFS = map[int64]bool{
	unix.EXT4_SUPER_MAGIC: true, unix.XFS_SUPER_MAGIC: true, unix.TMPFS_MAGIC: true,
}

// NewWatch starts a Watch (root's: CAP_SYS_ADMIN).
func NewWatch() (*Watch, error) {
	// Unlimited marks: maxMarks bounds them.
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_REPORT_DIR_FID|unix.FAN_UNLIMITED_MARKS|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	// seq 0 is a folder's "never read with this watch", gen 0 "never
	// marked".
	w := &Watch{fd: fd, seq: 1, floor: 1, logFrom: 1, gen: 1, last: map[string]uint64{}, buf: make([]byte, 64<<10),
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w, nil
}

// Close stops the Watch.
func (w *Watch) Close() {
	close(w.stop)
	<-w.done
	unix.Close(w.fd)
}

// run reads the events every drainEvery: the kernel's queue is bounded
// (one left to fill overflows, and then nothing is trusted), but a
// scan's sync reads what came since itself. Not as they come: the
// kernel merges a folder's events that wait in the queue (a thousand
// files made in a folder are one), and a process woken for each would
// take a processor from the work that makes them (measured: making and
// removing files in a followed folder took 1.6 times as long).
func (w *Watch) run() {
	defer close(w.done)
	t := time.NewTicker(drainEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			w.drain()
			w.mu.Unlock()
		}
	}
}

// drainEvery is how often a Watch reads its events between scans.
const drainEvery = 250 * time.Millisecond

// drain reads every event queued (w.mu held). A read that fails for
// another reason than an empty queue, or a queue still not empty after
// maxReads (events coming faster than they are read: a sync must not
// wait on them), trusts nothing read before.
func (w *Watch) drain() {
	for range maxReads {
		n, err := unix.Read(w.fd, w.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			if err != unix.EAGAIN {
				w.forget()
			}
			return
		}
		w.parse(w.buf[:n])
	}
	w.forget()
}

// maxReads bounds a drain's reads (of 64 KiB: thousands of events each).
const maxReads = 256

// forget trusts nothing read before now.
func (w *Watch) forget() {
	w.seq++
	w.floor = w.seq
	clear(w.last)
	w.log, w.logFrom = nil, w.seq
}

// parse takes the folders the events in b name.
func (w *Watch) parse(b []byte) {
	for len(b) >= unix.FAN_EVENT_METADATA_LEN {
		m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&b[0]))
		if m.Event_len < unix.FAN_EVENT_METADATA_LEN || int(m.Event_len) > len(b) || uint32(m.Metadata_len) > m.Event_len {
			w.forget()
			return
		}
		ev := b[:m.Event_len]
		b = b[m.Event_len:]
		if m.Mask&unix.FAN_Q_OVERFLOW != 0 {
			w.forget()
			continue
		}
		named := false
		for info := ev[m.Metadata_len:]; len(info) >= 4; {
			l := int(binary.LittleEndian.Uint16(info[2:]))
			if l < 4 || l > len(info) {
				break
			}
			if t := info[0]; t == unix.FAN_EVENT_INFO_TYPE_DFID_NAME || t == unix.FAN_EVENT_INFO_TYPE_DFID {
				if key, ok := eventKey(info[4:l]); ok {
					w.seq++
					w.last[key] = w.seq
					if len(w.log) >= maxLog {
						w.logFrom = w.log[maxLog/2-1].seq
						w.log = append(w.log[:0], w.log[maxLog/2:]...)
					}
					w.log = append(w.log, change{w.seq, key})
					named = true
				}
			}
			info = info[l:]
		}
		if !named {
			// An event that names no folder could be any folder's.
			w.forget()
		}
		if len(w.last) > maxChanged {
			w.forget()
		}
	}
}

// eventKey is the key of the folder an info record names: its file
// system id, then its file handle (struct file_handle: bytes, type,
// handle).
func eventKey(rec []byte) (string, bool) {
	if len(rec) < 16 {
		return "", false
	}
	n := int(binary.LittleEndian.Uint32(rec[8:]))
	if n > len(rec)-16 {
		return "", false
	}
	return handleKey(rec[:8], int32(binary.LittleEndian.Uint32(rec[12:])), rec[16:16+n]), true
}

// handleKey is a folder's key: its file system's id, its handle's type
// and bytes.
func handleKey(fsid []byte, typ int32, handle []byte) string {
	k := make([]byte, 0, 12+len(handle))
	k = append(k, fsid...)
	k = binary.LittleEndian.AppendUint32(k, uint32(typ))
	return string(append(k, handle...))
}

// fsidBytes is statfs's file system id as fanotify reports it.
func fsidBytes(fs *unix.Statfs_t) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint32(b, uint32(fs.Fsid.Val[0]))
	binary.LittleEndian.PutUint32(b[4:], uint32(fs.Fsid.Val[1]))
	return b
}

// errNotWatched says a file system is not one a Watch follows.
var errNotWatched = errors.New("not a file system a watch follows")

// maxMarks bounds a Watch's marks (each pins a folder's inode, about a
// kilobyte): the folders of ten projects of 20,000. Past it, the marks
// of folders no scan remembers any more (moved away, or their memory let
// go) would be kept for ever.
var maxMarks = 200_000

// markDir follows the folder path names from fd (fd alone when path is
// "": not an O_PATH descriptor) from now on, as the calling thread (the
// user must be able to read it). It returns the Watch's gen, which the
// folder is marked in.
func (w *Watch) markDir(fd int, path string) (uint32, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.marks >= maxMarks {
		// Every mark removed: no folder is followed any more, and what
		// was read before is not trusted.
		if err := unix.FanotifyMark(w.fd, unix.FAN_MARK_FLUSH, 0, unix.AT_FDCWD, ""); err != nil {
			return 0, err
		}
		w.marks = 0
		w.gen++
		w.drain()
		w.forget()
	}
	if err := unix.FanotifyMark(w.fd, unix.FAN_MARK_ADD|unix.FAN_MARK_ONLYDIR|unix.FAN_MARK_DONT_FOLLOW, watchMask, fd, path); err != nil {
		return 0, err
	}
	w.marks++
	return w.gen, nil
}

// sync reads the events of every change made so far, and returns the
// seq a folder read from now on is read at.
func (w *Watch) sync() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drain()
	return w.seq
}

// changedAny says whether an event named one of the folders keys since
// seq, or may have (the log no longer goes back to seq).
func (w *Watch) changedAny(seq uint64, keys map[string]bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if seq < w.floor || seq < w.logFrom {
		return true
	}
	for i := len(w.log) - 1; i >= 0 && w.log[i].seq > seq; i-- {
		if keys[w.log[i].key] {
			return true
		}
	}
	return false
}

// unchanged says the folder key, marked in gen, still is, and that no
// event named it since seq (when it was read), nor can one have been
// lost since.
func (w *Watch) unchanged(key string, gen uint32, seq uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return gen == w.gen && seq >= w.floor && w.last[key] <= seq
}

// current says whether gen is the Watch's: a folder marked in it still
// is.
func (w *Watch) current(gen uint32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return gen == w.gen
}
