// Command nettest holds agent-lock's network confinement to what it
// promises, in a small internet of its own (lab.go): two network
// namespaces joined by a veth pair, with a DNS server, web sites (two on
// one address), a git server over HTTPS and SSH, a UDP echo, a fake cloud
// metadata service and a private host, all on addresses that exist only
// there. Nothing it runs reaches any other network.
//
// Every case runs twice, as the adversary suite's techniques do: unjailed
// (as the test user, in the lab), where a refused case must reach its host
// (else it proves nothing: VOID), and under agent-lock granted
// allowed.test, git.test and private.test, where it must fail and be
// reported with the name (or address) it reached for. Cases that must work
// (curl, Node's fetch, Python's urllib, git clone over HTTPS and SSH, ssh,
// dig, the agent's own loopback server) must work jailed too, with no
// network refusal, and with no proxy variables.
//
//	AGENT_LOCK_VM=1 .build/nettest -agent-lock .build/agent-lock
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/agent-lock/agent-lock/test/netlab"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// grants are the jailed runs' network flags.
var grants = []string{"--profile", "none", "--allow-net", "allowed.test", "--allow-net", "git.test", "--allow-net", "private.test"}

func main() { os.Exit(run()) }

func run() int {
	var (
		agentLock = flag.String("agent-lock", ".build/agent-lock", "the agent-lock `binary` to test")
		engine    = flag.String("engine", "", "agent-lock's --engine; empty: its default")
		userName  = flag.String("user", "jailtest", "the unprivileged test `user`")
		allow     = flag.Bool(testenv.AllowFlag, false, "run outside the test VM (AGENT_LOCK_VM=1)")
		runRE     = flag.String("run", "", "run only cases whose name matches `regexp`")
		verbose   = flag.Bool("v", false, "print the output and report of cases that do not pass")
		timeout   = flag.Duration("timeout", 60*time.Second, "time limit of each run")
		claude    = flag.String("claude", ".build/agents/claude-code/node_modules/@anthropic-ai/claude-code", "Claude Code's `package` (make agents)")
	)
	flag.Parse()
	re, err := regexp.Compile(*runRE)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nettest: -run:", err)
		return 2
	}
	u, abs, err := testenv.Start(*allow, *userName, *agentLock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nettest:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	l, err := netlab.New(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nettest: the lab:", err)
		return 2
	}
	defer l.Close()
	s, err := newSuite(l, u, abs, *engine, *timeout, *claude)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nettest:", err)
		return 2
	}
	defer s.cleanup()
	s.verbose = *verbose

	passed, failed := 0, 0
	for _, c := range cases {
		if !re.MatchString(c.name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		verdict, detail := s.judge(ctx, c)
		fmt.Printf("%-5s %-22s %s\n", verdict, c.name, detail)
		if verdict == "PASS" {
			passed++
		} else {
			failed++
		}
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 || passed == 0 {
		return 1
	}
	return 0
}

type suite struct {
	lab     *netlab.Lab
	user    *testenv.User
	run     *testenv.Runner
	dir     string // DIR: the project, in the test user's home
	work    string
	verbose bool
	// missing says why what a case needs is not installed.
	missing map[string]string
}

// installClaude copies Claude Code's package into the user's npm prefix
// (~/.npm-global, which the node profile grants) with its bin link.
func (s *suite) installClaude(pkg string) error {
	abs, err := filepath.Abs(pkg)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(abs, "bin/claude.exe")); err != nil {
		return fmt.Errorf("Claude Code is not fetched (make agents): %v", err)
	}
	prefix := filepath.Join(s.user.Home, ".npm-global")
	os.RemoveAll(prefix)
	dst := filepath.Join(prefix, "lib/node_modules/@anthropic-ai/claude-code")
	os.MkdirAll(filepath.Dir(dst), 0o755)
	os.MkdirAll(filepath.Join(prefix, "bin"), 0o755)
	if out, err := exec.Command("cp", "-a", abs, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("install Claude Code: %v %s", err, out)
	}
	if err := os.Symlink("../lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe", filepath.Join(prefix, "bin/claude")); err != nil {
		return err
	}
	if out, err := exec.Command("chown", "-R", "-h", fmt.Sprintf("%d:%d", s.user.UID, s.user.GID), prefix).CombinedOutput(); err != nil {
		return fmt.Errorf("chown: %v %s", err, out)
	}
	return nil
}

func newSuite(l *netlab.Lab, u *testenv.User, agentLock, engine string, timeout time.Duration, claude string) (*suite, error) {
	work, err := os.MkdirTemp("", "nettest-")
	if err != nil {
		return nil, err
	}
	os.Chmod(work, 0o755)
	scratch := filepath.Join(work, "reports")
	if err := u.ReportsDir(scratch); err != nil {
		return nil, err
	}
	s := &suite{lab: l, user: u, work: work, dir: filepath.Join(u.Home, "nettest-project"),
		run: &testenv.Runner{User: u, AgentLock: agentLock, Engine: engine, Scratch: scratch, Timeout: timeout}}
	os.RemoveAll(s.dir)
	if err := u.MkdirAll(s.dir); err != nil {
		return nil, err
	}
	// What the agent's tools need from the lab, in DIR (the jail's own
	// place): the CA of its web sites, the SSH key and host key.
	for name, f := range map[string]struct {
		data string
		mode os.FileMode
	}{
		"ca.pem": {string(l.CAPEM), 0o644}, "lab_key": {string(l.SSHKey), 0o600},
		"known_hosts": {l.SSHHostLine, 0o644},
	} {
		if err := u.WriteFile(filepath.Join(s.dir, name), f.data, f.mode); err != nil {
			return nil, err
		}
	}
	// Claude Code where npm would put it for the user (a missing package
	// fails its case: make agents fetches it).
	if err := s.installClaude(claude); err != nil {
		s.missing = map[string]string{"claude": err.Error()}
	}
	// agent-lock's start is slow under emulation: measure it once.
	if _, err := s.run.MeasureStart(context.Background(), s.dir); err != nil {
		// MeasureStart runs outside the lab; in it, with the grants:
		return nil, err
	}
	return s, nil
}

