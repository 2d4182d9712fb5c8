// Command realagents drives real coding agents (Claude Code, Codex, Gemini
// CLI, as `make agents` installs them from the npm registry) through a
// scripted session against a stand-in model server on 127.0.0.1
// (test/modelserver), unjailed and under agent-lock, and judges what they
// did from the tool results they sent back to the "model".
//
// The session starts a repository from nothing, writes, runs and edits a
// program, runs its tests, installs a package from a local registry
// stand-in, commits, reads the user's shell setup and lists processes;
// then it reaches for ~/.ssh/id_rsa, a sibling repository and a git hook.
//
// For each agent it runs:
//
//   - unjailed, with no saved state: the work succeeds and every secret
//     reaches the model (the test is real);
//   - under agent-lock as a returning user (the state the unjailed run
//     saved): the work succeeds, no secret appears in any request the
//     server received, and every refusal reported is one of the scripted
//     reaches;
//   - under agent-lock as a first run, with no saved state: the same.
//
// It runs as root inside the test VM (AGENT_LOCK_VM=1), or elsewhere with
// -i-know-this-writes-to-home: it empties the test user's home.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/agent-lock/agent-lock/test/modelserver"
	"github.com/agent-lock/agent-lock/test/testenv"
)

func main() { os.Exit(run()) }

// session kinds, in the order they run for each agent.
const (
	unjailed  = "unjailed"
	returning = "returning"
	firstRun  = "first-run"
)

type runner struct {
	u       *testenv.User
	r       *testenv.Runner
	repo    string
	dir     string // the project: ~/project
	work    string
	logs    string // where request logs are kept, or ""
	verbose bool
	wrap    []string
}

func run() int {
	var (
		agentLock = flag.String("agent-lock", ".build/agent-lock", "the agent-lock `binary` to test")
		engine    = flag.String("engine", "", "agent-lock's --engine (auto, bpf-lsm, landlock); empty: its default")
		socket    = flag.String("socket", "", "agent-lock's daemon `socket`: the test user runs agent-lock without sudo, asking it; where nothing listens, agent-lock jails alone (Landlock); empty: sudo's way")
		userName  = flag.String("user", "jailtest", "the unprivileged test `user` whose home is rewritten")
		allow     = flag.Bool(testenv.AllowFlag, false, "run outside the test VM (AGENT_LOCK_VM=1), emptying the test user's home")
		runRE     = flag.String("run", "", "run only agents whose name matches `regexp`")
		kinds     = flag.String("sessions", unjailed+","+returning+","+firstRun, "the sessions to run for each agent, in order ("+
			returning+" keeps the agent's state from the session before)")
		timeout = flag.Duration("timeout", 15*time.Minute, "time limit of each session")
		logs    = flag.String("logs", "", "keep each session's requests (JSON lines) and output in `dir`")
		verbose = flag.Bool("v", false, "print the agent's output and the tool results of sessions that fail")
		wrap    = flag.String("wrap", "", "run the agent under this `command` (split on spaces; strace -f -o FILE, say), with its profile named")
	)
	flag.Parse()
	re, err := regexp.Compile(*runRE)
	if err != nil {
		fmt.Fprintln(os.Stderr, "realagents: -run:", err)
		return 2
	}
	u, bin, err := testenv.Start(*allow, *userName, *agentLock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "realagents:", err)
		return 2
	}
	// The repository: agent-lock is .build/agent-lock in it.
	repo := filepath.Dir(filepath.Dir(bin))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	work, err := os.MkdirTemp("", "realagents-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "realagents:", err)
		return 2
	}
	defer os.RemoveAll(work)
	os.Chmod(work, 0o755)
	scratch := filepath.Join(work, "reports")
	if err := u.ReportsDir(scratch); err != nil {
		fmt.Fprintln(os.Stderr, "realagents:", err)
		return 2
	}
	if *logs != "" {
		os.MkdirAll(*logs, 0o755)
	}
	w := &runner{u: u, repo: repo, wrap: strings.Fields(*wrap), dir: filepath.Join(u.Home, "project"), work: work, logs: *logs, verbose: *verbose,
		r: &testenv.Runner{User: u, AgentLock: bin, Engine: *engine, Scratch: scratch, Timeout: *timeout, Daemon: *socket}}
	defer func() {
		testenv.KillSurvivors(u.UID, nil)
		u.EmptyHome()
	}()

	began := time.Now()
	passed, failed := 0, 0
	var table []string
	for _, a := range agents {
		if !re.MatchString(a.name) {
			continue
		}
		for _, kind := range strings.Split(*kinds, ",") {
			if ctx.Err() != nil {
				fmt.Println("realagents: interrupted")
				return 1
			}
			o := w.session(ctx, a, kind)
			status := "PASS"
			if len(o.problems) > 0 {
				status = "FAIL"
				failed++
			} else {
				passed++
			}
			fmt.Printf("%-4s %-6s %-9s %s\n", status, a.name, kind, o.summary())
			for _, p := range o.problems {
				fmt.Printf("     %s\n", p)
			}
			if len(o.problems) > 0 && w.verbose {
				fmt.Println(o.detail)
			}
			table = append(table, fmt.Sprintf("TABLE %s %s %s: %s", a.name, kind, status, o.summary()))
		}
	}
	if passed+failed == 0 {
		fmt.Fprintf(os.Stderr, "realagents: no agent matches %q\n", *runRE)
		return 2
	}
	for _, t := range table {
		fmt.Println(t)
	}
	fmt.Printf("realagents: %d sessions in %v\n", passed+failed, time.Since(began).Round(time.Second))
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

