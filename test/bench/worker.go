package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
)

// worker runs one workload and prints how long it took. Arguments:
// WORKLOAD DIR OPENS [landlock], or storm PATH NANOSECONDS, or now.
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
	}
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "worker: WORKLOAD DIR OPENS [landlock]")
		return 2
	}
	w, dir := args[0], args[1]
	opens, err := strconv.Atoi(args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	if len(args) > 3 && args[3] == "landlock" {
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
	start := time.Now()
	if err := workload(w, dir, opens); err != nil {
		fmt.Fprintf(os.Stderr, "worker: %s: %v\n", w, err)
		return 1
	}
	fmt.Printf("elapsed_ns=%d\n", time.Since(start).Nanoseconds())
	return 0
}

func workload(w, dir string, opens int) error {
	switch w {
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
