package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/attach"
	"github.com/agent-lock/agent-lock/internal/dashboard"
	"github.com/agent-lock/agent-lock/internal/recording"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/session"
)

// The one-terminal session. On a terminal, unless --headless, the agent
// runs on a pseudo-terminal agent-lock owns and the user's terminal shows
// it in a pane beside the cell's live view. So that the terminal can be
// detached and attached again while the agent runs on, the session is not
// run by the agent-lock the user started: that one starts the session's
// own agent-lock (paneServerArg: a session of its own, no terminal) and
// hands it the terminal over the session's socket (internal/attach), as
// `agent-lock attach` does later, then waits for its end.

// paneServerArg starts the session's agent-lock: the arguments that follow
// are the user's.
const paneServerArg = "__pane-server"

// readyLine is the session's agent-lock's word that its socket listens; the
// socket's path follows. Whatever it writes before is the user's to read
// (a bad flag, a policy error, a note about the cell).
const readyLine = "\x00agent-lock-pane-ready "

// startPane starts the session's agent-lock with start, passes on what it
// says until its socket is ready, and attaches this terminal to it.
func startPane(ctx context.Context, start paneStarter, stdout, stderr io.Writer, failed func(error) int) int {
	r, w, err := os.Pipe()
	if err != nil {
		return failed(err)
	}
	wait, err := start(w)
	w.Close()
	if err != nil {
		r.Close()
		return failed(fmt.Errorf("start the session: %w", err))
	}
	// r stays open until this process ends: a late write of the server's
	// to a pipe nobody holds would kill it (SIGPIPE).
	br := bufio.NewReader(r)
	var sock string
	for {
		line, err := br.ReadString('\n')
		if p, ok := strings.CutPrefix(line, readyLine); ok {
			sock = strings.TrimSuffix(p, "\n")
			break
		}
		io.WriteString(stderr, line)
		if err != nil {
			// It ended before its socket was ready: it said why.
			if code := wait(); code > 0 {
				return code
			}
			return session.ExitFailed
		}
	}
	go wait()
	return attachTo(ctx, sock, stdout, stderr)
}

// paneStarter starts a one-terminal session's agent-lock, its output and
// error on w, and returns what waits for its exit status.
type paneStarter func(w *os.File) (wait func() int, err error)

// ownPane starts the session's agent-lock as this one's child, with the
// user's arguments args.
func ownPane(args []string) paneStarter {
	return func(w *os.File) (func() int, error) {
		cmd := exec.Command("/proc/self/exe", append([]string{paneServerArg}, args...)...)
		cmd.Args[0] = "agent-lock"
		cmd.Stdout, cmd.Stderr = w, w
		// A session of its own: the terminal's hangup and keys are not
		// its; it learns that the terminal closed from the socket.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return func() int {
			cmd.Wait()
			return cmd.ProcessState.ExitCode()
		}, nil
	}
}

// attachTo hands this terminal to the session at sock until it gives it back.
func attachTo(ctx context.Context, sock string, stdout, stderr io.Writer) int {
	end, err := attach.Attach(ctx, sock, os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock: %v\n", err)
		if end.Code != 0 {
			return end.Code
		}
		return session.ExitFailed
	}
	if end.Text != "" {
		fmt.Fprintln(stdout, strings.TrimSuffix(end.Text, "\n"))
	}
	return end.Code
}

const attachUsage = `Usage: agent-lock attach [SESSION]

Brings back the pane of a one-terminal session (agent-lock [DIR] -- COMMAND
on a terminal, detached with its d key): the agent, interactive, and the
cell's live view. With one such session running, SESSION can be left out;
agent-lock watch --list shows the running ones. Run it as the user who
started the session (or as root), from any terminal; a terminal attached
elsewhere is detached.
`