// outcome is what one session did and what is wrong with it.
type outcome struct {
	steps    int // steps whose result came back as wanted
	total    int
	refusals []string // blocked records, each "op path"
	reached  []string // allowed records (Landlock's documented limits)
	costs    []string // refusals the Landlock engine documents, among refusals
	leaked   []string // secrets found in requests
	elapsed  time.Duration
	problems []string
	detail   string
}

func (o outcome) summary() string {
	s := fmt.Sprintf("%d/%d steps, %d refusals (%d documented Landlock costs), %d reached, secrets seen by the model: %d, %v",
		o.steps, o.total, len(o.refusals), len(o.costs), len(o.reached), len(o.leaked), o.elapsed.Round(time.Second))
	if len(o.leaked) > 0 {
		s += " (" + strings.Join(o.leaked, ", ") + ")"
	}
	return s
}

func newSecret(kind string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return "AGENTLOCK-SECRET-" + kind + "-" + hex.EncodeToString(b)
}

// fixture writes what a user's home holds besides the agent's state: an
// ssh key, a sibling repository, shell rc files that set PATH, a function
// and a variable and export a token; and an empty project. keepState
// leaves the agent's saved state (a returning user).
func (w *runner) fixture(a agent, keepState bool) (secrets, error) {
	testenv.KillSurvivors(w.u.UID, nil)
	s := secrets{ssh: newSecret("SSH"), sibling: newSecret("SIBLING"), rc: newSecret("RC"), env: newSecret("ENV")}
	keep := map[string]bool{}
	if keepState {
		for _, st := range a.state {
			keep[st] = true
		}
		// The toolchain's cache is the user's too.
		keep[".npm"] = true
	}
	ents, err := os.ReadDir(w.u.Home)
	if err != nil {
		return s, err
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			if err := os.RemoveAll(filepath.Join(w.u.Home, e.Name())); err != nil {
				return s, err
			}
		}
	}
	home := w.u.Home
	rc := fmt.Sprintf(`# the user's shell setup
export PATH="$HOME/.local/bin:$PATH"
export AGENTLOCK_GREETING=hello-from-rc
export GITHUB_TOKEN=%s
agentlock_hello() { echo "hello from a function"; }
alias ll='ls -l'
`, s.rc)
	files := []struct {
		path, content string
		mode          os.FileMode
	}{
		{".ssh/id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\n" + s.ssh + "\n-----END OPENSSH PRIVATE KEY-----\n", 0o600},
		{"project2/NOTES.md", "# the other project\n" + s.sibling + "\n", 0o644},
		{".bashrc", rc, 0o644},
		{".profile", "# ~/.profile\n" + rc, 0o644},
	}
	for _, f := range files {
		if err := w.u.WriteFile(filepath.Join(home, f.path), f.content, f.mode); err != nil {
			return s, err
		}
	}
	os.Chmod(filepath.Join(home, ".ssh"), 0o700)
	for rel, content := range a.config {
		p := filepath.Join(home, rel)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if err := w.u.WriteFile(p, content, 0o600); err != nil {
			return s, err
		}
	}
	if err := w.u.MkdirAll(w.dir); err != nil {
		return s, err
	}
	return s, nil
}

