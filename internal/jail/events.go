package jail

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/spec"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// Event is one decision as the kernel reported it: the engines' report
// (verdict.Event), which both the hooks and the observers make.
type Event = verdict.Event

var opNames = map[jailAlOp]string{
	jailAlOpAL_OP_READ:        "read",
	jailAlOpAL_OP_WRITE:       "write",
	jailAlOpAL_OP_EXEC:        "exec",
	jailAlOpAL_OP_CREATE:      "create",
	jailAlOpAL_OP_UNLINK:      "unlink",
	jailAlOpAL_OP_RMDIR:       "rmdir",
	jailAlOpAL_OP_MKDIR:       "mkdir",
	jailAlOpAL_OP_MKNOD:       "mknod",
	jailAlOpAL_OP_RENAME:      "rename",
	jailAlOpAL_OP_LINK:        "link",
	jailAlOpAL_OP_SYMLINK:     "symlink",
	jailAlOpAL_OP_TRUNCATE:    "truncate",
	jailAlOpAL_OP_CHMOD:       "chmod",
	jailAlOpAL_OP_CHOWN:       "chown",
	jailAlOpAL_OP_SETATTR:     "utimes",
	jailAlOpAL_OP_SETXATTR:    "setxattr",
	jailAlOpAL_OP_REMOVEXATTR: "removexattr",
	jailAlOpAL_OP_MOUNT:       "mount",
	jailAlOpAL_OP_UMOUNT:      "umount",
	jailAlOpAL_OP_PIVOT_ROOT:  "pivot_root",
	jailAlOpAL_OP_CHROOT:      "chroot",
	jailAlOpAL_OP_PTRACE:      "ptrace",
	jailAlOpAL_OP_SIGNAL:      "signal",
	jailAlOpAL_OP_CONNECT:     "connect",
	jailAlOpAL_OP_SEND:        "send",
	jailAlOpAL_OP_BPF:         "bpf",
	jailAlOpAL_OP_IOCTL:       "ioctl",
	jailAlOpAL_OP_FORK:        "fork",
	jailAlOpAL_OP_IPC:         "ipc",
	jailAlOpAL_OP_KEY:         "keyring",
	jailAlOpAL_OP_WATCH:       "watch",
	jailAlOpAL_OP_GETXATTR:    "getxattr",
	jailAlOpAL_OP_LISTXATTR:   "listxattr",
	jailAlOpAL_OP_RECEIVE:     "receive",
	jailAlOpAL_OP_CONNECT_IN:  "connect-in",
	jailAlOpAL_OP_SEND_IN:     "send-in",
	jailAlOpAL_OP_SCHED:       "sched",
	jailAlOpAL_OP_NICE:        "nice",
	jailAlOpAL_OP_IOPRIO:      "ioprio",
	jailAlOpAL_OP_RLIMIT:      "rlimit",
}

var classNames = map[jailAlClass]string{
	jailAlClassAL_CLASS_INSIDE:     "inside",
	jailAlClassAL_CLASS_SYSTEM:     "system",
	jailAlClassAL_CLASS_OUTSIDE:    "outside",
	jailAlClassAL_CLASS_UNRESOLVED: "unresolved",
}

// ErrClosed is returned by Read after Close.
var ErrClosed = errors.New("jail closed")

// ErrFlushed is returned by Read when the events queued before Flush are
// consumed.
var ErrFlushed = errors.New("jail events flushed")

// Read blocks for the next event. It is not safe for concurrent use.
func (j *Jail) Read() (Event, error) {
	rec, err := j.reader.Read()
	if err != nil {
		if errors.Is(err, os.ErrClosed) || errors.Is(err, ringbuf.ErrClosed) {
			return Event{}, ErrClosed
		}
		if errors.Is(err, ringbuf.ErrFlushed) {
			return Event{}, ErrFlushed
		}
		return Event{}, fmt.Errorf("read event: %w", err)
	}
	return j.decode(rec.RawSample)
}

