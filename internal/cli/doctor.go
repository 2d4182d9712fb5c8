package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/agent-lock/agent-lock/internal/daemon"
	"github.com/agent-lock/agent-lock/internal/engine/landlockcell"
	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/landlock"
	"github.com/agent-lock/agent-lock/internal/session"
)

// doctor reports what the kernel offers and proves, with a live self-test,
// whether the jail works here. It exits non-zero when it does not.
func doctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	engine := fs.String("engine", session.EngineAuto, "")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: agent-lock doctor [--engine auto|bpf-lsm|landlock]")
		return 2
	}
	switch *engine {
	case session.EngineAuto, session.EngineBPF, session.EngineLandlock:
	default:
		fmt.Fprintf(stderr, "agent-lock doctor: --engine %q: use auto, bpf-lsm or landlock\n", *engine)
		return 2
	}
	f, err := kernel.Probe()
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock doctor: %v\n", err)
		return 1
	}
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	llABI := "not available"
	if f.LandlockABI > 0 {
		llABI = fmt.Sprintf("ABI %d", f.LandlockABI)
	}
	fmt.Fprintf(stdout, "kernel         %s\n", f.Release)
	fmt.Fprintf(stdout, "active LSMs    %s (from %s)\n", strings.Join(f.LSMs, ","), f.LSMSource)
	fmt.Fprintf(stdout, "bpf LSM        %s\n", yes(f.BPFInLSM))
	fmt.Fprintf(stdout, "BTF            %s\n", yes(f.BTF))
	fmt.Fprintf(stdout, "lockdown       %s\n", f.Lockdown)
	fmt.Fprintf(stdout, "Landlock       %s\n", llABI)
	fmt.Fprintf(stdout, "cgroup v2      %s\n", orNone(f.Cgroup2))
	fmt.Fprintf(stdout, "daemon         %s\n", daemonState())
	for _, n := range f.Notes {
		fmt.Fprintf(stdout, "note           %s\n", n)
	}
	var bpfErr error
	if *engine == session.EngineLandlock {
		bpfErr = errors.New("not tried (--engine landlock)")
	} else {
		bpfErr = session.SelfTest(ctx, f, session.EngineBPF)
	}
	if bpfErr == nil {
		fmt.Fprintln(stdout, "self-test      bpf-lsm passed: the LSM programs loaded, attached, refused a test open outside their cell and reported it")
		fmt.Fprintln(stdout, "\nagent-lock can jail agents on this machine, with the BPF-LSM engine (--engine auto picks it).")
		return 0
	}
	fmt.Fprintf(stdout, "self-test      bpf-lsm FAILED: %v\n", bpfErr)
	var llErr error
	if *engine == session.EngineBPF {
		fmt.Fprintln(stdout, "self-test      landlock not tried (--engine bpf-lsm)")
	} else if f.LandlockABI > 0 {
		llErr = session.SelfTest(ctx, f, session.EngineLandlock)
		if llErr == nil {
			fmt.Fprintf(stdout, "self-test      landlock passed: Landlock ABI %d refused a test open outside the cell and the observers reported it\n", f.LandlockABI)
			fmt.Fprintln(stdout, "\nagent-lock can jail agents on this machine with the Landlock engine (--engine auto picks it),")
			fmt.Fprintln(stdout, "which on this kernel does NOT close these side doors the BPF-LSM engine closes:")
			for _, l := range append(landlock.Limits(f.LandlockABI), landlockcell.Reports(f.LandlockABI)) {
				fmt.Fprintf(stdout, "  - %s\n", l)
			}
			fmt.Fprintln(stdout, "and refuses what the BPF-LSM engine would allow:")
			for _, c := range landlock.Costs(f.LandlockABI) {
				fmt.Fprintf(stdout, "  - %s\n", c)
			}
			return 0
		}
		fmt.Fprintf(stdout, "self-test      landlock FAILED: %v\n", llErr)
	}
	if *engine == session.EngineBPF {
		fmt.Fprintln(stdout, "\nagent-lock cannot jail agents with the BPF-LSM engine on this machine.")
	} else {
		fmt.Fprintln(stdout, "\nagent-lock cannot jail agents on this machine, and will refuse to start one.")
	}
	advice := f.Advice()
	if errors.Is(bpfErr, session.ErrNotRoot) {
		advice = append(advice, "run `sudo agent-lock doctor`: loading BPF programs needs root (sessions need no sudo once the daemon runs: sudo agent-lock install)")
	} else if errors.Is(bpfErr, jail.ErrNotSupported) && f.BPFInLSM && f.BTF {
		advice = append(advice, "bpf is an active LSM, yet the kernel refused to load or attach an LSM program. "+
			"Some kernels (hardened or virtualized builds) refuse every program that needs a BPF trampoline "+
			"(lsm/, fentry/, fexit/) with EPERM before verification. Run agent-lock on a kernel that allows them, "+
			"such as a stock Debian or Ubuntu kernel booted with bpf in lsm=")
	}
	for _, a := range advice {
		fmt.Fprintf(stdout, "  - %s\n", a)
	}
	return 1
}

// daemonState says whether agent-lock's daemon answers, and what that means.
func daemonState() string {
	sock := daemon.SocketPath()
	v, err := daemon.Ping(sock)
	if err != nil {
		if errors.Is(err, daemon.ErrNoDaemon) {
			return fmt.Sprintf("not running at %s: sessions need sudo, or run with Landlock alone, nothing observed (sudo agent-lock install lets every user run agent-lock as themselves, observed)", sock)
		}
		return fmt.Sprintf("at %s: %v", sock, err)
	}
	note := ""
	if v != version() {
		note = fmt.Sprintf("; this agent-lock is %s: restart the daemon (sudo systemctl restart agent-lock) to run the same", version())
	}
	return fmt.Sprintf("listening at %s (agent-lock %s): users run agent-lock without sudo%s", sock, v, note)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
