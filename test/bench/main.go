// Command bench measures what the jail costs (issue 6): the same workloads
// run unjailed, under agent-lock, under agent-lock's file_open hook alone
// (the one-hook reference design) and under a Landlock sandbox granting the
// same directory, in one run, repeated, and printed as ratios
// to unjailed with min/median/max; the open-heavy workload also runs with
// an empty BPF program on file_open (the cost of calling any program
// there). The cell's network is measured too, in a small internet of
// network namespaces (net.go): connections and a download through the
// cell against unjailed. It also runs an escape storm (denied
// opens as fast as one process can make them: how many were reported, how
// many lost) and measures agent-lock's start against starting the command
// directly.
//
// Each workload times itself inside the worker process, so agent-lock's own
// start (loading and verifying its programs) is not counted against the
// work; start-up is measured on its own. The modes take turns in rounds:
// in each, one worker per mode (one session) runs every workload once.
//
// With -engine landlock (make bench-native, on this machine's own kernel:
// emulation would measure the emulator) agent-lock runs its Landlock
// engine, measured against the same bare Landlock sandbox, and a fourth
// mode runs the workloads unjailed while an idle session runs
// (beside-session): what its observers, tracepoints that run for every
// process of the machine, cost processes outside the cell. Ratios are
// printed side by side; nothing is asserted of the times.
//
// It rewrites the test user's home, so it runs in the test VMs (make bench)
// or with -i-know-this-writes-to-home (or AGENT_LOCK_VM=1, as make
// bench-native sets).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/session"
	"github.com/agent-lock/agent-lock/test/testenv"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-worker" {
		os.Exit(worker(os.Args[2:]))
	}
	os.Exit(run())
}

type config struct {
	files, opens, cfiles, repeat int
	storm                        time.Duration
}

