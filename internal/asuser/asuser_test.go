package asuser

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMkdirAllActsAsTheUser: the folders are the user's, and where the user
// may not create (a root folder, reached directly or through a symlink the
// user planted) neither does MkdirAll, although agent-lock runs as root.
func TestMkdirAllActsAsTheUser(t *testing.T) {
	const uid, gid = 4242, 4242
	root := rootTree(t)
	home := filepath.Join(root, "home")
	locked := filepath.Join(root, "etc") // root's, 0755
	for _, d := range []string{home, locked} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chown(home, uid, gid)
	if err := os.Symlink(locked, filepath.Join(home, "link")); err != nil {
		t.Fatal(err)
	}
	os.Lchown(filepath.Join(home, "link"), uid, gid)

	made := filepath.Join(home, ".local/share/opencode")
	if err := MkdirAll(ID{UID: uid, GID: gid}, made); err != nil {
		t.Fatal(err)
	}
	for p := made; p != home; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid || st.Gid != gid || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: owner %d:%d mode %v, want %d:%d 0700", p, st.Uid, st.Gid, fi.Mode().Perm(), uid, gid)
		}
	}
	for _, p := range []string{filepath.Join(locked, "x"), filepath.Join(home, "link", "cron.d")} {
		if err := MkdirAll(ID{UID: uid, GID: gid}, p); !errors.Is(err, os.ErrPermission) {
			t.Errorf("MkdirAll(%s) = %v, want permission denied", p, err)
		}
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was made", p)
		}
	}
}

// rootTree is a folder the test user can reach (t.TempDir's parent is
// private to root), owned by root.
func rootTree(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another user")
	}
	root := t.TempDir()
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(root, 0o755)
	return root
}

// TestOpenFileActsAsTheUserWithTheirGroups: a file open to one of the
// user's groups opens; one open only to root's group does not, although
// the thread started as root; a symlink at the end is refused, not followed.
func TestOpenFileActsAsTheUserWithTheirGroups(t *testing.T) {
	root := rootTree(t)
	const uid, gid, group = 4242, 4242, 4343
	id := ID{UID: uid, GID: gid, Groups: []uint32{gid, group}}
	mine := filepath.Join(root, "group-file")
	roots := filepath.Join(root, "root-group-file")
	for _, f := range []struct {
		path string
		gid  int
	}{{mine, group}, {roots, 0}} {
		os.WriteFile(f.path, []byte("x"), 0o660)
		os.Chmod(f.path, 0o660) // past the umask
		os.Chown(f.path, 0, f.gid)
	}
	if f, err := OpenFile(id, mine, os.O_WRONLY, 0); err != nil {
		t.Errorf("a file writable by the user's group %d: %v", group, err)
	} else {
		f.Close()
	}
	if f, err := OpenFile(id, roots, os.O_WRONLY, 0); !errors.Is(err, os.ErrPermission) {
		t.Errorf("a file writable by root's group only: %v, want permission denied", err)
		if f != nil {
			f.Close()
		}
	}
	link := filepath.Join(root, "link")
	os.Symlink(mine, link)
	if f, err := OpenFile(id, link, os.O_WRONLY, 0); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("a symlink: %v, want ELOOP", err)
		if f != nil {
			f.Close()
		}
	}
	if b, err := ReadFile(id, link, 10); err != nil || string(b) != "x" {
		t.Errorf("ReadFile through a symlink to a file of the user's group: %q %v", b, err)
	}
	os.Chmod(roots, 0o600)
	rootLink := filepath.Join(root, "root-link")
	os.Symlink(roots, rootLink)
	if _, err := ReadFile(id, rootLink, 10); !errors.Is(err, os.ErrPermission) {
		t.Errorf("ReadFile through a symlink to root's file: %v, want permission denied", err)
	}
	if b, err := ReadFile(id, mine, 10); err != nil || string(b) != "x" {
		t.Errorf("ReadFile: %q %v", b, err)
	}
	if _, err := ReadFile(id, mine, 0); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile over the limit: %v", err)
	}
	fifo := filepath.Join(root, "fifo")
	syscall.Mkfifo(fifo, 0o666)
	if _, err := ReadFile(id, fifo, 10); err == nil {
		t.Error("ReadFile read a FIFO")
	}
}

