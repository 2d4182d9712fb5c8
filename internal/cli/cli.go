// Package cli parses agent-lock's command line and maps outcomes to exit
// statuses; the work is done by session (running an agent) and kernel
// (doctor).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/dashboard"
	"github.com/agent-lock/agent-lock/internal/dirscan"
	"github.com/agent-lock/agent-lock/internal/landlock"
	"github.com/agent-lock/agent-lock/internal/netcell"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
	"github.com/agent-lock/agent-lock/internal/profile"
	"github.com/agent-lock/agent-lock/internal/session"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// Version is set at link time (-ldflags "-X .../cli.Version=v1.2.3"); a
// plain build reports the module version or the VCS revision.
var Version = ""

const usage = `agent-lock: jail an AI coding agent in one directory, with BPF-LSM.

Usage:
  sudo agent-lock [flags] [DIR] [-- COMMAND [ARG...]]
  agent-lock [flags] [DIR] [-- COMMAND [ARG...]]   (with the daemon running;
                                                    without it, Landlock alone:
                                                    nothing observed)
  sudo agent-lock doctor [--engine E]
  sudo agent-lock install | uninstall              (the daemon, with systemd)
  sudo agent-lock daemon [--socket PATH]           (the daemon, in the foreground)
  agent-lock attach [SESSION]
  agent-lock watch [--list] [SESSION]
  agent-lock replay [--fast] FILE
  agent-lock profiles
  agent-lock policy [flags] [DIR] [-- COMMAND]
  agent-lock trust [DIR]
  agent-lock version

DIR defaults to the current directory; COMMAND to your login shell. The agent
runs as you (the user who ran sudo, or who asked the daemon), with no_new_privs, inside DIR: the kernel
lets it read and write DIR and its private TMPDIR, read the system (/usr, /lib*,
/bin, /sbin, /etc, /sys, its own /proc), and refuses everything else.

Flags:
  --engine E         what decides: auto (default: bpf-lsm where this kernel
                     runs BPF LSM programs, else landlock), bpf-lsm, landlock
                     (weaker: see agent-lock doctor for what it leaves open)
  --audit            allow everything, report what would have been refused
                     (bpf-lsm only)
  --best-effort      let the Landlock engine run without what it cannot
                     enforce (--deny PATTERN, a --deny inside DIR; alone,
                     a user namespace the kernel refuses), which
                     otherwise stops agent-lock at start; each is warned of
  --headless         no pane: the agent has the terminal itself, nothing is
                     written over its screen, one summary after it exits
                     (watch it with agent-lock watch)
  --pane-key KEY     the key that flips between the agent's pane and the
                     dashboard (default ctrl+], or your policy file's
                     pane-key; e.g. ctrl+^, alt+a, f12)
  --exit-with-agent  end when the agent exits, without waiting for a key
  --report FILE      where reports go (default: standard error with --headless
                     or off a terminal; the dashboard and the recording always)
  --format json|text report format (default: json with --report, text on a terminal)
  --allow-unix PATH  let the agent connect to this unix socket (repeatable)
  --allow PATH       let the agent read this tree too (repeatable)
  --allow-write PATH let the agent read and write this tree too (repeatable);
                     a file is granted by name, with NAME.* (a save's
                     temporary file, its lock)
  --deny PATH        refuse this tree even inside DIR or a grant (repeatable);
                     ~/.ssh, ~/.aws, ~/.gnupg, ~/.kube, shell histories and
                     other secrets of your home are always refused
  --deny PATTERN     refuse files so named in DIR and the grants: '*.pem',
                     'id_*', '.env*' (quote it); *.pem, *.key, id_*, .env*,
                     ... are refused inside your grants without asking
                     (bpf-lsm only: the Landlock engine grants by path)
  --unprotect PATH   let the agent write this protected entry of DIR
                     (repeatable); it may read but not create, change or
                     remove what your own tools run outside the jail:
                     .git/hooks, .git/config, .envrc, .vscode, .mcp.json,
                     .claude/settings.json, ... (agent-lock policy lists
                     them; the Landlock engine puts their changes back)
  --profile NAME     grant what this agent needs to start, log in and work
                     (repeatable; default: the profile the command's name
                     selects, e.g. claude, codex, gemini, aider, opencode,
                     omp, node, python; none for no profile); agent-lock
                     profiles lists what each grants
  --allow-root       allow running the agent as root
  --allow-home       allow DIR to be your home or a folder holding it (the
                     agent then reaches all of it but your secrets)
  --allow-net HOST[:PORT]
                     let the agent connect to this host (repeatable): a name
                     (api.example.com), its subdomains (*.example.com), an IP
                     or a CIDR; every port unless :PORT. Loopback, link-local
                     (169.254.169.254) and private addresses need an address
                     and a port (--allow-net localhost:5432). Default: the
                     profile's service hosts (its API and login) and nothing
                     else; names are resolved by agent-lock's own resolver
  --net off|open     off: no network at all; open: every connection allowed,
                     and reported (no confinement); grants: the default
  --env NAME         pass this variable although it looks like a secret
                     (repeatable); variables named like credentials
                     (*_TOKEN, *_SECRET, *_KEY, *_PASSWORD, AWS_*, ...) are
                     withheld, except the API key the profile names

Settings can also live in policy files (TOML, the flags' names as keys):
~/.config/agent-lock/policy.toml, then DIR/.agent-lock.toml, then the
flags. A project's file may only deny, unless you trusted it as it is
(agent-lock trust DIR; a file changed since is refused, with what changed).
agent-lock policy prints the effective cell.

On a terminal the agent runs in a pane, interactive, beside the cell's live
view; ctrl+] flips to the dashboard (escapes, detail, c copy), where d
detaches (agent-lock attach brings the pane back, from any terminal) and q
ends the session. The agent's escape sequences stay in its pane. Every
session is recorded (JSON lines) in ~/.local/state/agent-lock/ (or
$XDG_STATE_HOME/agent-lock/), where agent-lock watch finds running sessions
and agent-lock replay plays them.

Exit status: the agent's; 125 if agent-lock failed, 126 if COMMAND could not
be executed, 127 if it was not found.
`

