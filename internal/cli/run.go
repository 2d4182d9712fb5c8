package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/daemon"
	"github.com/agent-lock/agent-lock/internal/dashboard"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/recording"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/session"
)

// run jails the agent. Every session is recorded in the user's state
// folder; on a terminal, unless --headless, the agent runs in a pane beside
// the cell's live view (pane.go), run by a session agent-lock of its own.
func run(ctx context.Context, o options, stdout, stderr io.Writer) int {
	// Without root: through the daemon, or, where none answers, alone
	// (Landlock needs no privilege; session.Options.Alone).
	alone := os.Geteuid() != 0
	if alone && !o.serve {
		// The daemon serves no process under no_new_privs (a cell's, or
		// another sandbox's: flatpak, a NoNewPrivileges service, a
		// container run so): one could ask it for a cell of its own
		// choosing. Landlock alone can only narrow that sandbox.
		if sandboxed, _ := session.InCell(os.Getpid()); sandboxed {
			fmt.Fprintln(stderr, "agent-lock: this process runs in an agent-lock cell or another sandbox (no_new_privs), which the daemon serves no session: Landlock alone jails the agent, inside it")
		} else if _, err := daemon.Ping(daemon.SocketPath()); !errors.Is(err, daemon.ErrNoDaemon) {
			return viaDaemon(ctx, o, stdout, stderr)
		}
	}
	if !o.serve && !o.headless && isTerminal(stdout) && isTerminal(os.Stdin) {
		return startPane(ctx, ownPane(o.args), stdout, stderr, func(err error) int {
			fmt.Fprintf(stderr, "agent-lock: %v\n", err)
			return session.ExitFailed
		})
	}
	failed := func(err error) int {
		fmt.Fprintf(stderr, "agent-lock: %v\n", err)
		var se *session.Error
		if errors.As(err, &se) {
			return se.Code
		}
		return session.ExitFailed
	}
	invoking := func() (session.Agent, error) { return session.InvokingUser(o.allowRoot) }
	if alone {
		invoking = session.Self
	}
	agent, err := invoking()
	if err != nil {
		return failed(err)
	}
	// As the user: whether DIR exists, and where its links lead, is
	// the user's to learn, not root's to say.
	var dir string
	if err := asuser.Do(agent.ID(), func() error {
		var err error
		dir, err = session.ResolveDir(o.dir)
		return err
	}); err != nil {
		return failed(err)
	}
	if _, err := applyPolicyFiles(&o, agent.ID(), agent.Home, dir); err != nil {
		return failed(err)
	}
	owner := agent.ID()
	recDir, err := recording.For(dir, agent.Home, stateHomeEnv(), owner)
	if err != nil {
		return failed(fmt.Errorf("recordings folder: %w", err))
	}
	id := strings.TrimSuffix(recording.Name(time.Now(), os.Getpid()), recording.Ext)
	recFile, err := recording.Create(recDir, id+recording.Ext, owner)
	if err != nil {
		// A home without a writable state folder (a system user, a
		// read-only home) records under /run instead.
		runDir, rerr := recording.RunDir(owner)
		if rerr == nil {
			recDir = runDir
			recFile, rerr = recording.Create(recDir, id+recording.Ext, owner)
		}
		if rerr != nil {
			return failed(fmt.Errorf("cannot record the session: %v; nor in %s: %v", err, recDir, rerr))
		}
	}
	defer recFile.Close()
	writers := []report.Writer{report.NewJSON(recFile)}

	opts := o.session(dir, agent, recDir)
	opts.Alone = alone
	if o.ownTerminal {
		opts.Terminal = os.Stdin
	}
	if o.reportPath != "" {
		// Where the agent may write decides where the report is kept
		// while the session runs.
		plan, err := session.Prepare(opts, agent)
		if err != nil {
			discardIfEmpty(recFile)
			return failed(err)
		}
		rep, err := openReport(o.reportPath, owner, plan.Policy.Writable, stagedReport(recDir, id, owner))
		if err != nil {
			discardIfEmpty(recFile)
			return failed(err)
		}
		defer func() {
			if err := rep.Close(); err != nil {
				fmt.Fprintf(stderr, "agent-lock: %v\n", err)
			}
		}()
		opts.Plan = &plan
		if n := rep.Note(); n != "" {
			fmt.Fprintf(stderr, "agent-lock: %s\n", n)
		}
		if o.format == "text" {
			writers = append(writers, report.NewText(rep.Writer()))
		} else {
			writers = append(writers, report.NewJSON(rep.Writer()))
		}
	}

	if o.serve {
		return servePane(ctx, o, opts, writers, recDir, id, recFile.Name(), agent, owner, stdout, stderr)
	}
	// Headless, or off a terminal: the agent has agent-lock's standard
	// streams. On a terminal nothing is written over the agent's screen
	// while it runs (the recording and --report have every record): one
	// summary when it is over.
	quiet := isTerminal(stderr)
	var warns *warnings
	if quiet {
		warns = &warnings{}
		opts.Warnings = warns
	} else if o.reportPath == "" {
		if o.format == "json" || (o.format == "" && !isTerminal(stderr)) {
			writers = append(writers, report.NewJSON(stderr))
		} else {
			writers = append(writers, report.NewText(stderr))
		}
	}
	opts.Report = report.Tee(writers...)
	code, err := session.Run(ctx, opts)
	if warns != nil {
		for _, l := range warns.taken() {
			fmt.Fprintln(stderr, l)
		}
	}
	if err != nil {
		discardIfEmpty(recFile)
		return failed(err)
	}
	if quiet {
		if recs, err := readRecording(recFile.Name(), owner); err == nil {
			board := dashboard.NewBoard(0)
			for _, r := range recs {
				board.Apply(r)
			}
			fmt.Fprintln(stderr, dashboard.Summary(board, agent.Home))
		}
	}
	fmt.Fprintf(stderr, "agent-lock: session recorded in %s (agent-lock replay %s)\n", recFile.Name(), recFile.Name())
	return code
}

