package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/dashboard"
	"github.com/agent-lock/agent-lock/internal/recording"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/session"
)

const watchUsage = `Usage: agent-lock watch [SESSION]
       agent-lock watch --list

Attaches a dashboard to a running session (for example one started with
--headless, so that the agent keeps its own terminal). With one session
running, SESSION can be left out; --list shows the running ones. Run it as
the user who started the session (or as root). q detaches; the session goes on.
`

func watch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	list := fs.Bool("list", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, watchUsage)
			return 0
		}
		fmt.Fprintf(stderr, "agent-lock watch: %v\n%s", err, watchUsage)
		return session.ExitFailed
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "agent-lock watch: name at most one session\n%s", watchUsage)
		return session.ExitFailed
	}
	dirs, err := watchDirs()
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock watch: %v\n", err)
		return session.ExitFailed
	}
	var unfinished, running []recording.Session
	for _, d := range dirs {
		r, err := recording.Unfinished(d)
		if err != nil {
			fmt.Fprintf(stderr, "agent-lock watch: %s: %v\n", d, err)
			return session.ExitFailed
		}
		unfinished = append(unfinished, r...)
	}
	for _, s := range unfinished {
		if !s.Died {
			running = append(running, s)
		}
	}
	if *list {
		if len(unfinished) == 0 {
			fmt.Fprintf(stdout, "no running sessions (looked in %s)\n", strings.Join(dirs, ", "))
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SESSION\tSTATE\tSTARTED\tMODE\tDIR\tAGENT")
		for _, s := range unfinished {
			// A session whose agent-lock was killed never gets its
			// summary; it is over all the same (its cell was killed, or
			// the next agent-lock run kills it).
			state := "running"
			if s.Died {
				state = "ended (agent-lock was killed; no summary)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, state, s.Start.Time.Local().Format(time.DateTime),
				s.Start.Mode, s.Start.Dir, strings.Join(s.Start.Agent, " "))
		}
		tw.Flush()
		return 0
	}
	path, err := pick(running, dirs, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock watch: %v\n", err)
		return session.ExitFailed
	}
	// Open before touching the terminal: a session the caller may not read
	// is refused with a message, not a blank dashboard.
	f, err := asuser.OpenFile(caller(), path, os.O_RDONLY, 0)
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock watch: %v (only root and the user who started the session can watch it)\n", err)
		return session.ExitFailed
	}
	defer f.Close()

	home, _ := os.UserHomeDir()
	if a, err := session.InvokingUser(true); err == nil && os.Getenv("SUDO_UID") != "" {
		home = a.Home
	}
	m := dashboard.New(dashboard.Options{Home: home})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithInput(stdin), tea.WithOutput(stdout))
	go func() {
		err := recording.Follow(ctx, f, func(recs []report.Record) { p.Send(dashboard.RecordsMsg(recs)) })
		if ctx.Err() == nil {
			p.Send(dashboard.EndMsg{Err: err})
		}
	}()
	if _, err := p.Run(); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "agent-lock watch: %v\n", err)
		return session.ExitFailed
	}
	if ended, err := m.Ended(); ended && err != nil {
		fmt.Fprintf(stderr, "agent-lock watch: %v\n", err)
		return session.ExitFailed
	}
	fmt.Fprintln(stdout, dashboard.Summary(m.Board(), home))
	return 0
}

// pick resolves the session to watch among the running ones.
func pick(running []recording.Session, dirs []string, arg string) (string, error) {
	if arg == "" {
		switch len(running) {
		case 0:
			return "", fmt.Errorf("no running session (looked in %s): start one with sudo agent-lock --headless DIR -- COMMAND", strings.Join(dirs, ", "))
		case 1:
			return running[0].Path, nil
		}
		ids := make([]string, len(running))
		for i, s := range running {
			ids[i] = s.ID
		}
		return "", fmt.Errorf("%d sessions are running (%s): name one", len(running), strings.Join(ids, ", "))
	}
	if strings.Contains(arg, "/") {
		return arg, nil
	}
	for _, d := range dirs {
		if p, err := recording.Find(d, arg); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no session %q: agent-lock watch --list shows the running ones", arg)
}
