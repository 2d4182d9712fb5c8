package dirscan

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

// A Memory is what one user's last scan of one tree read: for each
// folder, its identity (device, inode, mount) and change time, its
// folders and whether it held the name. A later scan by the same user,
// for the same name and skips, takes a folder's entries from it instead
// of reading the folder when one statx of the folder (as the user) shows
// the same identity and change time: in a tree of tens of thousands of
// folders that is most of a session's start saved (a statx against an
// open, two getdents and a close).
//
// Why a remembered folder cannot hide an entry: a folder's ctime moves
// with every entry made, removed or renamed in it (and with its mode,
// owner and ACL), and no one can set it back (utimes sets mtime, not
// ctime). The ctime kept is taken from the open folder before it is
// read, so a change during or after the read moves it past the one kept,
// unless the change falls in the same tick of the file system's clock
// (coarse: a jiffy); so a folder whose ctime is not at least Settle older
// than the scan's start is not remembered (git's "racy" index entries,
// the same problem). A folder mounted over, or swapped for another by
// a rename in its parent, has another device, inode or mount id. The
// user's groups are in the memory's key: what the user may read follows
// them, not the folders' ctimes. A folder that could not be listed is not
// remembered (one listed with root's listing, which the user may search,
// is: its ctime moves with its names as any); one the user can no longer
// reach fails its statx and is
// skipped, as a read would. Only folders of local file systems whose
// ctime is the kernel's own are remembered (rememberedFS); the mount id
// is the one not reused within a boot, and a btrfs folder's subvolume is
// compared, where the kernel gives them (6.8, 6.10); a memory is of one
// boot (its key holds the boot id). A clock stepped back (NTP correcting
// a wrong one) could make a later change's ctime equal a kept one: a
// memory is not used once the wall clock has moved back more than a
// second against the boot clock since the oldest of its folders was
// read, nor kept when it moved back during the scan. What remains is
// root's: a file system rolled
// back to a snapshot, or made by hand, with the same identities and
// ctimes and other entries.
//
// Memories are root's: kept in a folder only root may write (the
// session's engine runs as root; a user's own scan remembers nothing),
// so a user, or an agent, cannot plant one that hides a repository.
type Memory struct {
	of    string // keyOf the scan
	key   string // of, and the boot
	store string
	id    asuser.ID
	root  string
	name  string
	skip  []string
	dirs  map[string]*folder // the last scan's, by path
	// gen counts the scans; this one's fresh are the folders it read
	// (those it took from dirs have its gen: the rest of dirs, not seen
	// again, are dropped when it ends).
	gen   uint64
	fresh map[string]*folder
	// offset: the clock's (clockOffset) when the oldest folder of dirs
	// was read; scanned: when this scan began; size: what it will
	// remember, about as encoded, and overflow: that passed maxBytes
	// (nothing is remembered); kept: a Scan made dirs, for Keep.
	offset, scanned int64
	size            int
	overflow        bool
	kept            bool

	recalled atomic.Int64 // folders the last Scan took from dirs
	visited  atomic.Int64 // folders it went through
	unlooked atomic.Int64 // of those taken, without a look (watch)

	// watch, when set (Memories'), follows the changes since each
	// folder was read. This scan's, when watching: seq, the watch's when
	// it began; what a folder must share with the root to be taken
	// unlooked, its device, mount (its unique id) and file system id;
	// mounts, the mount points below the root, at and below which
	// nothing is (a mount is no event).
	watch            *Watch
	watching         bool
	seq              uint64
	rootDev, rootMnt uint64
	rootSt           unix.Statx_t
	fsid             []byte
	mounts           []string
	// whole: the last scan, when it can be given again whole (unsaved:
	// dirs changed since Keep wrote them).
	whole   *wholeScan
	unsaved bool
}

// wholeScan is a scan that went through every folder of the root's mount
// it remembers, each with its key, at one seq (at), and found nothing it
// could not read (every folder of it remembered). If no event named any
// of its folders (keys) since, the mount points below the root are the
// same and the root is the folder it was, the tree is as it read it, and
// so is what it found: a scan gives hits again without a walk.
type wholeScan struct {
	at     uint64
	hits   []Hit
	mounts []string
	keys   map[string]bool // made after the scan (keys), nil until
}

