package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// ShellRC are the files in a home that shells read when they start
// (bash, sh, zsh, readline): agents run their commands through login or
// interactive shells (Claude Code sources ~/.bashrc into a snapshot, Codex
// runs `sh -lc`), so each command would start with "~/.bashrc: Permission
// denied" and without the user's PATH, aliases and functions.
var ShellRC = []string{
	".profile", ".bash_profile", ".bash_login", ".bashrc", ".bash_aliases", ".bash_logout",
	".zshenv", ".zprofile", ".zshrc", ".zlogin", ".zlogout", ".inputrc",
}

// rcSuffix follows the session's pid in the name of its folder of
// copies.
const rcSuffix = "-rc-"

// maxRC bounds a shell file agent-lock copies.
const maxRC = 1 << 20

// rcCopy is a scrubbed copy of one of the user's shell files and the path
// the agent's shells read it by.
type rcCopy struct {
	Copy     string // the copy, in a folder of root's, granted read-only
	Target   string // the file it stands for (its real path)
	Name     string // as the user knows it: ~/.bashrc
	Withheld []string
}

// shellRCCopies makes, in a new directory of root's, a copy of each of
// the user's shell files with the assignments of secret-looking variables
// taken out (secretenv.Secret: the same names the agent's environment
// loses). The files are read as the user (a link leads where the user may
// go, never where only root may); the copies are what the agent's shells
// read instead (mountns.go puts them over the originals in the agent's
// view), granted read-only, so the agent cannot write them either.
func shellRCCopies(a Agent, pol policy.Policy, warn warner) (copies []rcCopy, remove func(), err error) {
	// Named after this process, as its TMPDIR is: should it be killed,
	// the next run's sweep (sweepTmp) removes the folder.
	dir, err := os.MkdirTemp("", scratchPrefix+strconv.Itoa(os.Getpid())+rcSuffix)
	if err != nil {
		return nil, nil, fmt.Errorf("shell setup copies: %w", err)
	}
	// Searchable, not readable, by others: the user resolves the copies'
	// paths, and no one else may open the folder (and lock it: a sweep
	// leaves a folder its session holds).
	os.Chmod(dir, 0o711)
	release := holdFolder(dir)
	remove = func() { os.RemoveAll(dir); release() }
	// Its real path: the cell's init binds the copies without following
	// a link (a TMPDIR may lie behind one).
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	// What decides, as the user resolves it (the paths are the user's
	// to follow).
	var trust rcTrust
	if err := asuser.Do(a.ID(), func() error { trust = newRCTrust(pol); return nil }); err != nil {
		remove()
		return nil, nil, fmt.Errorf("shell setup copies: %w", err)
	}
	for _, name := range ShellRC {
		p := filepath.Join(a.Home, name)
		var content []byte
		var real string
		err := asuser.Do(a.ID(), func() error {
			r, hops, err := resolve(p)
			if err != nil {
				return err
			}
			if why := trust.untrusted(r, hops); why != "" {
				warn("~/%s %s: not copied for the agent, whose shells are refused it", name, why)
				return errUntrusted
			}
			// The path resolved, held: no link swapped in since moves
			// the read.
			fd, err := unix.Openat2(unix.AT_FDCWD, r, &unix.OpenHow{
				// Not blocking on a FIFO: it is refused below.
				Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
				Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
			})
			if err != nil {
				return err
			}
			f := os.NewFile(uintptr(fd), r)
			defer f.Close()
			if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
				return fmt.Errorf("%s: not a regular file", p)
			}
			content, err = io.ReadAll(io.LimitReader(f, maxRC+1))
			real = r
			return err
		})
		if err != nil || len(content) > maxRC {
			continue // none, or not one agent-lock copies: refused as before
		}
		scrubbed, withheld := scrubRC(string(content))
		cp := filepath.Join(dir, name)
		// Readable by the user alone: the folder is searchable by all
		// (the user resolves the copy's path for the cell's rules).
		if err := os.WriteFile(cp, []byte(scrubbed), 0o600); err != nil {
			remove()
			return nil, nil, fmt.Errorf("shell setup copies: %w", err)
		}
		// The user's, as the original is: the file's own permissions let
		// the agent try to write it, so that the cell is what refuses, and
		// reports it (the BPF LSM sees no open the permissions refused).
		// Only the user and root may write it; the folder is root's.
		if err := os.Chown(cp, int(a.UID), int(a.GID)); err != nil {
			remove()
			return nil, nil, fmt.Errorf("shell setup copies: %w", err)
		}
		copies = append(copies, rcCopy{Copy: cp, Target: real, Name: "~/" + name, Withheld: withheld})
	}
	return copies, remove, nil
}

var errUntrusted = errors.New("not copied")

