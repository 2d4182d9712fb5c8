package dashboard

import (
	"bytes"
	"encoding/base64"
	"image/color"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	tea "charm.land/bubbletea/v2"
	uv "github.com/charmbracelet/ultraviolet"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
	"github.com/creack/pty"
)

// PaneMsg says the agent's terminal changed: the screen is drawn again.
type PaneMsg struct{}

// Clipboard is one attempt of the agent's to reach the user's clipboard
// through its terminal (OSC 52): a write of Bytes bytes, or a read.
type Clipboard struct {
	Read  bool
	Bytes int
}

// maxPaneInput bounds what waits to be written to the agent's terminal: the
// emulator's answers to the agent's queries pile up there when the agent
// does not read its input, and an agent must not grow agent-lock's memory
// by asking.
const maxPaneInput = 1 << 20

// maxPaneOutput bounds the agent's output read and not yet drawn.
const maxPaneOutput = 4 << 20

// Pane is the agent's terminal: the master side of a pseudo-terminal
// agent-lock owns, read into a terminal emulator (x/vt). Everything the
// agent writes acts on the emulator's screen and nowhere else: the user's
// terminal only ever gets the cells the dashboard draws from it, so the
// agent's escape sequences (a title, the clipboard, a query, a colour
// change, a bell) cannot reach it. The emulator answers the agent's
// queries itself, and the user's keys reach the agent encoded as the
// agent's terminal modes ask (application cursor keys, bracketed paste,
// mouse reports).
//
// A Pane is a component of the dashboard: its methods are called from the
// model's Update and View; its goroutines (the pseudo-terminal's reader
// and writer) tell the model of changes through the send function given
// to Start.
type Pane struct {
	pty *os.File

	mu    sync.Mutex // guards emu and everything below it
	emu   *vt.Emulator
	modes map[ansi.Mode]bool
	title string
	// applied is the latest resize carried out (see Resize).
	applied uint64
	// back is what scrolled off the agent's main screen, for the user to
	// scroll back to (ScrollBack); scrolled is how far the view is
	// scrolled back, in lines (0: the agent's screen, live).
	back     history
	scrolled int

	version atomic.Uint64 // bumped whenever the screen may have changed
	dirty   atomic.Bool   // a PaneMsg is on its way
	resizes atomic.Uint64

	// The view's cache: the screen drawn at version, w×h.
	cache struct {
		version uint64
		w, h    int
		lines   []string
		cursor  *tea.Cursor
	}

	// The agent's output not yet parsed (readOutput, parseOutput).
	outMu   sync.Mutex
	out     []byte
	outEnd  bool
	outWake chan struct{}
	outRoom chan struct{}

	inMu   sync.Mutex
	in     []byte
	inWake chan struct{}
	done   chan struct{}
	once   sync.Once
}

// NewPane wraps the master side of the agent's pseudo-terminal, sized w×h.
// clipboard, if not nil, is told of every OSC 52 the agent writes (none
// of which is passed on).
func NewPane(master *os.File, w, h int, clipboard func(Clipboard)) *Pane {
	p := &Pane{pty: master, emu: vt.NewEmulator(max(w, 1), max(h, 1)), modes: map[ansi.Mode]bool{},
		inWake: make(chan struct{}, 1), outWake: make(chan struct{}, 1), outRoom: make(chan struct{}, 1), done: make(chan struct{})}
	p.emu.SetCallbacks(vt.Callbacks{
		Title:       func(s string) { p.title = s },
		EnableMode:  func(m ansi.Mode) { p.modes[m] = true },
		DisableMode: func(m ansi.Mode) { delete(p.modes, m) },
	})
	// The emulator's scrollback is only where lines wait between a write
	// and keep, which moves them into back, rendered: room for
	// all that one slice of output can scroll, so that the emulator never
	// drops its oldest line (a shift of all the others).
	p.emu.SetScrollbackSize(2 * maxSlice)
	p.emu.RegisterOscHandler(52, func(data []byte) bool {
		if clipboard != nil {
			clipboard(parseOSC52(data))
		}
		return true // handled: nothing is answered, nothing passed on
	})
	return p
}