// folder is one folder as a scan read it.
type folder struct {
	dev, ino, mnt, subvol uint64
	ctime                 int64  // ns
	ids                   uint32 // which of statxIDs the kernel gave
	subdirs               []string
	hit                   byte // the entry called name in it: hitNone, hitDir, hitRegular or hitOther
	// key: its file system id and file handle (handleKey), by which a
	// Watch names it ("" unknown); seq: the watch's seq when it was last
	// read or found unchanged (0: never, by this process's watch).
	key string
	seq uint64
	gen uint64 // the last scan that went through it (Memory.gen)
	// marked: the Watch's gen it was marked in (0: not marked).
	marked uint32
}

const (
	hitNone = iota
	hitDir
	hitRegular
	hitOther
)

// Settle is how much older than a scan's start a folder's ctime must be
// for the folder to be remembered: more than a file system clock's tick.
var Settle = 2 * time.Second

// maxBytes bounds a memory (each folder's path, its folders' names and
// about 35 bytes: 1.2 MB for the benchmark's 20,000 folders, about
// 150,000 such folders in all), in root's process as the scan goes and in
// its file: past it the scan remembers nothing, and the next one reads
// every folder, as without one. Root writes them on any user's behalf,
// into /run (memory): a user's together are bounded by userBytes, the
// store's by storeBytes (forget), and each must leave three times its
// size free.
var (
	maxBytes   = 8 << 20
	userBytes  = 16 << 20
	storeBytes = 64 << 20
)

// maxRemembered bounds a memory's folders as decode reads them: a damaged
// file cannot make it allocate more.
const maxRemembered = 1 << 20

// What a remembered folder is compared on: statxNeed and one of the mount
// ids, and statxIDs as far as the kernel gives them (STATX_MNT_ID_UNIQUE
// replaces STATX_MNT_ID from 6.8 on).
const (
	statxNeed = unix.STATX_TYPE | unix.STATX_INO | unix.STATX_CTIME
	statxIDs  = unix.STATX_MNT_ID | unix.STATX_MNT_ID_UNIQUE | unix.STATX_SUBVOL
	statxMask = statxNeed | statxIDs
)

const magic = "agent-lock dirscan memory 3\n"

// Recall returns the memory of the last scan of root by id, for name and
// skip, from the folder store (empty if there is none, or it is not
// root's alone, or the memory cannot be read: then every folder is
// read). It reads root's own files: call it as root, not as the user.
func Recall(store string, id asuser.ID, root, name string, skip []string) *Memory {
	of := keyOf(id, root, name, skip)
	key := fmt.Sprintf("boot %s %s", bootID(), of)
	m := &Memory{of: of, key: key, store: store, id: id, root: root, name: name, skip: skip, dirs: map[string]*folder{}}
	if !rootsAlone(store) {
		return m
	}
	data, err := readLimited(filepath.Join(store, m.file()), int64(maxBytes))
	if err != nil {
		return m
	}
	if dirs, offset, err := decode(data, key); err == nil && clockOffset() >= offset-int64(time.Second) {
		m.dirs, m.offset = dirs, offset
	}
	return m
}

// bootID names this boot: mount ids and the boot clock begin again at
// the next one.
func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

// clockOffset is the wall clock less the boot clock (ns): it moves back
// only when the wall clock is set back.
func clockOffset() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Now().UnixNano() - ts.Nano()
}

// keyOf names a scan: the user (groups included: what the user may read
// follows them), the root, the name and the skips.
func keyOf(id asuser.ID, root, name string, skip []string) string {
	return fmt.Sprintf("uid %d gid %d groups %v root %q name %q skip %q", id.UID, id.GID, id.Groups, root, name, skip)
}

