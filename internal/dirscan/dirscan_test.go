package dirscan

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestNamedFindsWhatAWalkFinds: on a tree of many folders, Named finds
// what one filepath.WalkDir in lexical order finds, in that order: every
// entry of the name at any depth, none inside one found, none in a
// skipped folder or through a symlink.
func TestNamedFindsWhatAWalkFinds(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		for j := range 25 {
			mk(fmt.Sprintf("d%02d/e%02d", i, j))
		}
		if i%7 == 0 {
			mk(fmt.Sprintf("d%02d/e03/.git/hooks", i))
			mk(fmt.Sprintf("d%02d/e03/.git/inner/.git", i)) // inside one found: not found
		}
	}
	mk("a/.git")
	mk("a-b/.git")
	mk("a/b/.git")
	mk("skipped/x/.git")
	os.WriteFile(filepath.Join(root, "d05/e01/.git"), []byte("gitdir: ../x\n"), 0o644)
	os.Symlink(filepath.Join(root, "a"), filepath.Join(root, "link"))
	mk(".git")
	skip := []string{filepath.Join(root, "skipped")}

	var want []Hit
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		if d.IsDir() && p == skip[0] {
			return fs.SkipDir
		}
		if d.Name() != ".git" {
			return nil
		}
		want = append(want, Hit{Path: p, Dir: d.IsDir(), Regular: d.Type().IsRegular()})
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	got, err := Named(asuser.ID{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}, root, ".git", skip)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 11 || !reflect.DeepEqual(got, want) {
		t.Errorf("Named found\n%v\nwant (a walk's, %d)\n%v", got, len(want), want)
	}
}

// TestNamedReadsAsTheUser: a folder only root may read is not read, on
// any of the scan's threads, although the scan runs as root.
func TestNamedReadsAsTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another user")
	}
	const uid, gid = 4242, 4242
	root, _ := testenv.ProjectDir(t, uid) // a root the user can reach
	for i := range 64 {
		open := filepath.Join(root, fmt.Sprintf("open%02d/.git", i))
		locked := filepath.Join(root, fmt.Sprintf("locked%02d", i))
		os.MkdirAll(open, 0o755)
		os.MkdirAll(filepath.Join(locked, ".git"), 0o755)
		os.Chmod(locked, 0o700) // root's
	}
	got, err := Named(asuser.ID{UID: uid, GID: gid}, root, ".git", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 64 {
		t.Errorf("as the user, found %d, want the 64 open ones", len(got))
	}
	for _, h := range got {
		if filepath.Base(filepath.Dir(h.Path))[:4] != "open" {
			t.Errorf("found %s, which only root may read", h.Path)
		}
	}
	all, _ := Named(asuser.ID{}, root, ".git", nil)
	if len(all) != 128 {
		t.Errorf("as root, found %d, want 128 (the test is real)", len(all))
	}
}

// TestNamedNamesWhatIsTooLong: a folder whose path is too long to open by
// name is a hit (Unread), not left out as an unreadable one is; so is an
// entry of the name whose own path is, in a folder that opens.
func TestNamedNamesWhatIsTooLong(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a/.git"), 0o755)
	deep := testenv.Deep(t, mkdir(t, root, "deep"), unix.PathMax+300)
	testenv.AtDeep(t, root, deep, func(fd int) {
		if err := unix.Mkdirat(fd, ".git", 0o755); err != nil {
			t.Fatal(err)
		}
	})
	// A folder of 4,092 bytes, which opens, holding a .git of 4,097.
	edge := testenv.Deep(t, mkdir(t, root, "edge"), unix.PathMax-4)
	testenv.AtDeep(t, root, edge, func(fd int) {
		if err := unix.Mkdirat(fd, ".git", 0o755); err != nil {
			t.Fatal(err)
		}
	})

	got, err := Named(asuser.ID{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}, root, ".git", nil)
	if err != nil {
		t.Fatal(err)
	}
	var long []string
	for _, h := range got {
		if h.Unread == unix.ENAMETOOLONG {
			long = append(long, h.Path)
		} else if h.Unread != nil {
			t.Errorf("%.60s…: %v", h.Path, h.Unread)
		}
	}
	if len(got) != 3 || len(long) != 2 {
		t.Fatalf("found %d, %d too long; want a/.git and two too long", len(got), len(long))
	}
	if p := long[0]; !strings.HasPrefix(deep, p) || len(p) < unix.PathMax || len(filepath.Dir(p)) >= unix.PathMax {
		t.Errorf("too long: %d bytes, want the first folder of the deep chain past %d", len(p), unix.PathMax)
	}
	if long[1] != edge+"/.git" {
		t.Errorf("too long: %.40s… (%d bytes), want the .git of the 4,092-byte folder", long[1], len(long[1]))
	}
}

// TestNamedFailsWhenItCannotOpen: a folder that fails to open for this
// process's want of descriptors fails the scan, naming it, rather than
// being left out (it could hold a repository).
func TestNamedFailsWhenItCannotOpen(t *testing.T) {
	root := t.TempDir()
	for i := range 20 {
		os.MkdirAll(filepath.Join(root, fmt.Sprint(i), ".git"), 0o755)
	}
	id := asuser.ID{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	if got, err := Named(id, root, ".git", nil); err != nil || len(got) != 20 {
		t.Fatalf("with descriptors: %d found, %v", len(got), err)
	}
	var old unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &old)
	lim := old
	lim.Cur = 64
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
	// Every descriptor below the limit taken: none for a folder.
	var fill []int
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fill = append(fill, fd)
	}
	got, err := Named(id, root, ".git", nil)
	for _, fd := range fill {
		unix.Close(fd)
	}
	unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	if err == nil || !strings.Contains(err.Error(), root) {
		t.Errorf("out of descriptors: %d found, error %v; want an error naming a folder", len(got), err)
	}
}

func mkdir(t *testing.T, root, name string) string {
	p := filepath.Join(root, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNamedListsWhatTheUserMaySearch: a folder the user may search but
// not list is listed (root lists it, asuser.OpenListing), and what is in
// it is found, since git opens names there: root's 0711 folder with a
// .git and a nested one, the user's own 0311 folder holding only a nested
// repository (git enters it from an index's gitlink). One the user may not
// search is left out, as git leaves it.
func TestNamedListsWhatTheUserMaySearch(t *testing.T) {
	needRoot(t)
	const uid, gid = 4242, 4242
	root, _ := testenv.ProjectDir(t, uid)
	for _, p := range []string{"search/.git", "search/sub/.git", "closed/.git", "own/b/.git"} {
		os.MkdirAll(filepath.Join(root, p), 0o755)
	}
	os.Chmod(filepath.Join(root, "search"), 0o711) // root's: the user may search it
	os.Chmod(filepath.Join(root, "closed"), 0o700)
	os.Chown(filepath.Join(root, "own"), uid, gid)
	os.Chmod(filepath.Join(root, "own"), 0o311)
	got, err := Named(asuser.ID{UID: uid, GID: gid}, root, ".git", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Hit{{Path: filepath.Join(root, "own/b/.git"), Dir: true}, {Path: filepath.Join(root, "search/.git"), Dir: true},
		{Path: filepath.Join(root, "search/sub/.git"), Dir: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("as the user, found %+v\nwant %+v", got, want)
	}
}
