package dirscan

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

// tree makes a tree of 300 folders with a few repositories, old enough to
// be remembered (settle, which the test sets).
func tree(t *testing.T, settle time.Duration) string {
	t.Helper()
	old := Settle
	Settle = settle
	t.Cleanup(func() { Settle = old })
	root := t.TempDir()
	for i := range 12 {
		for j := range 24 {
			os.MkdirAll(filepath.Join(root, fmt.Sprintf("d%02d/e%02d", i, j)), 0o755)
		}
		if i%5 == 0 {
			os.MkdirAll(filepath.Join(root, fmt.Sprintf("d%02d/e01/.git/hooks", i)), 0o755)
		}
	}
	time.Sleep(2 * settle)
	return root
}

// needRoot skips a test of the memory, which is root's, unless root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the memory is root's")
	}
}

// remembered is tree's, and a store holding the memory of a walk of it
// that the next walk takes every folder from (so a test's is real).
func remembered(t *testing.T) (root, store string) {
	t.Helper()
	root, store = tree(t, 50*time.Millisecond), filepath.Join(t.TempDir(), "scans")
	if n := rescan(t, root, store, func() {}); n < 300 {
		t.Fatalf("an unchanged tree: %d folders from the memory, want all (the test is real)", n)
	}
	return root, store
}

func me() asuser.ID { return asuser.ID{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())} }

// rescan keeps the memory of a scan of root, lets change change the
// tree, and scans again from a recalled memory: it must find what a scan
// without one finds. It returns how many folders the second scan took
// from the memory.
func rescan(t *testing.T, root, store string, change func()) int {
	t.Helper()
	m := Recall(store, me(), root, ".git", nil)
	if _, err := m.Scan(); err != nil {
		t.Fatal(err)
	}
	if err := m.Keep(); err != nil {
		t.Fatal(err)
	}
	change()
	m = Recall(store, me(), root, ".git", nil)
	got, err := m.Scan()
	if err != nil {
		t.Fatal(err)
	}
	want, err := Named(me(), root, ".git", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("with the memory found\n%v\nwithout\n%v", got, want)
	}
	_, n := m.Recalled()
	return n
}

// treeChange is a way a repository can appear in, or leave, a remembered
// tree: before runs ahead of the first scan, change between the scans.
type treeChange struct {
	name           string
	before, change func(t *testing.T, root, outside string)
}

// tree makes the remembered tree for c, and the folder outside it the
// change may use, with what c.before does done and settled, and a store.
func (c treeChange) tree(t *testing.T) (root, outside, store string) {
	t.Helper()
	root, outside, store = tree(t, 50*time.Millisecond), t.TempDir(), filepath.Join(t.TempDir(), "scans")
	if c.before != nil {
		c.before(t, root, outside)
		time.Sleep(2 * Settle)
	}
	return root, outside, store
}

// watching are Memories kept in store, with a Watch, which keep a scan
// at once (keepAfter), and close with the test.
func watching(t *testing.T, store string) *Memories {
	t.Helper()
	old := keepAfter
	keepAfter = 0
	t.Cleanup(func() { keepAfter = old })
	ms, err := NewMemories(store)
	if err != nil {
		t.Fatal("no watch:", err)
	}
	t.Cleanup(ms.Close)
	return ms
}

