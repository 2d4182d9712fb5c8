// Package session launches an agent in a jail and sees it through: it makes
// the cell (cgroup, private TMPDIR, loaded programs), proves the programs
// fire, starts the agent as the invoking user inside the cell before its
// first instruction, streams what the kernel refused, and tears everything
// down so that nothing the agent started outlives it.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/dirscan"
	"github.com/agent-lock/agent-lock/internal/engine"
	"github.com/agent-lock/agent-lock/internal/engine/bpflsm"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/profile"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/spec"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// Exit statuses of agent-lock itself, as env(1) and timeout(1) use them.
const (
	ExitFailed     = 125
	ExitCannotExec = 126
	ExitNotFound   = 127
)

// Error carries the exit status agent-lock should end with.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func fail(code int, err error) error { return &Error{Code: code, Err: err} }

// Options are what the command line asked for.
type Options struct {
	Dir       string
	Command   []string
	Audit     bool
	AllowRoot bool
	AllowUnix []string
	Report    report.Writer
	Version   string
	Getenv    func(string) string
	// Started, when set, is called once the agent runs (its start's
	// steps done): the daemon loads the next session's programs then.
	Started func()
	// Scan, when set, scans the project for the engine (the daemon's,
	// for a session it started ahead: engine.Spec.Scan).
	Scan dirscan.Scanner
	// Plan, when set, is the session's plan, made already by Prepare
	// for these options: the report's place depends on it, and a start
	// that made it twice would pay for it twice.
	Plan *Plan
	// Stdin, Stdout and Stderr are the agent's; agent-lock's own if nil.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Allow and AllowWrite grant trees beyond DIR, read-only and
	// read-write; Deny refuses trees even inside grants and DIR. The home's
	// secrets (policy.HomeSecrets) are denied without asking.
	Allow, AllowWrite, Deny []string
	// Unprotect lifts protected entries of DIR (policy.Protected), by
	// path relative to DIR or absolute inside it.
	Unprotect []string
	// DenyPatterns are names refused in DIR and the grants ("*.pem").
	DenyPatterns []string
	// Profiles name the agent profiles to grant (profile.All); empty:
	// the one the command's name selects, if any; "none": no profile.
	Profiles []string
	// PassEnv names variables the agent gets although they look like
	// credentials (--env); its own API key is passed without asking.
	PassEnv []string
	// Alone runs the session without root and without the daemon
	// (alone.go): the agent as this process's user, jailed by Landlock
	// alone, nothing observed.
	Alone bool
	// Engine is what decides: EngineBPF, EngineLandlock, or EngineAuto
	// (or ""): the BPF LSM where this kernel runs its programs, else
	// Landlock, else nothing (the agent does not start).
	Engine string
	// Warnings receives agent-lock's own warnings, one line each
	// (os.Stderr if nil): the dashboard owns the terminal and shows them.
	Warnings io.Writer
	// AllowHome lets DIR be the home or a folder holding it (--allow-home):
	// the agent then reaches everything there but what is always denied.
	AllowHome bool
	// Private are agent-lock's own state (the recordings, the user's
	// policy folder): denied to the agent wherever they are. One that is
	// missing but would lie where the agent may write is made first (as
	// the user), so that it can be denied.
	Private []string
	// Terminal, when set, is the agent's terminal: a pseudo-terminal
	// agent-lock owns and shows in its pane (its slave side, which the
	// agent gets as standard input, output and error). The agent leads a
	// session of its own with it as the controlling terminal, as a login
	// shell does (job control, ^C, ^Z work there), and it is the only
	// terminal the cell lets the agent open: agent-lock's own terminal is
	// the user's, and an agent that could write to it (or push keys into
	// it) could forge what the user sees.
	Terminal *os.File
	// BestEffort lets the Landlock engine run without what it cannot
	// enforce (landlockcell.Refusals), each said as a warning; without it
	// such a request stops the session at start.
	BestEffort bool
	// NetMode is the network's mode (--net, or a policy file's net),
	// NetFrom who set it; AllowNet the hosts granted beyond the
	// profiles' (policy files', --allow-net).
	NetMode  netpolicy.Mode
	NetFrom  string
	AllowNet []netpolicy.Rule
}