// Main runs agent-lock with args (without the program name).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "version", "--version":
			fmt.Fprintf(stdout, "agent-lock %s\n", version())
			return 0
		case "doctor":
			return doctor(ctx, args[1:], stdout, stderr)
		case "replay":
			return replay(ctx, args[1:], os.Stdin, stdout, stderr)
		case "watch":
			return watch(ctx, args[1:], os.Stdin, stdout, stderr)
		case "attach":
			return attachCmd(ctx, args[1:], stdout, stderr)
		case "daemon":
			return daemonCmd(ctx, args[1:], stdout, stderr)
		case "install", "uninstall":
			return installCmd(args[1:], args[0] == "uninstall", stdout, stderr)
		case daemonSessionArg:
			return daemonSession(ctx, args[1:], stdout, stderr)
		case daemonStandbyArg:
			return daemonStandby(ctx, stderr)
		case paneServerArg:
			o, err := parse(args[1:])
			if err != nil {
				fmt.Fprintf(stderr, "agent-lock: %v\nRun 'agent-lock --help' for usage.\n", err)
				return session.ExitFailed
			}
			o.serve = true
			return run(ctx, o, stdout, stderr)
		case "profiles":
			return profiles(args[1:], stdout, stderr)
		case "policy":
			return policyCmd(args[1:], stdout, stderr)
		case "trust":
			return trust(args[1:], stdout, stderr)
		case landlock.ExecArg:
			// The cell's first process, about to become the agent: it
			// must never run the agent unconfined, so any failure ends it.
			err := landlock.Exec(args[1:])
			fmt.Fprintf(stderr, "agent-lock: %v\n", err)
			if errors.Is(err, os.ErrNotExist) {
				return session.ExitNotFound
			}
			return session.ExitCannotExec
		case netcell.ProbeArg:
			// The network's self-test, run in a new cell by agent-lock
			// itself before the agent starts.
			return netcell.RunProbe(args[1:])
		case session.ReaperArg:
			if len(args) != 2 {
				return session.ExitFailed
			}
			return session.Reap(args[1])
		case "help", "-h", "--help":
			fmt.Fprint(stdout, usage)
			return 0
		}
	}
	o, code, ok := parseRun(args, stdout, stderr)
	if !ok {
		return code
	}
	return run(ctx, o, stdout, stderr)
}