// attachCmd is `agent-lock attach [SESSION]`.
func attachCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, attachUsage)
		return 0
	}
	if len(args) > 1 || (len(args) == 1 && strings.HasPrefix(args[0], "-")) {
		fmt.Fprintf(stderr, "agent-lock attach: name at most one session\n%s", attachUsage)
		return session.ExitFailed
	}
	if !isTerminal(os.Stdin) || !isTerminal(stdout) {
		fmt.Fprintln(stderr, "agent-lock attach: standard input and output must be a terminal (agent-lock watch shows a session's reports anywhere)")
		return session.ExitFailed
	}
	dirs, err := watchDirs()
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock attach: %v\n", err)
		return session.ExitFailed
	}
	var panes []recording.Session
	for _, d := range dirs {
		r, err := recording.Running(d)
		if err != nil {
			fmt.Fprintf(stderr, "agent-lock attach: %s: %v\n", d, err)
			return session.ExitFailed
		}
		for _, s := range r {
			if _, ok := attach.Find(dirs, s.ID); ok {
				panes = append(panes, s)
			}
		}
	}
	var id string
	if len(args) == 1 {
		id = strings.TrimSuffix(filepath.Base(args[0]), recording.Ext)
	} else {
		switch len(panes) {
		case 0:
			fmt.Fprintf(stderr, "agent-lock attach: no session with a pane is running (looked in %s)\n", strings.Join(dirs, ", "))
			return session.ExitFailed
		case 1:
			id = panes[0].ID
		default:
			ids := make([]string, len(panes))
			for i, s := range panes {
				ids[i] = s.ID
			}
			fmt.Fprintf(stderr, "agent-lock attach: %d sessions have a pane (%s): name one\n", len(panes), strings.Join(ids, ", "))
			return session.ExitFailed
		}
	}
	sock, ok := attach.Find(dirs, id)
	if !ok {
		fmt.Fprintf(stderr, "agent-lock attach: session %s has no pane to attach to (it ended, or runs --headless or off a terminal: agent-lock watch %s shows its reports)\n", id, id)
		return session.ExitFailed
	}
	return attachTo(ctx, sock, stdout, stderr)
}

