// Command realwork runs ordinary agent work under agent-lock and checks it
// succeeds with zero escape records: every record here is a false denial.
//
// Each job runs twice on a fresh project directory ~/project of the test
// user: first unjailed, to prove the job itself is sound, then under
// agent-lock, where it must exit 0, print what it should, and leave a
// report with no escape records.
//
// It runs as root inside the test VM:
//
//	AGENT_LOCK_VM=1 .build/realwork -agent-lock .build/agent-lock
//
// Outside the VM it refuses to run unless given -i-know-this-writes-to-home:
// it empties the test user's home.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

func main() { os.Exit(run()) }

type runner struct {
	u            *testenv.User
	r            *testenv.Runner
	dir, work    string
	baselineOnly bool
	verbose      bool
}

func run() int {
	var (
		agentLock    = flag.String("agent-lock", ".build/agent-lock", "the agent-lock `binary` to test")
		engine       = flag.String("engine", "", "agent-lock's --engine (auto, bpf-lsm, landlock); empty: its default")
		userName     = flag.String("user", "jailtest", "the unprivileged test `user` whose home is rewritten")
		allow        = flag.Bool(testenv.AllowFlag, false, "run outside the test VM (AGENT_LOCK_VM=1), emptying the test user's home")
		runRE        = flag.String("run", "", "run only jobs whose name matches `regexp`")
		skipRE       = flag.String("skip", "", "leave out jobs whose name matches `regexp`")
		verbose      = flag.Bool("v", false, "print the full output of jobs that fail")
		list         = flag.Bool("list", false, "list the jobs and exit")
		timeout      = flag.Duration("timeout", 30*time.Second, "time limit of each run (some jobs take longer)")
		baselineOnly = flag.Bool("baseline-only", false, "run only the unjailed baselines (on a machine that cannot load the jail)")
	)
	flag.Parse()
	re, err := regexp.Compile(*runRE)
	if err != nil {
		fmt.Fprintln(os.Stderr, "realwork: -run:", err)
		return 2
	}
	skip, err := regexp.Compile(*skipRE)
	if err != nil {
		fmt.Fprintln(os.Stderr, "realwork: -skip:", err)
		return 2
	}
	var selected []job
	for _, j := range jobs {
		if re.MatchString(j.name) && (*skipRE == "" || !skip.MatchString(j.name)) {
			selected = append(selected, j)
		}
	}
	if len(selected) == 0 {
		fmt.Fprintf(os.Stderr, "realwork: no job matches %q\n", *runRE)
		return 2
	}
	if *list {
		for _, j := range selected {
			fmt.Println(j.name)
		}
		return 0
	}
	bin := *agentLock
	if *baselineOnly {
		bin = "" // the baseline runs no agent-lock
	}
	u, bin, err := testenv.Start(*allow, *userName, bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "realwork:", err)
		return 2
	}
	if bin != "" {
		*agentLock = bin
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	work, err := os.MkdirTemp("", "realwork-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "realwork:", err)
		return 2
	}
	os.Chmod(work, 0o755)
	scratch := filepath.Join(work, "reports")
	if err := u.ReportsDir(scratch); err != nil {
		fmt.Fprintln(os.Stderr, "realwork:", err)
		return 2
	}
	w := &runner{
		u: u, dir: filepath.Join(u.Home, "project"), work: work,
		r:            &testenv.Runner{User: u, AgentLock: *agentLock, Engine: *engine, Scratch: scratch, Timeout: *timeout},
		baselineOnly: *baselineOnly, verbose: *verbose,
	}
	defer func() {
		testenv.KillSurvivors(u.UID, nil)
		u.EmptyHome()
		os.RemoveAll(work)
	}()

	if !w.baselineOnly {
		if err := w.preflight(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "realwork: FAIL: %v\n", err)
			fmt.Println("realwork: agent-lock does not work here; no job was tested")
			fmt.Printf("0 passed, %d failed\n", len(selected))
			return 1
		}
	}

	passed, failed, skipped := 0, 0, 0
	for _, j := range selected {
		if ctx.Err() != nil {
			fmt.Println("realwork: interrupted")
			return 1
		}
		status, detail, outs := w.try(ctx, j)
		if w.r.Engine == "landlock" && j.landlockCost != "" && status != "SKIP" {
			// A documented cost of that engine must still be one: if the
			// job works, the cost (and what agent-lock tells users) is stale.
			if status == "FAIL" {
				status, detail = "COST", "refused, as documented for the Landlock engine: "+j.landlockCost
			} else {
				status, detail = "FAIL", "listed as a cost of the Landlock engine but it works: update landlock.Costs and test/realwork/jobs.go"
			}
		}
		fmt.Printf("%-5s %-20s (%s)\n", status, j.name, detail)
		switch status {
		case "PASS", "SOUND", "COST":
			passed++
		case "SKIP":
			skipped++
		default:
			failed++
			if w.verbose {
				for _, o := range outs {
					fmt.Println(o)
				}
			}
		}
	}
	if w.baselineOnly {
		fmt.Printf("realwork (baseline only, nothing jailed): %d jobs, %d sound, %d broken, %d skipped\n",
			len(selected), passed, failed, skipped)
		if failed > 0 {
			return 1
		}
		return 0
	}
	fmt.Printf("realwork: %d jobs, %d skipped\n", len(selected), skipped)
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 || passed == 0 {
		return 1
	}
	return 0
}

// reset empties the home and makes a fresh DIR.
func (w *runner) reset() error {
	testenv.KillSurvivors(w.u.UID, nil)
	if err := w.u.EmptyHome(); err != nil {
		return err
	}
	return w.u.MkdirAll(w.dir)
}