// parseRun reads a session's arguments; when there is no session to run
// (a bad flag, --help) it has said so and ok is false, with the exit status.
func parseRun(args []string, stdout, stderr io.Writer) (o options, code int, ok bool) {
	o, err := parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock: %v\nRun 'agent-lock --help' for usage.\n", err)
		return o, session.ExitFailed, false
	}
	if o.help {
		fmt.Fprint(stdout, usage)
		return o, 0, false
	}
	o.args = args
	return o, 0, true
}

type options struct {
	// started: session.Options.Started (a session the daemon started).
	started func()
	// scan: session.Options.Scan (the daemon's, for a standby).
	scan       dirscan.Scanner
	dir        string
	command    []string
	audit      bool
	headless   bool
	allowRoot  bool
	allowHome  bool
	allowUnix  []string
	passEnv    []string
	allow      []string
	allowWrite []string
	deny       []string
	unprotect  []string
	// denyPatterns are the --deny arguments that are name patterns.
	denyPatterns []string
	profiles     []string
	reportPath   string
	format       string
	engine       string
	bestEffort   bool
	help         bool
	// The one-terminal session's: the key that flips between the agent's
	// pane and the dashboard, and whether the session ends with the agent.
	paneKey       string
	exitWithAgent bool
	// args are the arguments as given, for the session's own agent-lock;
	// serve says this is it (paneServerArg).
	args  []string
	serve bool
	// ownTerminal says that standard input is a terminal of the
	// session's own, to be the agent's controlling terminal: the one a
	// headless client of the daemon relays (daemon.go).
	ownTerminal bool
	// allowNet are the --allow-net values; netRules the rules they and
	// the policy files grant (files first); net is --net, or the policy
	// files' net, and netFrom says which set it.
	allowNet []string
	netRules []netpolicy.Rule
	net      string
	netFrom  string
}

// isPattern tells a --deny name pattern ('*.pem') from a path.
func isPattern(s string) bool { return strings.ContainsAny(s, "*?[") }

type listFlag struct{ v *[]string }

func (l listFlag) String() string     { return "" }
func (l listFlag) Set(s string) error { *l.v = append(*l.v, s); return nil }

