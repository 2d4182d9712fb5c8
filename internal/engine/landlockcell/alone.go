package landlockcell

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/engine"
	"github.com/agent-lock/agent-lock/internal/landlock"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
)

// A cell alone: the user runs agent-lock without sudo and no daemon
// answers. Landlock needs no privilege, so the cell still holds: the
// user's own agent-lock makes the ruleset, and the cell's first process
// (agent-lock again) enforces it and execs the agent, as under root. What
// needs root is missing, and the start says so: no cgroup (the session
// ends the agent's processes as their subreaper instead), no observers
// (nothing reaches the live view but the tripwire's reports), no
// Landlock audit records, and the network held by Landlock's ports, not
// by name.
//
// The mount and IPC namespaces the cell's first process gets (its own
// devpts, its own SysV IPC) come with a user namespace of its own, in
// which the user is still the user (mapped to itself): nothing is
// granted by it that the user lacks outside, and Landlock's domain,
// enforced inside, holds everywhere.

// alone completes c, a cell with no observers.
func (c *cell) alone() (engine.Cell, error) {
	tw, err := armTripwire(c.walk, c.s.User, "", c.s.Warn)
	if err != nil {
		if !c.s.BestEffort {
			c.ruleset.Close()
			return nil, err
		}
		c.s.Warn("--best-effort: the protected entries are not kept: %v", err)
	}
	c.tw = tw
	c.noAudit = "Landlock's audit records need root"
	if why := userNSRefused(); why != "" {
		const lacks = "the agent would see your other processes, reach your SysV IPC, signal your processes where Landlock does not scope signals (before ABI 6), open no terminals of its own, and find your shell files (~/.bashrc, ...) refused"
		if !c.s.BestEffort {
			c.tw.close()
			c.ruleset.Close()
			return nil, fmt.Errorf("this kernel refuses you a user namespace (%s), which a cell without root needs for its PID, mount and IPC namespaces: without them %s. Run with --best-effort to jail it so, or start the daemon (sudo agent-lock install)", why, lacks)
		}
		c.bare = true
		c.s.Warn("--best-effort: this kernel refuses you a user namespace (%s): %s", why, strings.Replace(lacks, "would ", "can ", 1))
	}
	close(c.events)
	return c, nil
}

// aloneAttr puts the cell's first process in a user namespace of its own,
// the user mapped to itself, for the namespaces the Landlock engine gives
// it (Command) and a PID namespace, whose init it is
// (landlock.AsInit): without root, only a user namespace's owner may make
// them. The user's groups stay as they are (setgroups is denied in it).
// Where the kernel refuses the user namespace, the process has none
// (landlock.Bare).
func (c *cell) aloneAttr(attr *syscall.SysProcAttr) landlock.Mode {
	attr.Credential = nil
	if c.bare {
		return landlock.Bare
	}
	userNS(attr)
	return landlock.AsInit
}

// userNS sets attr's namespaces for a cell alone.
func userNS(attr *syscall.SysProcAttr) {
	uid, gid := os.Getuid(), os.Getgid()
	attr.Cloneflags |= syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
}

// userNSRefused says why the kernel refuses this user the namespaces of a
// cell alone, "" where it does not: a process started with them (true,
// the agent's own user) tells. Some kernels refuse unprivileged user
// namespaces (kernel.unprivileged_userns_clone=0, user.max_user_namespaces=0,
// Ubuntu's kernel.apparmor_restrict_unprivileged_userns).
func userNSRefused() string {
	// The smallest program at hand: the clone is what is refused.
	t := exec.Command("/proc/self/exe", "--version")
	if _, err := os.Stat("/bin/true"); err == nil {
		t = exec.Command("/bin/true")
	}
	t.SysProcAttr = &syscall.SysProcAttr{AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN}}
	userNS(t.SysProcAttr)
	if err := t.Run(); err != nil {
		return err.Error()
	}
	return ""
}

func (c *cell) aboutAlone() engine.About {
	net := "the network: open (no daemon to hold it by name; Landlock holds ports, and this kernel's has none)"
	switch {
	case c.ports == nil:
		net = "the network: open (--net open)"
	case c.abi >= 4:
		net = fmt.Sprintf("the network by port only, not by name (no daemon): TCP %s%s; other protocols (ICMP, raw where allowed) unheld", tcpPorts(c.ports.TCP), udpLimit(c.abi))
	}
	limits := []string{
		"nothing observed: no daemon, so no live view of the agent's reaches and no report of what Landlock refused (sudo agent-lock install starts one)",
		net,
	}
	if c.bare {
		limits = append(limits, "no namespaces of its own (--best-effort: this kernel refuses you a user namespace): your other processes seen, your SysV IPC reachable, signals to your processes where Landlock does not scope them (before ABI 6), and your shell files refused to its shells")
	}
	return engine.About{Name: fmt.Sprintf("%s (ABI %d), alone", Name, c.abi), Limits: append(limits, landlock.Limits(c.abi)...)}
}

func tcpPorts(ports []uint16) string {
	if len(ports) == 0 {
		return "refused"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return "to any host's port " + strings.Join(s, ", ") + " only"
}

func udpLimit(abi int) string {
	if abi >= 10 {
		return ""
	}
	return "; UDP unheld (Landlock holds it from ABI 10)"
}

// AlonePorts is what of np a cell alone holds: Landlock knows ports, not
// hosts, so a granted host is its port, or 443 and 80 when it names none
// (an API's), and a query goes to port 53 of any resolver. nil: np is
// open.
func AlonePorts(np netpolicy.Policy) *landlock.Ports {
	switch np.Mode {
	case netpolicy.Open:
		return nil
	case netpolicy.Off:
		return &landlock.Ports{NoBind: true}
	}
	p := &landlock.Ports{UDP: []uint16{53}}
	for _, r := range np.Rules {
		if r.Port == 0 {
			p.TCP = append(p.TCP, 443, 80)
		} else {
			p.TCP = append(p.TCP, r.Port)
		}
	}
	slices.Sort(p.TCP)
	p.TCP = slices.Compact(p.TCP)
	return p
}
