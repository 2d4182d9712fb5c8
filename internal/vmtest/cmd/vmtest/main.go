// Command vmtest runs a command inside each kernel of the test matrix and
// reports which kernels it passed on.
//
//	go run ./internal/vmtest/cmd/vmtest [-kernels bookworm,trixie,forky] [-dir DIR] [-env K=V]... -- CMD ARGS...
//	go run ./internal/vmtest/cmd/vmtest -fetch-only [-refresh]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agent-lock/agent-lock/internal/vmtest"
)

type envFlag []string

func (e *envFlag) String() string     { return strings.Join(*e, " ") }
func (e *envFlag) Set(v string) error { *e = append(*e, v); return nil }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vmtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		kernels   = fs.String("kernels", "bookworm,trixie,forky", "comma-separated Debian suites whose kernels to run")
		fetchOnly = fs.Bool("fetch-only", false, "fetch the kernels and exit")
		refresh   = fs.Bool("refresh", false, "fetch each suite's current kernel even if one is cached")
		dir       = fs.String("dir", "", "working directory of the command in the guest (default: current directory)")
		timeout   = fs.Duration("timeout", vmtest.DefaultTimeout, "limit for each guest, boot included")
		parallel  = fs.Int("parallel", 1, "guests to run at once")
		verbose   = fs.Bool("v", false, "show apt's output while fetching")
		env       envFlag
	)
	fs.Var(&env, "env", "K=V added to the command's environment (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: vmtest [flags] -- CMD ARGS...\n       vmtest -fetch-only [-refresh]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	command := fs.Args()
	if !*fetchOnly && len(command) == 0 {
		fs.Usage()
		return 2
	}
	var ks []vmtest.Kernel
	for _, name := range strings.Split(*kernels, ",") {
		k, err := vmtest.LookupKernel(strings.TrimSpace(name))
		if err != nil {
			fmt.Fprintln(stderr, "vmtest:", err)
			return 2
		}
		ks = append(ks, k)
	}

	fopts := vmtest.FetchOptions{Refresh: *refresh}
	if *verbose {
		fopts.Log = stderr
	}
	imgs := make([]vmtest.Image, len(ks))
	for i, k := range ks {
		if _, err := vmtest.CachedImage(vmtest.CacheDir(), k); err != nil || *refresh {
			fmt.Fprintf(stderr, "vmtest: fetching the %s kernel into %s\n", k, vmtest.CacheDir())
		}
		img, err := vmtest.Fetch(ctx, k, fopts)
		if err != nil {
			fmt.Fprintln(stderr, "vmtest:", err)
			return 1
		}
		imgs[i] = img
		fmt.Fprintf(stderr, "vmtest: %s: linux %s (package %s)\n", k, img.Release, img.Version)
	}
	if *fetchOnly {
		return 0
	}

	results := make([]outcome, len(imgs))
	outs := make([]*prefixWriter, len(imgs))
	var mu sync.Mutex // serialises lines from guests running at once
	sem := make(chan struct{}, max(*parallel, 1))
	var wg sync.WaitGroup
	for i, img := range imgs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out := &prefixWriter{prefix: "[" + img.Kernel.Suite + "] ", w: stdout, mu: &mu}
			outs[i] = out
			res, err := vmtest.Run(ctx, img, vmtest.Options{
				Dir: *dir, Env: env, Command: command, Timeout: *timeout, Output: out,
			})
			results[i] = outcome{img: img, res: res, err: err}
			mu.Lock()
			if err != nil {
				fmt.Fprintf(stderr, "[%s] vmtest: %v\n", img.Kernel, err)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()

	failed := false
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw)
	for _, o := range results {
		verdict := "PASS"
		switch {
		case o.err != nil:
			verdict, failed = "FAIL (no exit status)", true
		case o.res.ExitCode != 0:
			verdict, failed = fmt.Sprintf("FAIL (exit %d)", o.res.ExitCode), true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v (boot %v)\n", o.img.Kernel, o.img.Release, verdict,
			o.res.Duration.Round(time.Second), o.res.Boot.Round(100*time.Millisecond))
	}
	tw.Flush()
	// The guests' own recaps of what failed, again after the table: with
	// guests running side by side a recap printed mid-run is buried by
	// the others' output, and CI keeps only the tail.
	for _, out := range outs {
		if out != nil && len(out.recap) > 0 {
			fmt.Fprintf(stdout, "\n%swhat failed:\n", out.prefix)
			for _, l := range out.recap {
				fmt.Fprintf(stdout, "%s%s\n", out.prefix, l)
			}
		}
	}
	if failed || ctx.Err() != nil {
		return 1
	}
	return 0
}

type outcome struct {
	img vmtest.Image
	res vmtest.Result
	err error
}

// prefixWriter labels each line with the kernel it came from. vmtest.Run
// writes whole lines, so no partial line needs holding back.
type prefixWriter struct {
	prefix string
	w      io.Writer
	mu     *sync.Mutex

	// recap holds the lines after guest-suite's "what failed, again"
	// marker, at most maxRecap of them.
	recap     []string
	recapping bool
}

const (
	recapMarker = "guest-suite: what failed, again:"
	maxRecap    = 60
)

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := strings.TrimSuffix(string(b), "\n")
	for _, l := range strings.Split(s, "\n") {
		if p.recapping && len(p.recap) < maxRecap {
			p.recap = append(p.recap, l)
		}
		if strings.TrimSpace(l) == recapMarker {
			p.recapping = true
		}
		if _, err := io.WriteString(p.w, p.prefix+l+"\n"); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}
