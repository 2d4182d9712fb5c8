package dirscan

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"

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