// parseOSC52 reads "52;SELECTION;DATA": DATA is base64, or ? for a read.
func parseOSC52(data []byte) Clipboard {
	parts := bytes.SplitN(data, []byte{';'}, 3)
	if len(parts) < 3 {
		return Clipboard{}
	}
	if string(parts[2]) == "?" {
		return Clipboard{Read: true}
	}
	return Clipboard{Bytes: base64.StdEncoding.DecodedLen(len(parts[2]))}
}

// Start runs the pane's goroutines: the agent's output into the emulator
// (a PaneMsg to send after each change, one at a time), and the emulator's
// input (the user's keys, the answers to the agent's queries) to the
// agent. They end at Close, or when the terminal is gone.
func (p *Pane) Start(send func(tea.Msg)) {
	go p.readOutput()
	go p.parseOutput(send)
	go p.drainInput()
	go p.writeInput()
}

// readOutput takes the agent's output as fast as it comes; parseOutput
// feeds the emulator all that has come since it last did. When the
// emulator lags (a large cat), what it gets at once grows, and with it what
// skipScrolled can leave out. At maxPaneOutput waiting bytes the reader
// waits: the agent's writes block, as on any terminal that is behind.
func (p *Pane) readOutput() {
	buf := make([]byte, 64<<10)
	for {
		n, err := p.pty.Read(buf)
		p.outMu.Lock()
		for n > 0 && len(p.out) >= maxPaneOutput && !p.closing() {
			p.outMu.Unlock()
			select {
			case <-p.outRoom:
			case <-p.done:
			}
			p.outMu.Lock()
		}
		p.out = append(p.out, buf[:n]...)
		p.outEnd = err != nil
		p.outMu.Unlock()
		select {
		case p.outWake <- struct{}{}:
		default:
		}
		if err != nil {
			return // EIO: the agent and all it started closed the terminal
		}
	}
}

func (p *Pane) parseOutput(send func(tea.Msg)) {
	var b []byte
	for {
		select {
		case <-p.outWake:
		case <-p.done:
			return
		}
		p.outMu.Lock()
		b, p.out = p.out, b[:0]
		end := p.outEnd
		p.outMu.Unlock()
		select {
		case p.outRoom <- struct{}{}:
		default:
		}
		if len(b) > 0 {
			p.feed(b)
			p.version.Add(1)
			if !p.dirty.Swap(true) {
				send(PaneMsg{})
			}
		}
		if end {
			return
		}
	}
}

func (p *Pane) closing() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// scrollbackLines is how many lines that scrolled off the agent's screen
// the pane keeps for the user to scroll back to, as terminals do.
const scrollbackLines = 10000

// history is a ring of the last scrollbackLines lines, oldest first.
type history struct {
	lines []string
	start int
}

func (h *history) push(s string) {
	if len(h.lines) < scrollbackLines {
		h.lines = append(h.lines, s)
		return
	}
	h.lines[h.start] = s
	h.start = (h.start + 1) % len(h.lines)
}

func (h *history) len() int { return len(h.lines) }

// line is the i-th line kept, 0 the oldest.
func (h *history) line(i int) string { return h.lines[(h.start+i)%len(h.lines)] }

func (h *history) clear() { h.lines, h.start = h.lines[:0], 0 }

// maxSlice bounds what the emulator parses at once: keys and the screen's
// drawing wait for it no longer than one slice takes.
const maxSlice = 16 << 10

