package dashboard

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/agent-lock/agent-lock/internal/report"
)

// The one-terminal screen: the agent's pane, and the cell's live view in a
// strip under it, or in a side panel where the terminal is wide enough to
// leave the agent a full-sized terminal beside it.
const (
	sideLayout = 140 // from this width, the side panel
	sideWidth  = 40
	stripLines = 3
)

// paneArea is where the agent's terminal is on the screen.
func (m *Model) paneArea() (x, y, w, h int) {
	sw, sh := max(m.width, 20), max(m.height, 4)
	if sw >= sideLayout {
		return 0, 0, sw - sideWidth - 1, sh
	}
	strip := stripLines
	if sh < 10 {
		strip = 1
	}
	return 0, 0, sw, sh - strip
}

// renderPane draws the agent's terminal and the live view, and where the
// cursor goes: the agent's, unless it hid it or has exited.
func (m *Model) renderPane() (string, *tea.Cursor) {
	sw, sh := max(m.width, 20), max(m.height, 4)
	x, y, w, h := m.paneArea()
	lines, cur := m.pane.View(w, h)
	if cur != nil && !m.ended {
		c := *cur
		c.X, c.Y = c.X+x, c.Y+y
		cur = &c
	} else {
		cur = nil
	}
	out := make([]string, 0, sh)
	if sw >= sideLayout {
		side := m.sidePanel(sideWidth, sh)
		for i := range sh {
			out = append(out, lines[i]+dim.Render("│")+side[i])
		}
	} else {
		out = append(out, lines...)
		out = append(out, m.strip(sw, sh-h)...)
	}
	return strings.Join(out, "\n"), cur
}

// badge is the session's state in a word or three.
func (m *Model) badge() string {
	switch b := m.board; {
	case b.Audit():
		return auditBadge.Render("AUDIT · UNCONFINED")
	case b.Unobserved():
		return jailedBadge.Render("JAILED (Landlock alone)")
	case b.Landlock():
		return jailedBadge.Render("JAILED (Landlock)")
	}
	return jailedBadge.Render("JAILED")
}

func (m *Model) dir() string {
	if m.board.Start == nil {
		return "(starting the cell…)"
	}
	return tilde(m.board.Start.Dir, m.home)
}

// escapeLine is one escape in a line: when, what, who, where.
func (m *Model) escapeLine(e report.Event) string {
	verdict, style := "blocked", badStyle
	if e.Verdict == report.Allowed {
		verdict, style = "reached", warnStyle
	}
	path := tilde(e.Path, m.home)
	if e.Path2 != "" {
		path += " → " + tilde(e.Path2, m.home)
	}
	line := style.Render(fmt.Sprintf("%s %s %s %s ", clock(e.Time), verdict, clean(e.Op), actor(e.Comm, e.PID))) + path + fire(e.Sensitive)
	if e.Repeats > 0 {
		line += dim.Render(fmt.Sprintf(" ×%s", count(1+uint64(e.Repeats))))
	}
	return line
}

// hint is the live view's last word: how to reach the dashboard, or that
// the agent has exited.
func (m *Model) hint() string {
	if m.ended {
		status := ""
		if s := m.board.Summary; s != nil {
			status = fmt.Sprintf(" (exit %d)", s.ExitCode)
		}
		return warnStyle.Bold(true).Render("the agent has exited" + status + ": press any key to close")
	}
	if back, kept := m.pane.Scrolled(); back > 0 {
		return warnStyle.Render(fmt.Sprintf("scrolled back %s of %s lines", count(uint64(back)), count(uint64(kept)))) +
			dim.Render(" · shift+PgUp/PgDn: scroll · any other key: back to the agent")
	}
	h := dim.Render(m.keys.Flip.Help().Key + ": dashboard (escapes, detail, copy, detach, end)")
	if _, kept := m.pane.Scrolled(); kept > 0 {
		h += dim.Render(" · shift+PgUp: scroll back")
	}
	if t := m.pane.Title(); t != "" {
		h += dim.Render(" · title: ") + clean(t)
	}
	return h
}

// strip is the live view under the pane: state and verdict, the latest
// escape (or a warning), and the hint.
func (m *Model) strip(w, h int) []string {
	b := m.board
	top := m.badge() + " " + title.Render(m.dir()) + " " + verdictLine(b) + dim.Render(fmt.Sprintf(" · in-bounds %s · system %s", count(b.InBounds), count(b.System)))
	var latest string
	switch esc := b.RecentEscapes(1); {
	case m.warning != "":
		latest = badStyle.Render("⚠ " + clean(m.warning))
	case len(esc) > 0:
		latest = "latest: " + m.escapeLine(esc[0])
	default:
		latest = dim.Render("nothing has tried to leave the directory")
	}
	lines := []string{top, latest, m.hint()}
	if h < len(lines) {
		// A very short terminal keeps the verdict.
		lines = lines[:h]
	}
	return pad(lines, w, h)
}

// sidePanel is the live view beside the pane: state, verdict, tallies, the
// latest escapes, newest first, and the hint.
func (m *Model) sidePanel(w, h int) []string {
	b := m.board
	wrap := lipgloss.NewStyle().Width(w)
	lines := []string{m.badge(), title.Render(fit(m.dir(), w)), ""}
	lines = append(lines, strings.Split(wrap.Render(verdictLine(b)), "\n")...)
	lines = append(lines,
		"in-bounds "+okStyle.Render(count(b.InBounds))+" · system "+sysStyle.Render(count(b.System)),
		"blocked "+badStyle.Render(count(b.Blocked)))
	if b.Audit() || b.Reached > 0 {
		lines[len(lines)-1] += " · reached " + warnStyle.Render(count(b.Reached))
	}
	lines = append(lines, "", title.Render("Latest escapes"))
	var foot []string
	if m.warning != "" {
		foot = append(foot, strings.Split(wrap.Render(badStyle.Render("⚠ "+clean(m.warning))), "\n")...)
	}
	foot = append(foot, strings.Split(wrap.Render(m.hint()), "\n")...)
	room := h - len(lines) - len(foot)
	esc := b.RecentEscapes(max(0, room/2))
	if len(esc) == 0 && room > 0 {
		lines = append(lines, dim.Render("none so far"))
	}
	for _, e := range esc {
		verdict, style := "blocked", badStyle
		if e.Verdict == report.Allowed {
			verdict, style = "reached", warnStyle
		}
		lines = append(lines,
			style.Render(fit(fmt.Sprintf("%s %s %s %s", clock(e.Time), verdict, clean(e.Op), actor(e.Comm, e.PID)), w)),
			fit(" "+keepEnd(tilde(e.Path, m.home)+fire(e.Sensitive), w-1), w))
	}
	for len(lines)+len(foot) < h {
		lines = append(lines, "")
	}
	return pad(append(lines, foot...), w, h)
}

// keepEnd shortens s to w cells from the left: a path's end (the file's
// name) says more than its start.
func keepEnd(s string, w int) string {
	if lipgloss.Width(s) <= w {
		return s
	}
	r := []rune(s)
	for len(r) > 0 && lipgloss.Width("…"+string(r)) > w {
		r = r[1:]
	}
	return "…" + string(r)
}
