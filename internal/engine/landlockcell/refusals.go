package landlockcell

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/secretenv"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// No silent promises: a request the Landlock engine cannot enforce stops
// the session at start, with the reason and what to do instead, unless
// the user says --best-effort (then it is a warning saying what happens
// instead). The BPF-LSM engine enforces all of them.

// Refusal is a request the Landlock engine cannot enforce as asked.
type Refusal struct {
	Why string // the request, why not, and what to do instead
	// BestEffort is what happens with --best-effort.
	BestEffort string
}

// Refusals are the requests in p that the Landlock engine cannot
// enforce as asked.
func Refusals(p policy.Policy) []Refusal {
	var out []Refusal
	for _, g := range p.DenyPatterns {
		out = append(out, Refusal{
			Why: fmt.Sprintf("--deny %q: Landlock grants by path and cannot refuse files by name; "+
				"use --engine bpf-lsm, or --deny the folders that hold them by path", g),
			BestEffort: fmt.Sprintf("--deny %q is not enforced: the agent may read and write files so named", g),
		})
	}
	for _, d := range p.Deny {
		if d == p.Dir || !spec.Under(d, p.Dir) {
			continue
		}
		out = append(out, Refusal{
			Why: fmt.Sprintf("--deny %s lies inside the project directory: Landlock only grants, so it would "+
				"grant the project's other entries one by one, and the agent could neither list %s nor make new files "+
				"in it or in the folders down to %s; use --engine bpf-lsm, or move it out of the project", d, p.Dir, d),
			BestEffort: fmt.Sprintf("--deny %s is refused by granting the project's other entries one by one: the agent "+
				"cannot list %s, nor make new files in it or in the folders down to %s", d, p.Dir, d),
		})
	}
	return out
}

// refuseUnenforceable is the Landlock engine's check at start; warn (nil
// for none) is told what --best-effort does instead.
func refuseUnenforceable(p policy.Policy, bestEffort bool, warn func(format string, args ...any)) error {
	rs := Refusals(p)
	if len(rs) == 0 {
		return nil
	}
	var why []string
	for _, r := range rs {
		if bestEffort && warn != nil {
			warn("--best-effort: %s", r.BestEffort)
		}
		why = append(why, r.Why)
	}
	if bestEffort {
		return nil
	}
	return fmt.Errorf("the Landlock engine cannot do what was asked:\n  - %s\n"+
		"(--best-effort runs the agent anyway, as far as Landlock can)", strings.Join(why, "\n  - "))
}

// withholdSockets keeps from the agent the variables that point at the
// user's unix sockets, where Landlock cannot refuse connecting to them
// (below ABI 9): the agent need not be told where ssh-agent listens. The
// limit is said once; granted are the sockets let through (--allow-unix).
func withholdSockets(env []string, abi int, granted []string, warn func(format string, args ...any)) (kept, withheld []string) {
	kept, withheld = secretenv.Sockets(env, granted, func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return filepath.Clean(p)
	})
	if len(withheld) > 0 {
		warn("Landlock ABI %d cannot refuse connecting to unix sockets by path (ABI 9 can): %s withheld from the agent "+
			"(--allow-unix PATH passes the one for PATH); a socket whose path the agent knows or guesses, "+
			"such as /var/run/docker.sock, stays reachable", abi, strings.Join(withheld, ", "))
	}
	return kept, withheld
}