// shellFileName says whether a file's name is a shell file's, as dotfile
// managers name them: .bashrc, bashrc, dot-bashrc, dot_bashrc (stow,
// chezmoi), HASH-hm_.bashrc (home-manager), bashrc.sh, bashrc.symlink;
// .bash_profile may lead to .profile. Not bashrc.secrets or .zshrc.local,
// where people keep what their dotfiles repository must not hold.
func shellFileName(base string) bool {
	if i := strings.LastIndex(base, "hm_"); i >= 0 {
		base = base[i+len("hm_"):]
	}
	base = strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(base, "dot-"), "dot_"), ".")
	for _, suffix := range []string{".sh", ".bash", ".zsh", ".symlink"} {
		base = strings.TrimSuffix(base, suffix)
	}
	for _, n := range ShellRC {
		if base == strings.TrimPrefix(n, ".") {
			return true
		}
	}
	return base == "aliases" // ~/.bash_aliases -> dotfiles/aliases
}

// resolve follows every symlink on path's way (absolute, clean), folders'
// included, as the kernel does, and returns the real path with the links
// met (each at its real place).
func resolve(path string) (real string, links []string, err error) {
	rest := strings.Split(path, "/")
	cur, dir := "/", true
	for n := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		if !dir { // anything past a file, "" and "." too (a trailing slash)
			return "", nil, fmt.Errorf("%s: %w", cur, unix.ENOTDIR)
		}
		if c == "" || c == "." {
			continue
		}
		next := filepath.Join(cur, c) // ".." of a real folder: its parent
		fi, err := os.Lstat(next)
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur, dir = next, fi.IsDir()
			continue
		}
		if n++; n > 40 {
			return "", nil, fmt.Errorf("%s: %w", path, unix.ELOOP)
		}
		links = append(links, next)
		t, err := os.Readlink(next)
		if err != nil {
			return "", nil, err
		}
		if filepath.IsAbs(t) {
			cur = "/"
		}
		rest = append(strings.Split(t, "/"), rest...)
	}
	return cur, links, nil
}

// rcTrust is what decides which shell files may be copied for the agent
// (untrusted): the policy, the cell's rules (the scratch places and a
// linked worktree's git folders are writable too) and the denied trees,
// each also by its real path (~/.aws -> vault/aws). Read once a session.
type rcTrust struct {
	pol    policy.Policy
	rules  []spec.Rule
	denied []policy.Denial
}

func newRCTrust(pol policy.Policy) rcTrust {
	t := rcTrust{pol: pol, rules: pol.Rules()}
	for _, d := range pol.Denied() {
		t.denied = append(t.denied, d)
		if r, err := filepath.EvalSymlinks(d.Path); err == nil && r != d.Path {
			t.denied = append(t.denied, policy.Denial{Path: r, Name: d.Name})
		}
	}
	return t
}

// untrusted says why a shell file, which resolves to real through links,
// must not be copied for the agent ("" if it may). The copy is the
// agent's to read, so an agent that could point the file elsewhere would
// read what it points at: no link on the way and not the file may lie
// where this session's agent may write (a dotfiles repository as DIR),
// the file must be named as a shell file (a link planted by an earlier
// session, with other grants, reaches only files so named), and no
// secret the cell refuses.
func (t rcTrust) untrusted(real string, links []string) string {
	pol, rules := t.pol, t.rules
	writable := func(p string) bool {
		if pol.Writable(p) {
			return true
		}
		for _, r := range rules {
			if r.Access&(spec.Write|spec.Scratch) == 0 {
				continue
			}
			// A file granted by name: its siblings NAME.* too (a save's
			// temporary file).
			sibling := r.Access&spec.Named != 0 && filepath.Dir(p) == filepath.Dir(r.Path) &&
				strings.HasPrefix(filepath.Base(p), filepath.Base(r.Path)+".")
			if spec.Under(p, r.Path) || sibling {
				return true
			}
		}
		return false
	}
	for _, l := range links {
		if writable(l) {
			return "leads through " + l + ", a link the agent may change"
		}
	}
	if writable(real) {
		return "is " + real + ", which the agent may change"
	}
	if !shellFileName(filepath.Base(real)) {
		return "leads to " + real + ", which is not named like a shell file (" + strings.Join(ShellRC, ", ") + ")"
	}
	for _, d := range t.denied {
		if spec.Under(real, d.Path) {
			return "leads to " + real + ", which the cell refuses (" + d.Name + ")"
		}
	}
	for _, g := range append(slices.Clone(policy.SecretPatterns), pol.DenyPatterns...) {
		if ok, _ := filepath.Match(g, filepath.Base(real)); ok {
			return "leads to " + real + ", a secret by its name (" + g + ")"
		}
	}
	return ""
}

// noFollow opens path for mounting over, refusing symlinks anywhere in it:
// the path was resolved as the user, and a link swapped in since must not
// move the mount.
func noFollow(path string) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}
