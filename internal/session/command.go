package session

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// outsideCommand says, before anything starts, that the command (or
// interp, the interpreter its #! line names, if any) lies where the cell
// grants nothing to read, and how to grant it; nil when it lies inside. Started anyway, it
// would only fail with a bare "permission denied" (an agent installed in
// /opt, in a version manager's folder no profile knows).
//
// It reads the cell's rules as the kernel walks them (a denial on the way
// refuses, else the nearest rule that grants reading), to say so early and
// by name; the kernel still decides, and this never lets anything through.
func outsideCommand(p policy.Policy, path, interp string) error {
	rules := p.Rules()
	check := func(what, file string) error {
		real, err := filepath.EvalSymlinks(file)
		if err != nil {
			return nil // not found: the start says so
		}
		ok, denial := readable(rules, real)
		if ok {
			return nil
		}
		shown := file
		if real != file {
			shown = file + " (" + real + ")"
		}
		if denial != "" {
			return fail(ExitCannotExec, fmt.Errorf("%s %s lies where the cell refuses everything (%s): the agent could not run it", what, shown, denial))
		}
		return fail(ExitCannotExec, fmt.Errorf("%s %s lies outside the cell (the project, the system folders and the grants): "+
			"the agent could not run it. Grant its install read-only with --allow %s (or allow = [%q] in ~/.config/agent-lock/policy.toml)",
			what, shown, installRoot(real), installRoot(real)))
	}
	if err := check("the command", path); err != nil {
		return err
	}
	if interp != "" {
		return check("its interpreter", interp)
	}
	return nil
}

// readable says whether the cell's rules let the agent read path, and
// names the denial that refuses it, if one does.
func readable(rules []spec.Rule, path string) (bool, string) {
	best := -1
	for i, r := range rules {
		if path != r.Path && !strings.HasPrefix(path, strings.TrimSuffix(r.Path, "/")+"/") {
			continue
		}
		if r.Access&spec.Deny != 0 {
			return false, r.Name
		}
		if r.Access&(spec.Read|spec.Write) != 0 && (best < 0 || len(r.Path) > len(rules[best].Path)) {
			best = i
		}
	}
	return best >= 0, ""
}

// installRoot is the folder to grant for an installed program: the prefix
// an installer made (/opt/agents for /opt/agents/bin/claude; the prefix of
// an npm package, above its lib/node_modules), else the program's folder.
func installRoot(path string) string {
	if i := strings.Index(path, "/lib/node_modules/"); i > 0 {
		return path[:i]
	}
	if i := strings.Index(path, "/node_modules/"); i > 0 {
		return path[:i]
	}
	dir := filepath.Dir(path)
	if filepath.Base(dir) == "bin" && filepath.Dir(dir) != "/" {
		return filepath.Dir(dir)
	}
	return dir
}

// interpreter is the program a script's #! line runs it with (through
// env, the one env finds on searchPath, the agent's PATH), or "".
func interpreter(path, searchPath string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" || !strings.HasPrefix(line, "#!") {
		return ""
	}
	fields := strings.Fields(strings.TrimPrefix(line, "#!"))
	if len(fields) == 0 {
		return ""
	}
	if filepath.Base(fields[0]) == "env" {
		for _, a := range fields[1:] {
			if strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
				continue
			}
			p, _ := findCommand(a, "/", searchPath)
			return p
		}
		return ""
	}
	return fields[0]
}