func run() int {
	var (
		agentLock = flag.String("agent-lock", ".build/agent-lock", "the agent-lock `binary` to measure")
		userName  = flag.String("user", "jailtest", "the unprivileged test `user` whose home is rewritten")
		allow     = flag.Bool(testenv.AllowFlag, false, "run outside the test VM (AGENT_LOCK_VM=1), emptying the test user's home")
		smoke     = flag.Bool("smoke", false, "tiny sizes, one repetition: proves the suite works, measures nothing")
		quick     = flag.Bool("quick", false, "open-read at a tenth of its size, the start-up and a short storm: the per-open figures and the storm's counts in minutes (make bench-quick)")
		only      = flag.String("run", "", "run only workloads matching `regexp`")
		repeat    = flag.Int("repeat", 0, "repetitions of each workload in each mode (default 3, smoke 1)")
		opens     = flag.Int("opens", 0, "opens of the open-read workload (default 200000, smoke 2000)")
		cfiles    = flag.Int("cfiles", 0, "C files of the cc workload (default 16, smoke 3)")
		engine    = flag.String("engine", "", "agent-lock's `engine`: empty for its default (the BPF-LSM engine, in the VMs), or landlock: "+
			"the Landlock engine against a bare Landlock sandbox, and what its observers cost processes outside the cell (natively)")
	)
	// The defaults fit make bench's 20 minutes on the test bed: three
	// kernels, two at a time, on two emulated CPUs (TCG), where each
	// compiler start costs about 0.4 s and each agent-lock start 4 s. Three repetitions give a median and a spread; more, and a
	// larger C build, where the machine allows (-repeat, -cfiles).
	c := config{files: 20000, opens: 200000, cfiles: 16, repeat: 3, storm: 10 * time.Second}
	flag.Parse()
	if *smoke {
		c = config{files: 200, opens: 2000, cfiles: 3, repeat: 1, storm: time.Second}
	}
	if *quick {
		// The kernel's statistics (ns a program run) hold at any size;
		// the workload ratios get noisier.
		c = config{files: 2000, opens: 20000, cfiles: 3, repeat: 3, storm: 3 * time.Second}
		if *only == "" {
			*only = "^(open-read|startup|startup-alone|startup-daemon|storm)$"
		}
	}
	if *repeat > 0 {
		c.repeat = *repeat
	}
	if *opens > 0 {
		c.opens = *opens
	}
	if *cfiles > 0 {
		c.cfiles = *cfiles
	}
	re, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -run:", err)
		return 2
	}
	u, bin, err := testenv.Start(*allow, *userName, *agentLock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	scratch, err := os.MkdirTemp("", "bench-reports-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	defer os.RemoveAll(scratch)
	if err := u.ReportsDir(scratch); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	// The whole run, setup included: make bench's budget is 20 minutes.
	began := time.Now()
	defer func() { fmt.Printf("bench: done in %v\n", time.Since(began).Round(time.Second)) }()
	b := &bench{c: c, r: &testenv.Runner{User: u, AgentLock: bin, Scratch: scratch, Timeout: 20 * time.Minute}}
	switch *engine {
	case "":
	case "landlock":
		// The BPF-LSM reference modes need that engine; beside-session
		// is the unjailed workload while a session runs.
		b.r.Engine = *engine
		modes = []string{"unjailed", "agent-lock", "landlock", "beside-session", "beside-trace"}
		hookModes = []string{"agent-lock", "beside-session"}
	default:
		fmt.Fprintf(os.Stderr, "bench: -engine %q: empty or landlock\n", *engine)
		return 2
	}
	if err := b.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: setup:", err)
		return 2
	}
	ctx := context.Background()
	if _, err := b.r.MeasureStart(ctx, b.dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	kernel := uname()
	engineName := "agent-lock's default engine"
	if b.r.Engine != "" {
		engineName = "agent-lock --engine " + b.r.Engine
	}
	fmt.Printf("bench: kernel %s, %d files, %d opens, %d C files, %d repetitions, %s\n", kernel, c.files, c.opens, c.cfiles, c.repeat, engineName)
	fmt.Printf("%-12s %-10s %10s %10s %10s %8s %11s  %s\n", "workload", "mode", "min", "median", "max", "ratio", "by round", "target")
	failed := false
	var sel []string
	for _, w := range workloads {
		if re.MatchString(w) {
			sel = append(sel, w)
		}
	}
	times := map[string]map[string][]time.Duration{}
	for _, w := range sel {
		times[w] = map[string][]time.Duration{}
	}
	if len(sel) > 0 {
		// The first session would pay alone for the caches the others find
		// warm (the compiler's pages and headers, the repository's index,
		// the emulator's translations): one round first, not counted.
		if err := b.round(ctx, modes[0], sel, nil); err != nil {
			fmt.Fprintf(os.Stderr, "bench: warm-up: %v\n", err)
			failed = true
		}
	}
	// Rounds: each mode's session runs every workload once, the modes take
	// turns, in reverse order every other round, so that a drift in the
	// machine's speed reaches every mode alike.
	for r := range c.repeat {
		order := slices.Clone(modes)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, mode := range order {
			err := b.round(ctx, mode, sel, func(w string, d time.Duration) {
				times[w][mode] = append(times[w][mode], d)
			})
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s: %v\n", mode, err)
				failed = true
			}
		}
		fmt.Printf("bench: round %d of %d done at %v\n", r+1, c.repeat, time.Since(began).Round(time.Second))
	}
	var hooks map[string]map[string]*hookRun
	if len(sel) > 0 {
		hooks = b.hooks(ctx, sel)
	}
	for _, w := range sel {
		base := median(times[w]["unjailed"])
		for _, mode := range modes {
			ts := times[w][mode]
			if len(ts) == 0 || base == 0 {
				continue
			}
			ratio := float64(median(ts)) / float64(base)
			verdict := ""
			switch {
			case mode == "agent-lock" && b.r.Engine == "landlock":
				verdict = sideBySide(ts, times[w]["landlock"], "bare Landlock")
			case mode == "agent-lock":
				verdict = target(ratio, times[w]["landlock"], median(ts))
			case mode == "beside-session":
				verdict = "what a session costs a process outside its cell"
			case mode == "beside-trace":
				verdict = "any syscall tracepoint's cost to every process: beside-session's floor"
			}
			lo, hi := roundRatios(ts, times[w]["unjailed"])
			fmt.Printf("%-12s %-10s %10s %10s %10s %7.2fx %11s  %s\n", w, mode, round(slices.Min(ts)), round(median(ts)), round(slices.Max(ts)), ratio,
				fmt.Sprintf("%.2f-%.2f", lo, hi), verdict)
			fmt.Printf("BENCH kernel=%s workload=%s mode=%s n=%d min_ns=%d median_ns=%d max_ns=%d ratio=%.3f round_ratio_min=%.3f round_ratio_max=%.3f\n",
				kernel, w, mode, len(ts), slices.Min(ts), median(ts), slices.Max(ts), ratio, lo, hi)
		}
		for _, mode := range modes {
			if hr := hooks[w][mode]; hr != nil {
				printHooks(kernel, w, mode, hr)
			}
		}
		if w == "open-read" && b.r.Engine == "" {
			perOpen(kernel, b.c.opens, times[w], hooks[w]["agent-lock"])
		}
	}
	if re.MatchString("network") || re.MatchString("connect-name") || re.MatchString("bulk-name") {
		if err := b.network(ctx, kernel); err != nil {
			fmt.Fprintln(os.Stderr, "bench: network:", err)
			failed = true
		}
	}
	// Start-up first: its sessions, which see no events, are the storm's
	// memory baseline.
	if re.MatchString("startup") {
		if err := b.startup(ctx, kernel); err != nil {
			fmt.Fprintln(os.Stderr, "bench: startup:", err)
			failed = true
		}
	}
	if re.MatchString("startup-alone") {
		if err := b.startupAlone(ctx, kernel); err != nil {
			fmt.Fprintln(os.Stderr, "bench: startup-alone:", err)
			failed = true
		}
	}
	if re.MatchString("startup-daemon") {
		if err := b.startupDaemon(ctx, kernel); err != nil {
			fmt.Fprintln(os.Stderr, "bench: startup-daemon:", err)
			failed = true
		}
	}
	if re.MatchString("storm") {
		if err := b.storm(ctx, kernel); err != nil {
			fmt.Fprintln(os.Stderr, "bench: storm:", err)
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}

var (
	workloads = []string{"open-read", "git-status", "git-add", "find-cat", "cc"}
	// file_open: agent-lock's engine with only its file_open hook, the
	// reference design's cost (what the other hooks add is agent-lock's
	// ratio over it).
	//
	// empty-hook: unjailed, with a BPF program that does nothing attached
	// to file_open (emptyHook), on the workloads in emptyWorkloads: the
	// cost of calling a program there, whatever it does.
	//
	// beside-session (-engine landlock): unjailed, while an idle
	// agent-lock session runs: its observers are tracepoints on the open
	// and exec family, which run for every process of the machine and
	// return at once for those outside the cell.
	//
	// beside-trace (-engine landlock): unjailed, with an empty program on
	// a syscall tracepoint nothing calls (syscallTrace): what the kernel
	// makes every process pay for any syscall tracepoint.
	modes          = []string{"unjailed", "agent-lock", "file_open", "empty-hook", "landlock"}
	emptyWorkloads = []string{"open-read"}
	// hookModes run again with the kernel's BPF statistics on.
	hookModes = []string{"agent-lock", "file_open"}
)

type bench struct {
	c      config
	r      *testenv.Runner
	dir    string // the project: a git repository of c.files files
	worker string // this binary, copied into dir so the jail lets it run
	// idleRSS is agent-lock's peak resident memory in a session that saw
	// no events (the start-up runs): the storm's memory baseline.
	idleRSS int64
	// idleTail is how long after its agent ended a session that saw no
	// events wrote its summary (the start-up runs' median): the storm's
	// baseline for how far behind the report fell.
	idleTail time.Duration
}

func (b *bench) setup() error {
	u := b.r.User
	if err := u.EmptyHome(); err != nil {
		return err
	}
	b.dir = filepath.Join(u.Home, "project")
	for i := range b.c.files {
		p := filepath.Join(b.dir, fmt.Sprintf("d%02d/d%03d/f%05d.txt", i%50, i%997, i))
		if err := u.WriteFile(p, fmt.Sprintf("file %d\n", i), 0o644); err != nil {
			return err
		}
	}
	for i := range b.c.cfiles {
		src := fmt.Sprintf("#include <stdio.h>\nint f%d(int x) { return x * %d; }\n", i, i+1)
		if err := u.WriteFile(filepath.Join(b.dir, "c", fmt.Sprintf("f%03d.c", i)), src, 0o644); err != nil {
			return err
		}
	}
	if err := u.WriteFile(filepath.Join(u.Home, ".ssh/id_rsa"), "KEY\n", 0o600); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	b.worker = filepath.Join(b.dir, ".bench", "bench")
	if err := u.WriteFile(b.worker, string(data), 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(u.Home, "tmp")
	u.MkdirAll(tmp)
	git := fmt.Sprintf("cd %s && git init -q && git -c user.name=b -c user.email=b@b add -A && git -c user.name=b -c user.email=b@b commit -qm init", b.dir)
	res := b.r.Unjailed(context.Background(), []string{"sh", "-c", git}, b.dir, tmp)
	if res.Exit != 0 {
		return fmt.Errorf("git setup: exit %d: %s", res.Exit, testenv.Tail(res.Output, 5))
	}
	return nil
}

// jailed is the runner of a jailed mode: agent-lock, or its file_open
// hook alone.
func (b *bench) jailed(mode string) *testenv.Runner {
	r := *b.r
	if mode == "file_open" {
		r.Engine = session.EngineFileOpenOnly
	}
	return &r
}

var elapsedRE = regexp.MustCompile(`^elapsed_ns=(\d+)$`)

// hookRun is where the kernel's time went in one run of a workload: the
// programs' runs and time, against the work's own time.
type hookRun struct {
	work  time.Duration
	hooks []testenv.Hook
}

// round runs each workload of sel once in one mode, in one worker (for the
// jailed modes, one agent-lock session: its start, seconds under
// emulation, would otherwise be most of the suite's time), and passes on
// the times the worker measured.
//
// Only one mode's worker lives at a time: a session's programs run for
// every process of the machine (and return at once for those outside its
// cell), so a session left open would slow the others' runs.
func (b *bench) round(ctx context.Context, mode string, sel []string, got func(w string, d time.Duration)) error {
	if mode == "beside-trace" {
		detach, err := syscallTrace()
		if err != nil {
			return err
		}
		defer detach()
	}
	if mode == "empty-hook" {
		sel = slices.DeleteFunc(slices.Clone(sel), func(w string) bool { return !slices.Contains(emptyWorkloads, w) })
		if len(sel) == 0 {
			return nil
		}
		detach, err := emptyHook()
		if err != nil {
			return err
		}
		defer detach()
	}
	s, err := b.serve(ctx, mode)
	if err != nil {
		return err
	}
	for _, w := range sel {
		d, err := s.run(w, b.c.opens)
		if err != nil {
			break
		}
		if got != nil {
			got(w, d)
		}
	}
	return s.end(b.r, mode)
}

// hooks runs each workload once more in each jailed mode, untimed, with the
// kernel's BPF statistics on (they cost two clock reads a program run, so
// the timed runs go without), and says where the kernel's time went: each
// program's runs and time during each workload, read from the kernel
// before and after it (only one session's programs are loaded).
func (b *bench) hooks(ctx context.Context, sel []string) map[string]map[string]*hookRun {
	out := map[string]map[string]*hookRun{}
	for _, w := range sel {
		out[w] = map[string]*hookRun{}
	}
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		fmt.Printf("hooks: no BPF statistics here: %v\n", err)
		return out
	}
	defer stats.Close()
	for _, mode := range hookModes {
		s, err := b.serve(ctx, mode)
		if err != nil {
			fmt.Printf("hooks: %s: %v\n", mode, err)
			continue
		}
		for _, w := range sel {
			before := progStats()
			d, err := s.run(w, b.c.opens)
			if err != nil {
				break
			}
			out[w][mode] = &hookRun{work: d, hooks: progStats().since(before)}
		}
		if err := s.end(b.r, mode); err != nil {
			fmt.Printf("hooks: %s: %v\n", mode, err)
		}
	}
	return out
}

// progs are the loaded BPF programs' statistics, by program ID.
type progs map[ebpf.ProgramID]testenv.Hook

func progStats() progs {
	out := progs{}
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return out
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, ierr := p.Info()
		st, serr := p.Stats()
		p.Close()
		if ierr == nil && serr == nil {
			out[id] = testenv.Hook{Name: info.Name, Runs: st.RunCount, NS: st.Runtime.Nanoseconds()}
		}
	}
}

// since is what each program ran from before to now: those that ran.
func (now progs) since(before progs) []testenv.Hook {
	var out []testenv.Hook
	for id, h := range now {
		h.Runs -= before[id].Runs
		h.NS -= before[id].NS
		if h.Runs > 0 {
			out = append(out, h)
		}
	}
	return out
}

// printHooks says where the kernel's time went in a jailed mode's run with
// the BPF statistics on: the programs that ran, how often, and for how
// long, against the work's own time.
func printHooks(kernel, w, mode string, hr *hookRun) {
	hs := slices.Clone(hr.hooks)
	slices.SortFunc(hs, func(a, b testenv.Hook) int { return int(b.NS - a.NS) })
	var total int64
	for _, h := range hs {
		total += h.NS
		fmt.Printf("BENCH kernel=%s workload=%s mode=%s hook=%s runs=%d ns=%d\n", kernel, w, mode, h.Name, h.Runs, h.NS)
	}
	line := fmt.Sprintf("hooks: %-11s %-10s %v in the programs over %v of work (%.0f%%):",
		w, mode, round(time.Duration(total)), round(hr.work), 100*float64(total)/float64(hr.work))
	for i, h := range hs {
		if i == 4 {
			line += fmt.Sprintf(" +%d more", len(hs)-i)
			break
		}
		line += fmt.Sprintf(" %s %d x %v;", h.Name, h.Runs, time.Duration(h.NS/int64(max(h.Runs, 1))))
	}
	fmt.Println(strings.TrimSuffix(line, ";"))
}

// fileOpenLimit is issue 22's target for the file_open program: half its
// 5.6 µs a run on forky under emulation before the work on speed.
const fileOpenLimit = 2800

// perOpen prints issue 22's targets for open-read: all of agent-lock's
// programs' time an open (the kernel's statistics, the run with them on)
// no more than what Landlock adds an open (its median time over
// unjailed's, this run), and file_open's time a run.
func perOpen(kernel string, opens int, times map[string][]time.Duration, hr *hookRun) {
	if hr == nil || opens == 0 || len(times["landlock"]) == 0 || len(times["unjailed"]) == 0 {
		return
	}
	var total, fo int64
	var foRuns uint64
	for _, h := range hr.hooks {
		total += h.NS
		if h.Name == "file_open" {
			fo, foRuns = h.NS, h.Runs
		}
	}
	own := float64(total) / float64(opens)
	landlock := float64(median(times["landlock"])-median(times["unjailed"])) / float64(opens)
	perRun := float64(fo) / float64(max(foRuns, 1))
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Printf("targets: open-read: agent-lock's programs take %.0f ns an open, Landlock adds %.0f ns an open (%s); file_open %.0f ns a run (%s: at most %d)\n",
		own, landlock, met(own <= landlock), perRun, met(perRun <= fileOpenLimit), fileOpenLimit)
	fmt.Printf("BENCH kernel=%s workload=open-read target=per-open agent_lock_ns=%.0f landlock_ns=%.0f met=%t\n", kernel, own, landlock, own <= landlock)
	fmt.Printf("BENCH kernel=%s workload=open-read target=file_open ns_per_run=%.0f limit_ns=%d met=%t\n", kernel, perRun, fileOpenLimit, perRun <= fileOpenLimit)
}

// server is one mode's worker, running workloads on request.
type server struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  *bufio.Scanner
	out    bytes.Buffer // its standard output, read here
	errs   bytes.Buffer // its and agent-lock's standard error
	report string       // jailed modes
	beside *server      // beside-session: the idle session it runs beside
	ctx    context.Context
	cancel context.CancelFunc
	err    error // the first run that failed
}