// Scan is Named for the memory's user, root, name and skip, taking every
// folder unchanged since the last scan from the memory, and remembering
// what it reads for Keep.
//
// What it read becomes the memory (for Keep, and for the next Scan of a
// Memory that a process keeps: Memories).
func (m *Memory) Scan() ([]Hit, error) {
	m.gen++
	m.fresh = map[string]*folder{}
	m.size, m.overflow = len(magic)+len(m.key)+40, false
	m.scanned = clockOffset()
	m.recalled.Store(0)
	m.visited.Store(0)
	m.unlooked.Store(0)
	if m.scanned < m.offset-int64(time.Second) {
		m.dirs, m.whole = map[string]*folder{}, nil // the clock went back since
	}
	m.watching = false
	if m.watch != nil {
		m.watchScan()
	}
	if m.still() {
		w := m.whole
		w.at = m.seq // nothing changed through now
		n := int64(len(m.dirs))
		m.visited.Store(n)
		m.recalled.Store(n)
		m.unlooked.Store(n)
		return slices.Clone(w.hits), nil
	}
	m.whole = nil
	hits, err := named(m.id, m.root, m.name, m.skip, m)
	fresh := m.fresh
	m.fresh = nil
	if err != nil {
		// What it took from dirs is as it was: they stay, and the
		// next scan looks again at what this one did not reach.
		return nil, err
	}
	maps.Copy(m.dirs, fresh)
	maps.DeleteFunc(m.dirs, func(_ string, f *folder) bool { return f.gen != m.gen })
	m.unsaved = true
	if m.watching && !m.overflow && len(m.dirs) == int(m.visited.Load()) &&
		!slices.ContainsFunc(hits, func(h Hit) bool { return h.Unread != nil }) {
		m.whole = &wholeScan{at: m.seq, hits: slices.Clone(hits), mounts: m.mounts}
	}
	switch {
	case m.overflow || len(m.dirs) == 0 || clockOffset() < m.scanned-int64(time.Second):
		// Too much to remember, nothing, or read while the clock went
		// back: the last memory is of no more use.
		m.dirs, m.offset, m.whole = map[string]*folder{}, 0, nil
	default:
		// The oldest of its folders were read when the last memory's
		// oldest were, if any were taken from it.
		offset := m.scanned
		if m.recalled.Load() > 0 {
			offset = max(offset, m.offset)
		}
		m.offset = offset
	}
	m.kept = true
	return hits, nil
}

// still says whether the tree is as the last scan, whole, read it: see
// wholeScan (its keys made: keys).
func (m *Memory) still() bool {
	w := m.whole
	if !m.watching || w == nil || w.keys == nil || !slices.Equal(w.mounts, m.mounts) {
		return false
	}
	if f := m.dirs[m.root]; f == nil || !f.is(&m.rootSt) {
		return false
	}
	return !m.watch.changedAny(w.at, w.keys)
}

// keys makes the keys of the last scan's whole, unless one of its folders
// was not remembered so (then it is not whole). It is not the scan's to
// make: a scan that reads nothing is the next session's, and these are
// tens of thousands of map entries.
func (m *Memory) keys() {
	w := m.whole
	if w == nil || w.keys != nil {
		return
	}
	keys := make(map[string]bool, len(m.dirs))
	for _, f := range m.dirs {
		if f.key == "" || f.seq != w.at || f.dev != m.rootDev || f.mnt != m.rootMnt || !m.watch.current(f.marked) {
			m.whole = nil
			return
		}
		keys[f.key] = true
	}
	w.keys = keys
}

// remember keeps f, the folder at dir this scan read or took from dirs
// (recall gave it this scan's gen), unless that would pass maxBytes:
// then nothing is (the caller holds the scan's lock).
func (m *Memory) remember(dir string, f *folder) {
	if m.overflow {
		return
	}
	m.size += len(dir) + 40
	for _, s := range f.subdirs {
		m.size += len(s) + 2
	}
	if m.size > maxBytes {
		m.overflow = true
		return
	}
	if f.gen != m.gen {
		f.gen = m.gen
		m.fresh[dir] = f
	}
}

// Recalled says how many folders the last Scan went through, and how many
// of them it took from the memory.
func (m *Memory) Recalled() (folders, recalled int) {
	return int(m.visited.Load()), int(m.recalled.Load())
}

// Unlooked says how many of the folders the last Scan took from the
// memory it took without a look (its Watch saw no change in them).
func (m *Memory) Unlooked() int { return int(m.unlooked.Load()) }

