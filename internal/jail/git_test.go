package jail_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/policy"
)

// TestGitFiles: git's command files are protected in every repository at
// any depth, by name along the path: a nested repository's config, a
// submodule's git directory under .git/modules, a linked worktree's
// commondir and gitdir, a .git file, .gitmodules anywhere. In a repository
// the jail makes (git init, git clone) the agent may make and change them,
// except a hook git would run (only NAME.sample files), and no symlink (by
// their names or in a git directory of the user's) or folder from
// elsewhere may bring one in; every command file it makes is
// counted (CNT_GIT_MADE) for the check at the session's end, and the jail's
// mark on it can be read back (Made).
func TestGitFiles(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	var dir string
	c := newCellWith(t, func(cfg *jail.Config, d, out string) {
		dir = d
		cfg.Protect = policy.Protected
	})
	// The user's: DIR's repository with a submodule's and a linked
	// worktree's git directories, a nested repository, a submodule's
	// pointer, a folder with nothing of git's.
	for rel, body := range map[string]string{
		".git/HEAD":                       "ref: refs/heads/main\n",
		".git/config":                     "[core]\n\tbare = false\n",
		".git/hooks/post-checkout":        "#!/bin/sh\n",
		".git/refs/heads/main":            "",
		".git/modules/sub2/config":        "[core]\n\tworktree = ../../../sub2\n",
		".git/modules/sub2/HEAD":          "ref: refs/heads/main\n",
		".git/modules/sub2/hooks/.keep":   "",
		".git/modules/sub2/refs/heads/m":  "",
		".git/worktrees/w/commondir":      "../..\n",
		".git/worktrees/w/gitdir":         "/elsewhere/w/.git\n",
		".git/worktrees/w/HEAD":           "ref: refs/heads/w\n",
		".gitmodules":                     "[submodule \"sub2\"]\n\tpath = sub2\n",
		"sub/.git/config":                 "[core]\n\tbare = false\n",
		"sub/.git/HEAD":                   "ref: refs/heads/main\n",
		"sub2/.git":                       "gitdir: ../.git/modules/sub2\n",
		"plain/f":                         "",
		"evil/pre-commit":                 "#!/bin/sh\n",
		"evil3/pre-commit":                "#!/bin/sh\n",
		"own/placeholder":                 "",
		"own2/placeholder":                "",
		".git/modules/sub2/objects/.keep": "",
	} {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(filepath.Join(dir, "own/placeholder"))
	os.Remove(filepath.Join(dir, "own2/placeholder"))
	if out, err := exec.Command("chown", "-R", "4242:4242", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	// own and own2 are the user's folders; the repositories made in them
	// below are the jail's.
	c.env = append(c.env, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b",
		"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b")
	exchange := `python3 -c 'import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); sys.exit(l.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), 2) and 1)' `
	before, err := c.j.Counters()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, script string
		ok           bool
		op, path     string // the refusal reported, when !ok
		rule         string
	}{
		// The user's repositories, at any depth.
		{"nested config", `echo '[core] fsmonitor = evil' >> sub/.git/config`, false, "write", "sub/.git/config", "protected .git/config"},
		{"nested hooks folder", `mkdir sub/.git/hooks`, false, "mkdir", "sub/.git/hooks", "protected .git/hooks"},
		{"submodule's config", `echo x >> .git/modules/sub2/config`, false, "write", "modules/sub2/config", "protected .git/config"},
		{"submodule's hook", `echo x > .git/modules/sub2/hooks/pre-commit`, false, "create", "modules/sub2/hooks/pre-commit", "protected .git/hooks"},
		{"worktree's commondir", `echo /tmp > .git/worktrees/w/commondir`, false, "write", "worktrees/w/commondir", "protected .git/commondir"},
		{"worktree's gitdir", `rm .git/worktrees/w/gitdir`, false, "unlink", "worktrees/w/gitdir", "protected .git/gitdir"},
		{"a submodule's pointer rewritten", `echo 'gitdir: ../evil' > sub2/.git`, false, "write", "sub2/.git", "protected .git"},
		{"a submodule's pointer removed", `rm sub2/.git`, false, "unlink", "sub2/.git", "protected .git"},
		{"a .git moved away", `mv sub/.git sub/old`, false, "rename", "sub/.git", "protected .git"},
		{"a .git file in the user's folder", `echo 'gitdir: ../evil' > plain/.git`, false, "create", "plain/.git", "protected .git"},
		{".gitmodules", `echo x >> .gitmodules`, false, "write", ".gitmodules", "protected .gitmodules"},
		{".gitmodules at depth", `echo x > plain/.gitmodules`, false, "create", "plain/.gitmodules", "protected .gitmodules"},
		{"a symlink onto a .git", `ln -s ../.git plain/.git`, false, "symlink", "plain/.git", "protected .git"},
		// Git's other files in the user's repositories: work goes on.
		{"submodule's work", `echo x > .git/modules/sub2/index && echo y > .git/modules/sub2/refs/heads/n && echo z > .git/worktrees/w/HEAD`, true, "", "", ""},
		{"a submodule's git directory made", `mkdir .git/modules/new && echo '[core]' > .git/modules/new/config && echo h > .git/modules/new/HEAD`, true, "", "", ""},
		{"a .git folder anywhere", `mkdir plain/.git && rmdir plain/.git`, true, "", "", ""},
		// Repositories the jail makes.
		{"git init and commit", `git init -q own && cd own && echo x > f && git add f && git commit -qm one && git config user.name b && ls .git/hooks | grep -q pre-commit.sample`, true, "", "", ""},
		{"a pointer in the jail's folder", `mkdir -p own/wt && echo 'gitdir: ../.git/worktrees/wt' > own/wt/.git`, true, "", "", ""},
		{"a sample hook", `echo x > own/.git/hooks/pre-push.sample && chmod +x own/.git/hooks/pre-push.sample`, true, "", "", ""},
		{"a symlink in the .git folder", `ln -s testing own/.git/probe && rm own/.git/probe`, true, "", "", ""},
		{"the jail's .git moved", `git init -q own2/r && mv own2/r/.git own2/r/gitbak && mv own2/r/gitbak own2/r/g2`, true, "", "", ""},
		{"a hook in the jail's repository", `echo evil > own/.git/hooks/pre-commit`, false, "create", "own/.git/hooks/pre-commit", "protected .git/hooks"},
		{"a sample renamed to a hook", `mv own/.git/hooks/pre-push.sample own/.git/hooks/pre-push`, false, "rename", "own/.git/hooks/pre-push", "protected .git/hooks"},
		{"a hook linked in", `ln evil/pre-commit own/.git/hooks/pre-commit`, false, "link", "own/.git/hooks/pre-commit", "protected .git/hooks"},
		{"a hooks folder from elsewhere", `rm -r own/.git/hooks && mv evil own/.git/hooks`, false, "rename", "own/.git/hooks", "protected .git/hooks"},
		{"a hooks folder from the repository", `mkdir own/.git/objects/h && echo x > own/.git/objects/h/pre-commit && mv own/.git/objects/h own/.git/hooks`, false, "rename", "own/.git/hooks", "protected .git/hooks"},
		{"hooks as a symlink", `ln -s ../../evil3 own/.git/hooks`, false, "symlink", "own/.git/hooks", "protected .git/hooks"},
		{"modules as a symlink", `ln -s ../../evil3 own/.git/modules`, false, "symlink", "own/.git/modules", "protected .git"},
		{"a symlink in the user's git directory", `ln -s ../../../evil3 .git/modules/sub2/m`, false, "symlink", "modules/sub2/m", "protected .git"},
		{"a symlink deeper in the jail's", `ln -s ../../../evil3 own/.git/objects/m`, true, "", "", ""},
		{"a folder from elsewhere into .git", `mkdir own/x && mv own/x own/.git/modules2`, false, "rename", "own/.git/modules2", "protected .git"},
		{"a folder exchanged into .git", `mkdir own/.git/hooks && ` + exchange + `own/.git/hooks evil3`, false, "rename", "own/.git/hooks", "protected .git/hooks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.run(tc.script)
			evs := c.events()
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v\n%s\nevents: %+v", err, out, evs)
				}
				if len(evs) != 0 {
					t.Fatalf("allowed work produced reports: %+v", evs)
				}
				return
			}
			if err == nil {
				t.Fatalf("not refused:\n%s", out)
			}
			for _, ev := range evs {
				if ev.Denied && ev.Op == tc.op && (strings.HasSuffix(ev.Path, tc.path) || strings.HasSuffix(ev.Path2, tc.path)) {
					if ev.Rule != tc.rule {
						t.Errorf("rule %q, want %q: %+v", ev.Rule, tc.rule, ev)
					}
					return
				}
			}
			t.Fatalf("no refused %s of ...%s among %+v (output %q)", tc.op, tc.path, evs, out)
		})
	}
	after, err := c.j.Counters()
	if err != nil {
		t.Fatal(err)
	}
	// Made, at least: the submodule's config, own's and own2/r's configs
	// (git writes each several times), own/wt's .git file.
	if n := after.GitMade - before.GitMade; n < 4 {
		t.Errorf("%d git command files counted made, want at least 4", n)
	}
	for rel, want := range map[string]bool{"own/.git/config": true, "own/wt/.git": true, ".git/modules/new/config": true,
		".git/config": false, "sub/.git/config": false} {
		f, err := os.OpenFile(filepath.Join(dir, rel), os.O_RDONLY|0o10000000 /* O_PATH */, 0)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		got, err := c.j.Made(f)
		f.Close()
		if err != nil || got != want {
			t.Errorf("Made(%s) = %v, %v; want %v", rel, got, err, want)
		}
	}
}