// feed gives the emulator the agent's output that came since the last
// feed, a slice at a time, and keeps what scrolls off the screen.
//
// When the output is a flood of plain text, the lines that would scroll
// off a screen of h rows before anyone could see them are not drawn: each
// line the emulator scrolls costs it a copy of the whole screen, and `cat`
// of a large file would scroll it hundreds of thousands of times. Of such
// a batch (scrolledAway), the emulator parses the first line (whatever
// sequence the previous batch left unfinished ends there), then h+1 lines
// (they scroll the whole screen off, as the skipped ones would have),
// and the last h+1 lines, on a screen cleared with the cursor on its
// last row, where the skipped lines would have left it. The skipped lines
// reach the scrollback through an emulator of one row (a scroll of it
// copies one row): its last scrollbackLines lines, in the same width,
// from the same column, so that they wrap as on the screen; without the
// colour set before them.
func (p *Pane) feed(b []byte) {
	p.mu.Lock()
	h := p.emu.Height()
	p.mu.Unlock()
	mid, cut, ok := scrolledAway(b, h+1)
	if !ok {
		p.write(b, 0)
		return
	}
	p.write(b[:mid], 0)
	p.mu.Lock()
	cur, w, alt := p.emu.CursorPosition(), p.emu.Width(), p.emu.IsAltScreen()
	// The rows above the cursor (the h lines have scrolled the cursor to
	// the last row, a blank one) go where the skipped lines would have
	// pushed them, blank ones too; then the screen is cleared (ED 2 would
	// push only the rows with something in them).
	if !alt {
		sb := p.emu.Scrollback()
		for y := range cur.Y {
			sb.Push(lineOf(w, func(x int) *uv.Cell { return p.emu.CellAt(x, y) }))
		}
	}
	p.emu.WriteString("\x1b[H\x1b[J\x1b[" + strconv.Itoa(p.emu.Height()) + ";1H")
	p.keep(p.emu.Scrollback(), 0)
	p.mu.Unlock()
	if !alt {
		skipped := b[mid : cut+1]
		from := len(skipped)
		for range scrollbackLines {
			if from = bytes.LastIndexByte(skipped[:max(from-1, 0)], '\n'); from < 0 {
				break
			}
		}
		one := vt.NewEmulator(w, 1)
		one.SetScrollbackSize(2 * scrollbackLines)
		if cur.X > 0 {
			one.WriteString("\x1b[" + strconv.Itoa(cur.X+1) + "G")
		}
		one.Write(skipped[from+1:])
		one.Close()
		p.mu.Lock()
		p.keep(one.Scrollback(), 0)
		p.mu.Unlock()
	}
	// The last lines push the cleared screen's rows above the cursor
	// before their own: blank, and not the agent's.
	p.write(b[cut+1:], h-1)
}

// write feeds b to the emulator a slice at a time and keeps what scrolls
// off, less the first drop lines, which are blank.
func (p *Pane) write(b []byte, drop int) {
	for len(b) > 0 {
		n := min(len(b), maxSlice)
		p.mu.Lock()
		p.emu.Write(b[:n])
		if bytes.Contains(b[:n], eraseScrollback) {
			// The agent cleared the scrollback (ED 3, as Claude Code's
			// /clear does); the emulator cleared the lines it held.
			p.back.clear()
			p.scrolled = 0
		}
		drop = p.keep(p.emu.Scrollback(), drop)
		p.mu.Unlock()
		b = b[n:]
	}
}

// keep moves the lines an emulator's scrollback holds into back, less the
// first drop of them that are blank, and returns how many are still to
// drop. The caller holds p.mu.
func (p *Pane) keep(sb *vt.Scrollback, drop int) int {
	for _, line := range sb.Lines() {
		if drop > 0 && len(line) == 0 {
			drop--
			continue
		}
		drop = 0
		p.backLine(line)
	}
	sb.Clear()
	return drop
}

var eraseScrollback = []byte("\x1b[3J")

// backLine keeps a line that scrolled off, rendered as the screen is
// drawn (View). A view scrolled back stays on the lines it shows. The
// caller holds p.mu.
func (p *Pane) backLine(l uv.Line) {
	n := len(l)
	if n > 0 {
		n += max(0, l[n-1].Width-1) // a wide last character (its second cell is trimmed)
	}
	p.back.push(lineOf(n, func(x int) *uv.Cell {
		if x >= len(l) {
			return nil
		}
		return &l[x]
	}).Render())
	if p.scrolled > 0 {
		p.scrolled = min(p.scrolled+1, p.back.len())
	}
}