// serve starts the worker of one mode: as the test user, directly, under a
// Landlock sandbox it makes itself, or under agent-lock.
func (b *bench) serve(ctx context.Context, mode string) (*server, error) {
	s := &server{}
	p := testenv.Proc{
		Argv:   []string{b.worker, "-worker", "serve", b.dir},
		Dir:    b.dir,
		Env:    b.r.UserEnv(filepath.Join(b.r.User.Home, "tmp")),
		AsUser: true,
	}
	switch mode {
	case "landlock":
		p.Argv = append(p.Argv, "landlock")
	case "beside-session":
		// An idle session, for as long as this worker lives.
		idle, err := b.serve(ctx, "agent-lock")
		if err != nil {
			return nil, err
		}
		if _, err := idle.run("noop", 0); err != nil {
			idle.end(b.r, "agent-lock")
			return nil, fmt.Errorf("the session to run beside: %w", err)
		}
		s.beside = idle
	case "agent-lock", "file_open":
		s.report = b.r.NextReport()
		p.Argv = b.jailed(mode).JailArgv(b.dir, s.report, testenv.StartWrapper(p.Argv))
		p.Env = b.r.RootEnv()
		p.AsUser = false // agent-lock drops to the user
	}
	s.ctx, s.cancel = context.WithTimeout(ctx, b.r.JailTimeout())
	s.cmd = b.r.Command(s.ctx, p)
	s.cmd.Stderr = &s.errs
	var err error
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		s.cancel()
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		s.cancel()
		return nil, err
	}
	s.lines = bufio.NewScanner(stdout)
	if err := s.cmd.Start(); err != nil {
		s.cancel()
		return nil, fmt.Errorf("start %s worker: %w", mode, err)
	}
	return s, nil
}

