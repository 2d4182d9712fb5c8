package dashboard

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/agent-lock/agent-lock/internal/report"
)

// RecordsMsg delivers report records to the dashboard. Sources batch them
// (see Feed): one update per batch is what keeps the screen redrawing under
// a flood of 100,000 events a second.
type RecordsMsg []report.Record

// EndMsg says the source has no more records: the session ended or the
// recording was fully replayed. Err is why it ended early, if it did.
type EndMsg struct{ Err error }

// WarningMsg is one of agent-lock's own warnings (a cell that could not be
// pinned, an event reader that failed): the dashboard owns the terminal, so
// it shows them itself instead of letting them scribble over the screen.
type WarningMsg string

// tickMsg redraws the screen so the sparkline moves while nothing arrives.
type tickMsg time.Time

// Options configure a dashboard.
type Options struct {
	// Home is the user's home directory, shown as ~.
	Home string
	// Now is the clock (time.Now if nil); replays pass the recording's.
	Now func() time.Time
	// MaxPaths bounds the distinct paths kept (DefaultMaxPaths if 0).
	MaxPaths int
	// Pane is the agent's terminal, for a one-terminal session: the
	// dashboard then shows it, interactive, beside the live view, and
	// FlipKey (DefaultFlipKey if "") switches to the full dashboard and
	// back. Watch and replay have none.
	Pane    *Pane
	FlipKey string
	// ExitWithAgent ends a one-terminal session's dashboard when the
	// agent exits, instead of saying so and waiting for a key.
	ExitWithAgent bool
}

// Exit is why a one-terminal dashboard quit.
type Exit int

const (
	ExitNone   Exit = iota
	ExitDetach      // d: the session goes on without a terminal
	ExitQuit        // q: the session ends, the agent is stopped
	ExitDone        // the agent had exited and the user closed the pane
)

// Model is the Bubble Tea model of the dashboard.
type Model struct {
	board          *Board
	home           string
	now            func() time.Time
	width, height  int
	cursor, offset int
	detail         bool
	copied         string // the summary shown after c, until the next key
	ended          bool
	endErr         error
	warning        string // the latest WarningMsg
	warnings       int
	keys           keyMap
	help           help.Model

	// A one-terminal session's: the agent's terminal, whether the full
	// dashboard is shown instead of it, the size last given to it.
	pane          *Pane
	showBoard     bool
	paneW, paneH  int
	exitWithAgent bool
	exit          Exit
}

// New returns a dashboard over an empty board.
func New(o Options) *Model {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	flip := o.FlipKey
	if flip == "" {
		flip = DefaultFlipKey
	}
	return &Model{board: NewBoard(o.MaxPaths), home: o.Home, now: now, width: 80, height: 24,
		keys: newKeyMap(o.Pane != nil, flip), help: newHelp(), pane: o.Pane, exitWithAgent: o.ExitWithAgent}
}

// Board is the model's aggregate, for the summary printed at the end.
func (m *Model) Board() *Board { return m.board }

// Ended reports whether the source said it has no more records, and why.
func (m *Model) Ended() (bool, error) { return m.ended, m.endErr }

// Exit says why a one-terminal dashboard quit, and resets it for the next
// terminal to attach.
func (m *Model) Exit() Exit {
	e := m.exit
	m.exit = ExitNone
	m.showBoard = false
	return e
}

func tick() tea.Cmd {
	return tea.Tick(250*time.Millisecond, func(t time.Time) tea.Msg { return tickMsg(t) })
}

func (m *Model) Init() tea.Cmd {
	if m.pane != nil {
		// The emulator tells the agent the user's terminal's colours.
		return tea.Batch(tick(), tea.RequestBackgroundColor, tea.RequestForegroundColor)
	}
	return tick()
}

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case RecordsMsg:
		for _, r := range msg {
			m.board.Apply(r)
		}
	case PaneMsg:
		if m.pane != nil {
			m.pane.Seen()
		}
	case tea.BackgroundColorMsg:
		if m.pane != nil {
			m.pane.SetColors(nil, msg.Color)
		}
	case tea.ForegroundColorMsg:
		if m.pane != nil {
			m.pane.SetColors(msg.Color, nil)
		}
	case EndMsg:
		m.ended, m.endErr = true, msg.Err
		// A source that failed (a session that could not start, a
		// recording that broke off) has nothing more to show: give the
		// terminal back so the error can be read.
		if msg.Err != nil || (m.pane != nil && m.exitWithAgent) {
			m.exit = ExitDone
			return m, tea.Quit
		}
	case WarningMsg:
		m.warning, m.warnings = string(msg), m.warnings+1
	case tickMsg:
		return m, tick()
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		return m, m.layoutPane()
	case tea.KeyPressMsg:
		return m, m.key(msg)
	case tea.PasteMsg:
		if m.paneShown() && !m.ended {
			m.pane.Paste(msg.Content)
		}
	case tea.MouseMsg:
		if m.paneShown() && !m.ended {
			x, y, w, h := m.paneArea()
			if mm := msg.Mouse(); mm.X >= x && mm.X < x+w && mm.Y >= y && mm.Y < y+h {
				m.pane.Mouse(msg, mm.X-x, mm.Y-y)
			}
		}
	}
	return m, nil
}