// scrolledAway finds in a batch of the agent's output the lines that
// would scroll off a screen of h rows before anyone could see them (see
// feed). It keeps the batch's first line, the h lines after it, and its
// last h lines: b[:mid] is the first line and the h after it,
// b[mid:cut+1] the lines skipped, b[cut+1:] the last h. ok is false when
// there are too few lines to skip, or when those lines and the h before
// them are not plain text (printable UTF-8, tabs, backspaces, carriage
// returns, line feeds: nothing that sets a mode, a colour or a cursor),
// or do not end with "\r\n" (the cursor's column after them is then 0).
func scrolledAway(b []byte, h int) (mid, cut int, ok bool) {
	if h < 1 || bytes.Count(b, []byte{'\n'}) < 4*h {
		return 0, 0, false
	}
	first := bytes.IndexByte(b, '\n') + 1
	mid = first
	for range h {
		mid += bytes.IndexByte(b[mid:], '\n') + 1
	}
	cut = len(b)
	for range h {
		cut = bytes.LastIndexByte(b[:cut], '\n')
	}
	if cut <= mid || b[cut-1] != '\r' || bytes.Count(b[mid:cut+1], []byte{'\n'}) < h || !plainText(b[first:cut+1]) {
		return 0, 0, false
	}
	return mid, cut, true
}

// plainText reports whether b is text that only prints: valid UTF-8 with
// no control character but tab, backspace, carriage return and line feed
// (no escape, no C1 control, no DEL).
func plainText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		switch {
		case r == '\t', r == '\b', r == '\r', r == '\n':
		case r < 0x20, r >= 0x7f && r <= 0x9f:
			return false
		}
	}
	return true
}