// servePane is the session's agent-lock: it owns the agent's terminal and
// runs the session, and draws on whichever terminal is attached.
func servePane(ctx context.Context, o options, opts session.Options, writers []report.Writer, recDir, id, recPath string,
	agent session.Agent, owner asuser.ID, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "agent-lock: %v\n", err)
		return session.ExitFailed
	}
	ln, err := listen(recDir, id, owner)
	if err != nil {
		return fail(err)
	}
	defer ln.Close()
	var reports *paneReports
	ln.Refuse = func(pid int) error {
		in, err := session.InCell(pid)
		if in && reports != nil {
			// Where the engine lets the agent connect to the socket
			// (Landlock before ABI 9), this is the refusal, and an escape.
			reports.escape(report.OpAttach, ln.Path(), pid, "a process of a cell may not attach to a session")
		}
		if in || err != nil {
			return errors.New("a process in an agent-lock cell or another sandbox (no_new_privs) cannot attach to a session")
		}
		return nil
	}
	logFile, err := recording.Create(recDir, id+".log", owner)
	if err != nil {
		return fail(fmt.Errorf("agent-lock's log: %w", err))
	}
	defer func() {
		logFile.Close()
		discardIfEmpty(logFile)
	}()

	master, slave, err := pty.Open()
	if err != nil {
		return fail(fmt.Errorf("a terminal for the agent: %w", err))
	}
	defer master.Close()
	defer slave.Close()
	// The agent's own terminal is the user's (as login makes a terminal
	// its user's), so that programs that open /dev/tty (less, vim, ssh)
	// can; nobody else's.
	if err := errors.Join(unix.Fchown(int(slave.Fd()), int(agent.UID), -1), unix.Fchmod(int(slave.Fd()), 0o600)); err != nil {
		return fail(fmt.Errorf("give the agent its terminal: %w", err))
	}

	reports = &paneReports{w: report.Tee(writers...), master: master}
	pane := dashboard.NewPane(master, 80, 24, reports.clipboard)
	m := dashboard.New(dashboard.Options{Home: agent.Home, Pane: pane, FlipKey: o.paneKey, ExitWithAgent: o.exitWithAgent})
	h := &hub{model: m}
	pane.Start(h.Send)
	defer pane.Close()
	sink := dashboard.NewSink(h.Send)
	reports.w = report.Tee(append(writers, sink)...)
	opts.Report = reports
	warns := &warnings{send: h.Send}
	opts.Warnings = warns
	opts.Terminal = slave

	// The socket listens: the agent-lock the user started attaches. From
	// here on this process has no terminal to write to: what it would
	// write goes to its log beside the recording.
	fmt.Fprintf(stdout, "%s%s\n", readyLine, ln.Path())
	for _, fd := range []int{1, 2} {
		unix.Dup2(int(logFile.Fd()), fd)
	}

	clients := make(chan *attach.Client)
	go func() {
		defer close(clients)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			clients <- c
		}
	}()
	var client *attach.Client
	select {
	case client = <-clients:
	case <-time.After(time.Minute):
		return fail(errors.New("no terminal attached to the session within a minute"))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	uiDone := make(chan dashboard.Exit, 1)
	h.attach(client, uiDone)

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var code int
	var runErr error
	sessionDone := make(chan struct{})
	go func() {
		code, runErr = session.Run(sctx, opts)
		sink.Close()
		close(sessionDone)
	}()

	ended, uiRunning := false, true
	// stopUI ends the attached terminal's dashboard, if it runs.
	stopUI := func(kill bool) {
		if !uiRunning {
			return
		}
		h.stop(kill)
		uiRunning = false
		select {
		case <-uiDone:
		case <-time.After(10 * time.Second):
			// Stuck writing to a terminal whose other end nobody reads:
			// left to its write, the session goes on without it. Its
			// word, should it come, goes to a channel no one reads.
			uiDone = make(chan dashboard.Exit, 1)
		}
	}
	for !(ended && client == nil) {
		var resizes <-chan struct{}
		var gone <-chan struct{}
		if client != nil {
			resizes, gone = client.Resizes(), client.Gone()
		}
		select {
		case c, ok := <-clients:
			if !ok {
				clients = nil
				continue
			}
			if client != nil {
				stopUI(false)
				client.End(attach.End{Text: fmt.Sprintf("agent-lock: detached: session %s was attached from another terminal", id)})
			}
			client, uiRunning = c, true
			h.attach(client, uiDone)
		case <-resizes:
			h.Send(tea.RequestWindowSize())
		case <-gone:
			// The terminal closed (or its agent-lock was killed): the
			// session ends, as when a terminal closes under a shell.
			stopUI(true)
			client.Close()
			client = nil
			stop()
		case exit := <-uiDone:
			uiRunning = false
			switch exit {
			case dashboard.ExitDetach:
				client.End(attach.End{Text: fmt.Sprintf("agent-lock: detached; the agent runs on. agent-lock attach %s brings it back, agent-lock watch %s shows its reports.", id, id)})
				client = nil
			case dashboard.ExitQuit:
				fmt.Fprint(client.Out, "agent-lock: stopping the agent…\r\n")
				stop()
				if !ended {
					<-sessionDone
					ended = true
				}
			case dashboard.ExitDone:
			default:
				// The terminal failed under the dashboard (a hangup).
				client.Close()
				client = nil
				stop()
				continue
			}
			if ended && client != nil {
				client.End(attach.End{Text: paneSummary(m, runErr, code, warns, recPath, owner, agent.Home), Code: exitCode(code, runErr)})
				client = nil
			}
		case <-sessionDone:
			sessionDone, ended = nil, true
			switch {
			case client != nil && ctx.Err() != nil:
				// Told to end (SIGTERM): no waiting for a key.
				stopUI(false)
				client.End(attach.End{Text: paneSummary(m, runErr, code, warns, recPath, owner, agent.Home), Code: exitCode(code, runErr)})
				client = nil
			case client != nil:
				h.Send(dashboard.EndMsg{Err: runErr})
			}
		}
	}
	if m.Board().Start == nil {
		// The agent never started: nothing to replay.
		if f, err := os.Stat(recPath); err == nil && f.Size() == 0 {
			os.Remove(recPath)
		}
	}
	return exitCode(code, runErr)
}

// listen makes the session's socket beside its recording, or in the
// user's folder under /run where that path is too long for a socket.
func listen(recDir, id string, owner asuser.ID) (*attach.Listener, error) {
	ln, err := attach.Listen(filepath.Join(recDir, attach.SocketName(id)), owner)
	if err == nil {
		return ln, nil
	}
	run, rerr := recording.RunDir(owner)
	if rerr != nil || run == recDir {
		return nil, err
	}
	return attach.Listen(filepath.Join(run, attach.SocketName(id)), owner)
}

func exitCode(code int, err error) int {
	if err != nil {
		var se *session.Error
		if errors.As(err, &se) {
			return se.Code
		}
		return session.ExitFailed
	}
	return code
}