func (s *suite) cleanup() {
	os.RemoveAll(filepath.Join(s.user.Home, ".npm-global"))
	os.RemoveAll(s.dir)
	os.RemoveAll(s.work)
}

// unjailed runs c's script as the test user in the lab's cell namespace.
func (s *suite) unjailed(ctx context.Context, c netCase) testenv.Result {
	tmp := filepath.Join(s.dir, ".tmp")
	s.user.MkdirAll(tmp)
	argv := s.lab.Wrap([]string{"/bin/bash", "-c", c.script}, s.user.UID, s.user.GID)
	return s.run.Run(ctx, testenv.Proc{Argv: argv, Dir: s.dir, Env: s.run.UserEnv(tmp)})
}

// jailed runs it under agent-lock, in the lab's cell namespace.
func (s *suite) jailed(ctx context.Context, c netCase) testenv.Result {
	report := s.run.NextReport()
	flags := grants
	if c.flags != nil {
		flags = c.flags
	}
	argv := s.run.JailArgv(s.dir, report, testenv.StartWrapper([]string{"/bin/bash", "-c", c.script}), flags...)
	res := s.run.Run(ctx, testenv.Proc{Argv: s.lab.Wrap(argv, 0, 0), Dir: s.dir, Env: s.run.RootEnv(), Timeout: s.run.JailTimeout()})
	s.run.ReadReport(&res, report)
	return res
}

// netOps are the report's operations on the network.
var netOps = map[string]bool{"connect": true, "send": true, "resolve": true, "socket": true}

// judge runs c twice and says how it went.
func (s *suite) judge(ctx context.Context, c netCase) (verdict, detail string) {
	if why := s.missing[c.needs]; why != "" {
		return "FAIL", why
	}
	mark := s.lab.QueryMark()
	base := s.unjailed(ctx, c)
	if !c.reached(s.lab, base, mark) {
		return "VOID", fmt.Sprintf("unjailed, it did not reach its host either (exit %d): %s", base.Exit, testenv.Tail(base.Output, 3)) + s.more(base)
	}
	mark = s.lab.QueryMark()
	res := s.jailed(ctx, c)
	if p := testenv.JailProblem(res); p != "" {
		return "FAIL", p + s.more(res)
	}
	var netEsc []testenv.Record
	for _, e := range res.Report.Escapes {
		if netOps[e.Op] {
			netEsc = append(netEsc, e)
		}
	}
	if c.works {
		switch {
		case !c.reached(s.lab, res, mark):
			return "FAIL", fmt.Sprintf("jailed, it did not work (exit %d): %s", res.Exit, testenv.Tail(res.Output, 3)) + s.more(res)
		case len(netEsc) > 0:
			return "FAIL", fmt.Sprintf("it worked, but %d network refusal(s) were reported, the first: %s [%s]", len(netEsc), netEsc[0], netEsc[0].Rule) + s.more(res)
		}
		// The engine's own refusals (the Landlock engine refuses writes
		// to /proc, dig names its threads there) are its suites' to judge.
		if n := len(res.Report.Escapes); n > 0 {
			return "PASS", fmt.Sprintf("works jailed, no network refusal (the engine refused %d other thing(s), the first: %s)", n, res.Report.Escapes[0])
		}
		return "PASS", "works jailed, nothing refused"
	}
	if c.reached(s.lab, res, mark) {
		return "LEAK", fmt.Sprintf("jailed, it reached its host: %s", testenv.Tail(res.Output, 3)) + s.more(res)
	}
	if c.says != "" && !strings.Contains(string(res.Output), c.says) {
		return "FAIL", fmt.Sprintf("refused, but the answer does not say %q: %s", c.says, testenv.Tail(res.Output, 3)) + s.more(res)
	}
	for _, e := range netEsc {
		if e.Op == c.op && e.Verdict == "blocked" && strings.Contains(e.Path, c.target) {
			if c.comm != "" && e.Comm != c.comm {
				return "FAIL", fmt.Sprintf("reported as %s's, not %s's: %s", e.Comm, c.comm, e) + s.more(res)
			}
			return "PASS", fmt.Sprintf("refused and reported: %s [%s]", e, e.Rule)
		}
	}
	return "UNREPORTED", fmt.Sprintf("refused, but no blocked %s of %s was reported (%d network records)", c.op, c.target, len(netEsc)) + s.more(res)
}

func (s *suite) more(res testenv.Result) string {
	if !s.verbose {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n    output:\n")
	for _, l := range strings.Split(strings.TrimRight(string(res.Output), "\n"), "\n") {
		b.WriteString("      " + l + "\n")
	}
	if res.Report != nil {
		b.WriteString("    report:\n")
		for _, e := range res.Report.Escapes {
			fmt.Fprintf(&b, "      %s [%s] host=%s addr=%s port=%d\n", e, e.Rule, e.Host, e.Addr, e.Port)
		}
	}
	return b.String()
}
