package landlock

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// A cell alone's first process (AsInit) is the init of the cell's PID
// namespace, and must hold nothing the agent could take: it never enters
// the agent's Landlock domain (Landlock then refuses the agent any ptrace
// of it, and so does its being undumpable), and it holds no capability
// once its mounts are made. Capabilities and Landlock domains are a
// thread's, and a Go process has many threads, so the init does not drop
// them thread by thread: it execs itself again (reap), which leaves one
// thread and, the user being no root in its namespace and no capability
// ambient, no capability. The agent's first process is its child,
// agent-lock once more (Bare: no mounts), which enforces the ruleset and
// the seccomp filter and execs the agent, as under root.

// The cell's first process execs (itself again, or the agent) from the
// thread the kernel started it with: a parent-death signal (the
// session's Pdeathsig, which ends the cell with a killed agent-lock) is
// that thread's, and an exec from another thread drops it. Locked in an
// init function, the main goroutine stays on that thread.
func init() {
	if len(os.Args) > 1 && os.Args[1] == ExecArg {
		runtime.LockOSThread()
	}
}

// initCell makes the cell's mounts (its devpts, its PID namespace's
// /proc, s's binds) with the CAP_SYS_ADMIN it holds in its user
// namespace, and execs reapCell with none.
func initCell(s Start, path string, argv []string) error {
	runtime.LockOSThread() // never unlocked: the thread execs
	masters, ptsErr := privatePTS(RulesetFD, s.TTYs)
	if ptsErr != nil {
		// The agent runs without terminals of its own, as before: the
		// cell is no weaker for it.
		fmt.Fprintf(os.Stderr, "agent-lock: the agent cannot open terminals of its own: %v\n", ptsErr)
	}
	for _, b := range s.Binds {
		if err := bind(b); err != nil {
			// As under root (session's agentView): it decides nothing,
			// the agent's shells are refused the original instead.
			fmt.Fprintf(os.Stderr, "agent-lock: %s for the agent: %v; its shells are refused it\n", b.Target, err)
		}
	}
	// This PID namespace's own /proc: the agent sees its processes and
	// none of the user's others (grantProc grants it).
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		// It decides nothing (the ruleset and the namespace do): the
		// agent then sees the numbers of every process, not their files.
		fmt.Fprintf(os.Stderr, "agent-lock: a /proc of the cell's own: %v; the agent sees every process listed\n", err)
	}
	// The masters, the ruleset and the agent's environment pass on.
	if err := keepOpen(append(masters, RulesetFD, EnvFD)); err != nil {
		return err
	}
	if err := dropCaps(); err != nil {
		return err
	}
	s.Mode, s.Binds = reap, nil
	return syscall.Exec("/proc/self/exe", Argv(s, path, argv), []string{})
}

// bind mounts b.Src over b.Target, both opened without following a
// symlink anywhere in them: the session resolved them, and a link
// swapped in since must not move the mount.
func bind(b Bind) error {
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	src, err := unix.Openat2(unix.AT_FDCWD, b.Src, how)
	if err != nil {
		return err
	}
	defer unix.Close(src)
	dst, err := unix.Openat2(unix.AT_FDCWD, b.Target, how)
	if err != nil {
		return err
	}
	defer unix.Close(dst)
	return unix.Mount("/proc/self/fd/"+strconv.Itoa(src), "/proc/self/fd/"+strconv.Itoa(dst), "", unix.MS_BIND, "")
}

// reapCell is the cell's init: undumpable, it starts the agent's first
// process (Bare) with the ruleset and the environment, reaps every
// process that comes back to it, and, once the agent is gone, exits with
// its status: the kernel then kills whatever else of the agent's runs in
// the namespace. What the agent leaves behind never outlives it, and
// nothing in the namespace can name a process outside it.
//
// An init receives only the signals it handles; the Go runtime handles
// nearly all, and would exit on SIGINT, SIGTERM and SIGHUP, which reach
// this process with the agent's (its process group, its terminal): they
// are taken here and let go, the agent gets its own. (A caught signal is the default again in a
// child after its exec; an ignored one would stay ignored.)
func reapCell(s Start, path string, argv []string) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the cell's init undumpable: %w", err)
	}
	// Every signal: the runtime would also dump and exit on SIGSEGV,
	// SIGABRT, ... sent by kill (where Landlock does not scope signals,
	// before ABI 6, the agent may send them).
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	go func() {
		for range sigs {
		}
	}()
	s.Mode = Bare
	pid, err := syscall.ForkExec("/proc/self/exe", Argv(s, path, argv),
		&syscall.ProcAttr{Env: []string{}, Files: []uintptr{0, 1, 2, RulesetFD, EnvFD}})
	if err != nil {
		return fmt.Errorf("start the agent's first process: %w", err)
	}
	// The init keeps nothing of the agent's.
	unix.Close(RulesetFD)
	unix.Close(EnvFD)
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for the agent: %w", err)
		}
		if got != pid {
			continue
		}
		if ws.Signaled() {
			// An init cannot die of a signal it sends itself.
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(ws.ExitStatus())
	}
}
