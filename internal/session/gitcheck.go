package session

import (
	"os/exec"
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

// checkGit runs gitcheck over the repositories the agent could write (DIR,
// its writable grants, the git directory of a linked worktree DIR is), as
// the agent's user, and reports what it found. Under the BPF LSM, which
// keeps the marks of what the jail made, only when the kernel saw the jail
// make a git command file (made > 0): the walk then costs nothing in a
// session that made none. Under Landlock, which keeps no marks, in DIR,
// what changed there since the start and the tripwire did not keep: the
// repositories the agent made (the tripwire keeps the git files of those
// that were there, at any depth).
func checkGit(c *cell, p policy.Policy, a Agent, audit bool, made uint64, w report.Writer, warn warner) int {
	if c.onlyOpen {
		return 0
	}
	git, _ := exec.LookPath("git")
	chk := &gitcheck.Checker{Made: c.jail.Made, Git: git, UID: a.UID, GID: a.GID, ReportOnly: audit}
	roots := append([]string{p.Dir}, p.AllowWrite...)
	var dirs []string
	switch {
	case c.ruleset != nil && c.tw != nil:
		// Under Landlock, which keeps no marks: git's files that changed
		// since the start and that the tripwire did not keep, in
		// repositories the agent made (tripwireRun.madeSince).
		chk.Made = c.tw.madeSince
		roots = []string{p.Dir}
	case made == 0 || c.ruleset != nil:
		return 0
	default:
		if wt, ok := policy.FindGitWorktree(p.Dir); ok {
			dirs = append(dirs, wt.GitDir)
		}
	}
	var found []gitcheck.Finding
	if err := asuser.Do(a.ID(), func() error {
		found = chk.Check(roots, dirs)
		return nil
	}); err != nil {
		warn("check the git files the agent made: %v", err)
		return 0
	}
	for _, f := range found {
		e := report.Event{Time: time.Now(), Comm: "agent-lock", Op: OpPlant, Path: f.Path, Path2: f.Moved,
			Verdict: report.Blocked, Rule: "git: " + f.Why}
		switch {
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
	}
	return len(found)
}
