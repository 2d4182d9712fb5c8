package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/session"
)

// doctor reports what the kernel offers and proves, with a live self-test,
// whether the jail works here. It exits non-zero when it does not.
func doctor(ctx context.Context, stdout, stderr io.Writer) int {
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
	landlock := "not available"
	if f.LandlockABI > 0 {
		landlock = fmt.Sprintf("ABI %d", f.LandlockABI)
	}
	fmt.Fprintf(stdout, "kernel         %s\n", f.Release)
	fmt.Fprintf(stdout, "active LSMs    %s (from %s)\n", strings.Join(f.LSMs, ","), f.LSMSource)
	fmt.Fprintf(stdout, "bpf LSM        %s\n", yes(f.BPFInLSM))
	fmt.Fprintf(stdout, "BTF            %s\n", yes(f.BTF))
	fmt.Fprintf(stdout, "lockdown       %s\n", f.Lockdown)
	fmt.Fprintf(stdout, "Landlock       %s\n", landlock)
	fmt.Fprintf(stdout, "cgroup v2      %s\n", orNone(f.Cgroup2))
	for _, n := range f.Notes {
		fmt.Fprintf(stdout, "note           %s\n", n)
	}
	err = session.SelfTest(ctx, f)
	if err == nil {
		fmt.Fprintln(stdout, "self-test      passed: an LSM program loaded, attached, refused a test open outside its cell and reported it")
		fmt.Fprintln(stdout, "\nagent-lock can jail agents on this machine.")
		return 0
	}
	fmt.Fprintf(stdout, "self-test      FAILED: %v\n", err)
	fmt.Fprintln(stdout, "\nagent-lock cannot jail agents on this machine, and will refuse to start one.")
	advice := f.Advice()
	if errors.Is(err, session.ErrNotRoot) {
		advice = append(advice, "run `sudo agent-lock doctor`: loading BPF programs needs root")
	} else if errors.Is(err, jail.ErrNotSupported) && f.BPFInLSM && f.BTF {
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

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
