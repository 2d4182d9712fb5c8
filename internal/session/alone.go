package session

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/engine"
	"github.com/agent-lock/agent-lock/internal/engine/bpflsm"
	"github.com/agent-lock/agent-lock/internal/engine/landlockcell"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
	"github.com/agent-lock/agent-lock/internal/report"
)

// ErrAloneNeedsLandlock: a session without root and without the daemon
// (Options.Alone) has only Landlock, which needs no privilege.
var ErrAloneNeedsLandlock = errors.New("without root and with no agent-lock daemon only the Landlock engine can jail the agent")

// openAlone opens a cell without root (Options.Alone): Landlock enforced
// by the cell's first process, no cgroup, no observers, no network
// programs (landlockcell's alone.go). This process becomes the
// subreaper of the agent's processes, so that what the agent leaves
// running comes back to it to be killed (killChildren) when the session
// ends, as the cgroup's kill does under root.
func openAlone(facts kernel.Facts, name string, s engine.Spec, np netpolicy.Policy, warn warner) (*cell, error) {
	if name != "" && name != EngineAuto && name != EngineLandlock {
		return nil, fmt.Errorf("%w; the %s engine needs the daemon: start it once (sudo agent-lock install, or sudo agent-lock daemon), or run agent-lock with sudo", ErrAloneNeedsLandlock, name)
	}
	if name != EngineLandlock && facts.BPFInLSM && !bpflsm.RefusedThisBoot() {
		// This kernel runs the BPF LSM (as far as anyone knows this
		// boot), which would decide with the daemon: Landlock alone is
		// the user's choice to make.
		return nil, fmt.Errorf("no agent-lock daemon is running, and this kernel's BPF-LSM engine needs it: start it once (sudo agent-lock install, or sudo agent-lock daemon), run agent-lock with sudo, or jail with Landlock alone, nothing observed (--engine landlock)")
	}
	var steps []report.Step
	step := stepper(&steps, time.Now())
	s.Warn = warn
	eng := landlockcell.Engine{Alone: true, Ports: landlockcell.AlonePorts(np)}
	if err := eng.Check(facts, s); err != nil {
		return nil, err
	}
	// What a killed session alone left behind: no cells (its agent died
	// with it), only its folders.
	sweepTmp(os.TempDir(), warn)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("become the agent's subreaper: %w", err)
	}
	ec, err := eng.Open(facts, s)
	if err != nil {
		return nil, err
	}
	step("engine")
	warn("no agent-lock daemon answers: Landlock alone jails the agent, without root; nothing is observed (no live view of its reaches: only the protected entries' tripwire reports), and the network is held by port, not by name. sudo agent-lock install starts the daemon")
	return &cell{eng: ec, warn: warn, steps: steps}, nil
}

// killChildren kills every child of this process that is the cell's
// (InCell: under no_new_privs, which agent-lock's own children, git's
// checks at the end, are not) and reaps them but keep (whose waiter reaps
// it), until none is left: a child's children, once it is killed, come
// back to this process (the subreaper) and are killed in the next round.
// Children only, never a process found by a number that may have been
// reused: an unreaped child's number is ours.
func killChildren(keep int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		live := 0
		for _, k := range children() {
			if in, err := InCell(k.pid); err != nil || !in {
				continue // gone, or agent-lock's own
			}
			if k.zombie {
				if k.pid != keep {
					unix.Wait4(k.pid, nil, unix.WNOHANG, nil)
				}
				continue
			}
			unix.Kill(k.pid, syscall.SIGKILL)
			live++
		}
		if live == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent's processes still run %v after their kill", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type child struct {
	pid    int
	zombie bool
}

// children are this process's children, from /proc.
func children() []child {
	self := strconv.Itoa(os.Getpid())
	var out []child
	procs, err := Processes()
	if err != nil {
		return nil
	}
	for pid, f := range procs {
		if len(f) > 1 && f[1] == self {
			out = append(out, child{pid: pid, zombie: f[0] == "Z"})
		}
	}
	return out
}