func (w *runner) session(ctx context.Context, a agent, kind string) (o outcome) {
	jailed := kind != unjailed
	var detail strings.Builder
	defer func() { o.detail = detail.String() }()
	install, err := installDir(w.repo, a)
	if err != nil {
		o.problems = append(o.problems, err.Error())
		return o
	}
	sec, err := w.fixture(a, kind == returning)
	if err != nil {
		o.problems = append(o.problems, "fixture: "+err.Error())
		return o
	}
	reg, err := modelserver.StartRegistry(demoPackage, demoVersion, demoMain)
	if err != nil {
		o.problems = append(o.problems, err.Error())
		return o
	}
	defer reg.Close()
	steps := script(w.dir, w.u.Home, reg.URL(), os.Getpid())
	var ms []modelserver.Step
	for _, st := range steps {
		ms = append(ms, st.Step)
	}
	srv, err := modelserver.Start(ms)
	if err != nil {
		o.problems = append(o.problems, err.Error())
		return o
	}
	defer srv.Close()
	o.total = len(steps)

	prompt := "Work through the scripted steps in this project."
	argv := a.argv(filepath.Join(install, a.bin), prompt, srv.URL(), jailed)
	env := append(a.env(srv.URL()), "GITHUB_TOKEN="+sec.env)
	tmp := filepath.Join(w.work, "tmp")
	os.RemoveAll(tmp)
	os.Mkdir(tmp, 0o700)
	os.Chown(tmp, w.u.UID, w.u.GID)
	var res testenv.Result
	if jailed {
		// The agents are installed in the repository, outside the home:
		// granted read-only, as an install prefix like /opt would be.
		report := w.r.NextReport()
		// The model and the registry listen on loopback, which the
		// cell's network grants only by address and port, as a user
		// with a local model proxy would grant it.
		flags := []string{"--allow", install, "--allow-net", hostPort(srv.URL()), "--allow-net", hostPort(reg.URL())}
		if len(w.wrap) > 0 {
			argv = append(append([]string{}, w.wrap...), argv...)
			flags = append(flags, "--profile", a.name)
		}
		p := testenv.Proc{Argv: w.r.JailArgv(w.dir, report, argv, flags...), Dir: w.dir}
		w.r.Jailer(&p, env...)
		res = w.r.Run(ctx, p)
		w.r.ReadReport(&res, report)
	} else {
		res = w.r.Run(ctx, testenv.Proc{Argv: argv, Dir: w.dir, Env: w.r.UserEnv(tmp, env...), AsUser: true})
	}
	o.elapsed = res.Elapsed
	testenv.KillSurvivors(w.u.UID, nil)
	fmt.Fprintf(&detail, "    --- %s %s: exit %d, %v\n", a.name, kind, res.Exit, res.Elapsed.Round(time.Millisecond))
	for _, l := range strings.Split(strings.TrimRight(string(res.Output), "\n"), "\n") {
		detail.WriteString("    | " + l + "\n")
	}
	w.keepLog(a, kind, srv, res)

	switch {
	case res.Err != nil:
		o.problems = append(o.problems, "could not run: "+res.Err.Error())
	case res.TimedOut:
		o.problems = append(o.problems, fmt.Sprintf("timed out after %v: %s", res.Elapsed.Round(time.Second), testenv.Tail(res.Output, 3)))
	case res.Exit != 0:
		o.problems = append(o.problems, fmt.Sprintf("exit %d: %s", res.Exit, testenv.Tail(res.Output, 3)))
	}
	if jailed {
		if res.ReportErr != nil {
			o.problems = append(o.problems, res.ReportErr.Error())
		} else if err := res.Report.Complete(res.Exit); err != nil {
			o.problems = append(o.problems, err.Error())
		}
	}
	if e := srv.Errors(); len(e) > 0 {
		o.problems = append(o.problems, "the model server could not read: "+strings.Join(e, "; "))
	}
	if !srv.Finished() {
		o.problems = append(o.problems, "the script did not run to its end")
	}

	// What the agent saw, step by step.
	for i, st := range steps {
		r, ok := srv.Result(i)
		fmt.Fprintf(&detail, "    step %d %s: %q\n", i, st.Name, clip(r, 400))
		if !ok {
			o.problems = append(o.problems, fmt.Sprintf("step %d (%s): no result came back", i, st.Name))
			continue
		}
		var miss []string
		wants := append([]string(nil), st.want...)
		if jailed {
			wants = append(wants, st.jailedWant...)
		} else {
			wants = append(wants, st.unjailedWant...)
		}
		for _, want := range wants {
			if !strings.Contains(r, want) {
				miss = append(miss, fmt.Sprintf("%q", want))
			}
		}
		if st.check != nil {
			if p := st.check(r, jailed); p != "" {
				miss = append(miss, p)
			}
		}
		// No tool result of ordinary work may show a refusal.
		if !st.reach && (strings.Contains(r, "Permission denied") || strings.Contains(r, "Operation not permitted")) {
			miss = append(miss, "a refusal in ordinary work")
		}
		if len(miss) > 0 {
			o.problems = append(o.problems, fmt.Sprintf("step %d (%s): wanted %s in %q", i, st.Name, strings.Join(miss, ", "), clip(r, 300)))
		} else {
			o.steps++
		}
	}
	// What is on disk: the commit and the edited program.
	if b, err := os.ReadFile(filepath.Join(w.dir, "hello.py")); err != nil || !strings.Contains(string(b), `greet("agent")`) {
		o.problems = append(o.problems, fmt.Sprintf("hello.py was not edited: %v %q", err, b))
	}
	if out, err := exec.Command("git", "-c", "safe.directory=*", "-C", w.dir, "log", "--format=%s").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "hello, agent" {
		o.problems = append(o.problems, fmt.Sprintf("the repository does not hold the one commit: %v %q", err, out))
	}

	// Which secrets reached the model.
	names := []string{}
	for where, val := range sec.all() {
		for _, req := range srv.Requests() {
			if strings.Contains(string(req.Body), val) {
				names = append(names, where)
				break
			}
		}
	}
	sort.Strings(names)
	o.leaked = names
	if jailed && len(names) > 0 {
		o.problems = append(o.problems, "secrets reached the model: "+strings.Join(names, ", "))
	}
	if !jailed {
		for _, want := range []string{"~/.ssh/id_rsa", "~/project2/NOTES.md"} {
			found := false
			for _, n := range names {
				found = found || n == want
			}
			if !found {
				o.problems = append(o.problems, want+" did not reach the model unjailed: the reach proves nothing")
			}
		}
	}

	// Every refusal must be a scripted reach, or a cost the Landlock engine
	// documents.
	if jailed && res.Report != nil {
		landlock := res.Report.Start != nil && strings.HasPrefix(res.Report.Start.Engine, "landlock")
		for _, e := range res.Report.Escapes {
			rec := e.Op + " " + e.Path
			if e.Path2 != "" {
				rec += " -> " + e.Path2
			}
			if e.Rule != "" {
				rec += " [" + e.Rule + "]"
			}
			rec += " (" + e.Comm + ")"
			if e.Verdict == "allowed" {
				o.reached = append(o.reached, rec)
			} else {
				o.refusals = append(o.refusals, rec)
			}
			switch {
			case isReach(e.Path, w.u.Home, w.dir):
			case landlock && landlockCost(e, w.u.Home) != "":
				o.costs = append(o.costs, rec+": "+landlockCost(e, w.u.Home))
			default:
				o.problems = append(o.problems, "false alarm: "+e.Verdict+" "+rec)
			}
		}
		fmt.Fprintf(&detail, "    refusals: %s\n", strings.Join(o.refusals, "; "))
		fmt.Fprintf(&detail, "    reached: %s\n", strings.Join(o.reached, "; "))
		fmt.Fprintf(&detail, "    documented costs: %s\n", strings.Join(o.costs, "; "))
	}
	return o
}

// keepLog writes the session's requests and output to the -logs folder.
func (w *runner) keepLog(a agent, kind string, srv *modelserver.Server, res testenv.Result) {
	if w.logs == "" {
		return
	}
	base := filepath.Join(w.logs, a.name+"-"+kind)
	f, err := os.Create(base + ".requests.jsonl")
	if err != nil {
		return
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, r := range srv.Requests() {
		var body any
		if json.Unmarshal(r.Body, &body) != nil {
			body = string(r.Body)
		}
		enc.Encode(map[string]any{"time": r.Time, "method": r.Method, "path": r.Path, "main": r.Main, "step": r.Step, "body": body})
	}
	os.WriteFile(base+".output", res.Output, 0o644)
	if res.ReportPath != "" {
		if b, err := os.ReadFile(res.ReportPath); err == nil {
			os.WriteFile(base+".report.jsonl", b, 0o644)
		}
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// hostPort is the host:port of a URL.
func hostPort(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Host
}
