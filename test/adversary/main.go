// Command adversary tries to escape agent-lock's jail the ways a
// determined agent running as the same user would, and checks that each
// attempt is both stopped and reported.
//
// Every technique runs twice against a fresh fixture in the test user's
// home: first unjailed as that user, where it must succeed (otherwise it
// proves nothing and counts as VOID), then under agent-lock, where its
// effect must be absent (secret not in the output, outside files unchanged
// on disk, no process left behind) and the report must hold a "blocked"
// record of the expected operation.
//
// It runs as root inside the test VM:
//
//	AGENT_LOCK_VM=1 .build/adversary -agent-lock .build/agent-lock
//
// Outside the VM it refuses to run unless given -i-know-this-writes-to-home:
// it empties the test user's home and writes fake secrets into it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "-technique-helper" {
		os.Exit(runHelper(os.Args[2], os.Args[3:]))
	}
	os.Exit(run())
}

type suite struct {
	fix          *Fixture
	run          *testenv.Runner
	baselineOnly bool
	verbose      bool
	abi          int  // Landlock's, under -engine landlock
	llAudit      bool // -landlock-audit: Landlock's audit records report too
}

func run() int {
	var (
		agentLock    = flag.String("agent-lock", ".build/agent-lock", "the agent-lock `binary` to test")
		engine       = flag.String("engine", "", "agent-lock's --engine (auto, bpf-lsm, landlock); empty: its default")
		userName     = flag.String("user", "jailtest", "the unprivileged test `user` whose home is rewritten")
		allow        = flag.Bool(testenv.AllowFlag, false, "run outside the test VM (AGENT_LOCK_VM=1), emptying the test user's home")
		runRE        = flag.String("run", "", "run only techniques whose name or family matches `regexp`")
		verbose      = flag.Bool("v", false, "print the full output and report of techniques that do not pass")
		list         = flag.Bool("list", false, "list the techniques and exit")
		timeout      = flag.Duration("timeout", 30*time.Second, "time limit of each run")
		baselineOnly = flag.Bool("baseline-only", false, "run only the unjailed baselines (on a machine that cannot load the jail)")
		viaDaemon    = flag.Bool("daemon", false, "run agent-lock as the user, through an agent-lock daemon the suite starts (no sudo)")
		llAudit      = flag.Bool("landlock-audit", false, "with -engine landlock (ABI 7+): turn the host's audit on for the run (and back off), and hold the engine to reporting what Landlock's audit records cover")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: adversary [flags]\n\nTries %d ways out of agent-lock's jail; see -list.\n\n", len(allTechniques()))
		flag.PrintDefaults()
	}
	flag.Parse()

	techs, err := selectTechniques(*runRE)
	if err != nil {
		fmt.Fprintln(os.Stderr, "adversary:", err)
		return 2
	}
	if *list {
		for _, t := range techs {
			op := "-"
			if len(t.Ops) > 0 {
				op = strings.Join(t.Ops, "|")
			}
			fmt.Printf("%-12s %-26s op=%-18s %s\n", t.Family, t.Name, op, t.Doc)
		}
		return 0
	}
	// setup finds the binary itself (the baseline-only run needs none).
	u, _, err := testenv.Start(*allow, *userName, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "adversary:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	s, cleanup, err := setup(ctx, u, *agentLock, *baselineOnly)
	if err != nil {
		fmt.Fprintln(os.Stderr, "adversary:", err)
		return 2
	}
	defer cleanup()
	if needed(techs, needForeign) {
		undo, err := vartmpOnDisk(s.fix.Work)
		if err != nil {
			fmt.Fprintln(os.Stderr, "adversary:", err)
			return 2
		}
		defer undo()
	}
	if *viaDaemon && !s.baselineOnly {
		stop, err := testenv.StartDaemon(s.run, s.fix.Work)
		if err != nil {
			fmt.Fprintln(os.Stderr, "adversary: -daemon:", err)
			return 2
		}
		defer stop()
	}
	s.verbose = *verbose
	s.run.Timeout = *timeout
	s.run.Engine = *engine
	if *engine == "landlock" {
		s.abi = landlockABI()
		landlockList(s.abi)
	}
	if *llAudit {
		restore, err := landlockAudit(*engine, s.abi)
		if err != nil {
			fmt.Fprintln(os.Stderr, "adversary: -landlock-audit:", err)
			return 2
		}
		defer restore()
		s.llAudit = true
	}

	if !s.baselineOnly {
		if err := s.preflight(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "adversary: FAIL: %v\n", err)
			fmt.Println("adversary: agent-lock does not work here; no technique was tested")
			fmt.Printf("0 passed, %d failed\n", len(techs))
			return 1
		}
	}
	return s.all(ctx, techs)
}

