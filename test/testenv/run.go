package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PathEnv is the PATH every run gets, jailed or not.
const PathEnv = "/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

// ExitAgentLock is agent-lock's own failure status.
const ExitAgentLock = 125

// Runner runs a suite's commands as the test user, directly or under
// agent-lock.
type Runner struct {
	User      *User
	AgentLock string        // absolute path of the agent-lock binary; empty in baseline-only mode
	Engine    string        // --engine for agent-lock; "" leaves it to agent-lock (auto)
	Scratch   string        // a root-only directory for reports
	Timeout   time.Duration // per run, unless the Proc says otherwise
	// Overhead is added to the timeout of jailed runs: agent-lock's own
	// start (loading and verifying its programs) is slow under emulation.
	Overhead time.Duration
	// Daemon is agent-lock's daemon's socket: jailed runs are then the
	// user's own agent-lock, which asks it (no sudo); else agent-lock
	// runs as root, as sudo would start it.
	Daemon string

	n int
}

// Proc is one process to run.
type Proc struct {
	Argv       []string
	Dir        string
	Env        []string // the complete environment
	AsUser     bool     // run with the test user's credentials; otherwise as root
	Stdin      *os.File // nil: /dev/null
	ExtraFiles []*os.File
	Cgroup     *os.File      // a cgroup2 directory to start in; nil: the caller's
	Timeout    time.Duration // 0: the Runner's
}

// Result is how a run ended.
type Result struct {
	Output   []byte // stdout and stderr, interleaved
	Exit     int    // exit status, 128+N when killed by signal N, -1 when it did not start
	TimedOut bool
	Err      error // set when it could not be started or waited for
	Elapsed  time.Duration
	// MaxRSS is the peak resident memory, in bytes, of the process or of
	// the largest of the descendants it waited for (getrusage's maxrss):
	// for a jailed run, agent-lock's unless the agent outgrew it.
	MaxRSS int64

	// Jailed runs only.
	ReportPath string
	Report     *Report
	ReportErr  error
}

// UserEnv is the environment of an unjailed run: what agent-lock promises
// the agent (HOME, USER from the passwd entry, a private TMPDIR) plus the
// suite's fixed PATH and locale.
func (r *Runner) UserEnv(tmpdir string, extra ...string) []string {
	env := []string{
		"PATH=" + PathEnv,
		"LANG=C",
		"SHELL=/bin/bash",
		"HOME=" + r.User.Home,
		"USER=" + r.User.Name,
		"LOGNAME=" + r.User.Name,
		"TMPDIR=" + tmpdir,
	}
	return append(env, extra...)
}

// RootEnv is the environment agent-lock itself is started with: as if
// the user ran it with sudo.
func (r *Runner) RootEnv(extra ...string) []string {
	env := []string{
		"PATH=" + PathEnv,
		"LANG=C",
		"SHELL=/bin/bash",
		"HOME=/root",
		"SUDO_UID=" + strconv.Itoa(r.User.UID),
		"SUDO_GID=" + strconv.Itoa(r.User.GID),
		"SUDO_USER=" + r.User.Name,
	}
	return append(env, extra...)
}

// NextReport names a fresh report file in the scratch directory.
func (r *Runner) NextReport() string {
	r.n++
	p := filepath.Join(r.Scratch, fmt.Sprintf("report-%03d.jsonl", r.n))
	os.Remove(p)
	return p
}

// Jailer sets p to start agent-lock as the suite does: as root with
// sudo's environment (and extra), or as the user asking the daemon, with
// the user's (and extra).
func (r *Runner) Jailer(p *Proc, extra ...string) {
	if r.Daemon == "" {
		p.Env, p.AsUser = r.RootEnv(extra...), false
		return
	}
	p.Env = append(r.UserEnv(os.TempDir(), extra...), "AGENT_LOCK_SOCKET="+r.Daemon)
	p.AsUser = true
}

// JailArgv is the agent-lock command line that runs argv in dir, with
// agent-lock's flags when given.
func (r *Runner) JailArgv(dir, report string, argv []string, flags ...string) []string {
	a := []string{r.AgentLock, "--headless", "--report", report}
	if r.Engine != "" {
		a = append(a, "--engine", r.Engine)
	}
	a = append(a, flags...)
	return append(append(a, dir, "--"), argv...)
}

// Unjailed runs argv as the test user in dir, with the same environment
// agent-lock would give it.
func (r *Runner) Unjailed(ctx context.Context, argv []string, dir, tmpdir string, extraEnv ...string) Result {
	return r.Run(ctx, Proc{Argv: argv, Dir: dir, Env: r.UserEnv(tmpdir, extraEnv...), AsUser: true})
}

// Jailed runs argv under agent-lock (as root, which drops to the test
// user, or through the daemon) and reads the report.
func (r *Runner) Jailed(ctx context.Context, argv []string, dir string, extraEnv ...string) Result {
	report := r.NextReport()
	p := Proc{Argv: r.JailArgv(dir, report, argv), Dir: dir, Timeout: r.JailTimeout()}
	r.Jailer(&p, extraEnv...)
	res := r.Run(ctx, p)
	r.ReadReport(&res, report)
	return res
}

