package session

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// agentView is how the agent sees the file system where it differs from
// agent-lock's: a /proc that shows it only the processes it may look at
// (its own), and the user's shell files replaced by their scrubbed copies
// (shellrc.go). Both live in a mount namespace of the agent's own, which
// agent-lock makes (as root, before the cell's first process starts) on the
// thread that starts it; the host's mounts still reach it, its own reach
// nothing outside.
type agentView struct {
	rc []rcCopy
}

// enter moves the calling thread, which must be locked and must start the
// agent, into the agent's mount namespace and sets it up. What cannot be
// set up is said in the warnings, and the agent runs without it: neither
// part decides anything (the cell refuses the same whatever the agent sees),
// they only spare the agent refusals of ordinary work.
func (v agentView) enter() (warnings []string) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return []string{fmt.Sprintf("a mount namespace for the agent: %v; it sees every process and its shells cannot read your shell setup", err)}
	}
	// Nothing mounted here propagates back to the host; the host's new
	// mounts still appear here.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return []string{fmt.Sprintf("the agent's mount namespace: %v; it sees every process and its shells cannot read your shell setup", err)}
	}
	// hidepid=4 (ptraceable): a process whose ptrace check fails is
	// neither listed nor found. That check asks the cell's engine (the BPF
	// LSM's ptrace_access_check, Landlock's domain scoping), so the agent's
	// own processes are all it sees: `ps` works, with no refusal of every
	// other process's /proc files to report. A reach for another by its
	// number is refused and reported by the BPF LSM (the same check, made
	// outside getdents); under Landlock it is not found, and only Landlock's
	// audit records report it.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=4"); err != nil {
		warnings = append(warnings, fmt.Sprintf("a /proc of the agent's own: %v; it sees every process, and ps reports refusals", err))
	}
	for _, c := range v.rc {
		if err := bindOver(c.Copy, c.Target); err != nil {
			warnings = append(warnings, fmt.Sprintf("%s for the agent: %v; its shells are refused it", c.Name, err))
		}
	}
	return warnings
}

// named is ev with the shell setup copies named as the agent knows them
// (~/.bashrc): the BPF LSM names a file from its own file system, where
// the copy lies in agent-lock's folder.
func (v agentView) named(ev verdict.Event) verdict.Event {
	for _, c := range v.rc {
		if ev.Path == c.Copy {
			ev.Path = c.Target
		}
		if ev.Path2 == c.Copy {
			ev.Path2 = c.Target
		}
	}
	return ev
}

// bindOver mounts the file src over target, which is opened without
// following symlinks, through its descriptor.
func bindOver(src, target string) error {
	fd, err := noFollow(target)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Mount(src, "/proc/self/fd/"+strconv.Itoa(fd), "", unix.MS_BIND, "")
}

// shellSetup makes the scrubbed copies of the user's shell files, grants
// them to the cell read-only (each file itself: the copy is mounted over
// the original, and Landlock's walk from a mount's root goes on from where
// it is mounted, not from where the copy lies) and returns the view that
// mounts them, with what removes them when the session ends.
func shellSetup(a Agent, p *policy.Policy, warn warner) (agentView, func()) {
	copies, remove, err := shellRCCopies(a, *p, warn)
	if err != nil {
		warn("%v; the agent's shells are refused your shell setup", err)
		return agentView{}, func() {}
	}
	profiled := maps.Clone(p.Profiled)
	if profiled == nil {
		profiled = map[string]string{}
	}
	for _, c := range copies {
		p.Allow = append(slices.Clone(p.Allow), c.Copy)
		profiled[c.Copy] = "shell setup " + c.Name + " (a copy without secrets)"
		if len(c.Withheld) > 0 {
			warn("%s: the agent's shells read it without %s", c.Name, strings.Join(c.Withheld, ", "))
		}
	}
	p.Profiled = profiled
	return agentView{rc: copies}, remove
}