// run asks for one run of workload w and returns the time it took.
func (s *server) run(w string, opens int) (time.Duration, error) {
	if s.err != nil {
		return 0, s.err
	}
	if _, err := fmt.Fprintf(s.in, "%s %d\n", w, opens); err != nil {
		s.err = fmt.Errorf("the worker is gone: %w", err)
		return 0, s.err
	}
	for s.lines.Scan() {
		line := s.lines.Text()
		s.out.WriteString(line + "\n")
		if m := elapsedRE.FindStringSubmatch(line); m != nil {
			ns, _ := strconv.ParseInt(m[1], 10, 64)
			return time.Duration(ns), nil
		}
		if strings.HasPrefix(line, "error=") {
			s.err = fmt.Errorf("%s", strings.TrimPrefix(line, "error="))
			return 0, s.err
		}
	}
	s.err = fmt.Errorf("the worker ended without an answer")
	return 0, s.err
}

// end ends the worker and says what went wrong in its session, if
// anything: a run that failed, agent-lock's own trouble, or a refusal (the
// workloads stay inside the project: a refusal would be a bug, and the
// time of a refused run measures nothing).
func (s *server) end(r *testenv.Runner, mode string) error {
	res := s.close(r)
	if s.beside != nil {
		if err := s.beside.end(r, "agent-lock"); err != nil {
			return fmt.Errorf("the session beside: %w", err)
		}
	}
	if s.err != nil {
		return fmt.Errorf("%v: %s", s.err, testenv.Tail(res.Output, 5))
	}
	if s.report != "" {
		if p := testenv.JailProblem(res); p != "" {
			return fmt.Errorf("%s", p)
		}
		if len(res.Report.Escapes) > 0 {
			return fmt.Errorf("a workload was refused something: %s", res.Report.Escapes[0].String())
		}
	}
	if res.Exit != 0 || res.TimedOut {
		return fmt.Errorf("%s worker: exit %d (timed out: %v): %s", mode, res.Exit, res.TimedOut, testenv.Tail(res.Output, 5))
	}
	return nil
}