// parse reads [flags] [DIR] [flags] [-- COMMAND...]. Everything after the
// first "--" is the command, untouched.
func parse(args []string) (options, error) {
	var o options
	pre := args
	for i, a := range args {
		if a == "--" {
			pre, o.command = args[:i], args[i+1:]
			if len(o.command) == 0 {
				return o, errors.New("nothing after --: give the command to run, or leave out -- to run your shell")
			}
			break
		}
	}
	fs := flag.NewFlagSet("agent-lock", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&o.audit, "audit", false, "")
	fs.BoolVar(&o.headless, "headless", false, "")
	fs.BoolVar(&o.allowRoot, "allow-root", false, "")
	fs.BoolVar(&o.allowHome, "allow-home", false, "")
	fs.BoolVar(&o.bestEffort, "best-effort", false, "")
	fs.StringVar(&o.reportPath, "report", "", "")
	fs.StringVar(&o.format, "format", "", "")
	fs.StringVar(&o.engine, "engine", "", "")
	fs.StringVar(&o.paneKey, "pane-key", "", "") // else the user's policy file's, else the default
	fs.BoolVar(&o.exitWithAgent, "exit-with-agent", false, "")
	fs.Var(listFlag{&o.allowUnix}, "allow-unix", "")
	fs.Var(listFlag{&o.passEnv}, "env", "")
	fs.Var(listFlag{&o.allow}, "allow", "")
	fs.Var(listFlag{&o.allowWrite}, "allow-write", "")
	fs.Var(listFlag{&o.deny}, "deny", "")
	fs.Var(listFlag{&o.unprotect}, "unprotect", "")
	fs.Var(listFlag{&o.profiles}, "profile", "")
	fs.Var(listFlag{&o.allowNet}, "allow-net", "")
	fs.Func("net", "", func(v string) error { o.net, o.netFrom = v, "--net"; return nil })
	fs.BoolVar(&o.help, "h", false, "")
	fs.BoolVar(&o.help, "help", false, "")
	var pos []string
	for {
		if err := fs.Parse(pre); err != nil {
			return o, err
		}
		pre = fs.Args()
		if len(pre) == 0 {
			break
		}
		pos = append(pos, pre[0])
		pre = pre[1:]
	}
	switch len(pos) {
	case 0:
	case 1:
		o.dir = pos[0]
	default:
		return o, fmt.Errorf("more than one directory given (%s): put the command after --, e.g. agent-lock %s -- %s",
			strings.Join(pos, " "), pos[0], strings.Join(pos[1:], " "))
	}
	var paths []string
	for _, d := range o.deny {
		if !isPattern(d) {
			paths = append(paths, d)
			continue
		}
		if err := spec.CheckPattern(d); err != nil {
			return o, fmt.Errorf("--deny: %w", err)
		}
		o.denyPatterns = append(o.denyPatterns, d)
	}
	o.deny = paths
	for _, n := range o.passEnv {
		if n == "" || strings.ContainsAny(n, "= \x00") {
			return o, fmt.Errorf("--env %q: give a variable name (its value comes from your environment), e.g. --env GITHUB_TOKEN", n)
		}
	}
	for _, p := range o.profiles {
		if _, ok := profile.ByName(p); !ok && p != "none" {
			return o, fmt.Errorf("--profile %q: the profiles are %s, or none (agent-lock profiles lists what each grants)", p, strings.Join(profile.Names(), ", "))
		}
	}
	switch o.engine {
	case "", session.EngineAuto, session.EngineBPF, session.EngineLandlock:
	case session.EngineFileOpenOnly:
		// The benchmarks' reference (make bench), not a jail: accepted,
		// never offered.
	default:
		return o, fmt.Errorf("--engine %q: use auto, bpf-lsm or landlock", o.engine)
	}
	if o.paneKey != "" {
		if err := dashboard.CheckFlipKey(o.paneKey); err != nil {
			return o, fmt.Errorf("--pane-key: %w", err)
		}
	}
	mode, err := netpolicy.ParseMode(o.net)
	if err != nil {
		return o, fmt.Errorf("--net %w", err)
	}
	for _, a := range o.allowNet {
		rs, err := netpolicy.Parse(a, "--allow-net")
		if err != nil {
			return o, fmt.Errorf("--allow-net %w", err)
		}
		o.netRules = append(o.netRules, rs...)
	}
	if mode != netpolicy.Grants && len(o.allowNet) > 0 {
		return o, fmt.Errorf("--net %s and --allow-net %s: --net %s grants %s; leave out one of them", o.net, o.allowNet[0], o.net,
			map[netpolicy.Mode]string{netpolicy.Off: "no host", netpolicy.Open: "every host"}[mode])
	}
	if o.format != "" && o.format != "json" && o.format != "text" {
		return o, fmt.Errorf("--format %q: use json or text", o.format)
	}
	return o, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	// A terminal answers for its settings; /dev/null, a character
	// device too, does not.
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func version() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}
