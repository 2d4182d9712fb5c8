package dashboard

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

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
	// LogPath is where the agent's output goes, shown in the footer.
	LogPath string
	// Now is the clock (time.Now if nil); replays pass the recording's.
	Now func() time.Time
	// MaxPaths bounds the distinct paths kept (DefaultMaxPaths if 0).
	MaxPaths int
}

// Model is the Bubble Tea model of the dashboard.
type Model struct {
	board          *Board
	home, logPath  string
	now            func() time.Time
	width, height  int
	cursor, offset int
	detail         bool
	copied         string // the summary shown after c, until the next key
	ended          bool
	endErr         error
	warning        string // the latest WarningMsg
	warnings       int
}

// New returns a dashboard over an empty board.
func New(o Options) *Model {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Model{board: NewBoard(o.MaxPaths), home: o.Home, logPath: o.LogPath, now: now, width: 80, height: 24}
}

// Board is the model's aggregate, for the summary printed at the end.
func (m *Model) Board() *Board { return m.board }

// Ended reports whether the source said it has no more records, and why.
func (m *Model) Ended() (bool, error) { return m.ended, m.endErr }

func tick() tea.Cmd {
	return tea.Tick(250*time.Millisecond, func(t time.Time) tea.Msg { return tickMsg(t) })
}

func (m *Model) Init() tea.Cmd { return tick() }

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case RecordsMsg:
		for _, r := range msg {
			m.board.Apply(r)
		}
	case EndMsg:
		m.ended, m.endErr = true, msg.Err
		// A source that failed (a session that could not start, a
		// recording that broke off) has nothing more to show: give the
		// terminal back so the error can be read.
		if msg.Err != nil {
			return m, tea.Quit
		}
	case WarningMsg:
		m.warning, m.warnings = string(msg), m.warnings+1
	case tickMsg:
		return m, tick()
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case tea.KeyPressMsg:
		return m, m.key(msg.String())
	}
	return m, nil
}

// key handles one key press.
func (m *Model) key(k string) tea.Cmd {
	m.warning = ""
	if m.copied != "" {
		m.copied = ""
		if k != "q" && k != "ctrl+c" {
			return nil
		}
	}
	n := len(m.board.Targets())
	page := max(1, m.height/2)
	switch k {
	case "q", "ctrl+c":
		return tea.Quit
	case "esc":
		if m.detail {
			m.detail = false
			return nil
		}
		return tea.Quit
	case "up", "k":
		m.cursor--
	case "down", "j":
		m.cursor++
	case "pgup":
		m.cursor -= page
	case "pgdown":
		m.cursor += page
	case "g", "home":
		m.cursor = 0
	case "G", "end":
		m.cursor = n - 1
	case "enter":
		m.detail = !m.detail && n > 0
	case "c":
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
	v := tea.NewView(m.render())
	v.AltScreen = true
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