// Keep writes what the last Scan read to the store, for the next scan.
// It writes root's own files: call it as root, not as the user.
func (m *Memory) Keep() error {
	if !m.kept {
		return errors.New("dirscan: nothing scanned to keep")
	}
	if !m.unsaved {
		return nil // as the store has it
	}
	m.unsaved = false
	path := filepath.Join(m.store, m.file())
	if len(m.dirs) == 0 {
		os.Remove(path)
		return nil
	}
	var buf bytes.Buffer
	encode(&buf, m.key, m.offset, m.dirs)
	if buf.Len() > maxBytes {
		os.Remove(path)
		return nil
	}
	// The folders above are others' too (/run/agent-lock holds the
	// daemon's socket and the users' recordings): made open to all.
	if err := os.MkdirAll(filepath.Dir(m.store), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(m.store, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if !rootsAlone(m.store) {
		return fmt.Errorf("dirscan: %s is not root's alone: no memory kept", m.store)
	}
	// /run is memory the whole system needs: a quarter of what is free
	// at most.
	var fs unix.Statfs_t
	if err := unix.Statfs(m.store, &fs); err != nil || (fs.Blocks != 0 && uint64(buf.Len())*4 > fs.Bavail*uint64(fs.Frsize)) {
		os.Remove(path)
		return fmt.Errorf("dirscan: too little room in %s for a memory of %d bytes", m.store, buf.Len())
	}
	f, err := os.CreateTemp(m.store, ".new-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	forget(m.store)
	return nil
}

// maxMemories bounds a store's memories, and maxMemoriesAUser a user's
// (a session keeps one for DIR and one for each writable grant): past
// either, or past userBytes or storeBytes, the least recently kept are
// removed, so that one user's projects cannot push out every other
// user's.
const (
	maxMemories      = 64
	maxMemoriesAUser = 16
)

// memoryName is a memory's file name: the uid, a dash, the key's hash.
var memoryName = regexp.MustCompile(`^([0-9]+)-[0-9a-f]{32}$`)

// forget removes the least recently kept memories past the bounds, a
// write's leftovers (a process killed in Keep) older than a minute, and
// anything else.
func forget(store string) {
	ents, err := os.ReadDir(store)
	if err != nil {
		return
	}
	type kept struct {
		name, uid string
		at        time.Time
		size      int64
	}
	var all []kept
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue
		}
		m := memoryName.FindStringSubmatch(e.Name())
		switch {
		case strings.HasPrefix(e.Name(), ".new-"):
			if time.Since(info.ModTime()) > time.Minute {
				os.Remove(filepath.Join(store, e.Name()))
			}
		case m == nil || !info.Mode().IsRegular():
			os.RemoveAll(filepath.Join(store, e.Name()))
		default:
			all = append(all, kept{e.Name(), m[1], info.ModTime(), info.Size()})
		}
	}
	slices.SortStableFunc(all, func(a, b kept) int { return b.at.Compare(a.at) })
	count, bytes := map[string]int{}, map[string]int64{}
	var n int
	var total int64
	for _, k := range all {
		count[k.uid]++
		bytes[k.uid] += k.size
		if count[k.uid] > maxMemoriesAUser || bytes[k.uid] > int64(userBytes) ||
			n >= maxMemories || total+k.size > int64(storeBytes) {
			os.Remove(filepath.Join(store, k.name))
			continue
		}
		n++
		total += k.size
	}
}

func (m *Memory) file() string {
	sum := sha256.Sum256([]byte(m.key))
	return fmt.Sprintf("%d-%s", m.id.UID, hex.EncodeToString(sum[:16]))
}

// rootsAlone says whether dir is a folder (not a link to one) that only
// root owns and may write.
func rootsAlone(dir string) bool {
	var st unix.Stat_t
	return unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == 0 && st.Mode&0o022 == 0
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = errors.New("too large")
	}
	return data, err
}

// recall returns the remembered entries of t's folder if it is the
// folder it was (asked as the scan's user: the thread it runs on), or
// the Watch saw no change in it.
func (s *scan) recall(t task) *folder {
	m, dir := s.mem, t.path
	f := m.dirs[dir]
	if f == nil {
		return nil
	}
	if t.known && m.unchanged(dir, f) {
		f.seq, f.gen = m.seq, m.gen
		m.recalled.Add(1)
		m.unlooked.Add(1)
		return f
	}
	if m.watching && f.dev == m.rootDev && f.mnt == m.rootMnt && !m.watch.current(f.marked) {
		// Marked first, then compared: a change after the mark is an
		// event, one before it moved the ctime.
		if !m.markAt(dir, f) {
			return nil
		}
	} else {
		var st unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, statxMask, &st) != nil || !f.is(&st) || !s.remembers(f.dev, dir) {
			return nil
		}
	}
	if m.watching && f.key != "" && m.watch.current(f.marked) {
		f.seq = m.seq // unchanged since it was read (its ctime), so since seq
	}
	f.gen = m.gen
	m.recalled.Add(1)
	return f
}

