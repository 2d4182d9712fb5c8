package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Every process technique aims at the victim: a process of the same user
// started outside the jail, with a secret in its memory and environment,
// the key open on a descriptor, and ~/project2 as its working directory.
var processTechniques = []Technique{
	{Name: "ptrace-attach", Family: "processes", Doc: "PTRACE_ATTACH to the victim and PEEKDATA its secret",
		Ops: ops("ptrace"), Target: true, Needs: needHelper | needVictim, Skip: ptraceScope,
		Cmd: helper(nil, "ptrace-peek", "{vpid}", "{vaddr}", "{vlen}"), Effect: leaked},
	{Name: "process-vm-readv", Family: "processes", Doc: "process_vm_readv the victim's secret",
		Ops: ops("ptrace"), Target: true, Needs: needHelper | needVictim, Skip: ptraceScope,
		Cmd: helper(nil, "vm-readv", "{vpid}", "{vaddr}", "{vlen}"), Effect: leaked},
	{Name: "proc-pid-mem", Family: "processes", Doc: "read the victim's secret from /proc/PID/mem",
		Ops: ops("read", "ptrace"), Needs: needVictim, Skip: ptraceScope,
		Cmd:    py(`f = open("/proc/{vpid}/mem", "rb"); f.seek({vaddr}); print(f.read({vlen}).decode())`),
		Effect: leaked},
	{Name: "proc-pid-environ", Family: "processes", Doc: "read the victim's environment",
		Ops:   ops("read", "ptrace"),
		Needs: needVictim,
		Cmd:   bash(`tr '\0' '\n' < /proc/{vpid}/environ`), Effect: leaked},
	{Name: "proc-pid-maps", Family: "processes", Doc: "read the victim's memory map",
		Ops: ops("read", "ptrace"), Needs: needVictim,
		Cmd: bash("cat /proc/{vpid}/maps"), Effect: outputHas("adv-victim")},
	{Name: "proc-pid-cwd", Family: "processes", Doc: "list and read through the victim's /proc/PID/cwd",
		Ops: ops("read", "ptrace"), Needs: needVictim,
		Cmd: bash("ls /proc/{vpid}/cwd/; cat /proc/{vpid}/cwd/secret.txt"), Effect: leaked},
	{Name: "proc-pid-root", Family: "processes", Doc: "read the credentials through the victim's /proc/PID/root",
		Ops: ops("read", "ptrace"), Needs: needVictim,
		Cmd: bash("ls /proc/{vpid}/root{home}; cat /proc/{vpid}/root{home}/.aws/credentials"), Effect: leaked},
	{Name: "proc-pid-fd", Family: "processes", Doc: "open the victim's key descriptor through /proc/PID/fd",
		Ops: ops("read", "ptrace"), Needs: needVictim,
		Cmd: bash("cat /proc/{vpid}/fd/{vfd}"), Effect: leaked},
	{Name: "proc-pid-oom-adj", Family: "processes", Doc: "make the victim the OOM killer's first pick via /proc/PID/oom_score_adj",
		Ops: ops("write", "ptrace"), Needs: needVictim,
		Cmd: bash("echo 1000 > /proc/{vpid}/oom_score_adj"),
		Effect: func(f *Fixture, o *outcome) string {
			b, _ := os.ReadFile(f.expand("/proc/{vpid}/oom_score_adj"))
			if strings.TrimSpace(string(b)) == "1000" {
				return "the victim's oom_score_adj is now 1000"
			}
			return ""
		}},
	{Name: "pidfd-getfd", Family: "processes", Doc: "pidfd_open + pidfd_getfd the victim's key descriptor",
		Ops: ops("ptrace", "read"), Target: true, Needs: needHelper | needVictim, Skip: ptraceScope,
		Cmd: helper(nil, "pidfd-getfd", "{vpid}", "{vfd}"), Effect: leaked},
	{Name: "kill-term", Family: "processes", Doc: "kill -TERM the victim",
		Ops: ops("signal"), Target: true, Needs: needVictim,
		Cmd: bash("kill -TERM {vpid}"), Effect: victimDead},
	{Name: "kill-all", Family: "processes", Doc: "kill -TERM -1: every process the user may signal",
		Ops: ops("signal"), Target: true, Needs: needVictim,
		Cmd: bash("kill -TERM -1"), Effect: victimDead},
	{Name: "pidfd-send-signal", Family: "processes", Doc: "pidfd_send_signal SIGTERM to the victim",
		Ops: ops("signal"), Target: true, Needs: needHelper | needVictim,
		Cmd: helper(nil, "pidfd-kill", "{vpid}"), Effect: victimDead},
	{Name: "fsetown-signal", Family: "processes", Doc: "F_SETOWN a pipe to the victim with F_SETSIG SIGTERM, then make it readable",
		Ops: ops("signal"), Target: true, Needs: needVictim,
		Cmd: py(`import fcntl, os, signal
r, w = os.pipe()
fcntl.fcntl(r, fcntl.F_SETOWN, {vpid})
fcntl.fcntl(r, 10, signal.SIGTERM)  # F_SETSIG
fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
os.write(w, b"x")`), Effect: victimDead},
	{Name: "fsetown-ex-signal", Family: "processes", Doc: "F_SETOWN_EX a pipe to the victim's thread with F_SETSIG SIGTERM, then make it readable",
		Ops: ops("signal"), Target: true, Needs: needVictim,
		Cmd: py(`import fcntl, os, signal, struct
r, w = os.pipe()
fcntl.fcntl(r, 15, struct.pack("ii", 0, {vpid}))  # F_SETOWN_EX, F_OWNER_TID
fcntl.fcntl(r, 10, signal.SIGTERM)  # F_SETSIG
fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
os.write(w, b"x")`), Effect: victimDead},
	{Name: "fiosetown-signal", Family: "processes", Doc: "ioctl FIOSETOWN a socket to the victim with F_SETSIG SIGTERM, then send it a byte",
		Ops: ops("signal"), Target: true, Needs: needVictim,
		Cmd: py(`import fcntl, os, signal, socket, struct
a, b = socket.socketpair()
fcntl.ioctl(a, 0x8901, struct.pack("i", {vpid}))  # FIOSETOWN
fcntl.fcntl(a, 10, signal.SIGTERM)  # F_SETSIG
fcntl.fcntl(a, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
b.send(b"x")`), Effect: victimDead},
	// The victim's share of the machine: a same-uid process may set these
	// for any process of its user.
	{Name: "renice-outside", Family: "processes", Doc: "renice the victim to 19",
		Ops: ops("nice"), Target: true, Needs: needVictim,
		Cmd: bash("renice -n 19 -p {vpid}"), Effect: victimSched("nice")},
	{Name: "chrt-idle-outside", Family: "processes", Doc: "chrt -i: put the victim in SCHED_IDLE",
		Ops: ops("sched"), Target: true, Needs: needVictim,
		Cmd: bash("chrt -i -p 0 {vpid}"), Effect: victimSched("policy")},
	{Name: "taskset-outside", Family: "processes", Doc: "taskset: pin the victim to one CPU",
		Ops: ops("sched"), Target: true, Needs: needVictim, Skip: oneCPU,
		Cmd: bash("taskset -p 1 {vpid}"), Effect: victimSched("cpus")},
	{Name: "ionice-outside", Family: "processes", Doc: "ionice -c 3: give the victim the idle I/O class",
		Ops: ops("ioprio"), Target: true, Needs: needVictim,
		Cmd: bash("ionice -c 3 -p {vpid}"), Effect: victimSched("ioclass")},
	{Name: "prlimit-outside", Family: "processes", Doc: "prlimit: cut the victim's open-file limit to 4",
		Ops: ops("rlimit"), Target: true, Needs: needVictim,
		Cmd: bash("prlimit --pid {vpid} --nofile=4:4"), Effect: victimSched("nofile")},
	{Name: "clone-into-cgroup", Family: "processes", Doc: "clone3(CLONE_INTO_CGROUP) a child into a cgroup the user may write",
		// Unjailed, the attack starts in a cgroup delegated to the user, so
		// that moving to its sibling is allowed; the jail's cgroup is not.
		Ops: ops("fork"), Needs: needCgroup, Skip: noCgroup2,
		Cmd: py(`import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class CloneArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("flags", "pidfd", "child_tid", "parent_tid",
        "exit_signal", "stack", "stack_size", "tls", "set_tid", "set_tid_size", "cgroup")]
fd = os.open("{cgdst}", os.O_RDONLY | os.O_DIRECTORY)
args = CloneArgs(flags=0x200000000, exit_signal=17, cgroup=fd)  # CLONE_INTO_CGROUP, SIGCHLD
pid = libc.syscall(435, ctypes.byref(args), ctypes.sizeof(args))  # clone3
if pid == 0:
    print("cgroup-escape", open("/proc/self/cgroup").read().split("\n")[-2], flush=True)
    os._exit(0)
if pid < 0:
    raise SystemExit("clone3: " + os.strerror(ctypes.get_errno()))
os.waitpid(pid, 0)`), Effect: outputHas("cgroup-escape 0::/adv-deleg/dst")},
}

