package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// AgentLockBin is the binary `make build` leaves, as the VM tests see it:
// they run from their package's directory, two levels below the repository.
func AgentLockBin(t testing.TB) string {
	t.Helper()
	bin, err := filepath.Abs("../../.build/agent-lock")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// ProjectDir makes a temporary root that every user may traverse (the
// test user must reach DIR, and TempDir's parent is private to root) with
// a project directory in it owned by uid.
func ProjectDir(t testing.TB, uid int) (root, dir string) {
	t.Helper()
	root = t.TempDir()
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(root, 0o755)
	dir = filepath.Join(root, "project")
	os.Mkdir(dir, 0o755)
	os.Chown(dir, uid, uid)
	return root, dir
}

// ReportPath is a --report path in a folder of uid's own: agent-lock
// writes the report as the user who ran it, so a folder of root's (as
// TempDir's are) is refused.
func ReportPath(t testing.TB, uid int) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chown(dir, uid, uid)
	return filepath.Join(dir, "report.jsonl")
}

// Engines are the engines `agent-lock doctor` proves on this kernel; a
// test that runs under each fails where none works.
func Engines(t testing.TB, bin string) []string {
	t.Helper()
	var out []string
	for _, e := range []string{"bpf-lsm", "landlock"} {
		// AGENT_LOCK_ENGINES (a comma-separated list) names the engines
		// to test where the others are tested elsewhere (CI's budget).
		if only := os.Getenv("AGENT_LOCK_ENGINES"); only != "" && !slices.Contains(strings.Split(only, ","), e) {
			continue
		}
		if exec.Command(bin, "doctor", "--engine", e).Run() == nil {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		t.Fatal("agent-lock doctor proves no engine on this kernel")
	}
	return out
}

// NewestRecording is the most recently written recording in dir (a live
// session's grows every second), waiting a little for one to appear.
func NewestRecording(t testing.TB, dir string) string {
	t.Helper()
	var newest string
	var when time.Time
	for i := 0; i < 50 && newest == ""; i++ {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".jsonl") {
				continue
			}
			if fi, err := e.Info(); err == nil && fi.ModTime().After(when) {
				newest, when = filepath.Join(dir, e.Name()), fi.ModTime()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if newest == "" {
		t.Fatalf("no recording in %s", dir)
	}
	return newest
}

// NeedVM skips t unless it runs as root where the suites may write the
// test user's home: in the test VMs (make vmtest) or natively under make
// native, which sets AGENT_LOCK_VM too.
func NeedVM(t testing.TB) {
	t.Helper()
	if os.Getenv("AGENT_LOCK_VM") != "1" || os.Geteuid() != 0 {
		t.Skip("runs as root in the test VMs (make vmtest) and natively (make native)")
	}
}