// watchScan readies this scan to take folders unlooked: the changes made
// so far read, the root's device, mount and file system id, and the
// mount points below it. Without them (a
// kernel without unique mount ids, before 6.8; a file system the watch
// does not follow; a root the user may not read) every folder is
// statx'd, as without a watch.
func (m *Memory) watchScan() {
	var st unix.Statx_t
	var fs unix.Statfs_t
	err := asuser.Do(m.id, func() error {
		fd, err := unix.Open(m.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, statxMask, &st); err != nil {
			return err
		}
		if err := unix.Fstatfs(fd, &fs); err != nil {
			return err
		}
		if !watchedFS[int64(fs.Type)] {
			return errNotWatched
		}
		return nil
	})
	if err != nil || st.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return
	}
	mounts, err := mountsBelow(m.root)
	if err != nil {
		return
	}
	// Every change made so far read: a folder marked before now (and
	// not named since) is as it was read.
	m.seq = m.watch.sync()
	m.rootDev, m.rootMnt, m.rootSt, m.fsid, m.mounts = devOf(&st), st.Mnt_id, st, fsidBytes(&fs), mounts
	m.watching = true
}

// unchanged says the watch saw no change in f, the folder at dir, since
// it was read, nor can one have been made unseen: f is of the root's
// file system and mount, and no mount point is at dir or above it.
func (m *Memory) unchanged(dir string, f *folder) bool {
	if !m.watching || f.seq == 0 || f.dev != m.rootDev || f.mnt != m.rootMnt ||
		f.ids&unix.STATX_MNT_ID_UNIQUE == 0 || !strings.HasPrefix(f.key, string(m.fsid)) {
		return false
	}
	for _, p := range m.mounts {
		if dir == p || strings.HasPrefix(dir, p+"/") {
			return false
		}
	}
	return m.watch.unchanged(f.key, f.marked, f.seq)
}

// follow marks f, a folder of the root's mount open at fd and not yet
// read, and gives it its key and the scan's seq, when the scan watches.
func (m *Memory) follow(f *folder, fd int) {
	if !m.watching || f.dev != m.rootDev || f.mnt != m.rootMnt {
		return
	}
	key := m.keyOfFD(fd)
	if key == "" {
		return
	}
	var err error
	if f.marked, err = m.watch.markDir(fd, ""); err == nil {
		f.key, f.seq = key, m.seq
	}
}

// keyOfFD is the key of the folder open at fd, of the root's file
// system ("" if it has no handle).
func (m *Memory) keyOfFD(fd int) string {
	h, _, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		return ""
	}
	return handleKey(m.fsid, h.Type(), h.Bytes())
}

// markAt marks the folder at dir and says whether it is still f (by a
// statx after the mark), giving it its key (a memory from the store has
// none) and the mark's gen. A folder that cannot be marked is compared
// all the same.
func (m *Memory) markAt(dir string, f *folder) bool {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	// "." from fd: fanotify takes no O_PATH descriptor itself.
	gen, markErr := m.watch.markDir(fd, ".")
	var st unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, statxMask, &st) != nil || !f.is(&st) {
		return false
	}
	if markErr != nil {
		return true
	}
	if key := m.keyOfFD(fd); key != "" {
		f.key, f.marked = key, gen
	}
	return true
}

// mountsBelow are the mount points below root in this process's mount
// namespace (the scan's threads'): a mount, or an unmount, below root
// makes no event in the folder it covers.
func mountsBelow(root string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, errors.New("dirscan: a mount table line it cannot read")
		}
		p := unescapeMount(f[4])
		if strings.HasPrefix(p, root+"/") || (root == "/" && p != "/") {
			out = append(out, p)
		}
	}
	return out, nil
}

// unescapeMount undoes the kernel's octal escapes in a mount table's
// path (a space is \040).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// remembers says whether the file system of device dev (dir is one of
// its folders) is one of rememberedFS, asking once a scan.
func (s *scan) remembers(dev uint64, dir string) bool {
	s.mu.Lock()
	ok, known := s.fs[dev]
	s.mu.Unlock()
	if known {
		return ok
	}
	if fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
		var st unix.Statx_t
		var fs unix.Statfs_t
		ok = unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE, &st) == nil && devOf(&st) == dev &&
			unix.Fstatfs(fd, &fs) == nil && rememberedFS[int64(fs.Type)]
		unix.Close(fd)
	}
	s.mu.Lock()
	s.fs[dev] = ok
	s.mu.Unlock()
	return ok
}

// rememberedFS are the file systems whose folders are remembered: local
// ones whose ctime moves with every change of a folder's entries, made
// by this kernel. Not a network file system (a cached ctime can be
// older than the server's folder), nor FUSE (its server says what the
// ctime is; virtiofs is one), nor an overlay (what a lower layer's
// change does to the merged folder is the overlay's to say): there every
// folder is read.
var rememberedFS = map[int64]bool{
	unix.EXT4_SUPER_MAGIC: true, unix.XFS_SUPER_MAGIC: true, unix.BTRFS_SUPER_MAGIC: true,
	unix.TMPFS_MAGIC: true, unix.F2FS_SUPER_MAGIC: true, unix.BCACHEFS_SUPER_MAGIC: true,
	0x2fc12fc1: true, // zfs
}