// writeEvent reports one kernel decision: every escape, and the in-bounds
// samples that opens lets through.
func writeEvent(w report.Writer, ev verdict.Event, opens *sampler) {
	e := report.Event{
		Time: ev.Time, PID: ev.PID, TID: ev.TID, Comm: ev.Comm, Op: ev.Op,
		Path: ev.Path, Path2: ev.Path2, TargetPID: ev.TargetPID,
		Sensitive: report.Sensitive(ev.Path) || (ev.Path2 != "" && report.Sensitive(ev.Path2)),
		Rule:      ev.Rule,
		Repeats:   ev.Repeats,
	}
	switch {
	case ev.InBounds:
		if opens.take(ev.Time) {
			e.Verdict = report.InBounds
			w.Open(e)
		}
	case ev.Audit:
		e.Verdict = report.Allowed
		w.Escape(e)
	default:
		e.Verdict = report.Blocked
		w.Escape(e)
	}
}

// endGrace is how long a stopped agent has to end on its own before its
// cell is killed.
const endGrace = 5 * time.Second

// opensPerSecond bounds the in-bounds samples written a second. The kernel
// sends at most ten a second per CPU; a machine with many CPUs busy in a
// build would still fill recordings with lines nobody reads.
const opensPerSecond = 20

// sampler lets through at most opensPerSecond in-bounds samples a second.
type sampler struct {
	sec int64
	n   int
}

func (s *sampler) take(t time.Time) bool {
	if sec := t.Unix(); sec != s.sec {
		s.sec, s.n = sec, 0
	}
	s.n++
	return s.n <= opensPerSecond
}

// startNoNewPrivs starts cmd from a thread with no_new_privs set, which the
// child inherits, so setuid programs cannot raise the agent, and in the
// agent's view of the mounts (view). The thread stays
// locked and waits for the child: Pdeathsig fires when the creating thread
// exits, and the thread must not go back to the pool with the flag set.
func startNoNewPrivs(cmd *exec.Cmd, view *agentView, warn warner) (<-chan error, <-chan int) {
	started := make(chan error, 1)
	done := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread exits with the goroutine, in the
		// agent's mount namespace.
		if view != nil {
			for _, w := range view.enter() {
				warn("%s", w)
			}
		}
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			started <- fmt.Errorf("set no_new_privs: %w", err)
			return
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		done <- exitStatus(cmd, err)
	}()
	return started, done
}