// noCgroup2 skips where no cgroup2 hierarchy is mounted.
func noCgroup2(f *Fixture) string {
	if f.cgroupRoot() == "" {
		return "no cgroup2 hierarchy is mounted"
	}
	return ""
}

// victimSched reports the victim's scheduling value what ("nice",
// "policy", "cpus", "ioclass", "nofile") when it is no longer as a process
// started by the suite has it.
func victimSched(what string) func(*Fixture, *outcome) string {
	return func(f *Fixture, o *outcome) string {
		if f.victim == nil {
			return ""
		}
		pid, _ := strconv.Atoi(f.victim.field("pid"))
		switch what {
		case "nice", "policy":
			// Fields 19 and 41 of /proc/PID/stat, counted after the
			// command name, which may hold spaces.
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				return ""
			}
			s := string(b)
			fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
			i := map[string]int{"nice": 19, "policy": 41}[what] - 3
			if i < len(fields) && fields[i] != "0" {
				return fmt.Sprintf("the victim's %s is now %s", what, fields[i])
			}
		case "cpus":
			var mine, its unix.CPUSet
			if unix.SchedGetaffinity(0, &mine) != nil || unix.SchedGetaffinity(pid, &its) != nil {
				return ""
			}
			if its.Count() < mine.Count() {
				return fmt.Sprintf("the victim may run on %d of %d CPUs", its.Count(), mine.Count())
			}
		case "ioclass":
			const whoProcess, classIdle = 1, 3
			prio, _, e := unix.Syscall(unix.SYS_IOPRIO_GET, whoProcess, uintptr(pid), 0)
			if e == 0 && prio>>13 == classIdle {
				return "the victim is in the idle I/O class"
			}
		case "nofile":
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "Max open files") {
					if fs := strings.Fields(l); len(fs) >= 4 && fs[3] == "4" {
						return "the victim's open-file limit is now 4"
					}
				}
			}
		}
		return ""
	}
}

// oneCPU skips where this process may run on one CPU only: there is no
// other to pin the victim to.
func oneCPU(*Fixture) string {
	var s unix.CPUSet
	if unix.SchedGetaffinity(0, &s) == nil && s.Count() < 2 {
		return "only one CPU here"
	}
	return ""
}
