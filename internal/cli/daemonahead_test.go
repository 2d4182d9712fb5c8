package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/netcell"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestDaemonCellAhead: the session a daemon starts ahead makes its cell's
// cgroup before any request, with its network's self-test already in it
// (a move into a cgroup waits for an RCU grace period: done ahead, it is
// not part of the start); the request's agent runs in that cgroup; the
// one made by the next session ahead goes when the daemon ends, with the
// self-test in it.
func TestDaemonCellAhead(t *testing.T) {
	bin, _ := lifecycleSetup(t)
	root, dir := testenv.ProjectDir(t, uid)
	facts, err := kernel.Probe()
	if err != nil || facts.Cgroup2 == "" {
		t.Fatalf("no cgroup v2 hierarchy: %v", err)
	}
	sock := filepath.Join(root, "daemon", "agent-lock.sock")
	d, dlog := startDaemonLog(t, bin, sock)
	readyRE := regexp.MustCompile(`a session is ready ahead \(pid (\d+)\)`)
	// ready waits for the n-th session started ahead, and returns its
	// cgroup, which must hold one process: the network's self-test.
	ready := func(n int) string {
		t.Helper()
		var pid string
		for i := 0; ; i++ {
			if m := readyRE.FindAllStringSubmatch(dlog(), -1); len(m) >= n {
				pid = m[n-1][1]
				break
			}
			if i == 600 {
				t.Fatalf("no session %d ready ahead:\n%s", n, dlog())
			}
			time.Sleep(200 * time.Millisecond)
		}
		cgs, _ := filepath.Glob(filepath.Join(facts.Cgroup2, "agent-lock", "s"+pid+"-*"))
		if len(cgs) != 1 {
			t.Fatalf("the session started ahead (pid %s) made %d cgroups, not one: %v", pid, len(cgs), cgs)
		}
		procs := strings.Fields(readFile(t, filepath.Join(cgs[0], "cgroup.procs")))
		if len(procs) != 1 {
			t.Fatalf("the cgroup made ahead holds %d processes, not the network's self-test alone: %v", len(procs), procs)
		}
		if cmdline := readFile(t, "/proc/"+procs[0]+"/cmdline"); !strings.Contains(cmdline, netcell.ProbeArg) {
			t.Fatalf("the cgroup made ahead holds %q, not the network's self-test", cmdline)
		}
		return cgs[0]
	}
	first := ready(1)
	out, err := daemonUser(dir, root, sock, bin, "--headless", "--engine", "landlock", "--report", testenv.ReportPath(t, uid), ".", "--", "cat", "/proc/self/cgroup").CombinedOutput()
	if err != nil {
		t.Fatalf("agent-lock: %v\n%s", err, out)
	}
	if strings.Count(dlog(), ", started ahead): ") != 1 {
		t.Fatalf("the session was not the one started ahead:\n%s", dlog())
	}
	if !strings.Contains(string(out), "/agent-lock/"+filepath.Base(first)+"\n") {
		t.Errorf("the agent ran in another cgroup than the one made ahead (%s):\n%s", first, out)
	}
	next := ready(2)
	d.Process.Signal(syscall.SIGTERM)
	d.Wait()
	for i := 0; ; i++ {
		if _, err := os.Stat(next); os.IsNotExist(err) {
			break
		}
		if i == 100 {
			t.Fatalf("the cgroup the next session made ahead is still there after the daemon ended: %s (holding %s)", next, readFile(t, filepath.Join(next, "cgroup.procs")))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