// TestReplaceNeverWritesThrough: what stands at the path, a symlink or a
// hard link to another file, is replaced as an entry; its target keeps its
// contents. And the user's own folder is needed: a root folder refuses.
func TestReplaceNeverWritesThrough(t *testing.T) {
	root := rootTree(t)
	const uid, gid = 4242, 4242
	id := ID{UID: uid, GID: gid}
	dir := filepath.Join(root, "user")
	os.Mkdir(dir, 0o755)
	os.Chown(dir, uid, gid)
	target := filepath.Join(dir, "bashrc")
	os.WriteFile(target, []byte("keep"), 0o644)
	os.Chown(target, uid, gid)
	for _, plant := range []func(string) error{
		func(p string) error { return os.Symlink(target, p) },
		func(p string) error { return os.Link(target, p) },
	} {
		p := filepath.Join(dir, "report.json")
		os.Remove(p)
		if err := plant(p); err != nil {
			t.Fatal(err)
		}
		if err := Replace(id, p, strings.NewReader("report"), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(target); string(b) != "keep" {
			t.Errorf("the planted link's target now holds %q", b)
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != uid {
			t.Errorf("%s after Replace: %v %v", p, fi, err)
		}
	}
	if err := Replace(id, filepath.Join(root, "x"), strings.NewReader("r"), 0o600); !errors.Is(err, os.ErrPermission) {
		t.Errorf("Replace in root's folder: %v, want permission denied", err)
	}
	// RemoveAll as the user leaves what the user could not remove.
	sub := filepath.Join(dir, "tree")
	os.Mkdir(sub, 0o755)
	os.Chown(sub, 0, 0)
	os.WriteFile(filepath.Join(sub, "roots"), nil, 0o644)
	if err := RemoveAll(id, sub); err == nil {
		t.Error("RemoveAll removed a root folder's contents as the user")
	}
	if _, err := os.Stat(filepath.Join(sub, "roots")); err != nil {
		t.Errorf("root's file in the tree: %v", err)
	}
}

// TestThreadActsAsTheUser: every piece of work a Thread does is the
// user's, and a closed Thread does no more.
func TestThreadActsAsTheUser(t *testing.T) {
	const uid, gid = 4242, 4242
	root := rootTree(t)
	os.Chmod(root, 0o777)
	th, err := NewThread(ID{UID: uid, GID: gid})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b"} {
		p := filepath.Join(root, name)
		if err := th.Do(func() error { return os.WriteFile(p, nil, 0o600) }); err != nil {
			t.Fatalf("piece %d: %v", i, err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid {
			t.Errorf("%s: owner %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
	}
	if err := th.Do(func() error { return os.WriteFile("/etc/agent-lock-asuser-test", nil, 0o600) }); !errors.Is(err, os.ErrPermission) {
		os.Remove("/etc/agent-lock-asuser-test")
		t.Errorf("writing /etc as the user: %v, want permission denied", err)
	}
	th.Close()
	ran := false
	if err := th.Do(func() error { ran = true; return nil }); !errors.Is(err, ErrClosed) || ran {
		t.Errorf("Do after Close: %v (ran %v), want ErrClosed and nothing run", err, ran)
	}
}

// TestOpenListing: a folder the user may search but not list gives its
// names, and the thread acts as the user after it (it may not list root's
// folder by itself, nor write /etc); one the user may not search gives the
// user's refusal.
func TestOpenListing(t *testing.T) {
	const uid, gid = 4242, 4242
	root := rootTree(t)
	search, closed := filepath.Join(root, "search"), filepath.Join(root, "closed")
	os.Mkdir(search, 0o711)
	os.Mkdir(closed, 0o700)
	os.WriteFile(filepath.Join(search, "name"), nil, 0o600)
	th, err := NewThread(ID{UID: uid, GID: gid})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	// The thread's ids, groups and effective capabilities, as the kernel
	// shows them.
	ids := func() string {
		b, _ := os.ReadFile("/proc/thread-self/status")
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			for _, k := range []string{"Uid:", "Gid:", "Groups:", "CapEff:"} {
				if strings.HasPrefix(l, k) {
					keep = append(keep, l)
				}
			}
		}
		return strings.Join(keep, "; ")
	}
	th.Do(func() error {
		// t.Fatal here would end the thread's goroutine, and Do would
		// wait for ever: errors, and return.
		if _, err := os.ReadDir(search); !errors.Is(err, os.ErrPermission) {
			t.Errorf("as the user, listing %s: %v, want permission denied (the test would prove nothing)", search, err)
			return nil
		}
		before := ids()
		f, err := OpenListing(ID{UID: uid, GID: gid}, search)
		if after := ids(); after != before {
			t.Errorf("the thread's ids after the listing:\n%s\nbefore:\n%s", after, before)
		}
		if err != nil {
			t.Error(err)
			return nil
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil || len(names) != 1 || names[0] != "name" {
			t.Errorf("listing: %v, %v; want [name]", names, err)
		}
		if _, err := os.ReadDir(search); !errors.Is(err, os.ErrPermission) {
			t.Errorf("after the listing, as the user: %v, want permission denied", err)
		}
		if err := os.WriteFile("/etc/agent-lock-asuser-test", nil, 0o600); !errors.Is(err, os.ErrPermission) {
			os.Remove("/etc/agent-lock-asuser-test")
			t.Errorf("after the listing, writing /etc: %v, want permission denied", err)
		}
		if _, err := OpenListing(ID{UID: uid, GID: gid}, closed); !errors.Is(err, os.ErrPermission) {
			t.Errorf("listing a folder the user may not search: %v, want permission denied", err)
		}
		return nil
	})
}
