package dashboard

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/term"
	"github.com/charmbracelet/x/vt"
	"github.com/creack/pty"

	"github.com/agent-lock/agent-lock/internal/report"
)

// agentTerm is a one-terminal dashboard over a real pseudo-terminal: the
// test writes to the slave side as an agent would, and reads what the
// agent would get from it.
type agentTerm struct {
	t     *testing.T
	m     *Model
	pane  *Pane
	slave *os.File
	mu    sync.Mutex
	clips []Clipboard
	// got is what the agent reads from its terminal, as it comes.
	got chan []byte
}

func newAgentTerm(t *testing.T, o Options, w, h int) *agentTerm {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	// Raw: bytes reach the test as the pane sent them, no echo, no
	// signals from ^C.
	if _, err := term.MakeRaw(slave.Fd()); err != nil {
		t.Fatal(err)
	}
	at := &agentTerm{t: t, slave: slave, got: make(chan []byte, 64)}
	go func() {
		for {
			b := make([]byte, 256)
			n, err := slave.Read(b)
			if n > 0 {
				at.got <- b[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	at.pane = NewPane(master, w, h, func(c Clipboard) {
		at.mu.Lock()
		at.clips = append(at.clips, c)
		at.mu.Unlock()
	})
	o.Pane, o.Home = at.pane, "/home/alice"
	o.Now = func() time.Time { return t0.Add(9 * time.Second) }
	at.m = New(o)
	at.pane.Start(func(tea.Msg) {})
	t.Cleanup(func() {
		at.pane.Close()
		slave.Close()
		master.Close()
	})
	at.resize(w, h)
	return at
}

// resize is the terminal's new size, carried out as the program would.
func (at *agentTerm) resize(w, h int) {
	if _, cmd := at.m.Update(tea.WindowSizeMsg{Width: w, Height: h}); cmd != nil {
		cmd()
	}
}

// write is the agent's output; it returns once the pane shows want.
func (at *agentTerm) write(s, want string) {
	at.t.Helper()
	if _, err := at.slave.WriteString(s); err != nil {
		at.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(at.pane.Text(), want) {
		if time.Now().After(deadline) {
			at.t.Fatalf("the pane never showed %q:\n%s", want, at.pane.Text())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// read is what the agent got, once it has n bytes.
func (at *agentTerm) read(n int) string {
	at.t.Helper()
	var buf []byte
	timeout := time.After(10 * time.Second)
	for len(buf) < n {
		select {
		case b := <-at.got:
			buf = append(buf, b...)
		case <-timeout:
			at.t.Fatalf("the agent got %q, want %d bytes", buf, n)
		}
	}
	return string(buf)
}

func (at *agentTerm) key(k tea.KeyPressMsg) tea.Cmd {
	_, cmd := at.m.Update(k)
	return cmd
}

func ctrl(r rune) tea.KeyPressMsg { return tea.KeyPressMsg{Code: r, Mod: tea.ModCtrl} }

// The agent's output is drawn in the pane; its escape sequences act there
// and nowhere else.
func TestPaneShowsTheAgentAndKeepsItsSequences(t *testing.T) {
	at := newAgentTerm(t, Options{}, 100, 30)
	at.m.Update(RecordsMsg(sampleRecords()))
	at.write("hello \x1b[1;31mred\x1b[m 世界\r\n", "世界")
	at.write("\x1b]52;c;"+"U0VDUkVU"+"\x07\x1b]2;evil\x07\x1b[?1049hALT", "ALT")
	v := at.m.View()
	for _, bad := range []string{"\x1b]52", "\x1b]2;", "U0VDUkVU", "\x1b[?1049h"} {
		if strings.Contains(v.Content, bad) {
			t.Errorf("the screen passes the agent's %q on: %q", bad, v.Content)
		}
	}
	if v.WindowTitle != "agent-lock" {
		t.Errorf("window title %q: the agent's title must not reach the terminal", v.WindowTitle)
	}
	plain := ansi.Strip(v.Content)
	if !strings.Contains(plain, "ALT") || strings.Contains(plain, "hello") {
		t.Errorf("the alternate screen does not act in the pane:\n%s", plain)
	}
	if !strings.Contains(plain, "title: evil") {
		t.Errorf("the agent's title is not shown in the live view:\n%s", plain)
	}
	at.write("\x1b[?1049l", "hello")
	v = at.m.View()
	if !strings.Contains(v.Content, "\x1b[1;31mred") && !strings.Contains(v.Content, "\x1b[31;1mred") && !strings.Contains(ansi.Strip(v.Content), "red") {
		t.Errorf("the agent's colours are lost: %q", v.Content)
	}
	at.mu.Lock()
	defer at.mu.Unlock()
	if len(at.clips) != 1 || at.clips[0].Read || at.clips[0].Bytes != 6 {
		t.Errorf("the clipboard write was not reported as 6 bytes: %+v", at.clips)
	}
}

// Keys reach the agent as a terminal sends them, in the modes the agent
// asked for, except the flip key, which shows the dashboard.
func TestPaneKeys(t *testing.T) {
	at := newAgentTerm(t, Options{}, 80, 24)
	for _, c := range []struct {
		key  tea.KeyPressMsg
		want string
	}{
		{tea.KeyPressMsg{Code: 'a', Text: "a"}, "a"},
		{tea.KeyPressMsg{Code: '!', Text: "!"}, "!"},
		{ctrl('c'), "\x03"},
		{ctrl('z'), "\x1a"},
		{ctrl('\\'), "\x1c"},
		{ctrl('d'), "\x04"},
		{tea.KeyPressMsg{Code: tea.KeyEnter}, "\r"},
		{tea.KeyPressMsg{Code: tea.KeyEnter, Mod: tea.ModShift}, "\r"},
		{tea.KeyPressMsg{Code: tea.KeyUp}, "\x1b[A"},
		{tea.KeyPressMsg{Code: tea.KeyUp, Mod: tea.ModCtrl}, "\x1b[1;5A"},
		{tea.KeyPressMsg{Code: tea.KeyDelete, Mod: tea.ModShift}, "\x1b[3;2~"},
		{tea.KeyPressMsg{Code: 'x', Mod: tea.ModAlt}, "\x1bx"},
	} {
		if cmd := at.key(c.key); cmd != nil {
			t.Errorf("%s: a key for the agent gave the dashboard a command", c.key)
		}
		if got := at.read(len(c.want)); got != c.want {
			t.Errorf("%s: the agent got %q, want %q", c.key, got, c.want)
		}
	}
	// Application cursor keys and bracketed paste, as the agent asks.
	at.write("\x1b[?1h\x1b[?2004hmodes", "modes")
	at.key(tea.KeyPressMsg{Code: tea.KeyUp})
	if got := at.read(3); got != "\x1bOA" {
		t.Errorf("up in application cursor mode: %q", got)
	}
	at.m.Update(tea.PasteMsg{Content: "pasted"})
	if got, want := at.read(len("\x1b[200~pasted\x1b[201~")), "\x1b[200~pasted\x1b[201~"; got != want {
		t.Errorf("paste: %q, want %q", got, want)
	}

	// The flip key shows the dashboard, whose keys stay its own.
	at.key(ctrl(']'))
	if !strings.Contains(ansi.Strip(at.m.View().Content), "Escape attempts") {
		t.Error("ctrl+] does not show the dashboard")
	}
	at.key(tea.KeyPressMsg{Code: 'j', Text: "j"})
	at.key(ctrl(']'))
	at.key(tea.KeyPressMsg{Code: 'b', Text: "b"})
	if got := at.read(1); got != "b" {
		t.Errorf("after flipping back the agent got %q: a key meant for the dashboard reached it", got)
	}
}

// Shift+PgUp and Shift+PgDn scroll the pane through what scrolled off the
// agent's screen, and stay the pane's; any other key brings the agent's
// screen back and goes to the agent; the agent's ED 3 empties the
// scrollback, as in a terminal.
func TestPaneScrollsBack(t *testing.T) {
	at := newAgentTerm(t, Options{}, 80, 24) // the pane: 21 rows over the strip
	var sb strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&sb, "line %d\r\n", i)
	}
	at.write(sb.String()+"prompt$ ", "prompt$")
	view := func() string { return ansi.Strip(at.m.View().Content) }
	if strings.Contains(view(), "line 150") || !strings.Contains(view(), "shift+PgUp: scroll back") {
		t.Fatalf("live, the pane shows more than the agent's screen, or no hint of scrolling:\n%s", view())
	}
	shiftPgUp := tea.KeyPressMsg{Code: tea.KeyPgUp, Mod: tea.ModShift}
	at.key(shiftPgUp)
	at.key(shiftPgUp)
	back, kept := at.pane.Scrolled()
	// 200 lines and the prompt on 21 rows: 180 scrolled off; two pages of 20.
	if back != 40 || kept != 180 {
		t.Fatalf("after two shift+PgUp: %d lines back of %d kept, want 40 of 180", back, kept)
	}
	lines, cur := at.pane.View(80, 21)
	if got := strings.TrimSpace(ansi.Strip(lines[0])); got != "line 141" || cur != nil {
		t.Errorf("scrolled back 40: the first row shows %q (want line 141), cursor %v (want none)", got, cur)
	}
	if !strings.Contains(view(), "scrolled back 40 of 180 lines") {
		t.Errorf("the live view does not say the pane is scrolled back:\n%s", view())
	}
	// Output while scrolled back does not move what is shown.
	at.write("more\r\n", "more")
	if lines, _ := at.pane.View(80, 21); strings.TrimSpace(ansi.Strip(lines[0])) != "line 141" {
		t.Errorf("new output moved the view scrolled back: %q", ansi.Strip(lines[0]))
	}
	at.key(tea.KeyPressMsg{Code: tea.KeyPgDown, Mod: tea.ModShift})
	if back, _ := at.pane.Scrolled(); back != 21 {
		t.Errorf("shift+PgDn: %d lines back, want 21", back)
	}
	select {
	case b := <-at.got:
		t.Errorf("a scroll key reached the agent: %q", b)
	default:
	}
	at.key(tea.KeyPressMsg{Code: 'x', Text: "x"})
	if got := at.read(1); got != "x" {
		t.Errorf("a key while scrolled back: the agent got %q", got)
	}
	if back, _ := at.pane.Scrolled(); back != 0 {
		t.Errorf("a key while scrolled back left the view %d lines back", back)
	}
	at.key(shiftPgUp)
	at.write("\x1b[H\x1b[2J\x1b[3Jcleared", "cleared")
	if back, kept := at.pane.Scrolled(); back != 0 || kept != 0 {
		t.Errorf("after ED 3: %d lines back of %d kept, want none", back, kept)
	}
}

// A flip key from --pane-key replaces ctrl+], which then goes to the agent.
func TestPaneKeyIsConfigurable(t *testing.T) {
	at := newAgentTerm(t, Options{FlipKey: "f12"}, 80, 24)
	at.key(ctrl(']'))
	if got := at.read(1); got != "\x1d" {
		t.Errorf("ctrl+] with --pane-key f12: the agent got %q", got)
	}
	at.key(tea.KeyPressMsg{Code: tea.KeyF12})
	if !at.m.showBoard {
		t.Error("f12 does not flip")
	}
	for k, ok := range map[string]bool{"ctrl+]": true, "f12": true, "alt+a": true, "ctrl+^": true,
		"ctrl+c": false, "ctrl+z": false, "ctrl+\\": false, "a": false, "f": false, "enter": false, "ctrl+shift+x": false} {
		if err := CheckFlipKey(k); (err == nil) != ok {
			t.Errorf("CheckFlipKey(%q) = %v", k, err)
		}
	}
}

// The agent's terminal gets the pane's size, which follows the terminal's.
func TestPaneResize(t *testing.T) {
	at := newAgentTerm(t, Options{}, 100, 30)
	for _, c := range []struct{ w, h, pw, ph int }{
		{100, 30, 100, 27}, // a strip of three lines under the pane
		{80, 8, 80, 7},     // a short terminal: one line
		{160, 50, 119, 50}, // wide: the side panel beside it
	} {
		at.resize(c.w, c.h)
		rows, cols, err := pty.Getsize(at.slave)
		if err != nil {
			t.Fatal(err)
		}
		if cols != c.pw || rows != c.ph {
			t.Errorf("at %dx%d the agent's terminal is %dx%d, want %dx%d", c.w, c.h, cols, rows, c.pw, c.ph)
		}
		checkGeometry(t, at.m.View().Content, c.w, c.h)
	}
}

// A terminal made shorter keeps the cursor's row, as xterm does: the rows
// above it go to the scrollback, and the agent's next line goes under its
// last one instead of over an older one.
func TestPaneShrinkKeepsTheCursorRow(t *testing.T) {
	at := newAgentTerm(t, Options{}, 80, 24) // 21 rows
	var sb strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&sb, "line %d\r\n", i)
	}
	at.write(strings.Replace(sb.String(), "line 20", "line 20 世界x", 1)+"prompt$ ", "prompt$")
	at.resize(80, 12) // 9 rows
	if _, cols, _ := pty.Getsize(at.slave); cols != 80 {
		t.Fatalf("the agent's terminal is %d wide, want 80", cols)
	}
	at.write("\r\nnext", "next")
	lines, _ := at.pane.View(80, at.pane.emu.Height())
	var got []string
	for _, l := range lines {
		got = append(got, strings.TrimSpace(ansi.Strip(l)))
	}
	if h := len(got); h < 3 || got[h-1] != "next" || got[h-2] != "prompt$" || got[h-3] != "line 20 世界x" {
		t.Errorf("after the shrink and a line, the pane's last rows are not line 20, prompt$, next:\n%s", strings.Join(got, "\n"))
	}
	if _, kept := at.pane.Scrolled(); kept != 21-len(got)+1 {
		t.Errorf("%d lines kept in the scrollback, want %d", kept, 21-len(got)+1)
	}
}

// The agent asks for mouse reports: the terminal is asked to send them,
// and a click in the pane reaches the agent at the pane's coordinates.
func TestPaneMouse(t *testing.T) {
	at := newAgentTerm(t, Options{}, 80, 24)
	if at.m.View().MouseMode != tea.MouseModeNone {
		t.Error("mouse reports are on while the agent asked for none: the user could not select text")
	}
	at.write("\x1b[?1000h\x1b[?1006hmouse", "mouse")
	if at.m.View().MouseMode != tea.MouseModeCellMotion {
		t.Error("the agent asked for mouse reports and the terminal is not asked for them")
	}
	at.m.Update(tea.MouseClickMsg{X: 4, Y: 2, Button: tea.MouseLeft})
	if got, want := at.read(len("\x1b[<0;5;3M")), "\x1b[<0;5;3M"; got != want {
		t.Errorf("click: %q, want %q", got, want)
	}
}

// The session's ends, as the keys and the agent decide them.
func TestPaneExits(t *testing.T) {
	at := newAgentTerm(t, Options{}, 80, 24)
	at.key(ctrl(']'))
	if cmd := at.key(tea.KeyPressMsg{Code: 'd', Text: "d"}); !isQuit(cmd) || at.m.Exit() != ExitDetach {
		t.Error("d in the dashboard does not detach")
	}
	if at.m.showBoard {
		t.Error("a terminal attached after a detach must see the agent first")
	}
	at.key(ctrl(']'))
	if cmd := at.key(ctrl('c')); cmd != nil {
		t.Error("ctrl+c in the dashboard must not end the session")
	}
	if cmd := at.key(tea.KeyPressMsg{Code: 'q', Text: "q"}); !isQuit(cmd) || at.m.Exit() != ExitQuit {
		t.Error("q in the dashboard does not end the session")
	}

	// The agent exits: the pane says so and waits for a key.
	at.m.Update(RecordsMsg{{Type: report.TypeSummary, Summary: &report.Summary{ExitCode: 3}}})
	if _, cmd := at.m.Update(EndMsg{}); cmd != nil {
		t.Error("the agent's exit closed the pane without --exit-with-agent")
	}
	if s := ansi.Strip(at.m.View().Content); !strings.Contains(s, "the agent has exited (exit 3): press any key to close") {
		t.Errorf("the pane does not say the agent exited:\n%s", s)
	}
	if cmd := at.key(tea.KeyPressMsg{Code: 'x', Text: "x"}); !isQuit(cmd) || at.m.Exit() != ExitDone {
		t.Error("a key after the agent's exit does not close the pane")
	}

	at = newAgentTerm(t, Options{ExitWithAgent: true}, 80, 24)
	if _, cmd := at.m.Update(EndMsg{}); !isQuit(cmd) || at.m.Exit() != ExitDone {
		t.Error("--exit-with-agent: the pane waits")
	}
}

// The one-terminal screen at fixed sizes: the strip under the pane, the
// side panel beside it, the dashboard.
func TestGoldenPaneViews(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 40}, {160, 50}} {
		w, h := size[0], size[1]
		t.Run(fmt.Sprintf("%dx%d", w, h), func(t *testing.T) {
			at := newAgentTerm(t, Options{}, w, h)
			at.m.Update(RecordsMsg(sampleRecords()[:20]))
			at.write("\x1b]2;build\x07$ make test\r\nok  \x1b[32mexample.com/pkg\x1b[m 0.01s\r\n$ ", "$ make")
			got := screen(t, at.m, colorprofile.Ascii)
			golden(t, fmt.Sprintf("pane-%dx%d.golden", w, h), got)
			checkGeometry(t, got, w, h)
			if c := at.m.View().Cursor; c == nil || c.X != 2 || c.Y != 2 {
				t.Errorf("the cursor is not the agent's (2, 2): %+v", c)
			}
		})
	}
}

// feed's skipping of a flood's lines changes nothing that can be seen:
// the same stream, fed in the same chunks, leaves the same screen and
// cursor in the pane as in a plain emulator, whatever the lines (long
// ones that wrap, tabs, wide characters, a colour set before and reset
// after, a title split across chunks), and the same lines to scroll back
// to (their text: the skipped ones lose the colour set before them); and
// it does skip lines.
func TestFeedChangesNothingSeen(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	words := []string{"go", "build", "ok", "\t", "世界", "ｗｉｄｅ", "e\u0301", "0123456789", strings.Repeat("x", 150)}
	skipped := false
	for round := range 40 {
		var sb strings.Builder
		if round%3 == 0 {
			sb.WriteString("\x1b[1;32m")
		}
		if round%5 == 0 {
			sb.WriteString("\x1b]2;a title that spans\r\nlines\x07")
		}
		lines := 40 + rnd.IntN(200)
		if round%7 == 6 {
			lines = 12000 + rnd.IntN(3000) // more than the pane keeps
		}
		for i := range lines {
			fmt.Fprintf(&sb, "%d ", i)
			for range rnd.IntN(6) {
				sb.WriteString(words[rnd.IntN(len(words))] + " ")
			}
			if round%4 == 1 {
				// A program in raw mode: its line feeds return no carriage.
				sb.WriteString("\n")
			} else {
				sb.WriteString("\r\n")
			}
		}
		if round%3 == 0 {
			sb.WriteString("\x1b[m")
		}
		sb.WriteString("prompt$ ")
		stream := []byte(sb.String())
		w, h := 20+rnd.IntN(100), 3+rnd.IntN(40)
		plain := vt.NewEmulator(w, h)
		plain.SetScrollbackSize(1 << 20)
		pane := NewPane(nil, w, h, nil)
		go io.Copy(io.Discard, plain)
		go io.Copy(io.Discard, pane.emu)
		for i := 0; i < len(stream); {
			n := min(len(stream)-i, 1+rnd.IntN(4096))
			if round%7 == 6 {
				n = min(len(stream)-i, 1+rnd.IntN(1<<20))
			}
			chunk := stream[i : i+n]
			plain.Write(chunk)
			if _, _, ok := scrolledAway(chunk, h+1); ok {
				skipped = true
			}
			pane.feed(chunk)
			i += n
		}
		if plain.Render() != pane.emu.Render() || plain.CursorPosition() != pane.emu.CursorPosition() {
			t.Fatalf("round %d (%dx%d): the screens differ:\n--- every line\n%s\n--- skipped\n%s\ncursor %v, %v",
				round, w, h, plain.String(), pane.emu.String(), plain.CursorPosition(), pane.emu.CursorPosition())
		}
		all := plain.Scrollback().Lines()
		if want := min(len(all), scrollbackLines); pane.back.len() != want {
			t.Fatalf("round %d (%dx%d): %d lines kept to scroll back to, want %d", round, w, h, pane.back.len(), want)
		}
		all = all[len(all)-pane.back.len():]
		for i, l := range all {
			// Trailing blanks aside: a coloured one is a cell of its own.
			got, want := strings.TrimRight(ansi.Strip(pane.back.line(i)), " "), strings.TrimRight(l.String(), " ")
			if got != want {
				t.Fatalf("round %d (%dx%d): line %d of %d kept is %q, want %q", round, w, h, i, len(all), got, want)
			}
		}
	}
	if !skipped {
		t.Error("no chunk was shortened: the test proves nothing")
	}
	// Not plain text: left alone.
	esc := []byte(strings.Repeat("line\x1b[K\r\n", 300))
	if _, _, ok := scrolledAway(esc, 25); ok {
		t.Error("a chunk with escape sequences was shortened")
	}
}