// JailTimeout is the time limit of a jailed run.
func (r *Runner) JailTimeout() time.Duration { return r.Timeout + r.Overhead }

// MeasureStart runs a harmless command under agent-lock (with a generous
// limit, since nothing is known yet), sets Overhead from how long it took,
// and says what is wrong if it did not work.
func (r *Runner) MeasureStart(ctx context.Context, dir string) (time.Duration, error) {
	saved := r.Timeout
	r.Timeout = 5 * time.Minute
	res := r.Jailed(ctx, StartWrapper([]string{"true"}), dir)
	r.Timeout = saved
	if p := JailProblem(res); p != "" {
		return 0, fmt.Errorf("a harmless command under agent-lock: %s", p)
	}
	if res.Exit != 0 {
		return 0, fmt.Errorf("a harmless command under agent-lock exited %d: %s", res.Exit, Tail(res.Output, 5))
	}
	r.Overhead = 2 * res.Elapsed
	return res.Elapsed, nil
}

// ReadReport fills in res's report fields from path.
func (r *Runner) ReadReport(res *Result, path string) {
	res.ReportPath = path
	res.Report, res.ReportErr = ReadReport(path)
}

// Run runs p in its own process group and kills the group when the
// timeout expires. Output goes through a pipe, not a file, so that a jail
// that checks every write against a path has nothing to object to.
func (r *Runner) Run(ctx context.Context, p Proc) Result {
	timeout := p.Timeout
	if timeout == 0 {
		timeout = r.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var out bytes.Buffer
	cmd := r.Command(ctx, p)
	cmd.Stdout = &out
	cmd.Stderr = &out

	start := time.Now()
	err := cmd.Run()
	res := Result{Output: out.Bytes(), Elapsed: time.Since(start), Exit: -1}
	if ctx.Err() == context.DeadlineExceeded {
		res.TimedOut = true
	}
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			res.MaxRSS = ru.Maxrss * 1024
		}
		res.Exit = ExitStatus(cmd.ProcessState)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		res.Err = err
	}
	return res
}

// Command is p as a command in its own process group, killed with the
// group when ctx ends, for callers that talk to it while it runs (Run
// waits for it). Its standard input is p.Stdin; the rest is the caller's.
func (r *Runner) Command(ctx context.Context, p Proc) *exec.Cmd {
	cmd := exec.CommandContext(ctx, p.Argv[0], p.Argv[1:]...)
	cmd.Dir = p.Dir
	cmd.Env = p.Env
	if p.Stdin != nil {
		cmd.Stdin = p.Stdin
	}
	cmd.ExtraFiles = p.ExtraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if p.Cgroup != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(p.Cgroup.Fd())
	}
	if p.AsUser {
		cmd.SysProcAttr.Credential = &syscall.Credential{
			Uid:    uint32(r.User.UID),
			Gid:    uint32(r.User.GID),
			Groups: r.User.Groups,
		}
	}
	cmd.Cancel = func() error {
		// The whole group: a shell and whatever it started in the foreground.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// A process left behind that still holds the output pipe must not
	// hold up the suite; survivors are the caller's business.
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// ExitStatus is how a process ended as Result.Exit says it: its exit
// status, 128+N when killed by signal N, -1 otherwise.
func ExitStatus(ps *os.ProcessState) int {
	ws := ps.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return -1
}

// Tail returns the last n lines of out, for messages.
func Tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:@,+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ShellJoin quotes and joins argv for a POSIX shell.
func ShellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = ShellQuote(a)
	}
	return strings.Join(q, " ")
}

// StartMark is echoed by a suite's wrapper before it runs the command
// under test, to tell "the command failed" from "it never started".
const StartMark = "__suite_started__"

// StartWrapper prefixes argv with a shell that prints StartMark and then
// becomes argv.
func StartWrapper(argv []string) []string {
	return append([]string{"/bin/sh", "-c", "echo " + StartMark + `; exec "$@"`, "sh"}, argv...)
}

// JailProblem says why a jailed run tells nothing about its command (it
// did not start, agent-lock failed, the report is incomplete), or "".
func JailProblem(res Result) string {
	switch {
	case res.Err != nil:
		return fmt.Sprintf("could not run agent-lock: %v", res.Err)
	case res.TimedOut:
		return fmt.Sprintf("timed out after %v: %s", res.Elapsed.Round(time.Second), Tail(res.Output, 3))
	case res.Exit == ExitAgentLock:
		return fmt.Sprintf("agent-lock failed (exit 125): %s", Tail(res.Output, 3))
	case !bytes.Contains(res.Output, []byte(StartMark)):
		return fmt.Sprintf("the command never started in the jail (exit %d): %s", res.Exit, Tail(res.Output, 3))
	case res.ReportErr != nil:
		return res.ReportErr.Error()
	}
	if err := res.Report.Complete(res.Exit); err != nil {
		return err.Error()
	}
	return ""
}

// Which finds name in PathEnv, the PATH every run gets; "" if absent.
func Which(name string) string {
	for _, d := range filepath.SplitList(PathEnv) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