// decode turns a variable-length sample into an Event. The kernel sends only
// the used part of path[]; the rest of the generated struct stays zero.
func (j *Jail) decode(raw []byte) (Event, error) {
	size := int(unsafe.Sizeof(jailEvent{}))
	if j.buf == nil {
		j.buf = make([]byte, size)
	}
	pathOff := int(unsafe.Offsetof(jailEvent{}.Path))
	if len(raw) < pathOff || len(raw) > size {
		return Event{}, fmt.Errorf("read event: sample of %d bytes", len(raw))
	}
	copy(j.buf, raw)
	clear(j.buf[len(raw):max(j.lastLen, len(raw))])
	j.lastLen = len(raw)
	e := (*jailEvent)(unsafe.Pointer(&j.buf[0]))
	n1, n2 := int(e.PathLen), int(e.Path2Len)
	if pathOff+n1+n2 > len(raw) {
		return Event{}, fmt.Errorf("read event: paths of %d+%d bytes in a %d-byte sample", n1, n2, len(raw))
	}
	ev := Event{
		Time:       j.clock.wall(e.TsNs),
		PID:        e.Pid,
		TID:        e.Tid,
		UID:        e.Uid,
		Op:         opNames[e.Op],
		Class:      classNames[e.Class],
		Denied:     e.Flags&evDenied != 0,
		Audit:      e.Flags&evAudit != 0,
		InBounds:   e.Flags&evInBounds != 0,
		Truncated:  e.Flags&evTruncated != 0,
		Unresolved: e.Flags&evUnresolved != 0,
		Protected:  e.Flags&evProtected != 0,
		Rule:       j.rules[e.Rule],
		TargetPID:  e.TargetPid,
		Detail:     e.Detail,
		Comm:       j.comm(e.Comm),
		Repeats:    e.Repeats,
	}
	if ev.Op == "" {
		ev.Op = "op" + strconv.Itoa(int(e.Op))
	}
	if e.Flags&evAsGiven != 0 {
		ev.Path = asGiven(j.names, e.Pid, e.Tid, e.Dev, string(raw[pathOff:pathOff+n1]), string(raw[pathOff+n1:pathOff+n1+n2]))
		if ev.Denied && ev.Rule == "" {
			ev.Rule = j.deniedBy(ev.Path)
		}
		return ev, nil
	}
	if n1 > 0 {
		ev.Path = j.name(e.Dev, raw[pathOff:pathOff+n1])
	}
	if e.Flags&evPath2 != 0 && n2 > 0 {
		ev.Path2 = j.name(e.Dev2, raw[pathOff+n1:pathOff+n1+n2])
	}
	return ev, nil
}

// deniedBy names the denial root a refused name lies in, or "". The
// observers see a refusal only as the name the process gave (nothing was
// opened to walk from); where another LSM refused a name inside a denial
// root (Landlock, whose grants are carved around it), that root is why.
func (j *Jail) deniedBy(path string) string {
	best := -1
	for i, r := range j.denied {
		if (path == r.Path || strings.HasPrefix(path, strings.TrimSuffix(r.Path, "/")+"/")) &&
			(best < 0 || len(r.Path) > len(j.denied[best].Path)) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return j.denied[best].Name
}

// nameSlots is the size of the cache of decoded names: direct-mapped, so a
// storm that repeats a few thousand paths (a loop over the same files, a
// scan of a tree) decodes them without allocating, and one of ever-new
// paths pays a hash and a compare, not a growing map.
const nameSlots = 16384

type nameSlot struct {
	dev       uint32
	rel, name string
}

// name is Namer.Name through the cache: the mount table is read once, so a
// (superblock, path) always names the same.
func (j *Jail) name(dev uint32, rel []byte) string {
	if j.nameCache == nil {
		j.nameCache = make([]nameSlot, nameSlots)
		j.nameSeed = maphash.MakeSeed()
	}
	slot := &j.nameCache[(maphash.Bytes(j.nameSeed, rel)^uint64(dev))%nameSlots]
	if slot.dev == dev && slot.name != "" && slot.rel == string(rel) {
		return slot.name
	}
	// One allocation where it can be: Name reads rel through a view of
	// the sample (reused by the next read), so what it returns is copied
	// if it points into the sample; the cache's key is then the end of the
	// name where the two agree (a mount of a superblock's root).
	view := unsafe.String(&rel[0], len(rel))
	name := j.names.Name(dev, view)
	if p := uintptr(unsafe.Pointer(unsafe.StringData(name))); p >= uintptr(unsafe.Pointer(&rel[0])) && p < uintptr(unsafe.Pointer(&rel[0]))+uintptr(len(rel)) {
		name = strings.Clone(name)
	}
	key := name[len(name)-min(len(name), len(rel)):]
	if key != view {
		key = string(rel)
	}
	*slot = nameSlot{dev: dev, rel: key, name: name}
	return name
}

// comm interns process names: few, repeated in every event.
func (j *Jail) comm(c [16]int8) string {
	if s, ok := j.comms[c]; ok {
		return s
	}
	if j.comms == nil || len(j.comms) >= 1024 {
		j.comms = map[[16]int8]string{}
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&c[0])), len(c))
	s := cString(b)
	j.comms[c] = s
	return s
}

// Flags from jail.h (#defines do not reach BTF, so they are repeated here).
const (
	evDenied     = 1 << 0
	evAudit      = 1 << 1
	evTruncated  = 1 << 2
	evUnresolved = 1 << 3
	evPath2      = 1 << 4
	evInBounds   = 1 << 5
	evAsGiven    = 1 << 6
	evProtected  = 1 << 7
)