// close ends the worker (its input ends) and returns how it ended, with
// agent-lock's report for the jailed modes.
func (s *server) close(r *testenv.Runner) testenv.Result {
	defer s.cancel()
	s.in.Close()
	for s.lines.Scan() {
		s.out.WriteString(s.lines.Text() + "\n")
	}
	s.cmd.Wait()
	res := testenv.Result{Output: append(s.out.Bytes(), s.errs.Bytes()...), Exit: -1}
	if ps := s.cmd.ProcessState; ps != nil {
		res.Exit = testenv.ExitStatus(ps)
	}
	res.TimedOut = errors.Is(s.ctx.Err(), context.DeadlineExceeded)
	if s.report != "" {
		r.ReadReport(&res, s.report)
	}
	return res
}

var (
	attemptsRE = regexp.MustCompile(`attempts=(\d+)`)
	endRE      = regexp.MustCompile(`end_ns=(\d+)`)
)

// storm: one jailed process opening an outside file as fast as it can.
// Every attempt must be in the report, or counted there as a repeat the
// kernel coalesced (report.Summary.Repeats), or as lost.
func (b *bench) storm(ctx context.Context, kernel string) error {
	argv := []string{b.worker, "-worker", "storm", filepath.Join(b.r.User.Home, ".ssh/id_rsa"), strconv.FormatInt(int64(b.c.storm), 10)}
	res := b.r.Jailed(ctx, testenv.StartWrapper(argv), b.dir)
	if p := testenv.JailProblem(res); p != "" {
		return fmt.Errorf("%s", p)
	}
	m := attemptsRE.FindSubmatch(res.Output)
	if m == nil || res.Report == nil || res.Report.Summary == nil {
		return fmt.Errorf("no attempts count or no summary: %s", testenv.Tail(res.Output, 5))
	}
	attempts, _ := strconv.Atoi(string(m[1]))
	target := argv[3]
	reported, lost := 0, int(res.Report.Summary.Lost)
	// The summary's repeats less those of the other escapes' reports
	// (the wrapper's): the storm's, those its reports carry and those
	// after its last report.
	repeats := int(res.Report.Summary.Repeats)
	for _, e := range res.Report.Escapes {
		if e.Path == target {
			reported++
		} else {
			repeats -= int(e.Repeats)
		}
	}
	unaccounted := attempts - reported - repeats - lost
	rate := float64(attempts) / b.c.storm.Seconds()
	fmt.Printf("storm: %d denied opens in %v (%.0f/s): %d reported, %d coalesced as repeats, %d counted lost, %d unaccounted\n",
		attempts, b.c.storm, rate, reported, repeats, lost, unaccounted)
	fmt.Printf("BENCH kernel=%s workload=storm attempts=%d per_s=%.0f reported=%d repeats=%d lost=%d unaccounted=%d\n",
		kernel, attempts, rate, reported, repeats, lost, unaccounted)
	// Memory: agent-lock's peak after the storm's events, against its peak
	// in the start-up runs (a session with no events), same run.
	if b.idleRSS > 0 {
		fmt.Printf("memory: agent-lock's peak resident memory %.1f MiB after %d events, %.1f MiB with none (%.2fx)\n",
			mib(res.MaxRSS), reported, mib(b.idleRSS), float64(res.MaxRSS)/float64(b.idleRSS))
		fmt.Printf("BENCH kernel=%s workload=memory events=%d peak_rss=%d idle_rss=%d ratio=%.2f\n",
			kernel, reported, res.MaxRSS, b.idleRSS, float64(res.MaxRSS)/float64(b.idleRSS))
	}
	// How far behind the report fell: the summary is written once every
	// event has been (the dashboard reads the same stream, in the same
	// loop), so its time after the storm's end, less that of a session
	// with no events, is the backlog the storm left.
	if tail, err := summaryAfter(res, endRE); err == nil {
		fmt.Printf("storm: the report was complete %v after the storm ended, %v with no events (%v behind)\n",
			round(tail), round(b.idleTail), round(max(tail-b.idleTail, 0)))
		fmt.Printf("BENCH kernel=%s workload=storm-lag tail_ns=%d idle_tail_ns=%d behind_ns=%d\n",
			kernel, tail, b.idleTail, max(tail-b.idleTail, 0))
	} else {
		return err
	}
	if unaccounted != 0 {
		return fmt.Errorf("%d denied opens were neither reported nor counted as repeats or lost", unaccounted)
	}
	return nil
}