// identified says whether st has what a folder is remembered by.
func identified(st *unix.Statx_t) bool {
	return st.Mask&statxNeed == statxNeed && st.Mask&(unix.STATX_MNT_ID|unix.STATX_MNT_ID_UNIQUE) != 0 &&
		st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// folderOf is the folder st is, its entries yet to be read.
func folderOf(st *unix.Statx_t) *folder {
	return &folder{dev: devOf(st), ino: st.Ino, mnt: st.Mnt_id, subvol: st.Subvol, ctime: ctimeOf(st), ids: st.Mask & statxIDs}
}

// is says whether st is the folder f was, unchanged.
func (f *folder) is(st *unix.Statx_t) bool {
	return identified(st) && st.Mask&statxIDs == f.ids && devOf(st) == f.dev && st.Ino == f.ino &&
		st.Mnt_id == f.mnt && st.Subvol == f.subvol && ctimeOf(st) == f.ctime
}

func devOf(st *unix.Statx_t) uint64  { return uint64(st.Dev_major)<<32 | uint64(st.Dev_minor) }
func ctimeOf(st *unix.Statx_t) int64 { return st.Ctime.Sec*1e9 + int64(st.Ctime.Nsec) }
func hitOf(h Hit) byte {
	switch {
	case h.Dir:
		return hitDir
	case h.Regular:
		return hitRegular
	}
	return hitOther
}

// encode writes the memory: magic, key, the clock's offset, then each
// folder.
func encode(w *bytes.Buffer, key string, offset int64, dirs map[string]*folder) {
	var buf [binary.MaxVarintLen64]byte
	num := func(v uint64) { w.Write(buf[:binary.PutUvarint(buf[:], v)]) }
	str := func(s string) { num(uint64(len(s))); w.WriteString(s) }
	w.WriteString(magic)
	str(key)
	num(uint64(offset))
	num(uint64(len(dirs)))
	for path, f := range dirs {
		str(path)
		num(f.dev)
		num(f.ino)
		num(f.mnt)
		num(f.subvol)
		num(uint64(f.ids))
		num(uint64(f.ctime))
		str(f.key)
		w.WriteByte(f.hit)
		num(uint64(len(f.subdirs)))
		for _, s := range f.subdirs {
			str(s)
		}
	}
}

// decode reads what encode wrote, for key. Its strings share one copy of
// data, and its folders one array: a memory of 20,000 folders is read in
// a few milliseconds, before the scan can begin.
func decode(raw []byte, key string) (map[string]*folder, int64, error) {
	bad := errors.New("dirscan: a damaged memory")
	if !bytes.HasPrefix(raw, []byte(magic)) {
		return nil, 0, bad
	}
	data := string(raw[len(magic):])
	fail := false
	num := func() uint64 {
		var v uint64
		for shift := uint(0); shift < 64; shift += 7 {
			if len(data) == 0 {
				break
			}
			b := data[0]
			data = data[1:]
			v |= uint64(b&0x7f) << shift
			if b < 0x80 {
				return v
			}
		}
		fail = true
		return 0
	}
	str := func() string {
		n := num()
		if fail || n > uint64(len(data)) {
			fail = true
			return ""
		}
		s := data[:n]
		data = data[n:]
		return s
	}
	if str() != key || fail {
		return nil, 0, bad
	}
	offset := int64(num())
	n := num()
	if fail || n > maxRemembered || n > uint64(len(data))/10 {
		return nil, 0, bad
	}
	dirs := make(map[string]*folder, n)
	all := make([]folder, n)
	var names []string
	for i := range all {
		path := str()
		f := &all[i]
		f.dev, f.ino, f.mnt, f.subvol, f.ids, f.ctime = num(), num(), num(), num(), uint32(num()), int64(num())
		f.key = str()
		if fail || len(data) == 0 {
			return nil, 0, bad
		}
		f.hit, data = data[0], data[1:]
		subs := num()
		if fail || subs > uint64(len(data)) {
			return nil, 0, bad
		}
		first := len(names)
		for range subs {
			names = append(names, str())
		}
		if fail {
			return nil, 0, bad
		}
		f.subdirs = names[first:len(names):len(names)]
		dirs[path] = f
	}
	if len(data) != 0 {
		return nil, 0, bad
	}
	return dirs, offset, nil
}