// asGiven names what a refused open or exec asked for: the name the process
// passed, relative to the directory the kernel named (its working directory
// or the dirfd) unless absolute, with symlinks followed as that process
// would have followed them (its /proc/self is /proc/PID), so that a planted
// link names its target. Nothing was opened, so this is read back from the
// file system now, as root, by lstat and readlink only; where that fails
// (the process is gone, the target does not exist) the name is cleaned
// lexically. A name through the process's own /proc links (fd/N, cwd,
// root) comes already split by the kernel (proc_link in jail.bpf.c): dir
// is the link's target, read while the process was alive. It names; it
// never decides.
func asGiven(n *Namer, pid, tid, dev uint32, dir, name string) string {
	if name == "" {
		name = "?"
	}
	if !strings.HasPrefix(name, "/") {
		if dir == "" {
			return name
		}
		name = n.Name(dev, dir) + "/" + name
	}
	self := "/proc/" + strconv.FormatUint(uint64(pid), 10)
	switch {
	case name == "/proc/self" || strings.HasPrefix(name, "/proc/self/"):
		name = self + name[len("/proc/self"):]
	case name == "/proc/thread-self" || strings.HasPrefix(name, "/proc/thread-self/"):
		name = self + "/task/" + strconv.FormatUint(uint64(tid), 10) + name[len("/proc/thread-self"):]
	}
	if r, err := filepath.EvalSymlinks(name); err == nil {
		return r
	}
	d, base := filepath.Split(name)
	if r, err := filepath.EvalSymlinks(d); err == nil {
		return filepath.Join(r, base)
	}
	return filepath.Clean(name)
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// monoClock turns the kernel's CLOCK_MONOTONIC stamps into wall time. The
// offset between the two clocks costs a system call to read, which at a
// flood of events was most of decoding's time; it is read again every
// 100 ms, so a wall-clock step shows within that.
type monoClock struct {
	offset time.Duration // wall minus monotonic
	at     time.Time     // when offset was read (carries Go's monotonic reading)
}

func (c *monoClock) wall(ns uint64) time.Time {
	if c.at.IsZero() || time.Since(c.at) > 100*time.Millisecond {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return time.Now()
		}
		c.at = time.Now()
		c.offset = time.Duration(c.at.UnixNano() - ts.Nano())
	}
	return time.Unix(0, int64(ns)+int64(c.offset))
}

// Namer turns the kernel's (superblock, path inside it) into a path in this
// mount namespace, for people to read. It plays no part in any decision.
type Namer struct {
	mounts map[uint32][]mountEntry
}

type mountEntry struct{ root, point string }

// NewNamer reads this process's mount table.
func NewNamer() (*Namer, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	n := &Namer{mounts: map[uint32][]mountEntry{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		dev, e, ok := parseMountinfo(sc.Text())
		if ok {
			n.mounts[dev] = append(n.mounts[dev], e)
		}
	}
	return n, sc.Err()
}

// parseMountinfo reads "id parent major:minor root mountpoint ...".
func parseMountinfo(line string) (uint32, mountEntry, bool) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return 0, mountEntry{}, false
	}
	maj, min, ok := strings.Cut(f[2], ":")
	if !ok {
		return 0, mountEntry{}, false
	}
	ma, err1 := strconv.ParseUint(maj, 10, 32)
	mi, err2 := strconv.ParseUint(min, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, mountEntry{}, false
	}
	return uint32(ma<<20 | mi), mountEntry{root: kernel.UnescapeMount(f[3]), point: kernel.UnescapeMount(f[4])}, true
}

// Name maps rel, a path from the root of superblock dev, to a path through
// the mount that shows the longest matching part of that superblock.
func (n *Namer) Name(dev uint32, rel string) string {
	best := -1
	var out string
	for _, m := range n.mounts[dev] {
		if !spec.Under(rel, m.root) || len(m.root) <= best {
			continue
		}
		best = len(m.root)
		rest := strings.TrimPrefix(rel, m.root)
		if m.root == "/" {
			rest = rel
		}
		out = joinMount(m.point, rest)
	}
	if best < 0 {
		return fmt.Sprintf("(dev %d:%d)%s", dev>>20, dev&(1<<20-1), rel)
	}
	return out
}

func joinMount(point, rest string) string {
	if point == "/" {
		if rest == "" {
			return "/"
		}
		return rest
	}
	return point + rest
}

// Drain returns events, the channel Stream feeds, which then ends with the
// events already in the ring, and true; once no process of the cell is
// left to add to them. Without the flush the reader would wait for events
// that no longer come: Drain then says so to warn and returns a closed
// channel, and false (the counters still say how many there were).
func (j *Jail) Drain(events <-chan Event, warn func(format string, args ...any)) (<-chan Event, bool) {
	if err := j.Flush(); err != nil {
		warn("flush events: %v", err)
		none := make(chan Event)
		close(none)
		return none, false
	}
	return events, true
}

// Stream sends the events to out until the reader is closed or flushed
// (then it returns) or done is closed; a failed read is said to warn.
func (j *Jail) Stream(out chan<- Event, done <-chan struct{}, warn func(format string, args ...any)) {
	for {
		ev, err := j.Read()
		if err != nil {
			if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFlushed) {
				warn("%v", err)
			}
			return
		}
		select {
		case out <- ev:
		case <-done:
			return
		}
	}
}
