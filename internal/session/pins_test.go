package session

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/test/testenv"
)

func TestSessionPID(t *testing.T) {
	for name, want := range map[string]int{"s123-abcd": 123, "s1-x": 1} {
		if pid, ok := sessionPID(name); !ok || pid != want {
			t.Errorf("sessionPID(%q) = %d, %v", name, pid, ok)
		}
	}
	for _, name := range []string{"test-abcd", "s-abcd", "sx-1", "s12", "s0-a", "agent"} {
		if _, ok := sessionPID(name); ok {
			t.Errorf("sessionPID(%q) accepted", name)
		}
	}
}

// TestSweepLeavesHeldFolders: a folder named after a pid this namespace
// does not know (a session in another PID namespace sharing /tmp) is
// left while its session holds it, and swept once it does not.
func TestSweepLeavesHeldFolders(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, scratchPrefix+"4194304-x") // PID_MAX_LIMIT: never a pid
	rc := filepath.Join(tmp, scratchPrefix+"4194304"+rcSuffix+"y")
	for _, d := range []string{dir, rc} {
		if err := os.MkdirAll(filepath.Join(d, "work"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	release := holdFolder(dir)
	var said []string
	warn := func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) }
	sweepTmp(tmp, warn)
	if _, err := os.Stat(filepath.Join(dir, "work")); err != nil {
		t.Errorf("a held folder was swept: %v", err)
	}
	if _, err := os.Stat(rc); !os.IsNotExist(err) || len(said) != 1 || !strings.Contains(said[0], "its copies of your shell files "+rc+" removed") {
		t.Errorf("the unheld folder: %v; said %q", err, said)
	}
	release()
	sweepTmp(tmp, warn)
	if _, err := os.Stat(dir); !os.IsNotExist(err) || len(said) != 2 || !strings.Contains(said[1], "its TMPDIR "+dir+" removed") {
		t.Errorf("the released folder: %v; said %q", err, said)
	}
}

// TestSweepQuietForAnEmptyCell: the cgroup of a cell whose agent-lock was
// killed is removed; only one that held processes (or pins) is told of:
// an empty one with nothing pinned confined nothing (a daemon's session
// started ahead and killed before any request leaves one,
// MakeCgroupAhead), and whoever's session sweeps it must not be told of
// a killed agent-lock that was never theirs.
func TestSweepQuietForAnEmptyCell(t *testing.T) {
	testenv.NeedVM(t)
	facts, err := kernel.Probe()
	if err != nil || facts.Cgroup2 == "" {
		t.Fatalf("no cgroup v2 hierarchy: %v", err)
	}
	base := filepath.Join(facts.Cgroup2, "agent-lock")
	os.Mkdir(base, 0o755)
	// Above PID_MAX_LIMIT: never a live pid.
	empty, full := filepath.Join(base, "s4194305-empty"), filepath.Join(base, "s4194306-full")
	for _, p := range []string{empty, full} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { killCgroup(p, 10*time.Second) })
	}
	dir, err := os.Open(full)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	sleep := exec.Command("sleep", "60")
	sleep.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleep.Wait()
	var said []string
	sweep(facts.Cgroup2, func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) })
	for _, p := range []string{empty, full} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s was not swept: %v", p, err)
		}
	}
	var told []string
	for _, s := range said {
		if strings.Contains(s, "agent-lock 419430") {
			told = append(told, s)
		}
	}
	if len(told) != 1 || !strings.Contains(told[0], "agent-lock 4194306, which was killed: 1 process(es)") {
		t.Errorf("told %q; want the cell that held a process alone", told)
	}
}
