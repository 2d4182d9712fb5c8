package dashboard

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/agent-lock/agent-lock/internal/report"
)

// The palette is the 16 basic colours, so that a terminal's theme decides
// the exact shades; every verdict is also written out in words, so NO_COLOR
// and monochrome terminals lose nothing but colour.
var (
	green  = lipgloss.Color("2")
	red    = lipgloss.Color("1")
	yellow = lipgloss.Color("3")
	blue   = lipgloss.Color("4")
	grey   = lipgloss.Color("8")

	jailedBadge = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("0")).Background(green).Padding(0, 1)
	auditBadge  = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("0")).Background(yellow).Padding(0, 1)
	title       = lipgloss.NewStyle().Bold(true)
	dim         = lipgloss.NewStyle().Foreground(grey)
	okStyle     = lipgloss.NewStyle().Foreground(green)
	badStyle    = lipgloss.NewStyle().Foreground(red)
	warnStyle   = lipgloss.NewStyle().Foreground(yellow)
	sysStyle    = lipgloss.NewStyle().Foreground(blue)
	cursorStyle = lipgloss.NewStyle().Reverse(true)
)

// wideLayout is the width from which the two panels sit side by side.
const wideLayout = 120

// masthead is the top of the screen: state, directory, verdict, bar, tallies.
func (m *Model) masthead(w int) []string {
	b := m.board
	state := jailedBadge.Render("JAILED")
	if b.Audit() {
		state = auditBadge.Render("AUDIT · UNCONFINED")
	} else if b.Unobserved() {
		state = jailedBadge.Render("JAILED (Landlock alone)")
	} else if b.Landlock() {
		state = jailedBadge.Render("JAILED (Landlock)")
	}
	dir := "(waiting for the session)"
	if b.Start != nil {
		dir = tilde(b.Start.Dir, m.home)
	}
	line1 := state + " " + title.Render(dir)
	if b.Summary != nil {
		line1 += " " + title.Render(fmt.Sprintf("· ended, exit %d", b.Summary.ExitCode))
	}
	if b.Start != nil && len(b.Start.Agent) > 0 {
		line1 += dim.Render(fmt.Sprintf("  pid %d  %s", b.Start.PID, clean(strings.Join(b.Start.Agent, " "))))
	}
	rate := b.Rate(m.now(), sparkWidth(w))
	tallies := fmt.Sprintf("in-bounds %s · system %s · blocked %s",
		okStyle.Render(count(b.InBounds)), sysStyle.Render(count(b.System)), badStyle.Render(count(b.Blocked)))
	if b.Audit() || b.Reached > 0 {
		tallies += " · reached " + warnStyle.Render(count(b.Reached))
	}
	if b.Undone > 0 {
		tallies += " · undone " + warnStyle.Render(count(b.Undone))
	}
	if b.Start != nil && len(b.Start.WithheldEnv) > 0 {
		tallies += " · " + fmt.Sprintf("%d secret env %s withheld", len(b.Start.WithheldEnv),
			plural(uint64(len(b.Start.WithheldEnv)), "variable", "variables"))
	}
	if b.Summary != nil && b.Summary.Lost > 0 {
		tallies += " · " + badStyle.Render(count(b.Summary.Lost)+" lost")
	}
	tallies += "   " + dim.Render("rate ") + sparkline(rate) + dim.Render(fmt.Sprintf(" %d/s", rate[len(rate)-1]))
	lines := []string{
		fit(line1, w),
		fit(verdictLine(b), w),
		proportionBar(b, w),
		fit(tallies, w),
	}
	// A weaker engine says what it leaves open, always in view.
	if b.Start != nil && len(b.Start.Limits) > 0 {
		var l []string
		for _, s := range b.Start.Limits {
			l = append(l, clean(s))
		}
		lines = append(lines, fit(warnStyle.Render(clean(b.Start.Engine)+" leaves open: ")+dim.Render(strings.Join(l, " · ")), w))
	}
	return lines
}