// discardIfEmpty removes a recording or log that a session which never
// started left empty.
func discardIfEmpty(f *os.File) {
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		os.Remove(f.Name())
	}
}

// stateHomeEnv is XDG_STATE_HOME when it is the invoking user's own: under
// sudo the environment may be root's or anyone's, so only the default
// (~/.local/state) is trusted.
func stateHomeEnv() string {
	if os.Getenv("SUDO_UID") != "" {
		return ""
	}
	return os.Getenv("XDG_STATE_HOME")
}

// watchDirs are the folders to look for the caller's sessions in: the
// sudo user's when run through sudo, the caller's own otherwise.
func watchDirs() ([]string, error) {
	if os.Getenv("SUDO_UID") != "" {
		a, err := session.InvokingUser(true)
		if err != nil {
			return nil, err
		}
		return recording.Dirs(a.Home, "", a.UID), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, err
	}
	return recording.Dirs(home, os.Getenv("XDG_STATE_HOME"), uint32(os.Getuid())), nil
}

// warnings takes the session's warnings while the dashboard or the agent
// owns the terminal: a line written to it there would land in the middle of
// the screen. Each line goes to the dashboard at once, if there is one, and
// is printed again once the terminal is the user's.
type warnings struct {
	mu    sync.Mutex
	send  func(tea.Msg)
	part  []byte
	lines []string
}

func (w *warnings) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.part[:i])
		w.part = w.part[i+1:]
		w.lines = append(w.lines, line)
		if w.send != nil {
			w.send(dashboard.WarningMsg(strings.TrimPrefix(line, "agent-lock: ")))
		}
	}
}

// taken returns every line written so far, an unfinished last one included.
func (w *warnings) taken() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := w.lines
	if len(w.part) > 0 {
		lines = append(lines, string(w.part))
	}
	return lines
}

// session is what o asks of a session in dir for agent; recDir is where
// it is recorded, "" for none yet.
func (o options) session(dir string, agent session.Agent, recDir string) session.Options {
	return session.Options{
		Dir: dir, Command: o.command, Audit: o.audit, AllowRoot: o.allowRoot, AllowHome: o.allowHome,
		AllowUnix: o.allowUnix, Version: version(), PassEnv: o.passEnv, Engine: o.engine,
		Allow: o.allow, AllowWrite: o.allowWrite, Unprotect: o.unprotect,
		Profiles: o.profiles, DenyPatterns: o.denyPatterns, Deny: o.deny, BestEffort: o.bestEffort,
		NetMode: netMode(o.net), NetFrom: o.netFrom, AllowNet: o.netRules,
		// What watch shows and what trusts a project: an agent that could
		// write them would forge its sessions or widen its next cell.
		Private: []string{recDir, recording.Dir(agent.Home, stateHomeEnv()), filepath.Dir(filepath.Join(agent.Home, policy.HomeFile))},
		Started: o.started,
		Scan:    o.scan,
	}
}

// netMode is --net's mode; parse checked it.
func netMode(s string) netpolicy.Mode {
	m, _ := netpolicy.ParseMode(s)
	return m
}