func exitStatus(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState == nil {
		return ExitFailed
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// resolveGrants resolves --allow, --allow-write and --deny to real paths and
// refuses the ones that would not make sense: a grant of / is no jail, and
// a denial around DIR would leave the agent nothing.
func resolveGrants(o Options, dir string) (allow, allowWrite, deny []string, err error) {
	resolve := func(flag string, paths []string) ([]string, error) {
		var out []string
		for _, p := range paths {
			abs, err := filepath.Abs(p)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", flag, p, err)
			}
			real, err := filepath.EvalSymlinks(abs)
			if err != nil {
				return nil, fmt.Errorf("%s %s: no such file or directory (grants and denials name existing paths)", flag, p)
			}
			if real == "/" && flag != "--deny" {
				return nil, fmt.Errorf("%s %s: granting / would not be a jail; name the folders the agent needs", flag, p)
			}
			out = append(out, real)
		}
		return out, nil
	}
	if allow, err = resolve("--allow", o.Allow); err != nil {
		return
	}
	if allowWrite, err = resolve("--allow-write", o.AllowWrite); err != nil {
		return
	}
	if deny, err = resolve("--deny", o.Deny); err != nil {
		return
	}
	for _, d := range deny {
		if d == dir || strings.HasPrefix(dir, strings.TrimSuffix(d, "/")+"/") {
			return nil, nil, nil, fmt.Errorf("--deny %s contains the project directory %s: the agent could not work; deny something inside it instead", d, dir)
		}
	}
	return
}

// Plan is what a session will run and grant, resolved from its options
// before anything is loaded: agent-lock policy prints it.
type Plan struct {
	Argv     []string
	Path     string // the command, found
	Policy   policy.Policy
	Profiles profile.Grants
	// Net is the cell's network: where it may connect.
	Net netpolicy.Policy
	// Notes say what the user should know about the cell before it
	// opens: what --allow-home exposes, agent-lock's state kept from the
	// agent inside DIR or a grant.
	Notes []string
	// Env is the environment the agent's is made from (baseEnv): the
	// caller's, before agent-lock's variables and the filter.
	Env []string
}

// MakePlan resolves o for agent: the directory, the command, its profile,
// grants and denials, the protected entries. Errors are the user's to fix
// and carry ExitFailed (or the command's exit status). It changes nothing:
// a profile's folders that a run would make are listed missing.
func MakePlan(o Options, agent Agent) (Plan, error) { return makePlan(o, agent, nil, baseEnv()) }

// Prepare makes the plan Run makes (Options.Plan): as the user, the
// profiles' missing folders and files made first.
func Prepare(o Options, agent Agent) (Plan, error) {
	var plan Plan
	// Read as root: sudo's environment (/proc/PID/environ, root's, mode
	// 0400) is not the user's to open (baseEnv).
	env := baseEnv()
	err := asuser.Do(agent.ID(), func() error {
		var err error
		plan, err = makePlan(o, agent, &profile.Maker{
			Dir:  func(p string) error { return asuser.MkdirAll(agent.ID(), p) },
			File: func(p, content string) error { return asuser.CreateFile(agent.ID(), p, content) },
		}, env)
		return err
	})
	if e := (*Error)(nil); err != nil && !errors.As(err, &e) {
		err = fail(ExitFailed, err)
	}
	return plan, err
}

// makePlan is MakePlan that, with mk, makes the profiles' missing
// folders and files (profile.Profile.Make, Seed) first; env is baseEnv's.
func makePlan(o Options, agent Agent, mk *profile.Maker, env []string) (Plan, error) {
	dir, err := ResolveDir(o.Dir)
	if err != nil {
		return Plan{}, fail(ExitFailed, err)
	}
	var notes []string
	if home, err := filepath.EvalSymlinks(agent.Home); err == nil && spec.Under(home, dir) {
		if !o.AllowHome {
			return Plan{}, fail(ExitFailed, fmt.Errorf("the project directory %s holds your home %s: the agent could read and change "+
				"everything in it but the secrets agent-lock always refuses (~/.ssh, ~/.aws, ...), your other projects and your "+
				"shell's startup files included; give the project's own folder, or pass --allow-home if that is what you want", dir, home))
		}
		notes = append(notes, fmt.Sprintf("--allow-home: the agent may read and change all of %s but the secrets agent-lock "+
			"always refuses (agent-lock policy lists them) and agent-lock's own state", home))
	}
	argv := o.Command
	if len(argv) == 0 {
		argv = []string{agent.Shell}
	}
	path, err := lookPath(argv[0], dir, pathOf(env), agent.ID())
	if err != nil {
		return Plan{}, err
	}
	for _, s := range o.AllowUnix {
		if _, err := os.Stat(s); err != nil {
			return Plan{}, fail(ExitFailed, fmt.Errorf("--allow-unix %s: %w", s, err))
		}
	}
	prof, err := profiles(o.Profiles, path, agent.Home, mk)
	if err != nil {
		return Plan{}, fail(ExitFailed, err)
	}
	if p, ok := profile.Detect(path); ok && slices.Contains(prof.Profiles, p.Name) {
		var w string
		if argv, w = p.CommandLine(argv); w != "" {
			notes = append(notes, w)
		}
	}
	o.Allow = append(slices.Clone(o.Allow), prof.Read...)
	o.AllowWrite = append(slices.Clone(o.AllowWrite), prof.Write...)
	allow, allowWrite, deny, err := resolveGrants(o, dir)
	if err != nil {
		return Plan{}, fail(ExitFailed, err)
	}
	reach := policy.Policy{Dir: dir, AllowWrite: allowWrite}
	var private []string
	for _, p := range o.Private {
		if p == "" {
			continue
		}
		real, err := realPathMissing(p)
		if err != nil {
			// Left out, it could be the agent's to make (a link into
			// DIR): a policy file a later session trusts.
			return Plan{}, fail(ExitFailed, fmt.Errorf("agent-lock's own %s: %v: agent-lock keeps it from the agent, and must know where it is: fix or remove it", p, err))
		}
		inReach := reach.Writable(real)
		if inReach {
			notes = append(notes, fmt.Sprintf("agent-lock's own %s lies where the agent may write: refused to it", real))
		}
		if _, err := os.Lstat(real); errors.Is(err, os.ErrNotExist) {
			if !inReach {
				continue // nothing to protect, and the agent cannot make it
			}
			if mk == nil {
				notes[len(notes)-1] += " (made first, as you: it is missing)"
				continue
			}
			if err := mk.Dir(real); err != nil {
				return Plan{}, fail(ExitFailed, fmt.Errorf("make %s, to keep it from the agent: %w", p, err))
			}
		}
		private = append(private, real)
	}
	protect, err := policy.Unprotect(dir, o.Unprotect)
	if err != nil {
		return Plan{}, fail(ExitFailed, err)
	}
	var files []string
	for _, f := range prof.Files {
		if real, err := policy.RealPath(f, true); err == nil {
			files = append(files, real)
		}
	}
	names := map[string]string{}
	for p, from := range prof.From {
		if real, err := policy.RealPath(p, slices.Contains(prof.Files, p)); err == nil {
			names[real] = "profile " + from
		}
	}
	net, err := netPolicy(o, prof)
	if err != nil {
		return Plan{}, fail(ExitFailed, err)
	}
	pol := policy.Policy{
		Dir: dir, AllowUnix: o.AllowUnix, Allow: allow, AllowWrite: allowWrite, Files: files, Deny: deny,
		Home: agent.Home, Protect: protect, Profiled: names, DenyPatterns: o.DenyPatterns, Private: private,
	}
	var interp string
	if err := asuser.Do(agent.ID(), func() error { interp = interpreter(path, pathOf(env)); return nil }); err != nil {
		return Plan{}, fail(ExitFailed, err)
	}
	if err := outsideCommand(pol, path, interp); err != nil {
		return Plan{}, err
	}
	return Plan{Argv: argv, Path: path, Profiles: prof, Notes: notes, Net: net, Policy: pol, Env: env}, nil
}

// profiles resolves the profiles asked for, or the one the command's name
// selects.
func profiles(names []string, path, home string, mk *profile.Maker) (profile.Grants, error) {
	if len(names) == 0 {
		if p, ok := profile.Detect(path); ok {
			names = []string{p.Name}
		}
	}
	if slices.Contains(names, "none") {
		if len(names) > 1 {
			return profile.Grants{}, errors.New("--profile none cannot be combined with other profiles")
		}
		return profile.Grants{}, nil
	}
	g, err := profile.Resolve(names, home, mk)
	if err != nil {
		return g, fmt.Errorf("--profile: %w", err)
	}
	return g, nil
}

// ResolveDir turns the DIR argument into the real absolute directory.
func ResolveDir(d string) (string, error) {
	if d == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("current directory: %w", err)
		}
		d = wd
	}
	abs, err := filepath.Abs(d)
	if err != nil {
		return "", fmt.Errorf("directory %q: %w", d, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("directory %q does not exist: give an existing project directory", d)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("directory %q: %w", d, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%q is not a directory: give the project directory to jail the agent in", d)
	}
	if real == "/" {
		return "", errors.New("refusing to use / as the project directory: that would not be a jail; give the project's own folder")
	}
	return real, nil
}

// lookPath finds the command as the agent's user would (id): on the
// agent's PATH, searchPath, through folders that user may search. Under
// sudo, agent-lock's own PATH is root's, and it would find as root what
// the user cannot reach.
func lookPath(name, dir, searchPath string, id asuser.ID) (string, error) {
	var path string
	var err error
	if aerr := asuser.Do(id, func() error {
		path, err = findCommand(name, dir, searchPath)
		return nil
	}); aerr != nil {
		return "", fail(ExitFailed, aerr)
	}
	return path, err
}

// findCommand is lookPath's search, done by the calling thread; a name
// with a slash is taken relative to dir.
func findCommand(name, dir, searchPath string) (string, error) {
	executable := func(p string) error {
		st, err := os.Stat(p)
		if err != nil {
			return fail(ExitNotFound, fmt.Errorf("%s: no such file", name))
		}
		// The kernel's own check, as the thread's file-system ids (the
		// user's, in lookPath): a file the user may not run is passed
		// over for the next on PATH, as a shell does.
		if !st.Mode().IsRegular() || unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS) != nil {
			return fail(ExitCannotExec, fmt.Errorf("%s: not an executable file", name))
		}
		return nil
	}
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, executable(p)
	}
	for _, d := range filepath.SplitList(searchPath) {
		// A relative folder on PATH names a folder of wherever the
		// agent happens to be: not searched (exec.LookPath's ErrDot).
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		if p := filepath.Join(d, name); executable(p) == nil {
			return p, nil
		}
	}
	return "", fail(ExitNotFound, fmt.Errorf("%s: command not found (looked in PATH=%s)", name, searchPath))
}