// paneSummary is what the terminal shows once the session is over: the
// warnings, the error, or the recording's summary (the dashboard stopped
// taking records at q; the agent's last moments are only in the recording).
func paneSummary(m *dashboard.Model, runErr error, code int, warns *warnings, recPath string, owner asuser.ID, home string) string {
	var sb strings.Builder
	for _, l := range warns.taken() {
		sb.WriteString(l + "\n")
	}
	if runErr != nil {
		fmt.Fprintf(&sb, "agent-lock: %v\n", runErr)
	}
	if m.Board().Start != nil {
		board := m.Board()
		if recs, err := readRecording(recPath, owner); err == nil {
			board = dashboard.NewBoard(0)
			for _, r := range recs {
				board.Apply(r)
			}
		} else {
			fmt.Fprintf(&sb, "agent-lock: the summary below is the dashboard's, the recording could not be read: %v\n", err)
		}
		sb.WriteString(dashboard.Summary(board, home) + "\n")
		fmt.Fprintf(&sb, "recording: %s (agent-lock replay %s)\n", recPath, recPath)
	}
	return sb.String()
}

// hub passes the session's messages to the dashboard of the terminal
// attached, or, with none attached, to the model itself, so that the
// board is up to date when a terminal attaches again.
type hub struct {
	mu    sync.Mutex
	model *dashboard.Model
	p     *tea.Program
}

func (h *hub) Send(msg tea.Msg) {
	h.mu.Lock()
	p := h.p
	if p == nil {
		h.model.Update(msg) // its commands are for a screen there is none of
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	// Outside the lock: a dashboard stuck writing to its terminal (one
	// whose other end nobody reads) blocks this, and stop, which ends
	// it, must still get the lock.
	p.Send(msg)
}

// attach runs the dashboard on c's terminal; done gets why it quit.
func (h *hub) attach(c *attach.Client, done chan<- dashboard.Exit) {
	p := tea.NewProgram(h.model, tea.WithInput(c.In), tea.WithOutput(c.Out), tea.WithEnvironment(c.Env),
		// The session's signals are the session's (SIGTERM ends it),
		// not the dashboard's.
		tea.WithoutSignalHandler(),
		// A frame every 8 ms, Bubble Tea's most: a key's echo waits for
		// the next frame.
		tea.WithFPS(120))
	h.mu.Lock()
	h.p = p
	h.mu.Unlock()
	go func() {
		p.Run()
		h.mu.Lock()
		h.p = nil
		exit := h.model.Exit()
		h.mu.Unlock()
		done <- exit
	}()
}

// stop ends the attached terminal's dashboard: restoring the terminal, or
// not (kill) when it is gone.
func (h *hub) stop(kill bool) {
	h.mu.Lock()
	p := h.p
	h.mu.Unlock()
	if p == nil {
		return
	}
	if kill {
		p.Kill()
	} else {
		p.Quit()
	}
}

// paneReports is the session's report, with what the pane keeps from the
// user's terminal added: the agent's clipboard writes (OSC 52), as escapes
// that agent-lock itself (not the kernel) refused. They are written between
// the session's start and its summary only.
type paneReports struct {
	w      report.Writer
	master *os.File

	mu             sync.Mutex
	started, ended bool
}

func (r *paneReports) Start(s report.Start) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = true
	return r.w.Start(s)
}
func (r *paneReports) Escape(e report.Event) error      { return r.w.Escape(e) }
func (r *paneReports) Open(e report.Event) error        { return r.w.Open(e) }
func (r *paneReports) Progress(p report.Progress) error { return r.w.Progress(p) }
func (r *paneReports) Summary(s report.Summary) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true
	return r.w.Summary(s)
}

// clipboard reports an OSC 52 of the agent's: by the process that held the
// terminal's foreground, which wrote it or ran what did.
func (r *paneReports) clipboard(c dashboard.Clipboard) {
	op := report.OpClipboard
	if c.Read {
		op = report.OpClipboardRead
	}
	pg, err := unix.IoctlGetInt(int(r.master.Fd()), unix.TIOCGPGRP)
	if err != nil {
		pg = 0
	}
	r.escape(op, report.ClipboardPath, pg, "the pane keeps the terminal's clipboard")
}

// escape reports what agent-lock itself refused the agent's process pid.
func (r *paneReports) escape(op, path string, pid int, rule string) {
	e := report.Event{Time: time.Now(), Op: op, Path: path, Verdict: report.Blocked, Rule: rule}
	if pid > 0 {
		e.PID, e.TID = uint32(pid), uint32(pid)
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
			e.Comm = strings.TrimSpace(string(b))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started && !r.ended {
		r.w.Escape(e)
	}
}
