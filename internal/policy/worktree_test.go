package policy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agent-lock/agent-lock/internal/spec"
)

func TestGitWorktreeRules(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=a", "-c", "user.email=a@b"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	repo := filepath.Join(root, "repo")
	os.Mkdir(repo, 0o755)
	git(repo, "init", "-q")
	git(repo, "commit", "-q", "--allow-empty", "-m", "init")
	git(repo, "worktree", "add", "-q", "../wt")
	wt := filepath.Join(root, "wt")

	w, ok := FindGitWorktree(wt)
	if !ok || w.GitDir != filepath.Join(repo, ".git/worktrees/wt") || w.Common != filepath.Join(repo, ".git") {
		t.Fatalf("FindGitWorktree(%s) = %+v, %v", wt, w, ok)
	}
	rules := Policy{Dir: wt}.Rules()
	find := func(path string) spec.Rule {
		t.Helper()
		i := slices.IndexFunc(rules, func(r spec.Rule) bool { return r.Path == path })
		if i < 0 {
			t.Fatalf("no rule for %s in %+v", path, rules)
		}
		return rules[i]
	}
	// Writable, and in a git directory: git's names below it (commondir,
	// gitdir, config.worktree) are protected as below a .git.
	if r := find(w.GitDir); r.Access != spec.Read|spec.Write|spec.InGit {
		t.Errorf("the worktree's git directory: %+v", r)
	}
	if r := find(w.Common); r.Access != spec.Read {
		t.Errorf("the common directory must be read-only (its config and hooks run outside the jail): %+v", r)
	}
	for _, d := range []string{"objects", "refs"} {
		if r := find(filepath.Join(w.Common, d)); r.Access != spec.Read|spec.Write|spec.InGit {
			t.Errorf("%s: %+v", d, r)
		}
	}
	// DIR itself is no git directory; a grant inside one is.
	if r := find(wt); r.Access&spec.InGit != 0 {
		t.Errorf("DIR marked as in a git directory: %+v", r)
	}
	mod := filepath.Join(repo, ".git", "modules")
	os.Mkdir(mod, 0o755)
	rules = Policy{Dir: wt, AllowWrite: []string{mod}}.Rules()
	if r := find(mod); r.Access&spec.InGit == 0 {
		t.Errorf("a grant inside a .git: %+v", r)
	}

	// A .git file planted elsewhere, naming the same git directory: that
	// directory names wt/.git back, not it.
	planted := filepath.Join(root, "planted")
	os.Mkdir(planted, 0o755)
	os.WriteFile(filepath.Join(planted, ".git"), []byte("gitdir: "+w.GitDir+"\n"), 0o644)
	if w, ok := FindGitWorktree(planted); ok {
		t.Errorf("a planted .git file borrowed a worktree's grants: %+v", w)
	}

	// The main worktree (.git a directory), and a .git file naming a
	// git directory inside DIR (a submodule's layout), need nothing.
	if _, ok := FindGitWorktree(repo); ok {
		t.Error("a repository's own directory taken for a linked worktree")
	}
	sub := filepath.Join(root, "sub")
	os.MkdirAll(filepath.Join(sub, "gd"), 0o755)
	os.WriteFile(filepath.Join(sub, ".git"), []byte("gitdir: gd\n"), 0o644)
	os.WriteFile(filepath.Join(sub, "gd", "commondir"), []byte(".\n"), 0o644)
	os.Mkdir(filepath.Join(sub, "gd", "objects"), 0o755)
	if w, ok := FindGitWorktree(sub); ok {
		t.Errorf("a git directory inside DIR taken for an outside one: %+v", w)
	}
}