// drainInput takes what the emulator has for the agent as soon as it is
// there: the emulator writes it into a pipe and blocks until it is read,
// with its lock held (an answer to a query is written while the agent's
// output is parsed).
func (p *Pane) drainInput() {
	buf := make([]byte, 4096)
	for {
		n, err := p.emu.Read(buf)
		if n > 0 {
			p.inMu.Lock()
			if len(p.in)+n <= maxPaneInput {
				p.in = append(p.in, buf[:n]...)
			}
			p.inMu.Unlock()
			select {
			case p.inWake <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

// writeInput writes the agent's input to the terminal; it alone waits for
// an agent that does not read.
func (p *Pane) writeInput() {
	for {
		select {
		case <-p.inWake:
		case <-p.done:
			return
		}
		p.inMu.Lock()
		b := p.in
		p.in = nil
		p.inMu.Unlock()
		if _, err := p.pty.Write(b); err != nil {
			return
		}
	}
}

// Close stops the pane's goroutines. The pseudo-terminal is its owner's
// to close.
func (p *Pane) Close() {
	p.once.Do(func() {
		close(p.done)
		// The input pipe's writer, not the emulator's Close: that sets a
		// flag its Read checks unlocked, while drainInput reads.
		if w, ok := p.emu.InputPipe().(*io.PipeWriter); ok {
			w.CloseWithError(io.EOF)
		}
	})
}

// Resize returns the command that gives the agent's terminal w×h cells:
// the emulator, and the pseudo-terminal, whose change of size the kernel
// signals to the agent (SIGWINCH). Resizes take effect in the order they
// were asked for, whatever order their commands run in.
func (p *Pane) Resize(w, h int) tea.Cmd {
	w, h = max(w, 1), max(h, 1)
	gen := p.resizes.Add(1)
	return func() tea.Msg {
		p.mu.Lock()
		defer p.mu.Unlock()
		if gen <= p.applied {
			return nil
		}
		p.applied = gen
		if p.emu.Width() != w || p.emu.Height() != h {
			p.keepCursorRow(h)
			p.emu.Resize(w, h)
			p.keep(p.emu.Scrollback(), 0)
			p.scrolled = min(p.scrolled, p.back.len())
			p.version.Add(1)
		}
		pty.Setsize(p.pty, &pty.Winsize{Cols: uint16(w), Rows: uint16(h)})
		return PaneMsg{}
	}
}

// keepCursorRow makes room for a screen h rows high: the emulator keeps
// a shorter screen's top rows and moves the cursor up onto whatever row
// is there, so the agent's next line overwrote an older one (the shell's
// prompt landing on its last command). As xterm does, the rows above go
// to the scrollback until the cursor's row is the last one. The other
// screen is redrawn by its program on SIGWINCH. The caller holds p.mu.
func (p *Pane) keepCursorRow(h int) {
	n := p.emu.CursorPosition().Y - h + 1
	if n <= 0 || p.emu.IsAltScreen() {
		return
	}
	w, eh := p.emu.Width(), p.emu.Height()
	p.keep(p.emu.Scrollback(), 0)
	for y := range n {
		p.backLine(lineOf(w, func(x int) *uv.Cell { return p.emu.CellAt(x, y) }))
	}
	for y := 0; y+n < eh; y++ {
		for x := range w {
			p.emu.SetCell(x, y, nil)
		}
		for x := 0; x < w; {
			c := p.emu.CellAt(x, y+n)
			if c == nil {
				x++
				continue
			}
			cc := *c
			p.emu.SetCell(x, y, &cc)
			x += max(1, c.Width)
		}
	}
}

// Key passes a key pressed by the user to the agent.
func (p *Pane) Key(k tea.Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq := modifiedKey(k); seq != "" {
		p.emu.SendText(seq)
		return
	}
	ev := uv.KeyPressEvent(uv.Key(k))
	if ev.Mod&uv.ModShift != 0 && (ev.Code == uv.KeyEnter || ev.Code == uv.KeySpace || ev.Code == uv.KeyBackspace) {
		// A terminal without keyboard enhancements sends these as the
		// unshifted key.
		ev.Mod &^= uv.ModShift
	}
	p.emu.SendKey(ev)
}

// Paste passes pasted text to the agent, bracketed if the agent asked.
func (p *Pane) Paste(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.emu.Paste(s)
}

// Mouse passes a mouse event at the pane's x, y to the agent, if it asked
// for mouse reports of that kind.
func (p *Pane) Mouse(m tea.MouseMsg, x, y int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	mm := uv.Mouse(m.Mouse())
	mm.X, mm.Y = x, y
	switch m.(type) {
	case tea.MouseClickMsg:
		p.emu.SendMouse(uv.MouseClickEvent(mm))
	case tea.MouseReleaseMsg:
		p.emu.SendMouse(uv.MouseReleaseEvent(mm))
	case tea.MouseWheelMsg:
		p.emu.SendMouse(uv.MouseWheelEvent(mm))
	case tea.MouseMotionMsg:
		// Motion only where the agent asked for it: with a button held
		// (1002) or always (1003).
		if p.modes[ansi.ModeMouseAnyEvent] || (p.modes[ansi.ModeMouseButtonEvent] && mm.Button != uv.MouseNone) {
			p.emu.SendMouse(uv.MouseMotionEvent(mm))
		}
	}
}

// MouseMode is the mouse reporting the user's terminal must do for the
// agent: none unless the agent asked for mouse reports, so that the user
// selects text as usual.
func (p *Pane) MouseMode() tea.MouseMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.modes[ansi.ModeMouseAnyEvent]:
		return tea.MouseModeAllMotion
	case p.modes[ansi.ModeMouseButtonEvent], p.modes[ansi.ModeMouseNormal], p.modes[ansi.ModeMouseX10]:
		return tea.MouseModeCellMotion
	}
	return tea.MouseModeNone
}

// Title is the last window title the agent set (shown, cleaned, in the
// live view; never passed on).
func (p *Pane) Title() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.title
}

// SetColors tells the emulator the user's terminal's colours, which it
// gives the agent when asked (programs pick a light or dark theme by them).
// A nil colour leaves the emulator's default.
func (p *Pane) SetColors(fg, bg color.Color) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fg != nil {
		p.emu.SetDefaultForegroundColor(fg)
	}
	if bg != nil {
		p.emu.SetDefaultBackgroundColor(bg)
	}
}

// Seen clears the pending change: the next change sends a PaneMsg again.
func (p *Pane) Seen() { p.dirty.Store(false) }

