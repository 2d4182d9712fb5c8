package session

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/agent-lock/agent-lock/internal/asuser"
)

// Agent is the user the agent runs as: whoever invoked sudo.
type Agent struct {
	UID, GID uint32
	Groups   []uint32
	Name     string
	Home     string
	Shell    string
}

// ID is the agent's identity for file-system work done on its behalf
// (asuser).
func (a Agent) ID() asuser.ID { return asuser.ID{UID: a.UID, GID: a.GID, Groups: a.Groups} }

// ErrNotRoot means agent-lock itself lacks the privilege to load programs.
var ErrNotRoot = errors.New("agent-lock must run as root to load its BPF programs: run it with sudo, or start its daemon (sudo agent-lock install) and run it as yourself")

// ErrRootAgent means the agent would run as root.
var ErrRootAgent = errors.New("refusing to run the agent as root: run agent-lock with sudo from your own account (or pass --allow-root)")

// Caller is who asked agent-lock's daemon for this session, as the kernel
// told the daemon (internal/daemon), with the environment the request
// gave: the user the agent runs as, in place of sudo's SUDO_UID and
// SUDO_GID, and with the caller's own groups, not the user database's (a
// caller that dropped a group keeps it dropped).
type Caller struct {
	UID, GID uint32
	Groups   []uint32
	Env      []string
}

// daemonCaller is the session's Caller, or nil for a session run by sudo.
var daemonCaller *Caller

// ServeCaller makes this process's sessions c's: called once, first, by
// the session's agent-lock the daemon started.
func ServeCaller(c Caller) { daemonCaller = &c }

// Self is this process's own user, as the agent of a session run without
// root (Options.Alone): the agent runs as whoever runs agent-lock.
func Self() (Agent, error) {
	a, _, err := agentOf(uint32(os.Getuid()), uint32(os.Getgid()))
	if err != nil {
		return Agent{}, err
	}
	gids, err := os.Getgroups()
	if err != nil {
		return Agent{}, fmt.Errorf("groups of %s: %w", a.Name, err)
	}
	for _, g := range gids {
		a.Groups = append(a.Groups, uint32(g))
	}
	return a, nil
}

// InvokingUser is the user the agent would run as (see invokingUser).
func InvokingUser(allowRoot bool) (Agent, error) { return invokingUser(os.Getenv, allowRoot) }

// invokingUser reads SUDO_UID and SUDO_GID, or falls back to root itself
// when allowRoot is set.
func invokingUser(getenv func(string) string, allowRoot bool) (Agent, error) {
	if os.Geteuid() != 0 {
		return Agent{}, ErrNotRoot
	}
	uidS, gidS := getenv("SUDO_UID"), getenv("SUDO_GID")
	if c := daemonCaller; c != nil {
		uidS, gidS = strconv.FormatUint(uint64(c.UID), 10), strconv.FormatUint(uint64(c.GID), 10)
	}
	if uidS == "" {
		if !allowRoot {
			return Agent{}, ErrRootAgent
		}
		uidS, gidS = "0", "0"
	}
	uid, err := strconv.ParseUint(uidS, 10, 32)
	if err != nil {
		return Agent{}, fmt.Errorf("SUDO_UID=%q is not a user id", uidS)
	}
	gid, err := strconv.ParseUint(gidS, 10, 32)
	if err != nil {
		return Agent{}, fmt.Errorf("SUDO_GID=%q is not a group id", gidS)
	}
	if uid == 0 && !allowRoot {
		return Agent{}, ErrRootAgent
	}
	a, u, err := agentOf(uint32(uid), uint32(gid))
	if err != nil {
		return Agent{}, err
	}
	if c := daemonCaller; c != nil {
		a.Groups = c.Groups
		return a, nil
	}
	gids, err := u.GroupIds()
	if err != nil {
		return Agent{}, fmt.Errorf("groups of %s: %w", a.Name, err)
	}
	for _, g := range gids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err == nil {
			a.Groups = append(a.Groups, uint32(n))
		}
	}
	return a, nil
}

// agentOf is the agent uid and gid make, but for its groups: its name,
// home and login shell from the user database.
func agentOf(uid, gid uint32) (Agent, *user.User, error) {
	uidS := strconv.FormatUint(uint64(uid), 10)
	a := Agent{UID: uid, GID: gid, Shell: "/bin/sh"}
	u, err := user.LookupId(uidS)
	if err != nil {
		return Agent{}, nil, fmt.Errorf("look up user %s: %w", uidS, err)
	}
	a.Name, a.Home = u.Username, u.HomeDir
	if sh := passwdShell("/etc/passwd", uidS); sh != "" {
		a.Shell = sh
	}
	return a, u, nil
}

// passwdShell returns the login shell of uid from a passwd file (os/user
// does not expose it).
func passwdShell(path, uid string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 7 && fields[2] == uid {
			return fields[6]
		}
	}
	return ""
}
