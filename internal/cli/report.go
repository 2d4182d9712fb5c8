package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/recording"
)

// reportFile is where --report goes. agent-lock runs as root but writes
// the report as the user who ran it: a path the user could not write is
// refused, and a symlink or a hard link at the path (planted, say, by an
// agent in an earlier session) is refused, not followed. A path the agent
// could itself write (in DIR or a read-write grant) would let it forge the
// report, so such a report is kept in the recordings folder, which the
// agent is refused, and put at the path, as a new file, when the session
// ends.
type reportFile struct {
	path   string // absolute
	id     asuser.ID
	f      *os.File // what the session writes
	staged bool     // f is in the recordings folder, not at path
}

// openReport opens path for the report as id (see reportFile). stage
// makes the file a staged report is written to.
func openReport(path string, id asuser.ID, writable func(string) bool, stage func() (*os.File, error)) (*reportFile, error) {
	if fd, ok := stdioPath(path); ok {
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return nil, fmt.Errorf("--report %s: %w", path, err)
		}
		return &reportFile{path: path, id: id, f: os.NewFile(uintptr(nfd), path)}, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("--report %s: %w", path, err)
	}
	// The folder as the user would name it (their links to it are theirs
	// to follow); the name itself is never followed.
	var dir string
	if asuser.Do(id, func() error {
		var err error
		dir, err = filepath.EvalSymlinks(filepath.Dir(abs))
		return err
	}) == nil {
		abs = filepath.Join(dir, filepath.Base(abs))
	}
	f, err := openAsUser(abs, id)
	if err != nil {
		return nil, err
	}
	r := &reportFile{path: abs, id: id, f: f}
	if !writable(abs) {
		return r, nil
	}
	f.Close()
	if r.f, err = stage(); err != nil {
		return nil, fmt.Errorf("--report %s: %w", path, err)
	}
	r.staged = true
	return r, nil
}

// openAsUser opens (or creates, 0600) the report file at abs as id and
// empties it, refusing what is not plainly a file of the user's.
func openAsUser(abs string, id asuser.ID) (*os.File, error) {
	// O_NONBLOCK: a FIFO with no reader is an error, not a hang.
	f, err := asuser.OpenFile(id, abs, unix.O_WRONLY|unix.O_CREAT|unix.O_NONBLOCK, 0o600)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("--report %s is a symbolic link: agent-lock does not follow it (something may have planted it to "+
			"redirect the report); remove it or choose another name", abs)
	case errors.Is(err, os.ErrPermission):
		return nil, fmt.Errorf("--report %s: permission denied: agent-lock writes the report as you (uid %d), and you may not "+
			"write there; choose a file in a folder of yours", abs, id.UID)
	case errors.Is(err, syscall.ENXIO):
		return nil, fmt.Errorf("--report %s is a FIFO with no reader: start its reader first", abs)
	case err != nil:
		return nil, fmt.Errorf("--report %s: %w", abs, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("--report %s: %w", abs, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if st.Nlink > 1 {
			f.Close()
			return nil, fmt.Errorf("--report %s has %d hard links: writing it would change the other names too; "+
				"remove it or choose another name", abs, st.Nlink)
		}
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, fmt.Errorf("--report %s: %w", abs, err)
		}
	case unix.S_IFCHR, unix.S_IFIFO:
		// /dev/null, a pipe to a reader: written as they are.
	default:
		f.Close()
		return nil, fmt.Errorf("--report %s is not a regular file; choose a file name", abs)
	}
	// Blocking writes from here on: a slow reader slows the report, it
	// does not lose it.
	if err := unix.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, fmt.Errorf("--report %s: %w", abs, err)
	}
	return f, nil
}

// stdioPath tells the names of agent-lock's own standard output and error
// (/dev/stdout, /dev/fd/2, ...), which are symlinks into /proc and would
// otherwise be refused as links: those are written through the descriptor
// agent-lock already holds.
func stdioPath(p string) (int, bool) {
	switch p {
	case "/dev/stdout":
		return 1, true
	case "/dev/stderr":
		return 2, true
	}
	for _, prefix := range []string{"/dev/fd/", "/proc/self/fd/"} {
		if n, ok := strings.CutPrefix(p, prefix); ok {
			if fd, err := strconv.Atoi(n); err == nil && (fd == 1 || fd == 2) {
				return fd, true
			}
		}
	}
	return 0, false
}

// Note says where the report goes, when that is not simply its path.
func (r *reportFile) Note() string {
	if !r.staged {
		return ""
	}
	return fmt.Sprintf("--report %s lies where the agent may write: it is kept in %s, out of the agent's reach, while the session runs, "+
		"and put at %s when it ends", r.path, r.f.Name(), r.path)
}

// Close ends the report: a staged one is put at its path, as a new file
// (whatever stands there now, the agent's doing perhaps, is replaced as a
// name, never written through), and removed from the recordings folder.
func (r *reportFile) Close() error {
	err := r.f.Close()
	if !r.staged || err != nil {
		return err
	}
	staged, err := asuser.OpenFile(r.id, r.f.Name(), os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("report kept in %s: %w", r.f.Name(), err)
	}
	defer staged.Close()
	if err := asuser.Replace(r.id, r.path, staged, 0o600); err != nil {
		return fmt.Errorf("report kept in %s: could not put it at %s: %w", r.f.Name(), r.path, err)
	}
	return asuser.Do(r.id, func() error { return os.Remove(r.f.Name()) })
}

// Writer is what the session's report writer writes to.
func (r *reportFile) Writer() io.Writer { return r.f }

// stagedReport makes the file a staged report is kept in while the
// session runs, beside the session's recording.
func stagedReport(dir, id string, owner asuser.ID) func() (*os.File, error) {
	return func() (*os.File, error) { return recording.Create(dir, id+".report", owner) }
}
