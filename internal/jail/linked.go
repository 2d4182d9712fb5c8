package jail

import (
	"errors"
	"io/fs"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// A file below a denied folder can have other names: a hard link made
// before the session, anywhere on the same file system (DIR included). The
// kernel decides by walking up from the name that was used, which never
// passes the denied folder, so such a name would read through. Load
// registers each such file itself, by inode, under the denial's rule: the
// kernel finds the rule on the target's own inode, the first step of every
// walk, and refuses it by whatever name it is reached.
//
// Only links that exist when the cell starts are found; a link made during
// the session by a process outside the cell is not (the README says so).

// Bounds of the scan, for all denied folders together: a denial of a large
// tree must not make every start slow, nor fill the kernel's rule table
// (4096 entries, shared with the rule roots).
const (
	maxLinkScan  = 200000 // entries looked at
	maxLinkRules = 1024   // files registered
)

// linkScan counts what the scans of one registration saw.
type linkScan struct {
	seen, linked int
	unchecked    []string // where the scan stopped short, and why
}

// denyLinked registers, under rule id, every regular file below the denied
// folder root that has more than one name.
func (j *Jail) denyLinked(root string, id uint32, s *linkScan) error {
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return fs.SkipDir // not a folder, or gone: nothing below it
			}
			s.unchecked = append(s.unchecked, p+": "+err.Error())
			return nil
		}
		if p == root && !d.IsDir() {
			return nil // a denied file: its own inode is its rule already
		}
		s.seen++
		if s.seen > maxLinkScan {
			s.unchecked = append(s.unchecked, root+": more than the scan's bound of entries below the denied folders")
			return fs.SkipAll
		}
		// d.Type is the entry's own (WalkDir never follows symlinks).
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // gone since the folder was read
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Nlink < 2 {
			return nil
		}
		if s.linked == maxLinkRules {
			s.unchecked = append(s.unchecked, p+": more files with other names below the denied folders than the kernel's table takes")
			return fs.SkipAll
		}
		// O_NOFOLLOW: what is registered must be the file just looked at,
		// never where a symlink put in its place since would lead;
		// O_NOATIME: registering reads nothing of it.
		_, err = j.handshakeOpen(p, jailRegistration{Flags: uint32(Deny), Id: id}, unix.O_NOFOLLOW|unix.O_NOATIME)
		switch {
		case err == nil:
			s.linked++
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP):
			// Gone, or replaced by a symlink, since it was looked at.
		default:
			return err
		}
		return nil
	})
	if err != nil {
		return &fs.PathError{Op: "register the other names of files in", Path: root, Err: err}
	}
	return nil
}

// done tells warn where the scans stopped short: a hard link made before
// the session to a file there is not refused.
func (s *linkScan) done(warn func(string, ...any)) {
	const most = 3
	for i, u := range s.unchecked {
		if i == most {
			warn("... and %d more places not looked at", len(s.unchecked)-most)
			break
		}
		warn("not looked at for hard links into a denied folder (a link made before the session to a file there reads through): %s", u)
	}
}
