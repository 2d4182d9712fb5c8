package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