// privateTmp makes the agent's TMPDIR, as the user, named after this
// agent-lock's pid so that a later run can tell a TMPDIR left behind by an
// agent-lock that was killed (sweep).
func privateTmp(a Agent) (string, error) {
	tmp, err := asuser.MkdirTemp(a.ID(), os.TempDir(), scratchPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("private TMPDIR in %s: %w", os.TempDir(), err)
	}
	return tmp, nil
}

// terminals are the device numbers (kernel encoding) and names of our stdio
// terminals, which the agent may reopen through /dev/tty or /proc/self/fd.
func terminals() (rdevs []uint32, paths []string) {
	for fd := 0; fd <= 2; fd++ {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		rdevs = append(rdevs, unix.Major(st.Rdev)<<20|unix.Minor(st.Rdev))
		// By name too, for Landlock, which grants by path.
		if p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil && strings.HasPrefix(p, "/dev/") {
			paths = append(paths, p)
		}
	}
	return rdevs, paths
}

// terminal is the device number and name of the agent's own terminal
// (Options.Terminal).
func terminal(f *os.File) (rdevs []uint32, paths []string) {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return nil, nil
	}
	rdevs = []uint32{unix.Major(st.Rdev)<<20 | unix.Minor(st.Rdev)}
	if p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err == nil && strings.HasPrefix(p, "/dev/") {
		paths = []string{p}
	}
	return rdevs, paths
}

