package landlock

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// initAgent is the cell's init (AsInit): it starts the agent from this
// thread, the one that enforced the ruleset and the seccomp filter (both
// are this thread's, and a child inherits its parent thread's), reaps
// every process that comes back to it, and, once the agent is gone, exits
// with its status: the kernel then kills whatever else of the agent's
// still runs in the namespace. What the agent leaves behind never
// outlives it, and nothing in the namespace can name a process outside
// it, to signal or to look at.
//
// An init receives only the signals it handles; the Go runtime would
// exit on SIGINT, SIGTERM and SIGHUP, which reach this process with the
// agent's (its process group, its terminal): they are taken here and let
// go, the agent gets its own. A caught signal is the default again in
// the agent after its exec; an ignored one would stay ignored.
func initAgent(path string, argv, env []string) error {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for range sigs {
		}
	}()
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		return fmt.Errorf("start %s: %w", path, err)
	}
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
