package asuser

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMkdirAllActsAsTheUser: the folders are the user's, and where the user
// may not create (a root folder, reached directly or through a symlink the
// user planted) neither does MkdirAll, although agent-lock runs as root.
func TestMkdirAllActsAsTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another user")
	}
	const uid, gid = 4242, 4242
	root := t.TempDir()
	// The user must reach it: TempDir's parent is private to root.
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(root, 0o755)
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
	if err := MkdirAll(made, uid, gid); err != nil {
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
		if err := MkdirAll(p, uid, gid); !errors.Is(err, os.ErrPermission) {
			t.Errorf("MkdirAll(%s) = %v, want permission denied", p, err)
		}
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was made", p)
		}
	}
}
