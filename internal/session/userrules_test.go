package session

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/policy"
)

// The cell's paths are resolved as the user: a DIR whose .git file names a
// linked worktree in a folder only root may enter gets no grant of it (as
// root, the same policy would grant the worktree: the test's own proof).
func TestRulesResolvedAsTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to act as another user")
	}
	const nobody = 65534
	// Not t.TempDir: its parent is root's alone.
	top, err := os.MkdirTemp("", "userrules-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	os.Chmod(top, 0o755)
	hidden := filepath.Join(top, "root-only")
	common := filepath.Join(hidden, "repo.git")
	gitDir := filepath.Join(common, "worktrees", "w")
	dir := filepath.Join(top, "dir")
	for _, d := range []string{filepath.Join(common, "objects"), gitDir, dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(hidden, 0o700)
	os.Chown(dir, nobody, nobody)
	for name, content := range map[string]string{
		filepath.Join(dir, ".git"):         "gitdir: " + gitDir + "\n",
		filepath.Join(gitDir, "gitdir"):    filepath.Join(dir, ".git") + "\n",
		filepath.Join(gitDir, "commondir"): "../..\n",
	} {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := policy.Policy{Dir: dir}
	granted := func(rules []string) bool {
		for _, r := range rules {
			if strings.Contains(r, gitDir) {
				return true
			}
		}
		return false
	}
	names := func(p policy.Policy, asUser bool) []string {
		rules := p.Rules()
		if asUser {
			var err error
			if rules, err = userRules(p, asuser.ID{UID: nobody, GID: nobody}); err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		for _, r := range rules {
			out = append(out, r.Name+" "+r.Path)
		}
		return out
	}
	if !granted(names(p, false)) {
		t.Fatalf("as root the worktree is not granted, so the test proves nothing: %v", names(p, false))
	}
	got := names(p, true)
	if granted(got) {
		t.Errorf("resolved as the user, a worktree only root can reach is granted: %v", got)
	}
	// DIR itself the user reaches: the rules were resolved, not lost.
	if !slices.Contains(got, "project directory "+dir) {
		t.Errorf("resolved as the user, DIR is not granted: %v", got)
	}
}
