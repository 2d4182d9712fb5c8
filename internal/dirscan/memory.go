package dirscan

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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
	next  map[string]*folder // this scan's
	// offset: the clock's (clockOffset) when the oldest folder of dirs
	// was read; scanned: when this scan began; size: next's size, about
	// as encoded, and overflow: it passed maxBytes (next is dropped).
	offset, scanned int64
	size            int
	overflow        bool

	recalled atomic.Int64 // folders the last Scan took from dirs
	visited  atomic.Int64 // folders it went through
}

// folder is one folder as a scan read it.
type folder struct {
	dev, ino, mnt, subvol uint64
	ctime                 int64  // ns
	ids                   uint32 // which of statxIDs the kernel gave
	subdirs               []string
	hit                   byte // the entry called name in it: hitNone, hitDir, hitRegular or hitOther
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

const magic = "agent-lock dirscan memory 2\n"

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

// Of says whether m is the memory of a scan of root by id for name,
// with skip.
func (m *Memory) Of(id asuser.ID, root, name string, skip []string) bool {
	return m.of == keyOf(id, root, name, skip)
}

// Scan is Named for the memory's user, root, name and skip, taking every
// folder unchanged since the last scan from the memory, and remembering
// what it reads for Keep.
func (m *Memory) Scan() ([]Hit, error) {
	m.next = make(map[string]*folder, len(m.dirs))
	m.size, m.overflow = len(magic)+len(m.key)+40, false
	m.scanned = clockOffset()
	m.recalled.Store(0)
	m.visited.Store(0)
	return named(m.id, m.root, m.name, m.skip, m)
}

// remember adds dir to what Keep writes, unless that would pass
// maxBytes: then nothing is (the caller holds the scan's lock).
func (m *Memory) remember(dir string, f *folder) {
	if m.overflow {
		return
	}
	m.size += len(dir) + 40
	for _, s := range f.subdirs {
		m.size += len(s) + 2
	}
	if m.size > maxBytes {
		m.overflow, m.next = true, nil
		return
	}
	m.next[dir] = f
}

// Recalled says how many folders the last Scan went through, and how many
// of them it took from the memory.
func (m *Memory) Recalled() (folders, recalled int) {
	return int(m.visited.Load()), int(m.recalled.Load())
}

// Keep writes what the last Scan read to the store, for the next scan.
// It writes root's own files: call it as root, not as the user.
func (m *Memory) Keep() error {
	if m.next == nil && !m.overflow {
		return errors.New("dirscan: nothing scanned to keep")
	}
	path := filepath.Join(m.store, m.file())
	if m.overflow || len(m.next) == 0 || clockOffset() < m.scanned-int64(time.Second) {
		// Too much to remember, nothing, or read while the clock went
		// back: the last memory is of no more use.
		os.Remove(path)
		return nil
	}
	// The oldest of its folders were read when the last memory's oldest
	// were, if any were taken from it.
	offset := m.scanned
	if m.recalled.Load() > 0 {
		offset = max(offset, m.offset)
	}
	var buf bytes.Buffer
	encode(&buf, m.key, offset, m.next)
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

// recall returns dir's remembered entries if dir is the folder it was
// (asked as the scan's user: the thread it runs on).
func (s *scan) recall(dir string) *folder {
	f := s.mem.dirs[dir]
	if f == nil {
		return nil
	}
	var st unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, statxMask, &st) != nil || !f.is(&st) || !s.remembers(f.dev, dir) {
		return nil
	}
	s.mem.recalled.Add(1)
	return f
}

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
