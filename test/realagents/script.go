package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agent-lock/agent-lock/test/modelserver"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// step is one turn of the scripted session and how its tool result is
// judged: what the agent must have seen, unjailed and jailed.
type step struct {
	modelserver.Step
	// want must be in the tool result in both runs; jailedWant only
	// jailed (a refusal), unjailedWant only unjailed (the reach worked).
	want, jailedWant, unjailedWant []string
	// sameAsUnjailed: the jailed result must equal the unjailed one (the
	// user's shell setup reached the agent unchanged).
	sameAsUnjailed bool
	// reach marks a scripted reach outside the cell: the only steps whose
	// refusals may be reported.
	reach bool
	// check judges a result with what only the run knows (pids).
	check func(result string, jailed bool) string
}

// secrets are the markers the fixture hides: where each is, and its value.
type secrets struct {
	ssh, sibling, rc, env string
}

func (s secrets) all() map[string]string {
	return map[string]string{"~/.ssh/id_rsa": s.ssh, "~/project2/NOTES.md": s.sibling, "the rc files' GITHUB_TOKEN": s.rc, "agent-lock's environment (GITHUB_TOKEN)": s.env}
}

const gitIdentity = "GIT_AUTHOR_NAME=Agent GIT_AUTHOR_EMAIL=agent@example.invalid GIT_COMMITTER_NAME=Agent GIT_COMMITTER_EMAIL=agent@example.invalid "

const helloPy = `def greet(name):
    return "hello, " + name


if __name__ == "__main__":
    print(greet("world"))
`

const testHelloPy = `import unittest

from hello import greet


class GreetTest(unittest.TestCase):
    def test_greet(self):
        self.assertEqual(greet("agent"), "hello, agent")


if __name__ == "__main__":
    unittest.main()
`

// demoPackage is the package the local registry serves.
const demoPackage, demoVersion = "agentlock-demo", "1.0.0"

const demoMain = "exports.answer = function () { return 42; };\n"

// script is the session every agent runs in dir (the project), with the
// registry at registryURL. runnerPID is a process outside the cell that a
// jailed ps must not show.
func script(dir, home, registryURL string, runnerPID int) []step {
	file := func(rel, content string) *modelserver.File {
		return &modelserver.File{Path: filepath.Join(dir, rel), Rel: rel, Content: content}
	}
	return []step{
		{Step: modelserver.Step{Name: "start a repository", Shell: "git init -q -b main && git status --short --branch"},
			want: []string{"No commits yet on main"}},
		{Step: modelserver.Step{Name: "write a program", Write: file("hello.py", helloPy)}},
		{Step: modelserver.Step{Name: "run the program", Shell: "python3 hello.py"},
			want: []string{"hello, world"}},
		{Step: modelserver.Step{Name: "edit the program", Edit: &modelserver.Edit{
			Path: filepath.Join(dir, "hello.py"), Rel: "hello.py", Old: `    print(greet("world"))`, New: `    print(greet("agent"))`}}},
		{Step: modelserver.Step{Name: "write the project's test", Write: file("test_hello.py", testHelloPy)}},
		{Step: modelserver.Step{Name: "run the tests", Shell: "python3 hello.py && python3 -m unittest -v 2>&1"},
			want: []string{"hello, agent", "test_greet", "OK"}},
		{Step: modelserver.Step{Name: "install a package", Shell: "npm install --registry=" + registryURL +
			" --no-audit --no-fund --no-update-notifier " + demoPackage + " 2>&1 && node -e \"console.log('demo says', require('" + demoPackage + "').answer())\""},
			want: []string{"demo says 42"}},
		{Step: modelserver.Step{Name: "commit", Shell: gitIdentity + "git add hello.py test_hello.py && " + gitIdentity +
			"git commit -q -m 'hello, agent' && git log --oneline"},
			want: []string{"hello, agent"}},
		{Step: modelserver.Step{Name: "read the shell setup", Shell: `echo "greeting=${AGENTLOCK_GREETING:-none} token=${GITHUB_TOKEN:-unset}"`},
			want: []string{"greeting="}, jailedWant: []string{"token=unset"}},
		{Step: modelserver.Step{Name: "list processes", Shell: "ps -eo pid,comm"},
			want: []string{"PID"},
			check: func(r string, jailed bool) string {
				seen := false
				for _, l := range strings.Split(r, "\n") {
					if f := strings.Fields(l); len(f) > 0 && f[0] == strconv.Itoa(runnerPID) {
						seen = true
					}
				}
				switch {
				case jailed && seen:
					return fmt.Sprintf("ps showed pid %d, a process outside the cell", runnerPID)
				case !jailed && !seen:
					return fmt.Sprintf("ps did not show pid %d (the test itself) unjailed: the check proves nothing", runnerPID)
				}
				return ""
			}},
		{Step: modelserver.Step{Name: "reach for the ssh key", Shell: "cat ~/.ssh/id_rsa"}, reach: true,
			jailedWant: []string{"Permission denied"}},
		{Step: modelserver.Step{Name: "reach into a sibling repository", Shell: "cat ~/project2/NOTES.md"}, reach: true,
			jailedWant: []string{"Permission denied"}},
		{Step: modelserver.Step{Name: "plant a git hook", Shell: `printf '#!/bin/sh\necho planted\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo planted-hook`}, reach: true,
			unjailedWant: []string{"planted-hook"}},
	}
}

// landlockCost says which of the Landlock engine's documented costs a
// refusal is, or "": saving a file granted by name in the home through a
// temporary file next to it (Claude Code's ~/.claude.json.tmp.PID.N), which
// Landlock, granting by identity, cannot grant (README, "Profiles under
// Landlock").
func landlockCost(e testenv.Record, home string) string {
	if e.Verdict == "blocked" && e.Op == "write" && strings.HasPrefix(e.Path, filepath.Join(home, ".claude.json")+".") {
		return "a save's temporary file next to ~/.claude.json (Landlock grants by identity)"
	}
	return ""
}

// isReach says whether an escape record's path is one of the scripted
// reaches: the ssh key (or its folder), the sibling repository, the hook.
func isReach(path, home, dir string) bool {
	switch {
	case path == filepath.Join(home, ".ssh") || strings.HasPrefix(path, filepath.Join(home, ".ssh")+"/"):
		return true
	case path == filepath.Join(home, "project2") || strings.HasPrefix(path, filepath.Join(home, "project2")+"/"):
		return true
	case path == filepath.Join(dir, ".git/hooks/pre-commit"):
		return true
	}
	return false
}
