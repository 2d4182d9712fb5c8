package landlockcell

import (
	"github.com/agent-lock/agent-lock/internal/asuser"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/tripwire"
)

// The Landlock engine's tripwire keeps git's files at any depth: those of
// the repositories below DIR's top and the links of every git directory's
// worktrees and submodules (the adversary's git-nested-config and
// git-worktree-commondir run against them natively and in forky).
func TestGitEntries(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{".git/worktrees/wt", ".git/modules/lib/m", "a/nest/.git/hooks", "a/nest/.git/worktrees/w2", "sub"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	for _, f := range []string{".git/worktrees/wt/HEAD", ".git/modules/lib/m/HEAD", "a/nest/.git/worktrees/w2/HEAD"} {
		os.WriteFile(filepath.Join(dir, f), []byte("ref: refs/heads/x\n"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "sub/.git"), []byte("gitdir: ../.git/modules/lib/m\n"), 0o644)

	entries, more, _, err := gitEntries(self(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	dirOnly := map[string]bool{}
	for _, e := range entries {
		if e.Root != dir {
			t.Errorf("entry %s: root %s, want DIR", e.Path, e.Root)
		}
		paths = append(paths, e.Path)
		dirOnly[e.Path] = e.DirOnly
	}
	for _, want := range []string{
		".git/worktrees/wt/commondir", ".git/worktrees/wt/gitdir", ".git/worktrees/wt/config.worktree",
		".git/modules/lib/m/config", ".git/modules/lib/m/hooks",
		"a/nest/.git", "a/nest/.git/hooks", "a/nest/.git/config", "a/nest/.git/commondir", "a/nest/.gitmodules",
		"a/nest/.git/worktrees/w2/commondir",
		"sub/.git", "sub/.gitmodules",
	} {
		if !slices.Contains(paths, want) {
			t.Errorf("%s is not kept; entries: %v", want, paths)
		}
	}
	if !dirOnly["a/nest/.git"] || dirOnly["sub/.git"] {
		t.Errorf("a .git folder keeps its name only, a .git file its content: %v", dirOnly)
	}
	if slices.Contains(paths, ".git/hooks") || more != 0 {
		t.Errorf("DIR's own are policy.Protected's, and nothing was left out: %v (%d more)", paths, more)
	}

	// What the entries keep is not the agent's; what changed elsewhere
	// since the start is.
	tw := &tripwireRun{since: time.Now().Add(-time.Second), gitDirs: gitDirInodes(dir, entries)}
	for _, e := range entries {
		tw.kept = append(tw.kept, keptPath{filepath.Join(e.Root, e.Path), e.DirOnly})
	}
	made := func(p string) bool {
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_PATH|unix.O_NOFOLLOW, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m, err := tw.madeSince(f)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	os.MkdirAll(filepath.Join(dir, "new/.git/hooks"), 0o755)
	hook := filepath.Join(dir, "new/.git/hooks/pre-commit")
	os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755)
	kept := filepath.Join(dir, "a/nest/.git/hooks/x")
	os.WriteFile(kept, []byte("#!/bin/sh\n"), 0o755)
	if !made(hook) {
		t.Errorf("a hook in a repository made since the start is not the agent's")
	}
	if made(kept) {
		t.Errorf("a file in a kept entry is taken for the agent's")
	}
	tw.since = time.Now().Add(time.Hour)
	if made(hook) {
		t.Errorf("a file older than the start is taken for the agent's")
	}

	// A git directory made before the start (in an earlier session, under
	// another name) and moved into place after it: its config's own ctime
	// is older than the start, the move is not.
	old := filepath.Join(dir, "prepared")
	os.MkdirAll(filepath.Join(old, "hooks"), 0o755)
	os.WriteFile(filepath.Join(old, "config"), []byte("[core]\n\tfsmonitor = touch pwned\n"), 0o644)
	os.WriteFile(filepath.Join(old, "hooks", "pre-commit"), []byte("#!/bin/sh\n"), 0o755)
	time.Sleep(50 * time.Millisecond)
	tw.since = time.Now()
	time.Sleep(50 * time.Millisecond)
	os.MkdirAll(filepath.Join(dir, "moved"), 0o755)
	if err := os.Rename(old, filepath.Join(dir, "moved", ".git")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"moved/.git/config", "moved/.git/hooks/pre-commit"} {
		if !made(filepath.Join(dir, p)) {
			t.Errorf("%s, in a git directory moved into place since the start, is not the agent's", p)
		}
	}

	// A git directory there was at the start changes with every git
	// command: a file of the user's in it is not the agent's for that.
	link := filepath.Join(dir, "a/nest/.git/objects")
	if err := os.Symlink("../../elsewhere", link); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	tw.since = time.Now()
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(filepath.Join(dir, "a/nest/.git/index.lock"), nil, 0o644)
	if made(link) {
		t.Errorf("a symlink of the user's in a git directory there was at the start is taken for the agent's after a git command there")
	}
}

// TestGrantRoots: the tripwire keeps git's files in the user's writable
// grants (not in a profile's, a read-only grant, a grant inside DIR or one
// inside another grant, nor in a grant of the whole home), at their top
// and below it.
func TestGrantRoots(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(home, "project")
	for _, d := range []string{"project/inner", "other/.git/hooks", "other/nest/.git", "other/sub", "ro/.git", ".claude/.git"} {
		os.MkdirAll(filepath.Join(home, d), 0o755)
	}
	p := policy.Policy{Dir: dir, Home: home, Protect: policy.Protected,
		AllowWrite: []string{home, filepath.Join(home, "other"), filepath.Join(home, "other/sub"), filepath.Join(dir, "inner"), filepath.Join(home, ".claude")},
		Allow:      []string{filepath.Join(home, "ro")},
		Profiled:   map[string]string{filepath.Join(home, ".claude"): "profile claude"}}
	rules := p.Rules()
	other := filepath.Join(home, "other")
	if got := grantRoots(p, rules); !slices.Equal(got, []string{other}) {
		t.Errorf("grant roots %v, want [%s]", got, other)
	}
	// The home's own grant would be a walk of the whole home at every
	// start: said, not kept.
	if got := broadGrants(p, rules); !slices.Equal(got, []string{home}) {
		t.Errorf("broad grants %v, want [%s]", got, home)
	}
	kept := map[string]bool{}
	for _, e := range TripwireEntries(p, rules) {
		kept[filepath.Join(e.Root, e.Path)] = true
	}
	for _, want := range []string{".git/hooks", ".git/config", ".gitmodules"} {
		if !kept[filepath.Join(other, want)] {
			t.Errorf("%s is not kept", filepath.Join(other, want))
		}
	}
	for p := range kept {
		if strings.HasPrefix(p, filepath.Join(home, "ro")) || strings.HasPrefix(p, filepath.Join(home, ".claude")) {
			t.Errorf("%s is kept: not a writable grant of the user's", p)
		}
	}
	nested, _, _, err := gitEntries(self(), other, nil, dir, other)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(nested, func(e tripwire.Entry) bool {
		return filepath.Join(e.Root, e.Path) == filepath.Join(other, "nest/.git/config")
	}) {
		t.Errorf("the nested repository's config is not kept: %v", nested)
	}
}

// self is this process's user, as whom the tests read.
func self() asuser.ID {
	return asuser.ID{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
}
