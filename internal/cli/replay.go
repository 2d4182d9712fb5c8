package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"

	tea "charm.land/bubbletea/v2"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/dashboard"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/session"
)

const replayUsage = `Usage: agent-lock replay [--fast] FILE

Shows a recorded session (a JSON-lines report) in the dashboard, at recorded
speed, or all at once with --fast. Keys as in a live session; q quits and
prints the session summary.
`

// replay runs the dashboard over a recorded report. The whole file is read
// and checked before the terminal is touched, so a bad file costs an error
// message and nothing else.
func replay(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fast := fs.Bool("fast", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, replayUsage)
			return 0
		}
		fmt.Fprintf(stderr, "agent-lock replay: %v\n%s", err, replayUsage)
		return session.ExitFailed
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "agent-lock replay: name one recorded session file\n%s", replayUsage)
		return session.ExitFailed
	}
	path := fs.Arg(0)
	recs, err := readRecording(path, caller())
	if err != nil {
		fmt.Fprintf(stderr, "agent-lock replay: %v\n", err)
		return session.ExitFailed
	}

	player := dashboard.NewPlayer(recs, *fast)
	m := dashboard.New(dashboard.Options{Home: homeOf(recs), Now: player.Now})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithInput(stdin), tea.WithOutput(stdout))
	go player.Play(ctx, p.Send)
	// A cancelled context (SIGINT/SIGTERM to agent-lock) is a way to quit.
	if _, err := p.Run(); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "agent-lock replay: %v\n", err)
		return session.ExitFailed
	}
	fmt.Fprintln(stdout, dashboard.Summary(m.Board(), homeOf(recs)))
	return 0
}

// readRecording parses a whole report file, read as id; its errors name
// the file and, through report.Read, the line.
func readRecording(path string, id asuser.ID) ([]report.Record, error) {
	f, err := asuser.OpenFile(id, path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []report.Record
	if err := report.Read(f, func(r report.Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("%s: %w (is it a JSON-lines report from agent-lock --report?)", path, err)
	}
	if len(recs) == 0 || recs[0].Start == nil {
		return nil, fmt.Errorf("%s: not an agent-lock recording: it does not begin with a start record", path)
	}
	return recs, nil
}

// homeOf is the recorded user's home, for ~ in paths, if this machine
// knows the user.
func homeOf(recs []report.Record) string {
	if len(recs) == 0 || recs[0].Start == nil {
		return ""
	}
	if u, err := user.Lookup(recs[0].Start.User); err == nil {
		return u.HomeDir
	}
	return ""
}

// caller is whom agent-lock reads a user's files as: under sudo, the user
// who ran it (root reading a path the user named would follow the user's
// links with root's rights); otherwise whoever runs it.
func caller() asuser.ID {
	if os.Geteuid() == 0 && os.Getenv("SUDO_UID") != "" {
		if a, err := session.InvokingUser(true); err == nil {
			return a.ID()
		}
	}
	groups, _ := os.Getgroups()
	id := asuser.ID{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	for _, g := range groups {
		id.Groups = append(id.Groups, uint32(g))
	}
	return id
}