// openEngine opens the cell with the engine asked for. Auto takes the BPF
// LSM where this kernel runs its programs and Landlock where it does not
// (at once where it refused them earlier in this boot: bpflsm's
// RememberRefusal); a cell that cannot be opened with either is an error,
// never a run without one.
func openEngine(facts kernel.Facts, name string, s engine.Spec, net netpolicy.Policy, warn warner) (*cell, error) {
	if name != "" && name != EngineAuto {
		return openCell(facts, name, s, net, warn)
	}
	fallback := !s.Audit && facts.LandlockABI > 0
	if fallback && bpflsm.RefusedThisBoot() {
		return openCell(facts, EngineLandlock, s, net, warn)
	}
	tried := time.Now()
	c, err := openCell(facts, EngineBPF, s, net, warn)
	if err == nil || !errors.Is(err, engine.ErrNotSupported) || !fallback {
		return c, err
	}
	bpflsm.RememberRefusal()
	refused := report.Step{Name: "bpf_lsm_refused", Time: time.Since(tried)}
	if c, err = openCell(facts, EngineLandlock, s, net, warn); err == nil {
		c.steps = append([]report.Step{refused}, c.steps...)
	}
	return c, err
}

// AutoEngine is the engine --engine auto picks on this kernel, and why.
// Where bpf is an active LSM only loading the programs tells (some
// kernels list it and refuse them): as root it loads them (SelfTest);
// otherwise pick is "" and why says what it depends on.
func AutoEngine(ctx context.Context, f kernel.Facts) (pick, why string) {
	abi := f.LandlockABI
	if !f.BPFInLSM {
		if abi == 0 {
			return "", "none: bpf is not in the active LSM list and this kernel has no Landlock (agent-lock doctor says what to change)"
		}
		return EngineLandlock, "bpf is not in the active LSM list"
	}
	if os.Geteuid() != 0 {
		return "", fmt.Sprintf("bpf-lsm if this kernel loads its programs (bpf is an active LSM; sudo agent-lock doctor, "+
			"or sudo agent-lock policy, tries), else landlock (ABI %d)", abi)
	}
	err := SelfTest(ctx, f, EngineBPF)
	// What sessions' auto goes by for the rest of this boot.
	if err == nil {
		bpflsm.ForgetRefusal()
	} else if errors.Is(err, engine.ErrNotSupported) {
		bpflsm.RememberRefusal()
	}
	switch {
	case err == nil:
		return EngineBPF, "its programs loaded and refused a test open here"
	case errors.Is(err, engine.ErrNotSupported) && abi > 0:
		return EngineLandlock, "this kernel lists bpf as an active LSM but refused to load its programs; agent-lock doctor says more"
	}
	return "", err.Error()
}

// warner writes one of agent-lock's own warnings (Options.Warnings).
type warner func(format string, args ...any)

func newWarner(w io.Writer) warner {
	if w == nil {
		w = os.Stderr
	}
	return func(format string, args ...any) {
		fmt.Fprintf(w, "agent-lock: "+format+"\n", args...)
	}
}

func agentEnv(base []string, a Agent, tmp, dir string) []string {
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "SUDO_"), k == "HOME", k == "USER", k == "LOGNAME",
			k == "SHELL", k == "TMPDIR", k == "PWD", k == "MAIL":
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"HOME="+a.Home, "USER="+a.Name, "LOGNAME="+a.Name, "SHELL="+a.Shell,
		"TMPDIR="+tmp, "PWD="+dir, "AGENT_LOCK=1")
}

// realPathMissing resolves p as the kernel would, a name at a time,
// following every symlink (a dangling one too, to where it points), and
// keeps the names from the first that does not exist: where p would be
// made. A relative link is read from the folder it is really in, so that
// its ".." is the kernel's, not the spelling's.
func realPathMissing(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s: not an absolute path", p)
	}
	resolved, rest, links := "/", strings.Split(p, "/"), 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, name)
		fi, err := os.Lstat(next)
		if errors.Is(err, os.ErrNotExist) {
			return filepath.Join(append([]string{next}, rest...)...), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > 40 {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return resolved, nil
}
