package cli

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/agent-lock/agent-lock/internal/landlock"
	"github.com/agent-lock/agent-lock/internal/netcell"
	"github.com/agent-lock/agent-lock/internal/session"
)

// TestMain lets this test binary be agent-lock where agent-lock runs
// itself (/proc/self/exe): the network's self-test in a new cell, the
// Landlock engine's first process, the reaper, the pane's server.
// Without it those runs would start this package's tests again, inside
// the cell (agent-lock policy's self-test did, a hundred deep).
func TestMain(m *testing.M) {
	hidden := []string{netcell.ProbeArg, landlock.ExecArg, session.ReaperArg, paneServerArg}
	if len(os.Args) > 1 && slices.Contains(hidden, os.Args[1]) {
		os.Exit(Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
