package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
)

// worker runs the workloads it is asked for and prints how long each took.
// Arguments: serve DIR [landlock], or storm PATH NANOSECONDS, or now.
//
// serve reads lines "WORKLOAD OPENS" from its standard input until it ends,
// runs each workload once, and answers each with a line elapsed_ns=N or
// error=WHY: one process (and one agent-lock session) for all of a mode's
// repetitions of a workload.
func worker(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "worker: no workload")
		return 2
	}
	switch args[0] {
	case "now":
		fmt.Printf("now_ns=%d\n", time.Now().UnixNano())
		return 0
	case "storm":
		return storm(args[1:])
	case "serve":
		return serve(args[1:])
	case "net":
		return netWorker(args[1:])
	}
	fmt.Fprintf(os.Stderr, "worker: unknown command %q\n", args[0])
	return 2
}

func serve(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "worker: serve DIR [landlock]")
		return 2
	}
	dir := args[0]
	if len(args) > 1 && args[1] == "landlock" {
		// The same grant as agent-lock's: the project read-write, the
		// system read-only. Landlock is inherited by git, sh and cc.
		err := landlock.V5.BestEffort().RestrictPaths(
			landlock.RWDirs(dir, os.Getenv("TMPDIR")),
			landlock.RODirs("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/sys").IgnoreIfMissing(),
			landlock.RWFiles("/dev/null").IgnoreIfMissing(),
		)
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker: landlock:", err)
			return 1
		}
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var w string
		var opens int
		if _, err := fmt.Sscan(in.Text(), &w, &opens); err != nil {
			fmt.Printf("error=%q: %v\n", in.Text(), err)
			continue
		}
		start := time.Now()
		if err := workload(w, dir, opens); err != nil {
			fmt.Printf("error=%s: %s\n", w, strings.ReplaceAll(err.Error(), "\n", " | "))
			continue
		}
		fmt.Printf("elapsed_ns=%d\n", time.Since(start).Nanoseconds())
	}
	return 0
}

func workload(w, dir string, opens int) error {
	switch w {
	case "noop":
		// An answer only: the worker runs (for an idle session, the
		// session is up).
		return nil
	case "open-read":
		var files []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, ".txt") {
				files = append(files, p)
			}
			return nil
		})
		if len(files) == 0 {
			return fmt.Errorf("no files")
		}
		buf := make([]byte, 4096)
		for i := range opens {
			f, err := os.Open(files[i%len(files)])
			if err != nil {
				return err
			}
			f.Read(buf)
			f.Close()
		}
		return nil
	case "git-status":
		return sh(dir, "git status --porcelain >/dev/null")
	case "git-add":
		return sh(dir, "git add -A")
	case "find-cat":
		return sh(dir, "find . -name '*.txt' -type f -print0 | xargs -0 cat >/dev/null")
	case "cc":
		return sh(dir, `mkdir -p build && for f in c/*.c; do cc -O0 -c "$f" -o "build/$(basename "$f" .c).o" || exit 1; done`)
	}
	return fmt.Errorf("unknown workload %q", w)
}

func sh(dir, script string) error {
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// storm opens path (which the jail refuses) as fast as it can for the given
// time and prints how many times it tried.
func storm(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "worker: storm PATH NANOSECONDS")
		return 2
	}
	ns, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	end := time.Now().Add(time.Duration(ns))
	n := 0
	for time.Now().Before(end) {
		if f, err := os.Open(args[0]); err == nil {
			f.Close()
			fmt.Fprintln(os.Stderr, "worker: storm: the open succeeded; it must be refused")
			return 1
		}
		n++
	}
	// When the storm ended: how far behind it the report fell is
	// measured from here.
	fmt.Printf("attempts=%d end_ns=%d\n", n, time.Now().UnixNano())
	return 0
}
