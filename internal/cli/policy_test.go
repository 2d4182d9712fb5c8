package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/policy"
)

func TestApplyPolicyFiles(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	for _, d := range []string{"ref", "cache", ".config/agent-lock"} {
		os.MkdirAll(filepath.Join(home, d), 0o755)
	}
	os.Mkdir(filepath.Join(dir, "data"), 0o755)
	userFile := filepath.Join(home, policy.HomeFile)
	projFile := filepath.Join(dir, policy.PolicyFile)
	os.WriteFile(userFile, []byte("engine = \"landlock\"\nallow = [\"~/ref\"]\nprofiles = [\"codex\"]\n"), 0o644)

	// A project's file that only denies is taken; flags win over files.
	os.WriteFile(projFile, []byte("deny = [\"data\"]\n"), 0o644)
	o := options{engine: "bpf-lsm", allow: []string{"/flag"}}
	used, err := applyPolicyFiles(&o, home, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(used, []string{userFile, projFile}) {
		t.Errorf("used %v", used)
	}
	if o.engine != "bpf-lsm" || !slices.Equal(o.allow, []string{filepath.Join(home, "ref"), "/flag"}) ||
		!slices.Equal(o.deny, []string{filepath.Join(dir, "data")}) || !slices.Equal(o.profiles, []string{"codex"}) {
		t.Errorf("merged %+v", o)
	}
	o = options{}
	applyPolicyFiles(&o, home, dir)
	if o.engine != "landlock" {
		t.Errorf("engine %q, want the user's file's", o.engine)
	}

	// A project's file that widens is refused, naming its line and key...
	os.WriteFile(projFile, []byte("deny = [\"data\"]\n\nallow-write = [\"~/cache\"]\n"), 0o644)
	_, err = applyPolicyFiles(&options{}, home, dir)
	if err == nil || !strings.HasPrefix(err.Error(), projFile+":3: allow-write: a project's policy file may only deny") {
		t.Fatalf("widening project file: %v", err)
	}
	// ...unless the user's own file trusts the project.
	os.WriteFile(userFile, []byte("trusted-projects = [\""+dir+"\"]\n"), 0o644)
	o = options{}
	if _, err := applyPolicyFiles(&o, home, dir); err != nil || !slices.Equal(o.allowWrite, []string{filepath.Join(home, "cache")}) {
		t.Errorf("trusted project: %v %+v", err, o)
	}
}