// summaryAfter is how long after the time the worker printed (re) the
// session's summary was written.
func summaryAfter(res testenv.Result, re *regexp.Regexp) (time.Duration, error) {
	m := re.FindSubmatch(res.Output)
	if m == nil || res.Report == nil || res.Report.Summary == nil {
		return 0, fmt.Errorf("no worker time or no summary: %s", testenv.Tail(res.Output, 5))
	}
	ns, _ := strconv.ParseInt(string(m[1]), 10, 64)
	at, err := time.Parse(time.RFC3339Nano, res.Report.Summary.Time)
	if err != nil {
		return 0, fmt.Errorf("summary time: %v", err)
	}
	return at.Sub(time.Unix(0, ns)), nil
}

// startup: from invoking agent-lock to the agent's first instruction,
// against starting the same command directly.
func (b *bench) startup(ctx context.Context, kernel string) error {
	var direct, jailed, tails, loads []time.Duration
	var names []string
	steps := map[string][]time.Duration{}
	for range b.c.repeat {
		t0 := time.Now()
		res := b.r.Unjailed(ctx, []string{b.worker, "-worker", "now"}, b.dir, filepath.Join(b.r.User.Home, "tmp"))
		d, err := startedAfter(res, t0)
		if err != nil {
			return err
		}
		direct = append(direct, d)
		t0 = time.Now()
		res = b.r.Jailed(ctx, []string{b.worker, "-worker", "now"}, b.dir)
		if d, err = startedAfter(res, t0); err != nil {
			return err
		}
		jailed = append(jailed, d)
		b.idleRSS = max(b.idleRSS, res.MaxRSS)
		tail, err := summaryAfter(res, nowRE)
		if err != nil {
			return err
		}
		tails = append(tails, tail)
		if res.Report.Start == nil || res.Report.Start.LoadNS <= 0 {
			return fmt.Errorf("the report's start has no load time (load_ns)")
		}
		loads = append(loads, time.Duration(res.Report.Start.LoadNS))
		if len(res.Report.Start.Steps) == 0 {
			return fmt.Errorf("the report's start has no steps (start_steps)")
		}
		for _, s := range res.Report.Start.Steps {
			if _, ok := steps[s.Name]; !ok {
				names = append(names, s.Name)
			}
			steps[s.Name] = append(steps[s.Name], time.Duration(s.NS))
		}
	}
	b.idleTail = median(tails)
	fmt.Printf("startup: direct %v, under agent-lock %v, of which the kernel loading and verifying its programs %v (medians of %d)\n",
		round(median(direct)), round(median(jailed)), round(median(loads)), len(jailed))
	var words, fields []string
	for _, n := range names {
		words = append(words, fmt.Sprintf("%s %v", n, round(median(steps[n]))))
		fields = append(fields, fmt.Sprintf("step_%s_ns=%d", n, median(steps[n])))
	}
	fmt.Printf("startup steps (medians): %s\n", strings.Join(words, ", "))
	fmt.Printf("BENCH kernel=%s workload=startup direct_ns=%d agent_lock_ns=%d load_ns=%d ratio=%.1f %s\n",
		kernel, median(direct), median(jailed), median(loads), float64(median(jailed))/float64(median(direct)), strings.Join(fields, " "))
	return nil
}

