package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// AllowFlag is the flag that lets a suite run outside the test VM.
const AllowFlag = "i-know-this-writes-to-home"

// Guard refuses to go on unless this is the test VM (AGENT_LOCK_VM=1) or the
// caller passed -i-know-this-writes-to-home, and we are root. The suites
// empty the test user's home and write fake secrets into it.
func Guard(allow bool) error {
	if os.Getenv("AGENT_LOCK_VM") != "1" && !allow {
		return errors.New("refusing to run: this suite empties the test user's home and writes fake secrets into it; " +
			"run it in the test VM (AGENT_LOCK_VM=1) or pass -" + AllowFlag)
	}
	if os.Geteuid() != 0 {
		return errors.New("must run as root: agent-lock needs root, and the fixture is written for another user")
	}
	return nil
}

// User is the unprivileged account the agent runs as.
type User struct {
	Name     string
	UID, GID int
	Groups   []uint32 // supplementary groups, as initgroups would set them
	Home     string
}

// LookupUser finds name in the user database and checks it is safe to
// hand over: not root, and a home that is a real directory at least two
// levels below /, because the suites delete everything in it.
func LookupUser(name string) (*User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("look up user %q: %w", name, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("user %q: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("user %q: gid %q: %w", name, u.Gid, err)
	}
	if uid == 0 || gid == 0 {
		return nil, fmt.Errorf("user %q is root or in group root; pick an unprivileged test user", name)
	}
	home := filepath.Clean(u.HomeDir)
	if !filepath.IsAbs(home) || strings.Count(home, "/") < 2 {
		return nil, fmt.Errorf("user %q: home %q is too close to /; refusing to empty it", name, home)
	}
	st, err := os.Lstat(home)
	if err != nil {
		return nil, fmt.Errorf("user %q: home: %w", name, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("user %q: home %q is not a directory", name, home)
	}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("user %q: groups: %w", name, err)
	}
	groups := []uint32{uint32(gid)}
	for _, g := range gids {
		n, err := strconv.Atoi(g)
		if err == nil && n != gid {
			groups = append(groups, uint32(n))
		}
	}
	return &User{Name: name, UID: uid, GID: gid, Groups: groups, Home: home}, nil
}

// EmptyHome removes everything inside the user's home, leaving the
// directory itself (owned by the user, mode 0755).
func (u *User) EmptyHome() error {
	ents, err := os.ReadDir(u.Home)
	if err != nil {
		return fmt.Errorf("empty home: %w", err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(u.Home, e.Name())); err != nil {
			return fmt.Errorf("empty home: %w", err)
		}
	}
	if err := os.Chown(u.Home, u.UID, u.GID); err != nil {
		return fmt.Errorf("empty home: %w", err)
	}
	return os.Chmod(u.Home, 0o755)
}

// Chown hands path, and everything below it when it is a directory, to
// the user. Symbolic links are changed, not followed.
func (u *User) Chown(path string) error {
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, u.UID, u.GID)
	})
}

// WriteFile writes a file owned by the user, creating parent directories
// (also owned by the user) as needed.
func (u *User) WriteFile(path, content string, mode os.FileMode) error {
	if err := u.MkdirAll(filepath.Dir(path)); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		return err
	}
	if err := os.Chmod(path, mode); err != nil {
		return err
	}
	return os.Chown(path, u.UID, u.GID)
}

// MkdirAll creates dir and its missing parents, the new ones owned by the
// user.
func (u *User) MkdirAll(dir string) error {
	if _, err := os.Lstat(dir); err == nil {
		return nil
	}
	if err := u.MkdirAll(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	return os.Chown(dir, u.UID, u.GID)
}

// Symlink makes a symbolic link at path to target, owned by the user, as
// the user would have made it.
func (u *User) Symlink(target, path string) error {
	if err := os.Symlink(target, path); err != nil {
		return err
	}
	return os.Lchown(path, u.UID, u.GID)
}

// Link makes path another name of the user's file target.
func (u *User) Link(target, path string) error { return os.Link(target, path) }

// ReportsDir makes dir (0700) the user's: agent-lock writes a --report as
// the user who ran it, so the suites' reports go to a folder of theirs,
// outside every cell.
func (u *User) ReportsDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	return os.Chown(dir, u.UID, u.GID)
}

// Start is every suite's first step: the guard, the test user, and the
// agent-lock binary as an absolute path that exists (none when agentLock
// is empty: a suite's baseline-only run needs none).
func Start(allow bool, userName, agentLock string) (u *User, bin string, err error) {
	if err := Guard(allow); err != nil {
		return nil, "", err
	}
	if u, err = LookupUser(userName); err != nil {
		return nil, "", err
	}
	if agentLock == "" {
		return u, "", nil
	}
	if bin, err = filepath.Abs(agentLock); err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		return nil, "", fmt.Errorf("agent-lock binary: %w (make build, or pass -agent-lock)", err)
	}
	return u, bin, nil
}
