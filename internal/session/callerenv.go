package session

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The agent's environment is the caller's. Run through sudo, agent-lock's
// own is not: sudo resets it (env_reset), so PATH is sudo's secure_path
// and the variables a profile passes (ANTHROPIC_API_KEY, ...) are gone;
// `sudo agent-lock -- claude` would not find ~/.local/bin/claude, nor give
// Claude Code its key. sudo itself still holds the environment the user's
// shell gave it, in its /proc/PID/environ, and so does its monitor (a fork
// of it that waits for the command, under use_pty). agent-lock reads it
// from the nearest of its ancestors that the user ran setuid root: real
// uid SUDO_UID, effective uid 0. It is only ever given to the agent, which
// runs as that user; agent-lock runs nothing as root by it (its own PATH
// stays sudo's).

// ancestorsLooked bounds the walk up: agent-lock under sudo, or the
// session's own agent-lock under the one the user started (the pane),
// with sudo's monitor between.
const ancestorsLooked = 4

// baseEnv is the environment the agent starts from (before agentEnv and
// the filter): the sudo caller's, with agent-lock's own variables over it
// but PATH, or agent-lock's own when it was not run through sudo; for a
// session the daemon started, its client's with the same rule. Called
// as root: sudo's environment is not its user's to read (it is not
// dumpable), and so not on a thread acting as the user (asuser).
func baseEnv() []string {
	own := os.Environ()
	if c := daemonCaller; c != nil {
		// The daemon's request: the client's own environment.
		return overEnv(c.Env, own)
	}
	uid := os.Getenv("SUDO_UID")
	if os.Geteuid() != 0 || uid == "" {
		return own
	}
	caller := sudoCallerEnv("/proc", os.Getpid(), uid)
	if caller == nil {
		return own
	}
	return overEnv(caller, own)
}

// overEnv is caller's variables with own's over them, all but PATH: under
// sudo own holds what sudo kept of the caller's (TERM, LANG), what it set
// for root (HOME, USER, SUDO_*: agentEnv sets the agent's own), and what
// the user asked sudo for by name (sudo VAR=value). A caller with no PATH
// (env -i sudo ...) gets sudo's.
func overEnv(caller, own []string) []string {
	at := map[string]int{}
	env := make([]string, 0, len(caller)+len(own))
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := at[k]; ok {
			env[i] = kv
			return
		}
		at[k] = len(env)
		env = append(env, kv)
	}
	for _, kv := range caller {
		set(kv)
	}
	_, callerPath := at["PATH"]
	for _, kv := range own {
		if !callerPath || !strings.HasPrefix(kv, "PATH=") {
			set(kv)
		}
	}
	return env
}

// sudoCallerEnv is the environment of the nearest of pid's ancestors that
// the user uid ran setuid root, or nil if none is. procfs is /proc (a
// test's stand-in otherwise).
func sudoCallerEnv(procfs string, pid int, uid string) []string {
	self, err := readStat(procfs, pid)
	if err != nil {
		return nil
	}
	pid, child := self.ppid, self.start
	for range ancestorsLooked {
		if pid <= 1 {
			return nil
		}
		st, err := readStat(procfs, pid)
		// A parent started before its child: else the child's parent
		// has died and its number was taken by a newer process.
		if err != nil || st.start > child {
			return nil
		}
		if st.ruid == uid && st.euid == "0" {
			env, err := os.ReadFile(filepath.Join(procfs, strconv.Itoa(pid), "environ"))
			// Still that process (a pid is reused only once its
			// process is gone): the environment read was its.
			again, err2 := readStat(procfs, pid)
			if err != nil || err2 != nil || again.start != st.start {
				return nil
			}
			var vars []string
			for _, kv := range bytes.Split(env, []byte{0}) {
				if bytes.IndexByte(kv, '=') > 0 {
					vars = append(vars, string(kv))
				}
			}
			return vars
		}
		pid, child = st.ppid, st.start
	}
	return nil
}

// procStat is what sudoCallerEnv reads of a process.
type procStat struct {
	ppid       int
	start      uint64 // start time, in clock ticks after boot
	ruid, euid string
}

func readStat(procfs string, pid int) (procStat, error) {
	var st procStat
	dir := filepath.Join(procfs, strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return st, err
	}
	// The command name, in parentheses, may hold anything: fields are
	// counted after its last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return st, fmt.Errorf("%s/stat: no command name", dir)
	}
	f := strings.Fields(string(stat[i+1:]))
	// state ppid ... starttime is the 22nd field of the line, the 20th here.
	if len(f) < 20 {
		return st, fmt.Errorf("%s/stat: %d fields", dir, len(f))
	}
	if st.ppid, err = strconv.Atoi(f[1]); err != nil {
		return st, fmt.Errorf("%s/stat: ppid %q", dir, f[1])
	}
	if st.start, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return st, fmt.Errorf("%s/stat: start time %q", dir, f[19])
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return st, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if ids, ok := strings.CutPrefix(line, "Uid:"); ok {
			if u := strings.Fields(ids); len(u) >= 2 {
				st.ruid, st.euid = u[0], u[1]
				return st, nil
			}
		}
	}
	return st, fmt.Errorf("%s/status: no Uid line", dir)
}

// pathOf is env's PATH.
func pathOf(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if p, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return p
		}
	}
	return ""
}
