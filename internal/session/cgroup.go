package session

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/kernel"
)

// cgroup is the jail's membership: a fresh cgroup v2 directory, owned by root
// so that nobody but root can move a process out of it.
type cgroup struct {
	Path string
	ID   uint64
	dir  *os.File
	// kills is how many times agent-lock wrote the cell's cgroup.kill.
	kills uint32
}

func newCgroup(mount string) (*cgroup, error) {
	if mount == "" {
		return nil, errors.New("no cgroup v2 hierarchy is mounted: mount one with `mount -t cgroup2 none /sys/fs/cgroup`")
	}
	base := filepath.Join(mount, "agent-lock")
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	p := filepath.Join(base, fmt.Sprintf("s%d-%s", os.Getpid(), hex.EncodeToString(rnd[:])))
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	dir, err := os.Open(p)
	if err != nil {
		os.Remove(p)
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		dir.Close()
		os.Remove(p)
		return nil, fmt.Errorf("stat cgroup: %w", err)
	}
	// A cgroup's id, as bpf_get_current_cgroup_id() returns it, is the
	// inode number of its directory.
	return &cgroup{Path: p, ID: st.Ino, dir: dir}, nil
}

// cgroupAhead is the cgroup of this process's next cell, made ahead
// (MakeCgroupAhead).
var cgroupAhead struct {
	sync.Mutex
	cg *cgroup
}

// MakeCgroupAhead makes the cgroup of this process's next cell now: a
// daemon's session started ahead (daemon.Standby) does it while no
// request waits, so that its network self-test can be moved into it
// ahead (netcell.StartProbeAhead). It returns the cgroup's descriptor and
// what removes it, killing what is in it, unless a cell took it (for the
// process's end; a killed process's is swept like a session's).
func MakeCgroupAhead() (fd int, drop func(), err error) {
	facts, err := kernel.Probe()
	if err != nil {
		return -1, nil, err
	}
	cg, err := newCgroup(facts.Cgroup2)
	if err != nil {
		return -1, nil, err
	}
	cgroupAhead.Lock()
	defer cgroupAhead.Unlock()
	if old := cgroupAhead.cg; old != nil {
		old.drop()
	}
	cgroupAhead.cg = cg
	return cg.FD(), func() {
		cgroupAhead.Lock()
		defer cgroupAhead.Unlock()
		if cgroupAhead.cg == cg {
			cgroupAhead.cg = nil
			cg.drop()
		}
	}, nil
}

// takeCgroupAhead takes the cgroup made ahead under mount, if any.
func takeCgroupAhead(mount string) *cgroup {
	cgroupAhead.Lock()
	defer cgroupAhead.Unlock()
	cg := cgroupAhead.cg
	if cg == nil || filepath.Dir(filepath.Dir(cg.Path)) != mount {
		return nil
	}
	cgroupAhead.cg = nil
	return cg
}

// drop kills what is in c, removes it and closes it.
func (c *cgroup) drop() {
	killCgroup(c.Path, 10*time.Second)
	c.Close()
}

// FD is the descriptor for clone3(CLONE_INTO_CGROUP).
func (c *cgroup) FD() int { return int(c.dir.Fd()) }

// killCgroup kills every process in the cgroup at path and waits until it is
// empty, then removes it. Processes stay confined until they are dead: the
// programs remain attached while this runs.
func killCgroup(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0); err != nil {
			// Before 5.14 there is no cgroup.kill: signal each process.
			killEach(path)
		}
		if empty(path) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes after %v", path, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for {
		err := os.Remove(path)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func killEach(path string) {
	b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

func empty(path string) bool {
	b, err := os.ReadFile(filepath.Join(path, "cgroup.events"))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	return bytes.Contains(b, []byte("populated 0"))
}

func (c *cgroup) Close() {
	if c.dir != nil {
		c.dir.Close()
	}
}

// maxKillMatch bounds matchKills: a count beyond it is a cgroup something
// kills in a loop, which agent-lock will not copy write by write.
const maxKillMatch = 1 << 16

// matchKills makes the cell's kill count (cgroup.kill writes) n, the count
// of agent-lock's own cgroup (jail.KillSeq), before anything is started in
// the cell. From Linux 6.14 (and the stable kernels the change went back
// to) a child cloned into another cgroup is killed at birth when that
// cgroup's count differs from the one its parent's cgroup had: so after
// cgroup.kill was once written where agent-lock runs (a CI job, a test
// harness, a service manager that reuses the cgroup), every process it
// started in a fresh cell died before it ran. Writing cgroup.kill of the
// new, empty cell kills nothing and counts one.
func (c *cgroup) matchKills(n uint32) error {
	if n < c.kills {
		return fmt.Errorf("the cell's kill count (%d) is past agent-lock's own cgroup's (%s, %d): start agent-lock from another cgroup (for example with systemd-run --scope)", c.kills, ownCgroup(), n)
	}
	n -= c.kills
	if n > maxKillMatch {
		return fmt.Errorf("cgroup.kill was written %d times in agent-lock's own cgroup (%s): this kernel kills every process started from there into the cell, and agent-lock matches at most %d; start agent-lock from another cgroup (for example with systemd-run --scope)", n, ownCgroup(), maxKillMatch)
	}
	kill := filepath.Join(c.Path, "cgroup.kill")
	for i := uint32(0); i < n; i++ {
		if err := os.WriteFile(kill, []byte("1"), 0); err != nil {
			return fmt.Errorf("match the cell's kill count to agent-lock's cgroup (%s, where cgroup.kill was written %d times): %w", ownCgroup(), n, err)
		}
		c.kills++
	}
	return nil
}

// maxKillTrials bounds killedAtBirth: each is a process started into the
// cell and killed there by the kernel.
const maxKillTrials = 64

// killedAtBirth counts a process the kernel killed as it was started into
// the cell, before any program is attached (the network's self-test, the
// cell's first process): the cell's kill count differs from agent-lock's
// own cgroup's (matchKills), and one more write of the empty cell's
// cgroup.kill brings it closer. The caller starts its process again. The
// engine's matchKills then adds what is still missing.
func (c *cgroup) killedAtBirth() error {
	if c.kills >= maxKillTrials {
		return fmt.Errorf("every process started into the cell dies at birth, after %d writes of its cgroup.kill: cgroup.kill was written too many times in agent-lock's own cgroup (%s); start agent-lock from another cgroup (for example with systemd-run --scope)", maxKillTrials, ownCgroup())
	}
	if err := os.WriteFile(filepath.Join(c.Path, "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("match the cell's kill count to agent-lock's cgroup (%s): %w", ownCgroup(), err)
	}
	c.kills++
	return nil
}

// ownCgroup is agent-lock's cgroup v2 path, for messages.
func ownCgroup() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return "unknown"
}

// bornKilled says whether err is a process's end by SIGKILL, which nothing
// in a fresh cell sends.
func bornKilled(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