// changes are the ways TestMemoryHidesNoChange and TestWatchHidesNoChange
// try.
func changes() []treeChange {
	mount := func(t *testing.T, other, target string) {
		t.Helper()
		if err := unix.Mount(other, target, "", unix.MS_BIND, ""); err != nil {
			t.Skip("no bind mount here:", err)
		}
		t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
	}
	return []treeChange{
		{name: "nothing", change: func(*testing.T, string, string) {}},
		{name: "git init in a folder", change: func(t *testing.T, root, _ string) {
			os.Mkdir(filepath.Join(root, "d03/e07/.git"), 0o755)
		}},
		{name: "a .git file", change: func(t *testing.T, root, _ string) {
			os.WriteFile(filepath.Join(root, "d04/e02/.git"), []byte("gitdir: /x\n"), 0o644)
		}},
		{name: "a .git symlink", change: func(t *testing.T, root, _ string) {
			os.Symlink("/x", filepath.Join(root, "d04/e03/.git"))
		}},
		{name: "git init, then the folder's times set back", change: func(t *testing.T, root, _ string) {
			d := filepath.Join(root, "d03/e08")
			var st unix.Stat_t
			unix.Lstat(d, &st)
			os.Mkdir(filepath.Join(d, ".git"), 0o755)
			at, mt := time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix())
			if err := os.Chtimes(d, at, mt); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a folder swapped for one holding a repository", change: func(t *testing.T, root, outside string) {
			other := filepath.Join(outside, "swap")
			os.MkdirAll(filepath.Join(other, "deep/.git"), 0o755)
			os.Rename(filepath.Join(root, "d06/e06"), filepath.Join(outside, "gone"))
			if err := os.Rename(other, filepath.Join(root, "d06/e06")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "two folders swapped by one rename", change: func(t *testing.T, root, _ string) {
			// e05 holds no repository, e01 does: exchanged, each
			// folder keeps its inode and entries, only the names move.
			if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, "d05/e01"), unix.AT_FDCWD, filepath.Join(root, "d05/e05"), unix.RENAME_EXCHANGE); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a tree moved in", change: func(t *testing.T, root, outside string) {
			other := filepath.Join(outside, "moved")
			os.MkdirAll(filepath.Join(other, "a/b/.git"), 0o755)
			if err := os.Rename(other, filepath.Join(root, "d07/e09/moved")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a repository removed", change: func(t *testing.T, root, _ string) {
			os.RemoveAll(filepath.Join(root, "d05/e01/.git"))
		}},
		{name: "a folder mounted over", change: func(t *testing.T, root, outside string) {
			other := filepath.Join(outside, "mounted")
			os.MkdirAll(filepath.Join(other, "in/.git"), 0o755)
			mount(t, other, filepath.Join(root, "d08/e03"))
		}},
		{name: "a folder's mount gone", before: func(t *testing.T, root, outside string) {
			// Remembered as the mount showed it; then the folder below
			// shows, its repository with it.
			os.MkdirAll(filepath.Join(root, "d09/e04/in/.git"), 0o755)
			other := filepath.Join(outside, "mounted")
			os.MkdirAll(filepath.Join(other, "in"), 0o755)
			mount(t, other, filepath.Join(root, "d09/e04"))
		}, change: func(t *testing.T, root, _ string) {
			if err := unix.Unmount(filepath.Join(root, "d09/e04"), 0); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a mount below a mount gone", before: func(t *testing.T, root, outside string) {
			other, under := filepath.Join(outside, "mounted"), filepath.Join(outside, "under")
			os.MkdirAll(filepath.Join(other, "x/y"), 0o755)
			os.MkdirAll(filepath.Join(under, "z/.git"), 0o755)
			mount(t, other, filepath.Join(root, "d10/e05"))
			mount(t, under, filepath.Join(root, "d10/e05/x/y"))
		}, change: func(t *testing.T, root, _ string) {
			if err := unix.Unmount(filepath.Join(root, "d10/e05/x/y"), 0); err != nil {
				t.Fatal(err)
			}
		}},
	}
}

// TestMemoryHidesNoChange: every way a repository can appear in a
// remembered tree is found by the next scan, and the rest of the tree is
// taken from the memory (so the test is real).
func TestMemoryHidesNoChange(t *testing.T) {
	needRoot(t)
	for _, c := range changes() {
		t.Run(c.name, func(t *testing.T) {
			root, outside, store := c.tree(t)
			n := rescan(t, root, store, func() { c.change(t, root, outside) })
			// All but the changed folders (a few) and those made since.
			if n < 300-5 {
				t.Errorf("the second scan took %d folders from the memory, want most of 300", n)
			}
		})
	}
}

