package landlock

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// The agent's own terminals. Landlock grants by path, and a terminal the
// agent opens (script, expect, a pty shell) is a new name under /dev/pts
// that no rule made before it existed can grant; granting /dev/pts whole
// would hand out the user's other terminals. So the cell gets a devpts
// instance of its own, mounted over /dev/pts in a mount namespace of its
// own (/dev/ptmx opens the instance beside it): everything in it is the
// agent's, and the ruleset grants it. The cell's first process mounts it
// with CAP_SYS_ADMIN, which it holds (as an ambient capability of the
// user's process) only until then.
//
// The terminals the agent inherited keep their names: each is bound over
// a terminal of the same number made in the new instance, whose master
// the agent inherits (closing it takes the name away, nothing else).

// ptsRights are what the private instance is granted: its terminals,
// read, written and controlled (from ABI 5), and listed.
func ptsRights(abi int) uint64 {
	r := uint64(ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSReadDir)
	if abi >= 3 {
		r |= ll.AccessFSTruncate
	}
	if abi >= 5 {
		r |= ll.AccessFSIoctlDev
	}
	return r
}

// privatePTS mounts the cell's devpts instance, keeps the inherited
// terminals ttys (/dev/pts/N names) at their names, and grants the
// instance in the ruleset rulesetFD. It returns the masters to leave open
// for the agent.
func privatePTS(rulesetFD int, ttys []string) ([]int, error) {
	abi, err := ll.LandlockGetABIVersion()
	if err != nil {
		return nil, err
	}
	type own struct {
		n  int
		fd int // O_PATH, the terminal as it is before the mount
	}
	var owns []own
	seen := map[int]bool{}
	for _, t := range ttys {
		n, err := strconv.Atoi(strings.TrimPrefix(t, "/dev/pts/"))
		if err != nil || !strings.HasPrefix(t, "/dev/pts/") || seen[n] {
			continue
		}
		fd, err := unix.Open(t, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", t, err)
		}
		defer unix.Close(fd)
		seen[n] = true
		owns = append(owns, own{n, fd})
	}
	// The mount stays in the cell's namespace.
	if err := unix.Mount("none", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make the cell's mounts private: %w", err)
	}
	root, err := mountPTS()
	if err != nil {
		return nil, fmt.Errorf("mount the cell's devpts: %w", err)
	}
	defer unix.Close(root)
	var masters []int
	for _, o := range owns {
		m, err := ptyNumbered(o.n)
		if err != nil {
			return nil, err
		}
		masters = append(masters, m)
		name := filepath.Join("/dev/pts", strconv.Itoa(o.n))
		if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(o.fd), name, "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("keep the terminal %s: %w", name, err)
		}
	}
	if err := ll.LandlockAddPathBeneathRule(rulesetFD, &ll.PathBeneathAttr{AllowedAccess: ptsRights(abi), ParentFd: root}, 0); err != nil {
		return nil, fmt.Errorf("grant the cell's devpts: %w", err)
	}
	return masters, nil
}

// mountPTS mounts a new devpts instance over /dev/pts and returns a
// descriptor of its root. Through the mount API, not mount(2) and open(2):
// the observers report every open of the cell's processes, and would take
// the root of an instance they have no rule for for an escape.
func mountPTS() (int, error) {
	fs, err := unix.Fsopen("devpts", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return mountPTSOld(err)
	}
	defer unix.Close(fs)
	for _, kv := range [][2]string{{"mode", "0620"}, {"ptmxmode", "0666"}} {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return -1, fmt.Errorf("devpts %s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, err
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, err
	}
	if err := unix.MoveMount(m, "", unix.AT_FDCWD, "/dev/pts", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		unix.Close(m)
		return -1, err
	}
	return m, nil
}

// mountPTSOld is mountPTS on kernels without the mount API (before 5.2).
func mountPTSOld(why error) (int, error) {
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,mode=0620,ptmxmode=0666"); err != nil {
		return -1, fmt.Errorf("%w (fsopen: %v)", err, why)
	}
	return unix.Open("/dev/pts", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// ptyNumbered makes terminals in the cell's instance until one numbered n
// exists (the instance numbers them from 0, lowest free first) and
// returns its master; the others are closed, their numbers free again.
func ptyNumbered(n int) (int, error) {
	var spare []int
	defer func() {
		for _, fd := range spare {
			unix.Close(fd)
		}
	}()
	for range n + 1 {
		m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("open /dev/ptmx: %w", err)
		}
		got, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
		if err != nil {
			unix.Close(m)
			return -1, err
		}
		if got == n {
			return m, nil
		}
		spare = append(spare, m)
	}
	return -1, fmt.Errorf("no terminal numbered %d in the cell's devpts", n)
}

// dropCaps ends the capabilities the cell's first process had for the
// mount, on this thread (the one that execs the agent), and checks that
// none is left.
func dropCaps() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return fmt.Errorf("capabilities left after dropping them: %+v", data)
		}
	}
	if on, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, unix.CAP_SYS_ADMIN, 0, 0); err != nil || on != 0 {
		return fmt.Errorf("CAP_SYS_ADMIN still ambient (%d, %v)", on, err)
	}
	return nil
}

// keepOpen lets fds survive the exec.
func keepOpen(fds []int) error {
	for _, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return err
		}
	}
	return nil
}