// View draws the agent's screen as exactly h lines of w cells, and where
// its cursor is (nil when the agent hid it). Colours the agent left at the
// default stay the user's terminal's; hyperlinks are not passed on (their
// targets are the agent's to choose, and the user's terminal would open
// them).
//
// Scrolled back (ScrollBack), the view starts that many lines up, in the
// lines that scrolled off (each drawn in the width it had), and shows no
// cursor.
func (p *Pane) View(w, h int) ([]string, *tea.Cursor) {
	v := p.version.Load()
	if c := &p.cache; c.lines != nil && c.version == v && c.w == w && c.h == h {
		return c.lines, c.cursor
	}
	p.mu.Lock()
	lines := make([]string, h)
	ew, eh := p.emu.Width(), p.emu.Height()
	back := p.back.len()
	for row := range h {
		y := row - p.scrolled
		if y < 0 {
			lines[row] = fitLine(p.back.line(back+y), w)
			continue
		}
		lines[row] = lineOf(w, func(x int) *uv.Cell {
			if y >= eh || x >= ew {
				return nil
			}
			return p.emu.CellAt(x, y)
		}).Render()
	}
	var cur *tea.Cursor
	if pos := p.emu.CursorPosition(); p.scrolled == 0 && !p.emu.CursorHidden() && pos.X < w && pos.Y < h {
		style, blink := p.emu.CursorStyle()
		cur = tea.NewCursor(pos.X, pos.Y)
		cur.Shape, cur.Blink = tea.CursorShape(style), blink
	}
	p.mu.Unlock()
	p.cache.version, p.cache.w, p.cache.h, p.cache.lines, p.cache.cursor = v, w, h, lines, cur
	return lines, cur
}

// lineOf is a line of w cells from cell (nil: blank), a wide character
// once, without hyperlinks: their targets are the agent's to choose, and
// the user's terminal would open them.
func lineOf(w int, cell func(x int) *uv.Cell) uv.Line {
	line := uv.NewLine(w)
	for x := 0; x < w; {
		c := cell(x)
		if c == nil {
			x++
			continue
		}
		cc := *c
		cc.Link = uv.Link{}
		line.Set(x, &cc)
		x += max(1, c.Width)
	}
	return line
}

// fitLine is a rendered line cut or padded to w cells.
func fitLine(s string, w int) string {
	if ansi.StringWidth(s) > w {
		s = ansi.Truncate(s, w, "") + ansi.ResetStyle
	}
	return s + strings.Repeat(" ", max(0, w-ansi.StringWidth(s)))
}

// ScrollBack moves the view n lines further back into what scrolled off
// the agent's screen (n < 0: forward), within what is kept, and returns
// how far back it is now (0: the agent's screen, live).
func (p *Pane) ScrollBack(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := max(0, min(p.scrolled+n, p.back.len()))
	if s != p.scrolled {
		p.scrolled = s
		p.version.Add(1)
	}
	return s
}

// Scrolled is how far back the view is, and how many lines are kept.
func (p *Pane) Scrolled() (back, kept int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.scrolled, p.back.len()
}

// Text is the agent's screen as plain text, for tests.
func (p *Pane) Text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.emu.String()
}

// modifiedKey encodes the special keys with Shift, Alt or Ctrl as xterm
// does (CSI 1;m A, CSI n;m ~), which the emulator's own encoder does not;
// "" for every other key.
func modifiedKey(k tea.Key) string {
	mods := k.Mod & (tea.ModShift | tea.ModAlt | tea.ModCtrl)
	if mods == 0 {
		return ""
	}
	m := 1
	if mods&tea.ModShift != 0 {
		m++
	}
	if mods&tea.ModAlt != 0 {
		m += 2
	}
	if mods&tea.ModCtrl != 0 {
		m += 4
	}
	final := map[rune]byte{tea.KeyUp: 'A', tea.KeyDown: 'B', tea.KeyRight: 'C', tea.KeyLeft: 'D',
		tea.KeyHome: 'H', tea.KeyEnd: 'F', tea.KeyF1: 'P', tea.KeyF2: 'Q', tea.KeyF3: 'R', tea.KeyF4: 'S'}
	if f, ok := final[k.Code]; ok {
		return "\x1b[1;" + strconv.Itoa(m) + string(f)
	}
	tilde := map[rune]int{tea.KeyInsert: 2, tea.KeyDelete: 3, tea.KeyPgUp: 5, tea.KeyPgDown: 6,
		tea.KeyF5: 15, tea.KeyF6: 17, tea.KeyF7: 18, tea.KeyF8: 19, tea.KeyF9: 20, tea.KeyF10: 21,
		tea.KeyF11: 23, tea.KeyF12: 24}
	if n, ok := tilde[k.Code]; ok {
		return "\x1b[" + strconv.Itoa(n) + ";" + strconv.Itoa(m) + "~"
	}
	return ""
}