// TestWatchHidesNoChange: the same with Memories (the daemon's): after a
// first scan that reads every folder, a second gives its hits again
// whole (the Watch saw no change: the test is real); a change of each
// way is found by the third, which walks again (no longer whole) and
// takes the rest unlooked, and a fourth finds it too.
func TestWatchHidesNoChange(t *testing.T) {
	needRoot(t)
	for _, c := range changes() {
		t.Run(c.name, func(t *testing.T) {
			root, outside, store := c.tree(t)
			ms := watching(t, store)
			scan := func() ([]Hit, Stats) {
				t.Helper()
				hits, st, err := ms.Scan(me(), root, ".git", nil)
				if err != nil {
					t.Fatal(err)
				}
				ms.pending.Wait()
				return hits, st
			}
			if _, st := scan(); st.Unlooked != 0 {
				t.Fatalf("the first scan took %d folders unlooked", st.Unlooked)
			}
			// Whole: the root too is taken unlooked; but not with a
			// mount below the root (its folders have their mount's id).
			if _, st := scan(); st.Folders < 300 || (c.before == nil && st.Unlooked != st.Folders) || st.Unlooked < 300-5 {
				t.Fatalf("an unchanged tree: %d of %d folders taken unlooked, want all (given whole, without mounts)", st.Unlooked, st.Folders)
			}
			c.change(t, root, outside)
			want, err := Named(me(), root, ".git", nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				got, st := scan()
				if !reflect.DeepEqual(got, want) {
					t.Errorf("scan %d after the change found\n%v\nwithout a memory\n%v", i+1, got, want)
				}
				if i == 0 && c.name != "nothing" && st.Unlooked == st.Folders {
					t.Errorf("the change was not seen: the scan was given whole")
				}
				if st.Unlooked < 300-30 { // the changed folders, and their folders statx'd
					t.Errorf("scan %d after the change took %d folders unlooked, want most of 300", i+1, st.Unlooked)
				}
			}
		})
	}
}

// TestMemoryRemembersNoFreshFolder: a folder changed in the last Settle
// before a scan is read again by the next (its ctime may not have moved
// with a change in the same tick of the file system's clock).
func TestMemoryRemembersNoFreshFolder(t *testing.T) {
	needRoot(t)
	root := tree(t, 50*time.Millisecond)
	Settle = time.Hour
	if n := rescan(t, root, filepath.Join(t.TempDir(), "scans"), func() {}); n != 0 {
		t.Errorf("%d folders changed within Settle were taken from the memory", n)
	}
}

// TestMemoryIsRootsAndTheUsers: a memory in a store others may write, or
// kept for another user or other groups, is not used.
func TestMemoryIsRootsAndTheUsers(t *testing.T) {
	needRoot(t)
	root, store := remembered(t)
	other := me()
	other.Groups = []uint32{4242}
	m := Recall(store, other, root, ".git", nil)
	m.Scan()
	if _, n := m.Recalled(); n != 0 {
		t.Errorf("another set of groups took %d folders from the memory", n)
	}
	os.Chmod(store, 0o777)
	m = Recall(store, me(), root, ".git", nil)
	m.Scan()
	if _, n := m.Recalled(); n != 0 {
		t.Errorf("a memory in a folder anyone may write: %d folders taken from it", n)
	}
	if err := m.Keep(); err == nil {
		t.Error("a memory was kept in a folder anyone may write")
	}
}

// TestMemoryOnlyOnKnownFileSystems: a tree on a file system whose ctimes
// memory.go does not vouch for (ramfs here; NFS, FUSE and overlays
// alike) is read whole every time.
func TestMemoryOnlyOnKnownFileSystems(t *testing.T) {
	needRoot(t)
	old := Settle
	Settle = 50 * time.Millisecond
	t.Cleanup(func() { Settle = old })
	root := t.TempDir()
	if err := unix.Mount("ramfs", root, "ramfs", 0, ""); err != nil {
		t.Skip("no ramfs here:", err)
	}
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	for i := range 20 {
		os.MkdirAll(filepath.Join(root, fmt.Sprintf("d%02d/e", i)), 0o755)
	}
	time.Sleep(2 * Settle)
	if n := rescan(t, root, filepath.Join(t.TempDir(), "scans"), func() {}); n != 0 {
		t.Errorf("%d folders of a ramfs taken from the memory", n)
	}
}