func selectTechniques(expr string) ([]Technique, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("-run: %w", err)
	}
	var out []Technique
	seen := map[string]bool{}
	for _, t := range allTechniques() {
		if seen[t.Name] {
			return nil, fmt.Errorf("two techniques named %s", t.Name)
		}
		seen[t.Name] = true
		if re.MatchString(t.Name) || re.MatchString(t.Family) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no technique matches %q", expr)
	}
	return out, nil
}

// setup makes the scratch directory, the helper copies and the C
// programs, and returns the suite and what undoes it.
func setup(ctx context.Context, u *testenv.User, agentLock string, baselineOnly bool) (*suite, func(), error) {
	if !baselineOnly {
		abs, err := filepath.Abs(agentLock)
		if err != nil {
			return nil, nil, err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, nil, fmt.Errorf("agent-lock binary: %w (build it first, or pass -agent-lock)", err)
		}
		if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return nil, nil, fmt.Errorf("agent-lock binary %s is not an executable file", abs)
		}
		agentLock = abs
	}
	work, err := os.MkdirTemp("", "adversary-")
	if err != nil {
		return nil, nil, err
	}
	// World-searchable: the outside processes run from bin/ as the user.
	os.Chmod(work, 0o755)
	scratch := filepath.Join(work, "reports")
	bin := filepath.Join(work, "bin")
	if err := u.ReportsDir(scratch); err != nil {
		return nil, nil, err
	}
	os.Mkdir(bin, 0o755)

	marker := make([]byte, 8)
	rand.Read(marker)
	f := &Fixture{
		U: u, Home: u.Home, Dir: filepath.Join(u.Home, "project"),
		Marker: "advsecret" + hex.EncodeToString(marker),
		Work:   work, Bin: bin,
	}
	cleanup := func() {
		f.Stop()
		u.EmptyHome()
		for p := range f.sharedFiles() {
			os.Remove(p)
		}
		for _, p := range planted {
			os.Remove(p)
		}
		for _, p := range foreignScratchFiles() {
			os.Remove(p)
		}
		os.RemoveAll(work)
	}
	fail := func(err error) (*suite, func(), error) { cleanup(); return nil, nil, err }

	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	for _, name := range []string{"adv-helper", "adv-victim"} {
		if err := copyFile(self, filepath.Join(bin, name), 0o755); err != nil {
			return fail(err)
		}
	}
	if err := compile(ctx, bin, f.Marker); err != nil {
		return fail(err)
	}
	r := &testenv.Runner{User: u, AgentLock: agentLock, Scratch: scratch}
	f.next = func(argv []string) testenv.Result { return r.Jailed(ctx, argv, f.Dir) }
	f.user = func(argv []string) testenv.Result {
		tmp := filepath.Join(work, "tmp-user")
		os.Mkdir(tmp, 0o700)
		os.Chown(tmp, u.UID, u.GID)
		return r.Unjailed(ctx, argv, f.Dir, tmp)
	}
	return &suite{fix: f, run: r, baselineOnly: baselineOnly}, cleanup, nil
}