// verdictLine says in one line whether the jail held.
func verdictLine(b *Board) string {
	if b.Audit() {
		if b.Reached == 0 {
			return okStyle.Render("no out-of-bounds reaches so far")
		}
		return warnStyle.Render(fmt.Sprintf("%s out-of-bounds %s got through — audit mode enforces nothing",
			count(b.Reached), plural(b.Reached, "reach", "reaches")))
	}
	undone := ""
	if b.Undone > 0 {
		// The Landlock engine's tripwire put protected entries back.
		undone = warnStyle.Render(fmt.Sprintf(" · %s %s to protected files undone", count(b.Undone), plural(b.Undone, "change", "changes")))
	}
	if b.Blocked == 0 && b.Reached == 0 {
		if b.Unobserved() {
			// Landlock refuses, and nothing is there to say so.
			return warnStyle.Render("escapes refused but not seen: no daemon to observe them") + undone
		}
		return okStyle.Render("no escape attempts — the jail is holding") + undone
	}
	v := badStyle.Render(fmt.Sprintf("%s escape %s blocked", count(b.Blocked), plural(b.Blocked, "attempt", "attempts"))) +
		okStyle.Render(" — the jail is holding")
	if b.Reached > 0 {
		// The Landlock engine lets through what it cannot refuse.
		v += warnStyle.Render(fmt.Sprintf(" · %s %s got past this engine", count(b.Reached), plural(b.Reached, "reach", "reaches")))
	}
	return v + undone
}

// segments returns the bar's cells per category. Every non-zero category
// gets at least one cell, so a single blocked attempt among millions of
// in-bounds opens is never rounded away; the largest category gives up the
// cells that costs.
func segments(counts []uint64, w int) []int {
	cells := make([]int, len(counts))
	var total uint64
	nonzero := 0
	for _, c := range counts {
		total += c
		if c > 0 {
			nonzero++
		}
	}
	if total == 0 || w < nonzero {
		return cells
	}
	used, largest := 0, 0
	for i, c := range counts {
		if c == 0 {
			continue
		}
		cells[i] = max(1, int(float64(c)/float64(total)*float64(w)))
		used += cells[i]
		if c > counts[largest] || counts[largest] == 0 {
			largest = i
		}
	}
	cells[largest] += w - used
	for cells[largest] < 1 { // only when rounding overshot everywhere
		for i := range cells {
			if i != largest && cells[i] > 1 {
				cells[i]--
				cells[largest]++
				break
			}
		}
	}
	return cells
}

func proportionBar(b *Board, w int) string {
	counts := []uint64{b.InBounds, b.System, b.Blocked, b.Reached}
	styles := []lipgloss.Style{okStyle, sysStyle, badStyle, warnStyle}
	// Distinct glyphs keep the categories apart without colour.
	glyphs := []string{"█", "▓", "▒", "░"}
	cells := segments(counts, w)
	var sb strings.Builder
	n := 0
	for i, c := range cells {
		if c > 0 {
			sb.WriteString(styles[i].Render(strings.Repeat(glyphs[i], c)))
			n += c
		}
	}
	if n == 0 {
		return dim.Render(strings.Repeat("·", w))
	}
	return sb.String()
}

func sparkWidth(w int) int { return max(5, min(30, w/6)) }

var sparks = []rune("▁▂▃▄▅▆▇█")

func sparkline(vals []uint64) string {
	var top uint64
	for _, v := range vals {
		top = max(top, v)
	}
	out := make([]rune, len(vals))
	for i, v := range vals {
		switch {
		case v == 0:
			out[i] = ' '
		case top == 0:
			out[i] = sparks[0]
		default:
			out[i] = sparks[int((v*uint64(len(sparks)-1)+top-1)/top)]
		}
	}
	return sysStyle.Render(string(out))
}

