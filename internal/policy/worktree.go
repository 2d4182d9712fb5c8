package policy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"

	"github.com/agent-lock/agent-lock/internal/spec"
)

// GitWorktree is a project directory that is a linked git worktree (git
// worktree add ../feature) whose git directory lies outside it: DIR/.git is
// a file naming GitDir (COMMON/worktrees/NAME), which names the repository's
// common directory. To commit there git writes GitDir (HEAD, index, the
// worktree's logs) and the common objects, refs and logs; it reads the rest
// of the common directory (config, hooks, packed-refs).
type GitWorktree struct {
	GitDir, Common string
}

// WorktreeProtected are the names in a linked worktree's git directory
// that lead git elsewhere or configure it: the BPF LSM protects them as
// git's names (spec.Protected.Git), the Landlock engine's tripwire keeps
// them by these names.
var WorktreeProtected = []string{"commondir", "gitdir", "config.worktree"}

// FindGitWorktree reads DIR/.git (DIR resolved). It finds nothing where
// .git is a directory, names a git directory inside DIR (a submodule's),
// or does not lead to a worktree's git directory that names DIR/.git back
// and has a common directory.
func FindGitWorktree(dir string) (GitWorktree, bool) {
	f := filepath.Join(dir, ".git")
	if st, err := os.Lstat(f); err != nil || !st.Mode().IsRegular() || st.Size() > 4096 {
		return GitWorktree{}, false
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return GitWorktree{}, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	gitdir, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "gitdir: ")
	if !ok || gitdir == "" {
		return GitWorktree{}, false
	}
	if !filepath.IsAbs(gitdir) {
		gitdir = filepath.Join(dir, gitdir)
	}
	gitdir, err = filepath.EvalSymlinks(gitdir)
	if err != nil || gitdir == dir || strings.HasPrefix(gitdir, dir+"/") {
		return GitWorktree{}, false
	}
	// The git directory must name this .git as its worktree (git's own
	// back-link, which git keeps and the agent cannot write): a .git file
	// an agent planted in a folder of DIR, for a later session rooted
	// there, cannot borrow another worktree's grants.
	back, err := os.ReadFile(filepath.Join(gitdir, "gitdir"))
	if err != nil {
		return GitWorktree{}, false
	}
	if b, err := filepath.EvalSymlinks(strings.TrimSpace(string(back))); err != nil || b != f {
		return GitWorktree{}, false
	}
	c, err := os.ReadFile(filepath.Join(gitdir, "commondir"))
	if err != nil {
		return GitWorktree{}, false
	}
	common := strings.TrimSpace(string(c))
	if !filepath.IsAbs(common) {
		common = filepath.Join(gitdir, common)
	}
	common, err = filepath.EvalSymlinks(common)
	if err != nil {
		return GitWorktree{}, false
	}
	if st, err := os.Stat(filepath.Join(common, "objects")); err != nil || !st.IsDir() {
		return GitWorktree{}, false
	}
	return GitWorktree{GitDir: gitdir, Common: common}, true
}

// rules are the worktree's grants: its git directory read-write, the
// common directory read-only, and its objects, refs and logs read-write.
// The writable ones lie in git directories (InGit) whatever they are
// called (a bare repository's need not be .git): git's files below them
// are protected as in any repository, so the worktree's links to the
// common directory (commondir, gitdir: a commondir pointing at a directory
// the agent wrote would hand the user's next git command a config, and
// hooks, of its choosing) and its config.worktree are read-only, as is
// DIR's .git file on the other side of the link. Not marked Grant: the
// secret-name patterns are for the user's trees, and a branch may be
// called id_fix.
func (w GitWorktree) rules() []spec.Rule {
	out := []spec.Rule{
		{Path: w.Common, Access: spec.Read, Name: "git worktree's repository " + w.Common},
		{Path: w.GitDir, Access: spec.Read | spec.Write | spec.InGit, Name: "git worktree " + w.GitDir},
	}
	for _, d := range []string{"objects", "refs", "logs"} {
		p := filepath.Join(w.Common, d)
		if _, err := os.Stat(p); err == nil {
			out = append(out, spec.Rule{Path: p, Access: spec.Read | spec.Write | spec.InGit, Name: "git worktree's repository " + p})
		}
	}
	return out
}