// scrollPage is how far a scroll key moves the pane: its height less a
// line, which stays in sight.
func (m *Model) scrollPage() int {
	_, _, _, h := m.paneArea()
	return max(1, h-1)
}

// paneShown reports whether the agent's pane is on the screen (and so
// gets the keys).
func (m *Model) paneShown() bool { return m.pane != nil && !m.showBoard }

// layoutPane gives the agent's terminal the size its place on the screen
// has now, if that changed.
func (m *Model) layoutPane() tea.Cmd {
	if m.pane == nil {
		return nil
	}
	_, _, w, h := m.paneArea()
	if w == m.paneW && h == m.paneH {
		return nil
	}
	m.paneW, m.paneH = w, h
	return m.pane.Resize(w, h)
}

// key handles one key press.
func (m *Model) key(msg tea.KeyPressMsg) tea.Cmd {
	if m.paneShown() {
		switch {
		case m.ended:
			// The pane said the agent exited; any key closes it.
			m.exit = ExitDone
			return tea.Quit
		case key.Matches(msg, m.keys.Flip):
			m.showBoard = true
			return nil
		case key.Matches(msg, m.keys.ScrollBack):
			m.pane.ScrollBack(m.scrollPage())
			return nil
		case key.Matches(msg, m.keys.ScrollForth):
			m.pane.ScrollBack(-m.scrollPage())
			return nil
		}
		// Any other key brings the agent's screen back, as in a
		// terminal, and goes to the agent.
		if back, _ := m.pane.Scrolled(); back > 0 {
			m.pane.ScrollBack(-back)
		}
		m.pane.Key(tea.Key(msg))
		return nil
	}
	m.warning = ""
	if m.copied != "" {
		m.copied = ""
		if !key.Matches(msg, m.keys.Quit) {
			return nil
		}
	}
	n := len(m.board.Targets())
	page := max(1, m.height/2)
	switch {
	case key.Matches(msg, m.keys.Quit):
		m.exit = ExitQuit
		if m.ended {
			m.exit = ExitDone
		}
		return tea.Quit
	case key.Matches(msg, m.keys.Flip):
		m.showBoard, m.detail = false, false
		return nil
	case key.Matches(msg, m.keys.Detach):
		m.exit = ExitDetach
		if m.ended {
			m.exit = ExitDone
		}
		return tea.Quit
	case key.Matches(msg, m.keys.Back):
		if m.detail {
			m.detail = false
			return nil
		}
		if m.pane != nil {
			m.showBoard = false
			return nil
		}
		return tea.Quit
	case key.Matches(msg, m.keys.Up):
		m.cursor--
	case key.Matches(msg, m.keys.Down):
		m.cursor++
	case key.Matches(msg, m.keys.PageUp):
		m.cursor -= page
	case key.Matches(msg, m.keys.PageDown):
		m.cursor += page
	case key.Matches(msg, m.keys.Top):
		m.cursor = 0
	case key.Matches(msg, m.keys.Bottom):
		m.cursor = n - 1
	case key.Matches(msg, m.keys.Detail):
		m.detail = !m.detail && n > 0
	case key.Matches(msg, m.keys.Copy):
		m.copied = Summary(m.board, m.home)
		return tea.SetClipboard(m.copied)
	}

	m.cursor = max(0, min(m.cursor, n-1))
	return nil
}

// scroll keeps the cursor inside the rows visible rows of a list of n.
func (m *Model) scroll(rows, n int) {
	m.cursor = max(0, min(m.cursor, n-1))
	if m.cursor < m.offset {
		m.offset = m.cursor
	}
	if rows > 0 && m.cursor >= m.offset+rows {
		m.offset = m.cursor - rows + 1
	}
	m.offset = max(0, min(m.offset, n-rows))
}

