// Package recording keeps every session's report in the user's state
// directory ($XDG_STATE_HOME/agent-lock, by default ~/.local/state/agent-lock):
// it creates the files as that user, lists the sessions still running, and
// follows one live, which is how `agent-lock watch` attaches.
//
// Who may watch is who may read the file: it is created 0600 and owned by
// the user who started the session, so root and that user can, other users
// cannot, and a jailed process cannot either because the state directory is
// outside its project directory (the jail refuses the open).
package recording

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/report"
)

// Ext is the recordings' file name extension.
const Ext = ".jsonl"

// Dir is the recordings folder of a user whose home is home. xdgState is
// that user's XDG_STATE_HOME, used when it is an absolute path, as the XDG
// base directory specification says.
func Dir(home, xdgState string) string {
	if filepath.IsAbs(xdgState) {
		return filepath.Join(xdgState, "agent-lock")
	}
	return filepath.Join(home, ".local", "state", "agent-lock")
}

// Create makes dir (and its parents, 0700) and a new file name in it (0600),
// acting as owner (see asuser: the folder is the user's).
func Create(dir, name string, owner asuser.ID) (*os.File, error) {
	var f *os.File
	err := asuser.Do(owner, func() error {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("folder: %w", err)
		}
		fd, err := unix.Open(filepath.Join(dir, name),
			unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("create %s: %w", filepath.Join(dir, name), err)
		}
		f = os.NewFile(uintptr(fd), filepath.Join(dir, name))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	return f, nil
}

// Name is a new recording's file name: when it started and agent-lock's pid.
func Name(t time.Time, pid int) string {
	return fmt.Sprintf("%s-%d%s", t.UTC().Format("20060102T150405Z"), pid, Ext)
}

// Session is a recording found in the folder.
type Session struct {
	ID    string // the file name without Ext, what `watch` takes
	Path  string
	Start report.Start
	Ended bool // it has its summary
	// Died: it has no summary and the agent-lock that recorded it is
	// gone (killed: SIGKILL gives it no chance to write one).
	Died bool
}

// Running returns the recorded sessions in dir that have not ended and
// whose agent-lock is still alive, oldest first.
func Running(dir string) ([]Session, error) {
	all, err := Unfinished(dir)
	return slices.DeleteFunc(all, func(s Session) bool { return s.Died }), err
}

// Unfinished returns the recorded sessions in dir that have no summary,
// running or died, oldest first. Files that are not recordings are
// ignored.
func Unfinished(dir string) ([]Session, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Session
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), Ext) {
			continue
		}
		s, err := inspect(filepath.Join(dir, e.Name()))
		if err != nil || s.Ended {
			continue
		}
		s.Died = !supervised(s.Start)
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Session) int { return a.Start.Time.Compare(b.Start.Time) })
	return out, nil
}

// supervised reports whether the agent-lock that recorded st still runs:
// its pid with the start time it recorded (a pid alone may have been
// reused). Recordings from before agent-lock recorded itself are judged by
// the agent's pid.
func supervised(st report.Start) bool {
	if st.AgentLockPID <= 0 {
		return alive(st.PID)
	}
	t, err := ProcessStart(st.AgentLockPID)
	return err == nil && t == st.AgentLockStart
}

// ProcessStart is when process pid started, in clock ticks since boot
// (/proc/PID/stat's starttime): with the pid, it names one process for
// the life of the machine.
func ProcessStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces and parentheses:
	// the fields that follow start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// inspect reads a recording's start record and looks for a summary at its
// end, without reading the middle of a long session.
func inspect(path string) (Session, error) {
	s := Session{ID: strings.TrimSuffix(filepath.Base(path), Ext), Path: path}
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	head := make([]byte, 64<<10)
	n, _ := io.ReadFull(f, head)
	line, _, ok := bytes.Cut(head[:n], []byte("\n"))
	if !ok {
		return s, errors.New("no complete start record")
	}
	r, err := report.ParseLine(line)
	if err != nil || r.Start == nil {
		return s, errors.New("not a recording")
	}
	s.Start = *r.Start
	st, err := f.Stat()
	if err != nil {
		return s, err
	}
	tail := make([]byte, min(st.Size(), 64<<10))
	if _, err := f.ReadAt(tail, st.Size()-int64(len(tail))); err != nil && err != io.EOF {
		return s, err
	}
	lines := bytes.Split(bytes.TrimRight(tail, "\n"), []byte("\n"))
	if last, err := report.ParseLine(lines[len(lines)-1]); err == nil && last.Summary != nil {
		s.Ended = true
	}
	return s, nil
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Find returns the recording of session id (a file name, with or without
// Ext) in dir.
func Find(dir, id string) (string, error) {
	p := filepath.Join(dir, strings.TrimSuffix(filepath.Base(id), Ext)+Ext)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no session %q in %s", id, dir)
	}
	return p, nil
}

// Follow calls fn for each record of the recording open in f as it is
// written, until the summary record, ctx's end, or an error. A line still
// being written is waited for, never parsed half. The caller opens f (as
// whom it reads for) and closes it.
func Follow(ctx context.Context, f *os.File, fn func([]report.Record)) error {
	path := f.Name()
	var pending []byte
	buf := make([]byte, 256<<10)
	lineNo := 0
	for {
		n, err := f.Read(buf)
		pending = append(pending, buf[:n]...)
		var batch []report.Record
		for {
			line, rest, ok := bytes.Cut(pending, []byte("\n"))
			if !ok {
				break
			}
			lineNo++
			pending = rest
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			r, perr := report.ParseLine(line)
			if perr != nil {
				return fmt.Errorf("%s: report line %d: %w", path, lineNo, perr)
			}
			batch = append(batch, r)
		}
		if len(pending) > report.MaxLine {
			return fmt.Errorf("%s: report line %d: longer than %d bytes", path, lineNo+1, report.MaxLine)
		}
		if len(batch) > 0 {
			fn(batch)
			if batch[len(batch)-1].Summary != nil {
				return nil
			}
		}
		if err != nil && err != io.EOF {
			return err
		}
		if n == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// runBase holds the recordings of sessions whose project directory contains
// the user's state folder: there the agent could rewrite its own recording,
// and so forge what `watch` shows. Under /run it is outside every project
// directory, so the jail refuses the agent any access.
var runBase = "/run/agent-lock"

// Dirs are the folders a user's recordings may be in: the state folder, and
// the fallback under /run for sessions jailed around it.
func Dirs(home, xdgState string, uid uint32) []string {
	return []string{Dir(home, xdgState), filepath.Join(runBase, fmt.Sprint(uid))}
}

// For returns the folder to record a session jailed in project: the state
// folder unless project contains it. It makes the /run fallback, as root,
// owned by the user.
func For(project, home, xdgState string, owner asuser.ID) (string, error) {
	dirs := Dirs(home, xdgState, owner.UID)
	if !within(dirs[0], project) {
		return dirs[0], nil
	}
	return RunDir(owner)
}

// RunDir makes the user's folder under /run, as root, owned by the user:
// for sessions jailed around the state folder, and for users whose home
// has none (system users, a read-only home).
func RunDir(owner asuser.ID) (string, error) {
	d := filepath.Join(runBase, fmt.Sprint(owner.UID))
	if err := os.MkdirAll(runBase, 0o755); err != nil {
		return "", err
	}
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	// runBase is root's, so nothing the user planted can be in the way.
	if err := os.Lchown(d, int(owner.UID), int(owner.GID)); err != nil {
		return "", err
	}
	return d, nil
}

// within reports whether path is dir or lies under it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
