package engine_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/agent-lock/agent-lock/internal/"

// deps are the packages pkg needs, with go list's view of the build.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", mod+pkg).Output()
	if err != nil {
		t.Skipf("go list: %v (the go tool is not here)", err)
	}
	return strings.Fields(string(out))
}

// TestShape: the engines stay behind engine's interface. Neither engine
// imports the other, the cell's description (policy, spec) imports no
// engine nor the BPF loader, and session reaches the kernel's programs
// only through the engines.
func TestShape(t *testing.T) {
	for _, tc := range []struct {
		pkg  string
		none []string
	}{
		{"engine/bpflsm", []string{"engine/landlockcell", "landlock", "tripwire"}},
		{"engine/landlockcell", []string{"engine/bpflsm"}},
		{"engine", []string{"jail", "landlock", "engine/bpflsm", "engine/landlockcell"}},
		{"policy", []string{"jail", "landlock", "engine", "engine/bpflsm", "engine/landlockcell"}},
		{"spec", []string{"jail", "landlock", "engine", "policy"}},
		{"verdict", []string{"jail", "landlock", "engine"}},
	} {
		d := deps(t, tc.pkg)
		for _, n := range tc.none {
			if slices.Contains(d, mod+n) {
				t.Errorf("%s imports %s", tc.pkg, n)
			}
		}
	}
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, mod+"session").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"jail", "landlock", "tripwire"} {
		if slices.Contains(strings.Fields(string(out)), mod+n) {
			t.Errorf("session imports %s: it knows the engines through engine.Cell only", n)
		}
	}
}