func (m *Model) View() tea.View {
	var v tea.View
	if m.paneShown() {
		content, cur := m.renderPane()
		v = tea.NewView(content)
		v.Cursor = cur
		v.MouseMode = m.pane.MouseMode()
	} else {
		v = tea.NewView(m.render())
	}
	v.AltScreen = true
	// The agent's own title is shown in the live view, never set here:
	// the title is the user's terminal's.
	v.WindowTitle = "agent-lock"
	return v
}

// Summary is the session in a few lines, for a pull request or an issue:
// mode, directory, counts, the top and the sensitive targets, the verdict.
func Summary(b *Board, home string) string {
	var sb strings.Builder
	mode, dir, agent := "JAILED (enforce)", "?", ""
	if b.Audit() {
		mode = "AUDIT (unconfined)"
	} else if b.Landlock() {
		mode = "JAILED (enforce, " + clean(b.Start.Engine) + ")"
	}
	if b.Start != nil {
		dir = tilde(b.Start.Dir, home)
		agent = clean(strings.Join(b.Start.Agent, " "))
	}
	fmt.Fprintf(&sb, "agent-lock session: %s in %s\n", mode, dir)
	if agent != "" {
		fmt.Fprintf(&sb, "agent: %s\n", agent)
	}
	fmt.Fprintf(&sb, "verdict: %s\n", plainVerdict(b))
	fmt.Fprintf(&sb, "in-bounds %s · system %s · blocked %s", count(b.InBounds), count(b.System), count(b.Blocked))
	if b.Audit() || b.Reached > 0 {
		fmt.Fprintf(&sb, " · reached %s", count(b.Reached))
	}
	if b.Undone > 0 {
		fmt.Fprintf(&sb, " · undone %s", count(b.Undone))
	}
	sb.WriteString("\n")
	if b.Summary != nil {
		undos := func(head string, us []report.Undo) {
			if len(us) == 0 {
				return
			}
			var l []string
			for _, u := range us {
				what := u.Action
				if u.Why != "" {
					what = u.Why
				}
				times := ""
				if u.Count > 1 {
					times = fmt.Sprintf(" %d times", u.Count)
				}
				l = append(l, fmt.Sprintf("%s (%s%s: %s)", tilde(u.Path, home), clean(u.Op), times, clean(what)))
			}
			fmt.Fprintf(&sb, "%s: %s\n", head, strings.Join(l, "; "))
		}
		undos("undone by the tripwire (put back as they were)", b.Summary.Undone)
		undos("LEFT CHANGED (the tripwire could not put them back)", b.Summary.LeftChanged)
	}
	if b.Start != nil && len(b.Start.Limits) > 0 {
		var l []string
		for _, s := range b.Start.Limits {
			l = append(l, clean(s))
		}
		fmt.Fprintf(&sb, "left open by this engine: %s\n", strings.Join(l, "; "))
	}
	targets := b.Targets()
	if len(targets) > 0 {
		sb.WriteString("top targets:\n")
		for _, t := range targets[:min(5, len(targets))] {
			fmt.Fprintf(&sb, "  %6s  %-8s %s%s\n", count(t.Count), clean(t.MainOp()), tilde(t.Path, home), fire(t.Sensitive))
		}
	}
	if b.Start != nil && len(b.Start.WithheldEnv) > 0 {
		fmt.Fprintf(&sb, "withheld from the agent's environment: %s\n", clean(strings.Join(b.Start.WithheldEnv, ", ")))
	}
	var sensitive []string
	for _, t := range targets {
		if t.Sensitive {
			sensitive = append(sensitive, tilde(t.Path, home))
		}
	}
	if len(sensitive) > 0 {
		slices.Sort(sensitive)
		fmt.Fprintf(&sb, "sensitive targets: %s\n", strings.Join(sensitive, ", "))
	}
	return strings.TrimSuffix(sb.String(), "\n")
}

func plainVerdict(b *Board) string {
	if b.Audit() {
		return fmt.Sprintf("%s out-of-bounds %s got through (audit mode)", count(b.Reached), plural(b.Reached, "reach", "reaches"))
	}
	return fmt.Sprintf("%s escape %s blocked — the jail is holding", count(b.Blocked), plural(b.Blocked, "attempt", "attempts"))
}

func fire(s bool) string {
	if s {
		return " 🔥"
	}
	return ""
}

func sortByCount(keys []string, counts map[string]uint64) {
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
}