// startupAlone: the start of a session without root and without the
// daemon (the user's own agent-lock, Landlock alone: docs/engines.md),
// against starting the same command directly, in turns.
func (b *bench) startupAlone(ctx context.Context, kernel string) error {
	r := *b.r
	r.Engine = "landlock"
	r.Daemon = filepath.Join(os.TempDir(), "no-agent-lock-daemon", "agent-lock.sock")
	return b.startupAs(ctx, kernel, "startup-alone", "no root, no daemon: Landlock alone", r, nil, func(res testenv.Result) error {
		if res.Report.Start == nil || !strings.HasSuffix(res.Report.Start.Engine, ", alone") {
			return fmt.Errorf("the session was not Landlock alone: %s", testenv.Tail(res.Output, 5))
		}
		return nil
	})
}

// startupDaemon: the start of a session the test user asks the daemon
// for (no sudo: issue 18's path), from invoking agent-lock to the
// command's first instruction, against starting it directly, in turns,
// a file saved in the project between two sessions.
// The daemon is started once, before the first round, and each round
// waits for the daemon's programs loaded ahead of the next session (its
// log says when): the start of a session that does not follow another
// by seconds. A session that found none would load its own (the start
// of the "startup" line).
func (b *bench) startupDaemon(ctx context.Context, kernel string) error {
	sock := filepath.Join(os.TempDir(), fmt.Sprintf("agent-lock-bench-daemon-%d", os.Getpid()), "agent-lock.sock")
	d, log, err := testenv.Daemon(b.r.AgentLock, sock)
	if err != nil {
		return err
	}
	defer func() { d.Process.Kill(); d.Wait(); os.RemoveAll(filepath.Dir(sock)) }()
	r := *b.r
	r.Daemon = sock
	sessions := 0
	// Between two sessions the user works: a file saved in one folder,
	// as an editor saves (its folder changes: the daemon's walk reads it
	// again, and cannot give the last walk whole).
	saved := 0
	ready := func() error {
		old := filepath.Join(b.dir, "d01", fmt.Sprintf("saved-%d.txt", saved))
		saved++
		if err := b.r.User.WriteFile(filepath.Join(b.dir, "d01", fmt.Sprintf("saved-%d.txt", saved)), "saved\n", 0o644); err != nil {
			return err
		}
		os.Remove(old)
		for range 600 {
			// Ready since the last session took the one before.
			l := log()
			last := strings.LastIndex(l, "agent-lock daemon: session ")
			if strings.LastIndex(l, "programs are ready: ") > last && strings.LastIndex(l, "network programs are ready") > last &&
				strings.LastIndex(l, "a session is ready ahead") > last {
				return nil
			}
			time.Sleep(200 * time.Millisecond)
		}
		return fmt.Errorf("the daemon loaded no programs ahead (the engine's and the network's), or started no session ahead, in two minutes: %s", log())
	}
	return b.startupAs(ctx, kernel, "startup-daemon", "as the user, through the daemon, its programs loaded ahead", r, ready, func(res testenv.Result) error {
		sessions++
		if n := strings.Count(log(), "agent-lock daemon: session "); n != sessions {
			return fmt.Errorf("the daemon started %d sessions, not %d: %s", n, sessions, testenv.Tail(res.Output, 5))
		}
		// The session started ahead took it.
		if n := strings.Count(log(), ", started ahead): "); n != sessions {
			return fmt.Errorf("the session was not the one started ahead (%d of %d were): %s", n, sessions, log())
		}
		// The programs the daemon loaded ahead, not the session's own.
		for _, ahead := range []string{"load_ahead", "network_load_ahead"} {
			if res.Report.Start == nil || !slices.ContainsFunc(res.Report.Start.Steps, func(s testenv.Step) bool { return s.Name == ahead }) {
				return fmt.Errorf("the session loaded its own programs (no step %s): %s", ahead, testenv.Tail(res.Output, 5))
			}
		}
		return nil
	})
}

