package session

import (
	"os/exec"
	"strings"
	"time"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/gitcheck"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/report"
)

// OpPlant is the operation of a report record for a git file the agent
// made that the user's git would have run a command from (or followed out
// of a git directory): agent-lock moved it aside when the session ended
// (gitcheck).
const OpPlant = "plant"

// checkGit runs gitcheck where the engine says the agent may have made
// git files (engine.Cell.GitScope: under the BPF LSM, which marks what the
// jail made, DIR, its writable grants and the git directory of a linked
// worktree DIR is, when the kernel saw the jail make a git command file;
// under Landlock what changed since the start in DIR and the user's
// writable grants that the tripwire did not keep), as the agent's user,
// and reports what it found.
func checkGit(c *cell, p policy.Policy, a Agent, audit bool, made uint64, w report.Writer, warn warner) int {
	git, _ := exec.LookPath("git")
	var found []gitcheck.Finding
	if err := asuser.Do(a.ID(), func() error {
		// As the user: the scope reads DIR's .git file.
		g := c.eng.GitScope(p.Dir, p.AllowWrite, made)
		if g == nil {
			return nil
		}
		chk := &gitcheck.Checker{Made: g.Made, Git: git, UID: a.UID, GID: a.GID, Groups: a.Groups, ReportOnly: audit}
		found = chk.Check(g.Roots, g.GitDirs)
		return nil
	}); err != nil {
		warn("check the git files the agent made: %v", err)
		return 0
	}
	n := 0
	for _, f := range found {
		e := report.Event{Time: time.Now(), Comm: "agent-lock", Op: OpPlant, Path: f.Path, Path2: f.Moved,
			Verdict: report.Blocked, Rule: "git: " + f.Why}
		switch {
		case f.Unchecked:
			e.Verdict = report.Allowed
			warn("could not look for git files the agent may have made at %s (%s; the report has the whole path): remove it, or look before you run git there or move it higher", elide(f.Path), f.Why)
		case audit:
			e.Verdict = report.Allowed
			warn("the agent made %s, which your git would run a command from: %s (audit: left as it is)", f.Path, f.Why)
		case f.Err != nil:
			e.Verdict = report.Allowed
			warn("the agent made %s, which your git would run a command from (%s), and agent-lock could not move it aside: %v; remove it before you run git there", f.Path, f.Why, f.Err)
		default:
			warn("the agent made %s, which your git would run a command from: %s; moved to %s", f.Path, f.Why, f.Moved)
		}
		w.Escape(e)
		if !f.Unchecked {
			n++ // what was found; not what could not be looked at
		}
	}
	return n
}

// elide shortens a path too long to read on a terminal: its start and end.
func elide(p string) string {
	if len(p) <= 160 {
		return p
	}
	return strings.ToValidUTF8(p[:100], "") + "…" + strings.ToValidUTF8(p[len(p)-50:], "")
}