// escapesPanel lists the outside targets, or the selected one's detail.
func (m *Model) escapesPanel(w, h int) []string {
	b := m.board
	targets := b.Targets()
	head := fmt.Sprintf("Escape attempts · %d %s", len(targets), plural(uint64(len(targets)), "path", "paths"))
	if m.detail && len(targets) > 0 {
		return m.detailPanel(targets[m.cursor], w, h)
	}
	lines := []string{title.Render(fit(head, w))}
	rows := h - 1
	if b.MorePaths > 0 {
		rows--
	}
	if len(targets) == 0 {
		lines = append(lines, dim.Render("nothing has tried to leave the directory"))
	}
	m.scroll(rows, len(targets))
	for i := m.offset; i < len(targets) && i < m.offset+rows; i++ {
		lines = append(lines, m.targetRow(targets[i], w, i == m.cursor))
	}
	if b.MorePaths > 0 {
		lines = append(lines, dim.Render(fit(fmt.Sprintf("  … %s more %s on other paths (not kept)",
			count(b.MorePaths), plural(b.MorePaths, "attempt", "attempts")), w)))
	}
	return pad(lines, w, h)
}

func (m *Model) targetRow(t *Target, w int, selected bool) string {
	flag := "  "
	if t.Sensitive {
		flag = "🔥"
	}
	badge := badStyle.Render("blocked")
	if t.Reached > 0 {
		badge = warnStyle.Render("reached")
	}
	prefix := fmt.Sprintf("%s %6s %-8s ", flag, count(t.Count), clean(t.MainOp()))
	rest := w - ansi.StringWidth(prefix) - len("blocked") - 1
	path := ansi.Truncate(tilde(t.Path, m.home), max(rest, 1), "…")
	row := prefix + path + strings.Repeat(" ", max(0, rest-ansi.StringWidth(path))) + " "
	if selected {
		return cursorStyle.Render(row) + badge
	}
	return row + badge
}

func (m *Model) detailPanel(t *Target, w, h int) []string {
	flag := ""
	if t.Sensitive {
		flag = " 🔥 sensitive"
	}
	verdict := fmt.Sprintf("%s blocked", count(t.Blocked))
	if t.Reached > 0 {
		verdict += fmt.Sprintf(", %s reached", count(t.Reached))
	}
	if t.Undone > 0 {
		verdict += fmt.Sprintf(", %s undone", count(t.Undone))
	}
	lines := []string{
		title.Render(fit("Detail · "+tilde(t.Path, m.home), w)),
		fit(fmt.Sprintf("%s %s%s: %s", count(t.Count), plural(t.Count, "attempt", "attempts"), flag, verdict), w),
		fit(fmt.Sprintf("first %s · last %s", clock(t.First), clock(t.Last)), w),
	}
	if t.Rule != "" {
		lines = append(lines, fit("rule: "+clean(t.Rule), w))
	}
	if t.Addr != "" {
		lines = append(lines, fit("address: "+clean(t.Addr), w))
	}
	lines = append(lines, title.Render("operations"))
	ops := make([]string, 0, len(t.Ops))
	for op := range t.Ops {
		ops = append(ops, op)
	}
	sortByCount(ops, t.Ops)
	for _, op := range ops {
		lines = append(lines, fit(fmt.Sprintf("  %-10s %s", clean(op), count(t.Ops[op])), w))
	}
	lines = append(lines, title.Render("processes"))
	for _, a := range t.Actors {
		lines = append(lines, fit("  "+actor(a.Comm, a.PID), w))
	}
	if t.MoreActors {
		lines = append(lines, dim.Render("  … and others"))
	}
	lines = append(lines, dim.Render("enter/esc: back"))
	return pad(lines, w, h)
}

// livePanel streams the latest decisions, newest at the bottom.
func (m *Model) livePanel(w, h int) []string {
	lines := []string{title.Render(fit("Live", w))}
	events := m.board.Recent(h - 1)
	if len(events) == 0 {
		lines = append(lines, dim.Render("waiting for the kernel's reports"))
	}
	for _, e := range events {
		verdict, style := "blocked", badStyle
		switch e.Verdict {
		case report.Allowed:
			verdict, style = "reached", warnStyle
		case report.Undone:
			verdict, style = "undone", warnStyle
		case report.InBounds:
			verdict, style = "ok", okStyle
		}
		flag := ""
		if e.Sensitive {
			flag = "🔥"
		}
		head := fmt.Sprintf("%s %-7s %-7s %s %s", clock(e.Time), verdict, clean(e.Op), actor(e.Comm, e.PID), flag)
		path := tilde(e.Path, m.home)
		if e.Path2 != "" {
			path += " → " + tilde(e.Path2, m.home)
		}
		// A long path keeps its end: the file's name says more than the
		// folders above it.
		if over := ansi.StringWidth(head) + ansi.StringWidth(path) - w; over > 0 && ansi.StringWidth(path) > over+1 {
			path = ansi.TruncateLeft(path, over+1, "…")
		}
		lines = append(lines, style.Render(fit(head+path, w)))
	}
	return pad(lines, w, h)
}