// needed says whether a technique of techs needs n.
func needed(techs []Technique, n needs) bool {
	for _, t := range techs {
		if t.Needs&n != 0 {
			return true
		}
	}
	return false
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// preflight runs a harmless command under agent-lock: if that fails,
// every technique would "fail to escape" for the wrong reason.
func (s *suite) preflight(ctx context.Context) error {
	if err := s.fix.Reset(&Technique{Name: "preflight"}); err != nil {
		return err
	}
	took, err := s.run.MeasureStart(ctx, s.fix.Dir)
	if err != nil {
		return err
	}
	fmt.Printf("adversary: agent-lock runs a trivial command in %v here; jailed runs get %v each\n",
		took.Round(time.Millisecond), s.run.JailTimeout().Round(time.Second))
	return nil
}

// broken says why a jailed run tells nothing about the technique, or "".
func (s *suite) broken(o *outcome) string { return testenv.JailProblem(o.res) }

// once runs t's command, unjailed or jailed, and collects what it left.
func (s *suite) once(ctx context.Context, t *Technique, jailed bool) *outcome {
	f := s.fix
	argv := testenv.StartWrapper(t.Cmd(f))

	var extra []*os.File
	if t.InheritHome {
		h, err := os.Open(f.Home)
		if err == nil {
			defer h.Close()
			extra = append(extra, h)
		}
	}
	if t.InheritFile != "" {
		for len(extra) < 2 {
			null, err := os.Open(os.DevNull)
			if err != nil {
				break
			}
			defer null.Close()
			extra = append(extra, null)
		}
		h, err := os.Open(filepath.Join(f.Home, t.InheritFile))
		if err == nil {
			defer h.Close()
			extra = append(extra, h)
		}
	}
	tmpdir := filepath.Join(f.Work, "tmp-unjailed")
	os.RemoveAll(tmpdir)
	os.Mkdir(tmpdir, 0o700)
	os.Chown(tmpdir, f.U.UID, f.U.GID)

	p := testenv.Proc{Argv: argv, Dir: f.Dir, ExtraFiles: extra, AsUser: !jailed, Env: s.run.UserEnv(tmpdir)}
	if t.Needs&needCgroup != 0 && !jailed {
		if cg, err := os.Open(f.cgroupDir("src")); err == nil {
			defer cg.Close()
			p.Cgroup = cg
		}
	}
	report := ""
	if jailed {
		report = s.run.NextReport()
		if t.ReportIn != "" {
			report = f.expand(t.ReportIn)
		}
		var flags []string
		for _, a := range t.Flags {
			flags = append(flags, f.expand(a))
		}
		p.Argv = s.run.JailArgv(f.dir(t), report, argv, flags...)
		s.run.Jailer(&p)
		p.Timeout = s.run.JailTimeout()
	}
	if t.TTY {
		// A fresh terminal; after the command, the shell on it reads one
		// line, as the user's shell would once the agent is gone.
		inner := testenv.ShellJoin(p.Argv) + `; echo "cmd-exit=$?"; read -t 3 l; echo "GOT:$l"`
		p.Argv = []string{"script", "-qec", inner, "/dev/null"}
		r, w, err := os.Pipe()
		if err == nil {
			defer r.Close()
			defer w.Close()
			p.Stdin = r
		}
	}
	res := s.run.Run(ctx, p)
	if t.TTY {
		if m := regexp.MustCompile(`cmd-exit=(\d+)`).FindSubmatch(res.Output); m != nil {
			res.Exit, _ = strconv.Atoi(string(m[1]))
		}
	}
	if jailed {
		s.run.ReadReport(&res, report)
	}
	time.Sleep(t.Settle)
	o := &outcome{res: res, out: string(res.Output)}
	o.survivors = testenv.Survivors(f.U.UID, f.keep())
	for i := 0; jailed && len(o.survivors) > 0 && i < 10; i++ {
		// Give processes that agent-lock killed a moment to go.
		time.Sleep(100 * time.Millisecond)
		o.survivors = testenv.Survivors(f.U.UID, f.keep())
	}
	return o
}

type result struct {
	status, op, detail string
	base, jail         *outcome
}

func (s *suite) try(ctx context.Context, t *Technique) result {
	f := s.fix
	op := "-"
	if len(t.Ops) > 0 {
		op = t.Ops[0]
	}
	if err := f.Reset(t); err != nil {
		return result{status: "ERROR", op: op, detail: err.Error()}
	}
	if t.Skip != nil {
		if why := t.Skip(f); why != "" {
			return result{status: "SKIP", op: op, detail: why}
		}
	}
	base := s.once(ctx, t, false)
	baseEffect := t.Effect
	if t.Naive != nil {
		baseEffect = func(f *Fixture, _ *outcome) string { return t.Naive(f) }
	}
	if eff := baseEffect(f, base); eff == "" {
		if base.res.Exit == exitSkip {
			return result{status: "SKIP", op: op, detail: skipReason(base.out), base: base}
		}
		return result{status: "VOID", op: op, base: base,
			detail: fmt.Sprintf("unjailed it achieved nothing, so it proves nothing (exit %d): %s", base.res.Exit, testenv.Tail(base.res.Output, 3))}
	}
	if s.baselineOnly {
		return result{status: "SOUND", op: op, detail: "unjailed: " + baseEffect(f, base), base: base}
	}

	if err := f.Reset(t); err != nil {
		return result{status: "ERROR", op: op, detail: err.Error(), base: base}
	}
	before := f.snapshot()
	jail := s.once(ctx, t, true)
	r := result{op: op, base: base, jail: jail}
	if t.Refused != "" {
		return s.judgeRefusal(t, r, before)
	}
	if msg := s.broken(jail); msg != "" {
		r.status, r.detail = "ERROR", msg
		return r
	}

	var leaks []string
	if eff := t.Effect(f, jail); eff != "" {
		leaks = append(leaks, eff)
	}
	if strings.Contains(jail.out, f.Marker) && t.Effect(f, jail) != "secret in output" {
		leaks = append(leaks, "secret in output")
	}
	if d := diffSnapshots(f.ungranted(t, before), f.ungranted(t, f.snapshot())); len(d) > 0 {
		leaks = append(leaks, "outside changed: "+strings.Join(d, "; "))
	}
	if eff := survived(f, jail); eff != "" && !strings.Contains(strings.Join(leaks, ""), eff) {
		leaks = append(leaks, "outlived agent-lock: "+eff)
	}
	if len(leaks) > 0 {
		r.status, r.detail = "LEAK", strings.Join(leaks, "; ")
		return r
	}
	if len(t.Ops) == 0 {
		r.status, r.detail = "PASS", "nothing outlived agent-lock"
		return r
	}
	if rec := s.match(t, jail.res.Report); rec != nil {
		r.status, r.op, r.detail = "PASS", rec.Op, rec.String()
		return r
	}
	if t.Excuse != nil {
		if why := t.Excuse(jail); why != "" {
			r.status, r.detail = "PASS", "stopped, no record: "+why
			return r
		}
	}
	r.status = "UNREPORTED"
	r.detail = fmt.Sprintf("stopped, but no blocked %s record%s; the report has %s",
		strings.Join(t.Ops, "|"), pathNote(t), recordList(jail.res.Report.Escapes, 4))
	return r
}

// judgeRefusal judges a technique agent-lock must refuse to start for:
// it must exit 125 saying t.Refused, and nothing may have changed.
func (s *suite) judgeRefusal(t *Technique, r result, before map[string]string) result {
	f, jail := s.fix, r.jail
	var leaks []string
	if eff := t.Effect(f, jail); eff != "" {
		leaks = append(leaks, eff)
	}
	if d := diffSnapshots(before, f.snapshot()); len(d) > 0 {
		leaks = append(leaks, "outside changed: "+strings.Join(d, "; "))
	}
	switch {
	case len(leaks) > 0:
		r.status, r.detail = "LEAK", strings.Join(leaks, "; ")
	case jail.res.Exit != testenv.ExitAgentLock || !strings.Contains(jail.out, t.Refused):
		r.status, r.detail = "ERROR", fmt.Sprintf("agent-lock must refuse to start saying %q; it exited %d: %s",
			t.Refused, jail.res.Exit, testenv.Tail(jail.res.Output, 3))
	default:
		r.status, r.detail = "PASS", "refused: "+t.Refused
	}
	return r
}

func skipReason(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "SKIP: "); i >= 0 {
			return strings.TrimSpace(l[i+len("SKIP: "):])
		}
	}
	return "the kernel refuses it even without a jail"
}