// startupAs: a session's start run by r, against starting the same
// command directly, in turns; ready, when set, is waited for before each
// session, and check says the session was r's kind.
func (b *bench) startupAs(ctx context.Context, kernel, workload, how string, r testenv.Runner, ready func() error, check func(testenv.Result) error) error {
	var direct, jailed []time.Duration
	var names []string
	steps := map[string][]time.Duration{}
	for range b.c.repeat {
		t0 := time.Now()
		res := r.Unjailed(ctx, []string{b.worker, "-worker", "now"}, b.dir, filepath.Join(r.User.Home, "tmp"))
		d, err := startedAfter(res, t0)
		if err != nil {
			return err
		}
		direct = append(direct, d)
		if ready != nil {
			if err := ready(); err != nil {
				return err
			}
		}
		t0 = time.Now()
		res = r.Jailed(ctx, []string{b.worker, "-worker", "now"}, b.dir)
		if d, err = startedAfter(res, t0); err != nil {
			return err
		}
		if err := check(res); err != nil {
			return err
		}
		jailed = append(jailed, d)
		if res.Report.Start == nil {
			return fmt.Errorf("the report has no start: %s", testenv.Tail(res.Output, 5))
		}
		for _, s := range res.Report.Start.Steps {
			if _, ok := steps[s.Name]; !ok {
				names = append(names, s.Name)
			}
			steps[s.Name] = append(steps[s.Name], time.Duration(s.NS))
		}
	}
	var words, fields []string
	for _, n := range names {
		words = append(words, fmt.Sprintf("%s %v", n, round(median(steps[n]))))
		fields = append(fields, fmt.Sprintf("step_%s_ns=%d", n, median(steps[n])))
	}
	label := strings.Replace(workload, "-", " ", 1)
	fmt.Printf("%s (%s): direct %v, under agent-lock %v, %v more (medians of %d)\n",
		label, how, round(median(direct)), round(median(jailed)), round(median(jailed)-median(direct)), len(jailed))
	fmt.Printf("%s steps (medians): %s\n", label, strings.Join(words, ", "))
	fmt.Printf("BENCH kernel=%s workload=%s direct_ns=%d agent_lock_ns=%d over_ns=%d ratio=%.1f %s\n",
		kernel, workload, median(direct), median(jailed), median(jailed)-median(direct), float64(median(jailed))/float64(median(direct)), strings.Join(fields, " "))
	return nil
}

var nowRE = regexp.MustCompile(`now_ns=(\d+)`)

func startedAfter(res testenv.Result, t0 time.Time) (time.Duration, error) {
	m := nowRE.FindSubmatch(res.Output)
	if res.Exit != 0 || m == nil {
		return 0, fmt.Errorf("exit %d: %s", res.Exit, testenv.Tail(res.Output, 5))
	}
	ns, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return time.Unix(0, ns).Sub(t0), nil
}

// target says whether agent-lock met issue 6's target on a workload: at
// most 1.10x unjailed and no slower than Landlock, medians of this run.
func target(ratio float64, landlock []time.Duration, own time.Duration) string {
	var missed []string
	if ratio > 1.10 {
		missed = append(missed, "over 1.10x")
	}
	if len(landlock) > 0 && own > median(landlock) {
		missed = append(missed, "slower than landlock")
	}
	if len(missed) == 0 {
		return "met"
	}
	return "MISSED: " + strings.Join(missed, ", ")
}

// sideBySide is the ratio of the medians of ts and of other, named.
func sideBySide(ts, other []time.Duration, name string) string {
	if len(other) == 0 || median(other) == 0 {
		return ""
	}
	return fmt.Sprintf("%.2fx %s", float64(median(ts))/float64(median(other)), name)
}

// roundRatios are the lowest and highest of the ratios of ts to base
// taken round by round (the runs of one round are minutes apart at most):
// how far the ratio itself moves from run to run.
func roundRatios(ts, base []time.Duration) (lo, hi float64) {
	for i := range min(len(ts), len(base)) {
		r := float64(ts[i]) / float64(base[i])
		if i == 0 || r < lo {
			lo = r
		}
		if i == 0 || r > hi {
			hi = r
		}
	}
	return lo, hi
}

func median(ts []time.Duration) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	s := slices.Clone(ts)
	slices.Sort(s)
	return s[len(s)/2]
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(10 * time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d
}

func uname() string {
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