func (m *Model) footer(w int) string {
	if m.warning != "" {
		// Until the next key: warnings are rare and the user must see them.
		text := "⚠ " + clean(m.warning)
		if m.warnings > 1 {
			text = fmt.Sprintf("⚠ %d warnings, the latest: %s", m.warnings, clean(m.warning))
		}
		return badStyle.Render(fit(text+" (printed again at the end)", w))
	}
	return dim.Render(fit(m.help.ShortHelpView(m.keys.ShortHelp()), w))
}

// render draws the whole screen at the model's size.
func (m *Model) render() string {
	w, h := max(m.width, 20), max(m.height, 8)
	lines := m.masthead(w)
	body := h - len(lines) - 1
	if m.copied != "" {
		lines = append(lines, pad(strings.Split(m.copied, "\n"), w, body)...)
	} else if w >= wideLayout {
		left := w*3/5 - 1
		right := w - left - 3
		l, r := m.escapesPanel(left, body), m.livePanel(right, body)
		for i := range body {
			lines = append(lines, l[i]+dim.Render(" │ ")+r[i])
		}
	} else {
		top := max(3, body*3/5)
		lines = append(lines, m.escapesPanel(w, top)...)
		lines = append(lines, m.livePanel(w, body-top)...)
	}
	lines = append(lines, m.footer(w))
	return strings.Join(lines, "\n")
}

// fit truncates s to w cells and pads it to exactly w.
func fit(s string, w int) string {
	s = ansi.Truncate(s, w, "…")
	return s + strings.Repeat(" ", max(0, w-ansi.StringWidth(s)))
}

// pad makes lines exactly h lines of width w.
func pad(lines []string, w, h int) []string {
	if len(lines) > h {
		lines = lines[:h]
	}
	for i, l := range lines {
		lines[i] = fit(l, w)
	}
	for len(lines) < h {
		lines = append(lines, strings.Repeat(" ", w))
	}
	return lines
}

// tilde shows p with ~ for home, made safe for the terminal (see clean).
func tilde(p, home string) string {
	if home != "" && home != "/" {
		if p == home {
			return "~"
		}
		if strings.HasPrefix(p, home+"/") {
			p = "~" + p[len(home):]
		}
	}
	return clean(p)
}

// clean makes a string from the agent (a file name, a command line, a
// comm) safe to draw: control characters, which a hostile agent could put
// in a file name to move the cursor or recolour the screen and so forge
// what the user sees, are shown escaped (\n, \x1b); invalid UTF-8 shows
// as U+FFFD.
func clean(s string) string {
	if !strings.ContainsFunc(s, needsEscape) && utf8.ValidString(s) {
		return s
	}
	var sb strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\t':
			sb.WriteString(`\t`)
		case needsEscape(r):
			fmt.Fprintf(&sb, `\x%02x`, r)
		default:
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

func needsEscape(r rune) bool { return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' }

func clock(t time.Time) string {
	if t.IsZero() {
		return "--:--:--"
	}
	return t.Local().Format("15:04:05")
}

// count writes n with thousands separators.
func count(n uint64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// actor names a process: comm[pid], or "?" where the kernel's record named
// none (Landlock's audit records do not).
func actor(comm string, pid uint32) string {
	if pid == 0 && comm == "" {
		return "?"
	}
	return fmt.Sprintf("%s[%d]", clean(comm), pid)
}
