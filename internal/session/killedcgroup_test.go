package session_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestStartFromKilledCgroup: agent-lock starts from a cgroup in which
// cgroup.kill was written before (kernels from 6.14 killed every process it
// started into the cell then). Runs in the test VMs only.
func TestStartFromKilledCgroup(t *testing.T) {
	testenv.NeedVM(t)
	bin := testenv.AgentLockBin(t)
	_, dir := testenv.ProjectDir(t, 4242)
	cg := filepath.Join("/sys/fs/cgroup", "agent-lock-test-killed")
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(cg)
	// Twice, so a count that is matched but off by one still fails.
	for i := 0; i < 2; i++ {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
	}
	// Moved in by a shell (not cloned in: that clone is what the kernel
	// kills), which then becomes agent-lock.
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" --headless --report /dev/null "$3" -- /bin/echo started`,
		"sh", cg, bin, dir)
	cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "started") {
		t.Fatalf("agent-lock from a cgroup once killed: %v\n%s", err, out)
	}
}
