package session

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The agent runs in a process group of its own, as a shell runs a job:
// the terminal's keys (^C, ^\) reach the agent and not agent-lock, which
// must outlive the agent to kill what it left behind and write the summary.
// Where agent-lock holds the terminal's foreground, the agent's group takes
// it for as long as it runs, and agent-lock takes it back after. The agent
// starts with the default disposition of every signal: a signal agent-lock
// ignored would be ignored by the agent too, and by everything it starts
// (bash does not let a script undo an ignored SIGINT).

// foreground reports whether agent-lock's standard input is a terminal
// whose foreground process group is agent-lock's: only then may the agent
// be handed the terminal.
func foreground() bool {
	pg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}

// jobControl sets attr to start the agent in a group of its own, given the
// terminal's foreground when agent-lock has it and the agent's standard
// input is agent-lock's. An agent on a terminal of its own (Options.Terminal)
// leads a session of its own (Setsid), and so is already its own group.
func jobControl(attr *syscall.SysProcAttr, ownStdin bool) (foregrounded bool) {
	if attr.Setsid {
		return false
	}
	attr.Setpgid = true
	if ownStdin && foreground() {
		// Ctty is agent-lock's descriptor of the terminal: the child
		// makes its group the foreground before it execs.
		attr.Foreground, attr.Ctty = true, 0
		return true
	}
	return false
}

// holdTerminal keeps agent-lock from stopping while the agent's group has
// the foreground: a write to the terminal from a background group stops
// the writer (SIGTTOU) when the terminal says so (stty tostop). It returns
// what gives the foreground back to agent-lock, when it had it, and undoes
// the rest.
func holdTerminal(foregrounded bool) (release func()) {
	signal.Ignore(syscall.SIGTTOU)
	var once sync.Once
	return func() {
		once.Do(func() {
			if foregrounded {
				// A background group's TIOCSPGRP is what SIGTTOU is sent
				// for; ignored, the call goes through.
				unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp())
			}
			signal.Reset(syscall.SIGTTOU)
		})
	}
}

// forwardKeys passes the terminal's interrupt and quit signals, when they
// reach agent-lock (a `kill -INT`, or a terminal whose foreground agent-lock
// shares with no agent), to the agent's group. It returns what stops it.
func forwardKeys(pgid func() int) (stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGQUIT)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-ch:
				if g := pgid(); g > 0 {
					syscall.Kill(-g, s.(syscall.Signal))
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// InCell reports whether process pid runs in a cell of agent-lock's (any
// session's) or another sandbox: such a process may not drive a session's
// terminal (agent-lock attach) or ask the daemon for a session, whatever
// user it runs as. Every cell under root is a cgroup below the hierarchy's
// agent-lock folder (newCgroup); a cell alone is no_new_privs.
func InCell(pid int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok && (p == "/agent-lock" || strings.HasPrefix(p, "/agent-lock/")) {
			return true, nil
		}
	}
	// A cell alone (Landlock without root) has no cgroup: its processes,
	// as every Landlock sandbox's, run under no_new_privs, which nothing
	// undoes. Such a process asking for a session, or a terminal, would
	// end its sandbox there.
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, err
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "NoNewPrivs:"); ok {
			return strings.TrimSpace(v) == "1", nil
		}
	}
	return false, nil
}