func (w *runner) argv(j job) []string {
	return testenv.StartWrapper([]string{"/bin/bash", "-c", "set -euo pipefail\n" + j.script})
}

func (w *runner) runJob(ctx context.Context, j job, jailed bool) testenv.Result {
	r := w.r
	if saved := r.Timeout; j.timeout > saved {
		r.Timeout = j.timeout
		defer func() { r.Timeout = saved }()
	}
	if jailed {
		return r.Jailed(ctx, w.argv(j), w.dir)
	}
	tmp := filepath.Join(w.work, "tmp-unjailed")
	os.RemoveAll(tmp)
	os.Mkdir(tmp, 0o700)
	os.Chown(tmp, w.u.UID, w.u.GID)
	return r.Unjailed(ctx, w.argv(j), w.dir, tmp)
}

// setup runs the job's setup unjailed in the fresh DIR.
func (w *runner) setup(ctx context.Context, j job) error {
	if j.setup == "" {
		return nil
	}
	tmp := filepath.Join(w.work, "tmp-setup")
	os.RemoveAll(tmp)
	os.Mkdir(tmp, 0o700)
	os.Chown(tmp, w.u.UID, w.u.GID)
	res := w.r.Unjailed(ctx, testenv.StartWrapper([]string{"/bin/bash", "-c", "set -euo pipefail\n" + j.setup}), w.dir, tmp)
	if res.Err != nil || res.Exit != 0 {
		return fmt.Errorf("setup (unjailed) failed: exit %d %v: %s", res.Exit, res.Err, res.Output)
	}
	return nil
}

func (w *runner) preflight(ctx context.Context) error {
	if err := w.reset(); err != nil {
		return err
	}
	took, err := w.r.MeasureStart(ctx, w.dir)
	if err != nil {
		return err
	}
	fmt.Printf("realwork: agent-lock runs a trivial command in %v here\n", took.Round(time.Millisecond))
	return nil
}

// try returns the job's status, a one-line detail and, for failures, the
// full outputs.
func (w *runner) try(ctx context.Context, j job) (string, string, []string) {
	if j.skip != nil {
		if why := j.skip(); why != "" {
			return "SKIP", why, nil
		}
	}
	if err := w.reset(); err != nil {
		return "FAIL", "fixture: " + err.Error(), nil
	}
	if err := w.setup(ctx, j); err != nil {
		return "FAIL", err.Error(), nil
	}
	base := w.runJob(ctx, j, false)
	full := []string{dump("unjailed", base)}
	if msg := w.judge(j, base); msg != "" {
		return "FAIL", "the job itself is broken, unjailed: " + msg, full
	}
	if w.baselineOnly {
		return "SOUND", "unjailed in " + base.Elapsed.Round(time.Millisecond).String(), nil
	}

	// Keep what the job carries over before the fixture is wiped.
	carried := filepath.Join(w.work, "carry")
	os.RemoveAll(carried)
	for _, c := range j.carry {
		os.MkdirAll(filepath.Dir(filepath.Join(carried, c)), 0o755)
		os.Rename(filepath.Join(w.dir, c), filepath.Join(carried, c))
	}
	if err := w.reset(); err != nil {
		return "FAIL", "fixture: " + err.Error(), full
	}
	for _, c := range j.carry {
		os.Rename(filepath.Join(carried, c), filepath.Join(w.dir, c))
	}
	if err := w.setup(ctx, j); err != nil {
		return "FAIL", err.Error(), full
	}

	jail := w.runJob(ctx, j, true)
	full = append(full, dump("jailed", jail))
	if p := testenv.JailProblem(jail); p != "" {
		return "FAIL", p, full
	}
	var problems []string
	if msg := w.judge(j, jail); msg != "" {
		problems = append(problems, "jailed: "+msg)
	}
	if n := len(jail.Report.Escapes); n > 0 {
		var recs []string
		for _, e := range jail.Report.Escapes {
			recs = append(recs, e.String())
		}
		problems = append(problems, fmt.Sprintf("%d false denial(s): %s", n, strings.Join(recs, "; ")))
	} else if s := jail.Report.Summary; s.Escapes > 0 || s.Lost > 0 {
		problems = append(problems, fmt.Sprintf("summary counts %d escapes, %d lost events", s.Escapes, s.Lost))
	}
	testenv.KillSurvivors(w.u.UID, nil)
	if len(problems) > 0 {
		return "FAIL", strings.Join(problems, "; "), full
	}
	return "PASS", fmt.Sprintf("unjailed %v, jailed %v, no escapes",
		base.Elapsed.Round(time.Millisecond), jail.Elapsed.Round(time.Millisecond)), nil
}

// judge says what is wrong with one run's outcome, or "".
func (w *runner) judge(j job, res testenv.Result) string {
	switch {
	case res.Err != nil:
		return res.Err.Error()
	case res.TimedOut:
		return fmt.Sprintf("timed out after %v: %s", res.Elapsed.Round(time.Second), testenv.Tail(res.Output, 3))
	case res.Exit != 0:
		return fmt.Sprintf("exit %d: %s", res.Exit, testenv.Tail(res.Output, 3))
	case !strings.Contains(string(res.Output), j.want):
		return fmt.Sprintf("output lacks %q: %s", j.want, testenv.Tail(res.Output, 3))
	}
	return ""
}

func dump(name string, res testenv.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "    --- %s: exit %d, %v\n", name, res.Exit, res.Elapsed.Round(time.Millisecond))
	for _, l := range strings.Split(strings.TrimRight(string(res.Output), "\n"), "\n") {
		b.WriteString("    | " + l + "\n")
	}
	if res.Report != nil {
		for _, e := range res.Report.Escapes {
			b.WriteString("    report: " + e.String() + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
