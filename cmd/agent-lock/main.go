// Command agent-lock jails an AI coding agent, and everything it starts, in
// one project directory, with BPF-LSM programs that decide and report every
// access. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/agent-lock/agent-lock/internal/cli"
)

func main() {
	// SIGHUP is the terminal closing: the session ends as on SIGTERM (the
	// agent stopped, the recording closed with its summary), never waits
	// for a key that cannot come.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGHUP)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
