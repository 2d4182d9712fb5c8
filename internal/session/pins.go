package session

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

// The programs of a session are held three ways: by agent-lock, by its
// reaper, and by pins on the bpf file system. The pins are what keeps a
// cell closed when both processes are killed at once (`pkill -9
// agent-lock` matches both): the agent's processes then stay confined, and
// the next agent-lock run kills them (sweep).

const bpffsMagic = 0xcafe4a11

// pinBase is where sessions pin their links, or "" where no bpf file system
// is or can be mounted at /sys/fs/bpf; the reaper still holds the cell then.
func pinBase() string {
	const mnt = "/sys/fs/bpf"
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil || st.Type != bpffsMagic {
		// systemd mounts it; minimal systems do not. Mount it as systemd
		// would, rather than run without pins.
		if unix.Mount("bpf", mnt, "bpf", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700") != nil {
			return ""
		}
		if err := unix.Statfs(mnt, &st); err != nil || st.Type != bpffsMagic {
			return ""
		}
	}
	base := filepath.Join(mnt, "agent-lock")
	if err := os.Mkdir(base, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return ""
	}
	return base
}

// pinDir is the pin directory of the session whose cgroup is at cgPath.
func pinDir(cgPath string, warn warner) string {
	base := pinBase()
	if base == "" {
		warn("no bpf file system at /sys/fs/bpf: the jail lasts only as long as agent-lock or its reaper")
		return ""
	}
	return filepath.Join(base, filepath.Base(cgPath))
}

// scratchPrefix begins the name of a session's private TMPDIR, which goes
// on with agent-lock's pid: agent-lock-<pid>-<random>.
const scratchPrefix = "agent-lock-"

// sweep cleans up after sessions whose agent-lock was killed (SIGKILL
// gives it no chance to): it kills their cells, unpins their programs and
// removes their TMPDIRs, and says what it did. A session's cgroup is named
// s<pid>-<random> after its agent-lock; while that pid lives (or has been
// reused: the cell then stays closed, the safe side) the cell is left
// alone.
func sweep(cgMount string, warn warner) {
	if cgMount == "" {
		return
	}
	base := filepath.Join(cgMount, "agent-lock")
	ents, _ := os.ReadDir(base)
	pins := pinBase()
	for _, e := range ents {
		pid, ok := sessionPID(e.Name())
		if !ok || alive(pid) {
			continue
		}
		cg := filepath.Join(base, e.Name())
		procs := len(strings.Fields(readString(filepath.Join(cg, "cgroup.procs"))))
		if err := killCgroup(cg, 10*time.Second); err != nil {
			warn("a cell left by agent-lock %d, which was killed: %v", pid, err)
			continue
		}
		pinned := false
		if pins != "" {
			for _, p := range []string{filepath.Join(pins, e.Name()), filepath.Join(pins, e.Name()+netPinSuffix)} {
				if _, err := os.Lstat(p); err == nil {
					pinned = true
				}
				os.RemoveAll(p)
			}
		}
		// An empty cgroup with nothing pinned on it confined nothing: a
		// daemon's session started ahead, killed before any request,
		// leaves one (MakeCgroupAhead). Not worth a word to whoever's
		// session swept it.
		if procs > 0 || pinned {
			warn("cleaned up after agent-lock %d, which was killed: %d process(es) of its cell killed, still confined", pid, procs)
		}
	}
	sweepTmp(os.TempDir(), warn)
	if pins == "" {
		return
	}
	// Pins whose cgroup is gone hold programs that jail nobody.
	pinned, _ := os.ReadDir(pins)
	for _, e := range pinned {
		pid, ok := sessionPID(e.Name())
		if !ok || alive(pid) {
			continue
		}
		if _, err := os.Stat(filepath.Join(base, e.Name())); errors.Is(err, os.ErrNotExist) {
			os.RemoveAll(filepath.Join(pins, e.Name()))
		}
	}
}

// holdFolder locks the session's folder path for as long as it lives
// (the process's end lets go): sweepTmp leaves a locked folder alone. It
// returns the release.
func holdFolder(path string) func() {
	if path == "" {
		return func() {}
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return func() {}
	}
	// Never waiting: a folder another holds exclusively (a sweep about
	// to remove it, or someone who could open it) must not stall the
	// start. Unheld, it is only exposed to a sweep from another PID
	// namespace.
	unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
	return func() { unix.Close(fd) }
}

// sweepTmp removes the private TMPDIRs (and the shell files' copies) in
// tmp of sessions whose agent-lock is gone, as the user who owns each
// (what the agent left there is theirs); without root, only this user's.
func sweepTmp(tmp string, warn warner) {
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), scratchPrefix)
		p, _, cut := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(p)
		if !ok || !cut || err != nil || pid <= 0 || !e.IsDir() || alive(pid) {
			continue
		}
		path := filepath.Join(tmp, e.Name())
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if me := os.Geteuid(); me != 0 && int(st.Uid) != me {
			continue // another user's, without root: theirs to sweep
		}
		// Its session's lock (holdFolder): a pid is this namespace's, and
		// a run in another PID namespace sharing this /tmp (a container,
		// a sandbox) must not take a live session's folder for a dead one.
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			continue
		}
		err = asuser.RemoveAll(asuser.ID{UID: st.Uid, GID: st.Gid}, path)
		unix.Close(fd)
		if err != nil {
			warn("the TMPDIR %s of agent-lock %d, which was killed: %v", path, pid, err)
			continue
		}
		what := "its TMPDIR"
		if strings.HasPrefix(rest, p+rcSuffix) {
			what = "its copies of your shell files"
		}
		warn("cleaned up after agent-lock %d, which was killed: %s %s removed", pid, what, path)
	}
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// sessionPID reads the pid out of a session cgroup's name.
func sessionPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "s")
	if !ok {
		return 0, false
	}
	p, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(p)
	return pid, err == nil && pid > 0
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