// TestMemoryForgetsAcrossAClockStepBack: a memory kept before the wall
// clock was set back (against the boot clock) is not used: a change made
// since could have the ctime a folder had then.
func TestMemoryForgetsAcrossAClockStepBack(t *testing.T) {
	needRoot(t)
	root, store := remembered(t)
	// The memory as if kept with the wall clock 10 s ahead of now.
	m := Recall(store, me(), root, ".git", nil)
	m.Scan()
	var buf bytes.Buffer
	encode(&buf, m.key, clockOffset()+int64(10*time.Second), m.dirs)
	if err := os.WriteFile(filepath.Join(store, m.file()), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	m = Recall(store, me(), root, ".git", nil)
	m.Scan()
	if folders, n := m.Recalled(); n != 0 || folders < 300 {
		t.Errorf("after the clock went back, %d of %d folders were taken from the memory", n, folders)
	}
}

// FuzzDecode: a damaged memory is refused, never a crash.
func FuzzDecode(f *testing.F) {
	for _, dirs := range []map[string]*folder{
		{},
		{"/p": {dev: 8<<32 | 1, ino: 12, mnt: 30, subvol: 256, ids: unix.STATX_MNT_ID_UNIQUE, ctime: 1e18, subdirs: []string{"a", "b"}, hit: hitDir, key: "\x01\x02"}},
	} {
		var buf bytes.Buffer
		encode(&buf, "k", 12345, dirs)
		f.Add(buf.Bytes())
		got, offset, err := decode(buf.Bytes(), "k")
		if err != nil || !reflect.DeepEqual(got, dirs) || offset != 12345 {
			f.Fatalf("decode(encode) = %v, %v", got, err)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		decode(data, "k")
	})
}

// TestMemoryStoreIsBounded: a store keeps a user's maxMemoriesAUser last
// kept.
func TestMemoryStoreIsBounded(t *testing.T) {
	needRoot(t)
	root := tree(t, 50*time.Millisecond)
	store := filepath.Join(t.TempDir(), "scans")
	var last *Memory
	for i := range maxMemories + 5 {
		last = Recall(store, me(), root, fmt.Sprint("name", i), nil)
		last.Scan()
		if err := last.Keep(); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(store)
	if len(ents) != maxMemoriesAUser {
		t.Errorf("%d memories of one user in the store, want %d", len(ents), maxMemoriesAUser)
	}
	if _, err := os.Stat(filepath.Join(store, last.file())); err != nil {
		t.Errorf("the last memory kept was removed: %v", err)
	}
}

// TestMemoryBounds: a memory past maxBytes is not kept (nor is one of a
// walk that remembered nothing), and the last one is removed then; the
// store keeps a user's memories within userBytes and everyone's within
// storeBytes, so one user's many projects leave the others' alone; a
// write's leftovers and foreign files go.
func TestMemoryBounds(t *testing.T) {
	needRoot(t)
	root, store := remembered(t)
	m := Recall(store, me(), root, ".git", nil)
	file := filepath.Join(store, m.file())
	old := maxBytes
	maxBytes = 4096 // 300 folders' paths are more
	m.Scan()
	maxBytes = old
	if err := m.Keep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err == nil {
		t.Error("a memory past maxBytes was kept, or the last one left")
	}
	// A walk that remembered nothing (every folder fresh) keeps nothing.
	Settle = time.Hour
	m = Recall(store, me(), root, ".git", nil)
	m.Scan()
	m.Keep()
	if ents, _ := os.ReadDir(store); len(ents) != 0 {
		t.Errorf("a walk that remembered nothing kept %d files", len(ents))
	}

	// The store's bounds, on made-up memories.
	oldUser, oldStore := userBytes, storeBytes
	userBytes, storeBytes = 4000, 10000
	t.Cleanup(func() { userBytes, storeBytes = oldUser, oldStore })
	now := time.Now()
	write := func(name string, size int, age time.Duration) {
		p := filepath.Join(store, name)
		os.WriteFile(p, make([]byte, size), 0o600)
		os.Chtimes(p, now.Add(-age), now.Add(-age))
	}
	hash := func(i int) string { return fmt.Sprintf("%032x", i) }
	for i := range 4 { // another user's, older
		write("1001-"+hash(i), 1000, time.Hour+time.Duration(i)*time.Minute)
	}
	for i := range 10 { // one user's many, newer
		write("1002-"+hash(i), 1000, time.Duration(i)*time.Minute)
	}
	write(".new-leftover", 10, 2*time.Minute)
	write(".new-writing", 10, 0)
	write("0123abcd", 10, 0) // the first format's name
	forget(store)
	var users [3]int
	for _, e := range must(os.ReadDir(store)) {
		switch {
		case e.Name()[:5] == "1001-":
			users[1]++
		case e.Name()[:5] == "1002-":
			users[2]++
			if e.Name() != "1002-"+hash(0) && e.Name() != "1002-"+hash(1) && e.Name() != "1002-"+hash(2) && e.Name() != "1002-"+hash(3) {
				t.Errorf("kept %s, not one of the user's four newest", e.Name())
			}
		case e.Name() == ".new-writing":
			users[0]++
		default:
			t.Errorf("%s left in the store", e.Name())
		}
	}
	if users[1] != 4 || users[2] != 4 || users[0] != 1 {
		t.Errorf("kept %d of the other user's 4, %d of the flooding user's 10 (want 4: userBytes), and the write under way %d times", users[1], users[2], users[0])
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestWatchSeesTheRootSwapped: a root renamed away and another folder
// put at its path makes no event in any folder the memory has: the
// root's own identity tells (a mutant that did not compare it gave the
// old tree's hits whole).
func TestWatchSeesTheRootSwapped(t *testing.T) {
	needRoot(t)
	root := tree(t, 50*time.Millisecond)
	ms := watching(t, filepath.Join(t.TempDir(), "scans"))
	for range 2 {
		if _, _, err := ms.Scan(me(), root, ".git", nil); err != nil {
			t.Fatal(err)
		}
		ms.pending.Wait()
	}
	if err := os.Rename(root, root+".old"); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "x/.git"), 0o755)
	got, _, err := ms.Scan(me(), root, ".git", nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Named(me(), root, ".git", nil)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("with the root swapped found\n%v\nwithout a memory\n%v", got, want)
	}
}

// TestWatchMarksBounded: past maxMarks every mark is removed (the next
// mark's, here one of another folder): a change made in a folder whose
// mark went is still found, and the folders are marked again as scans
// read them, then taken unlooked again.
func TestWatchMarksBounded(t *testing.T) {
	needRoot(t)
	root, other := tree(t, 50*time.Millisecond), t.TempDir()
	ms := watching(t, filepath.Join(t.TempDir(), "scans"))
	scan := func(n int) Stats {
		t.Helper()
		want, _ := Named(me(), root, ".git", nil)
		got, st, err := ms.Scan(me(), root, ".git", nil)
		if err != nil {
			t.Fatal(err)
		}
		ms.pending.Wait()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("scan %d found\n%v\nwithout a memory\n%v", n, got, want)
		}
		return st
	}
	scan(1)
	if st := scan(2); st.Unlooked != st.Folders {
		t.Fatalf("an unchanged tree was not given whole (%+v): the test proves nothing", st)
	}
	ms.watch.mu.Lock()
	ms.watch.marks = maxMarks
	ms.watch.mu.Unlock()
	fd, err := unix.Open(other, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := ms.watch.markDir(fd, ""); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(root, "d09/e09/.git"), 0o755)
	scan(3)
	if st := scan(4); st.Unlooked < 300-1 {
		t.Errorf("once marked again, %d of %d folders taken unlooked", st.Unlooked, st.Folders)
	}
}

// TestMemoriesBusy: a scan of a tree whose last scan is still under way,
// or past maxScanning scans under way, is not made (ErrBusy: the session
// walks itself); a tree's folder that never answers holds no more.
func TestMemoriesBusy(t *testing.T) {
	ms := &Memories{held: map[string]*held{}, scanning: make(chan struct{}, maxScanning)}
	of := keyOf(me(), "/p", ".git", nil)
	ms.held[of] = &held{scanning: true}
	if _, _, err := ms.Scan(me(), "/p", ".git", nil); err != ErrBusy {
		t.Errorf("a scan of a tree being scanned: %v, want ErrBusy", err)
	}
	for range maxScanning {
		ms.scanning <- struct{}{}
	}
	if _, _, err := ms.Scan(me(), "/q", ".git", nil); err != ErrBusy {
		t.Errorf("a scan past maxScanning: %v, want ErrBusy", err)
	}
}