func pathNote(t *Technique) string {
	if t.Path == "" {
		return ""
	}
	return " for a path containing " + t.Path
}

func recordList(recs []testenv.Record, n int) string {
	if len(recs) == 0 {
		return "no escape records"
	}
	var s []string
	for i, r := range recs {
		if i == n {
			s = append(s, fmt.Sprintf("and %d more", len(recs)-n))
			break
		}
		s = append(s, r.String())
	}
	return strings.Join(s, ", ")
}

// match finds the record that shows t was blocked.
func (s *suite) match(t *Technique, rep *testenv.Report) *testenv.Record {
	f := s.fix
	want := t.Path
	if strings.HasPrefix(want, "~") {
		want = f.Home + want[1:]
	}
	victim := 0
	if f.victim != nil {
		victim, _ = strconv.Atoi(f.victim.field("pid"))
	}
	for i := range rep.Escapes {
		e := &rep.Escapes[i]
		// undone: the Landlock engine's tripwire put a protected entry
		// back; the technique's effect is judged gone on its own.
		if (e.Verdict != "blocked" && e.Verdict != "undone") || !contains(t.Ops, e.Op) {
			continue
		}
		if want != "" && !strings.Contains(e.Path, want) && !strings.Contains(e.Path2, want) &&
			!(s.llAudit && e.Rule == "Landlock's audit record" && strings.HasPrefix(want, e.Path+"/")) {
			// (Landlock's audit records name the directory an entry
			// was to be made in or removed from, not the entry.)
			continue
		}
		if t.Target && e.TargetPID != 0 && e.TargetPID != victim {
			continue
		}
		return e
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *suite) all(ctx context.Context, techs []Technique) int {
	counts := map[string]int{}
	jailedRuns, failed125 := 0, 0
	for i := range techs {
		t := &techs[i]
		if ctx.Err() != nil {
			fmt.Println("adversary: interrupted")
			return 1
		}
		r := s.try(ctx, t)
		if s.run.Engine == "landlock" {
			r = landlockJudge(t, r, s.abi, s.llAudit)
		}
		counts[r.status]++
		if r.jail != nil {
			jailedRuns++
			if r.jail.res.Exit == testenv.ExitAgentLock {
				failed125++
			}
		}
		fmt.Printf("%-10s %-26s op=%-11s (%s)\n", r.status, t.Name, r.op, oneLine(r.detail))
		if s.verbose && r.status != "PASS" && r.status != "SKIP" && r.status != "SOUND" && r.status != "EXPECTED" {
			s.dump(r)
		}
	}
	n := len(techs)
	if s.baselineOnly {
		fmt.Printf("adversary (baseline only, nothing jailed): %d techniques, %d sound, %d void, %d errors, %d skipped\n",
			n, counts["SOUND"], counts["VOID"], counts["ERROR"], counts["SKIP"])
		if counts["VOID"]+counts["ERROR"] > 0 {
			return 1
		}
		return 0
	}
	if jailedRuns > 0 && failed125 == jailedRuns {
		fmt.Println("adversary: agent-lock failed with exit 125 on every run: the jail never ran, nothing was tested")
	}
	fmt.Printf("adversary: %d techniques, %d leaks, %d void, %d unreported, %d errors, %d skipped\n",
		n, counts["LEAK"], counts["VOID"], counts["UNREPORTED"], counts["ERROR"], counts["SKIP"])
	if s.run.Engine == "landlock" {
		fmt.Printf("adversary: Landlock engine: %d expected leaks, %d listed leaks that no longer leak\n", counts["EXPECTED"], counts["FIXED"])
	}
	bad := counts["LEAK"] + counts["VOID"] + counts["UNREPORTED"] + counts["ERROR"] + counts["FIXED"]
	fmt.Printf("%d passed, %d failed\n", counts["PASS"]+counts["EXPECTED"], bad)
	if bad > 0 || counts["PASS"] == 0 {
		return 1
	}
	return 0
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

func (s *suite) dump(r result) {
	show := func(name string, o *outcome) {
		if o == nil {
			return
		}
		fmt.Printf("    --- %s: exit %d, %v\n", name, o.res.Exit, o.res.Elapsed.Round(time.Millisecond))
		for _, l := range strings.Split(strings.TrimRight(o.out, "\n"), "\n") {
			fmt.Println("    | " + l)
		}
		if o.res.Report != nil {
			for _, e := range o.res.Report.Escapes {
				fmt.Println("    report: " + e.String())
			}
			for _, l := range o.res.Report.Malformed {
				fmt.Println("    report (malformed): " + l)
			}
		}
		for _, p := range o.survivors {
			fmt.Println("    survivor: " + p.String())
		}
	}
	show("unjailed", r.base)
	show("jailed", r.jail)
}
