package testenv

import (
	"os"
	"path/filepath"
	"testing"
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
