package dashboard

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"

	"github.com/agent-lock/agent-lock/internal/report"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestMain(m *testing.M) {
	time.Local = time.UTC
	os.Exit(m.Run())
}

// fed returns a dashboard that has received recs, at w×h.
func fed(recs []report.Record, w, h int) *Model {
	m := New(Options{Home: "/home/alice",
		Now: func() time.Time { return t0.Add(9 * time.Second) }})
	m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	m.Update(RecordsMsg(recs))
	return m
}

func press(m *Model, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		_, cmd = m.Update(keyMsg(k))
	}
	return cmd
}

func keyMsg(k string) tea.KeyPressMsg {
	switch k {
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "pgdown":
		return tea.KeyPressMsg{Code: tea.KeyPgDown}
	case "pgup":
		return tea.KeyPressMsg{Code: tea.KeyPgUp}
	}
	r := []rune(k)[0]
	return tea.KeyPressMsg{Code: r, Text: k}
}

// screen renders m through a fixed colour profile: the golden files hold
// the text attributes (the cursor's reverse video) but no colours, so they
// do not depend on the terminal the tests ran in.
func screen(t *testing.T, m *Model, profile colorprofile.Profile) string {
	t.Helper()
	var buf bytes.Buffer
	w := &colorprofile.Writer{Forward: &buf, Profile: profile}
	if _, err := w.Write([]byte(m.View().Content)); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it after review):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestGoldenViews(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 40}, {200, 50}} {
		w, h := size[0], size[1]
		t.Run(fmt.Sprintf("%dx%d", w, h), func(t *testing.T) {
			m := fed(sampleRecords(), w, h)
			press(m, "down")
			got := screen(t, m, colorprofile.Ascii)
			golden(t, fmt.Sprintf("view-%dx%d.golden", w, h), got)
			checkGeometry(t, got, w, h)
			press(m, "enter")
			got = screen(t, m, colorprofile.Ascii)
			golden(t, fmt.Sprintf("detail-%dx%d.golden", w, h), got)
			checkGeometry(t, got, w, h)
		})
	}
}

// checkGeometry: exactly h lines, none wider than w, whatever the content.
func checkGeometry(t *testing.T, s string, w, h int) {
	t.Helper()
	lines := strings.Split(s, "\n")
	if len(lines) != h {
		t.Errorf("%d lines on a %d-line terminal", len(lines), h)
	}
	for i, l := range lines {
		if n := ansi.StringWidth(l); n > w {
			t.Errorf("line %d is %d cells on a %d-cell terminal: %q", i, n, w, ansi.Strip(l))
		}
	}
}

func TestNoColorStaysLegible(t *testing.T) {
	m := fed(sampleRecords(), 120, 40)
	plain := ansi.Strip(screen(t, m, colorprofile.NoTTY))
	for _, want := range []string{"JAILED", "~/proj", "32 escape attempts blocked", "blocked", "🔥", "~/.ssh/id_ed25519", "node[1200]"} {
		if !strings.Contains(plain, want) {
			t.Errorf("without colour the screen lacks %q:\n%s", want, plain)
		}
	}
}

func TestAuditMasthead(t *testing.T) {
	recs := sampleRecords()
	start := *recs[0].Start
	start.Mode = report.Audit
	recs[0].Start = &start
	for _, r := range recs[1:] {
		if r.Event != nil {
			r.Event.Verdict = report.Allowed
		}
	}
	m := fed(recs, 120, 40)
	s := ansi.Strip(m.View().Content)
	for _, want := range []string{"AUDIT · UNCONFINED", "32 out-of-bounds reaches got through", "reached 32", "reached"} {
		if !strings.Contains(s, want) {
			t.Errorf("audit screen lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "jail is holding") {
		t.Errorf("audit screen claims the jail holds:\n%s", s)
	}
}

func TestKeysMoveCursorAndOpenDetail(t *testing.T) {
	m := fed(sampleRecords(), 80, 24)
	n := len(m.board.Targets())
	press(m, "j", "j", "k")
	if m.cursor != 1 {
		t.Errorf("j j k: cursor %d, want 1", m.cursor)
	}
	press(m, "G")
	if m.cursor != n-1 {
		t.Errorf("G: cursor %d, want %d", m.cursor, n-1)
	}
	press(m, "down")
	if m.cursor != n-1 {
		t.Errorf("down past the end: cursor %d", m.cursor)
	}
	press(m, "g")
	if m.cursor != 0 {
		t.Errorf("g: cursor %d", m.cursor)
	}
	press(m, "pgdown")
	if m.cursor == 0 {
		t.Error("pgdown did not move")
	}
	press(m, "pgup", "up")
	if m.cursor != 0 {
		t.Errorf("pgup: cursor %d", m.cursor)
	}
	// The list scrolls so the cursor stays visible.
	press(m, "G")
	if s := ansi.Strip(m.View().Content); !strings.Contains(s, "project") {
		t.Errorf("after G the last row is not on screen:\n%s", s)
	}

	press(m, "g", "enter")
	s := ansi.Strip(m.View().Content)
	for _, want := range []string{"Detail · ~/.ssh/id_ed25519", "13 attempts", "read", "write", "node[1200]", "first 17:04:03", "last 17:04:08"} {
		if !strings.Contains(s, want) {
			t.Errorf("detail lacks %q:\n%s", want, s)
		}
	}
	if cmd := press(m, "esc"); cmd != nil {
		t.Error("esc in the detail must go back, not quit")
	}
	if m.detail {
		t.Error("esc did not close the detail")
	}
	if cmd := press(m, "esc"); !isQuit(cmd) {
		t.Error("esc on the list does not quit")
	}
	if cmd := press(m, "q"); !isQuit(cmd) {
		t.Error("q does not quit")
	}
}

func isQuit(cmd tea.Cmd) bool {
	if cmd == nil {
		return false
	}
	_, ok := cmd().(tea.QuitMsg)
	return ok
}

func TestCopySummary(t *testing.T) {
	m := fed(sampleRecords(), 120, 40)
	cmd := press(m, "c")
	if cmd == nil {
		t.Fatal("c returned no command")
	}
	msg := cmd()
	if fmt.Sprintf("%T", msg) != "tea.setClipboardMsg" {
		t.Errorf("c sent %T, want the OSC 52 clipboard message", msg)
	}
	want := Summary(m.board, "/home/alice")
	if fmt.Sprint(msg) != want {
		t.Errorf("clipboard %q, want %q", fmt.Sprint(msg), want)
	}
	s := ansi.Strip(m.View().Content)
	if !strings.Contains(s, "agent-lock session: JAILED (enforce) in ~/proj") {
		t.Errorf("the copied summary is not shown:\n%s", s)
	}
	press(m, "j")
	if m.copied != "" || m.cursor != 0 {
		t.Errorf("the first key after c must only close the summary (cursor %d)", m.cursor)
	}
	for _, line := range []string{
		"verdict: 32 escape attempts blocked — the jail is holding",
		"in-bounds 48,213 · system 9,120 · blocked 32",
		"13  read     ~/.ssh/id_ed25519 🔥",
		"sensitive targets: ~/.aws/credentials, ~/.bash_history, ~/.ssh/id_ed25519",
	} {
		if !strings.Contains(want, line) {
			t.Errorf("summary lacks %q:\n%s", line, want)
		}
	}
}

func TestResizeReflows(t *testing.T) {
	m := fed(sampleRecords(), 200, 50)
	wide := ansi.Strip(m.View().Content)
	if !strings.Contains(wide, "│") {
		t.Error("a wide terminal does not show the panels side by side")
	}
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	narrow := ansi.Strip(m.View().Content)
	if strings.Contains(narrow, " │ ") {
		t.Error("a narrow terminal still splits the panels")
	}
	checkGeometry(t, narrow, 80, 24)
}

// A flood is one update per batch: 100,000 events, then a render.
func BenchmarkFloodBatchAndRender(b *testing.B) {
	batch := make(RecordsMsg, 100_000)
	for i := range batch {
		batch[i] = report.Record{Type: report.TypeEscape, Event: &report.Event{
			Time: t0.Add(time.Duration(i) * 10 * time.Microsecond), Comm: "find", PID: uint32(i % 64),
			Op: "read", Path: fmt.Sprintf("/home/alice/src/%d/x", i%20000), Verdict: report.Blocked,
			Sensitive: i%97 == 0,
		}}
	}
	m := fed(sampleRecords()[:1], 120, 40)
	b.ResetTimer()
	for range b.N {
		m.Update(batch)
		_ = m.View()
	}
}

// A hostile file name must not drive the terminal: its escape sequences and
// newlines are shown, not obeyed, on the screen and in the summary.
func TestHostileNamesAreShownNotObeyed(t *testing.T) {
	recs := sampleRecords()
	evil := "/home/alice/\x1b[2J\x1b[Hfake\nJAILED\r\x07"
	recs = append(recs[:len(recs)-1], report.Record{Type: report.TypeEscape, Event: &report.Event{
		Time: t0, Comm: "x\x1b[31m", PID: 9, Op: "read", Path: evil, Verdict: report.Blocked}})
	start := *recs[0].Start
	start.Agent = []string{"sh", "-c", "a\nb\x1b]52;c;AAAA\x07"}
	recs[0].Start = &start
	m := fed(recs, 120, 40)
	raw := screen(t, m, colorprofile.Ascii)
	for _, bad := range []string{"\x1b[2J", "\x1b[H", "\x07", "\r", "\x1b]52", "\x1b[31m"} {
		if strings.Contains(raw, bad) {
			t.Errorf("the screen carries %q from the agent", bad)
		}
	}
	if !strings.Contains(raw, `~/\x1b[2J\x1b[Hfake\nJAILED\x0d\x07`) {
		t.Errorf("the hostile name is not shown escaped:\n%s", ansi.Strip(raw))
	}
	checkGeometry(t, raw, 120, 40)
	sum := Summary(m.board, "/home/alice")
	if strings.ContainsAny(sum, "\x1b\x07\r") {
		t.Errorf("the summary carries control characters: %q", sum)
	}
}

// Live tallies arrive with progress records, before the summary.
func TestProgressFeedsTallies(t *testing.T) {
	m := fed(sampleRecords()[:3], 120, 40)
	m.Update(RecordsMsg{{Type: report.TypeProgress, Progress: &report.Progress{Time: t0, InBounds: 700, System: 55}}})
	s := ansi.Strip(m.View().Content)
	if !strings.Contains(s, "in-bounds 700 · system 55 · blocked 2") {
		t.Errorf("progress not shown:\n%s", s)
	}
}

func TestWithheldEnvIsShown(t *testing.T) {
	recs := sampleRecords()
	start := *recs[0].Start
	start.WithheldEnv = []string{"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"}
	recs[0].Start = &start
	m := fed(recs, 120, 40)
	if s := ansi.Strip(m.View().Content); !strings.Contains(s, "2 secret env variables withheld") {
		t.Errorf("masthead does not say what was withheld:\n%s", s)
	}
	if s := Summary(m.board, "/home/alice"); !strings.Contains(s, "withheld from the agent's environment: AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN") {
		t.Errorf("summary:\n%s", s)
	}
}

// TestLandlockEngineSaysWhatItLeavesOpen: under the Landlock engine the
// masthead names the engine and its limits, and what got past it is
// counted as reached, never hidden among the blocked.
func TestLandlockEngineSaysWhatItLeavesOpen(t *testing.T) {
	recs := sampleRecords()
	recs[0].Start.Engine = "landlock (ABI 7)"
	recs[0].Start.Limits = []string{"inotify watches outside", "reports cover opens and execs only"}
	recs = append(recs, report.Record{Type: report.TypeEscape, Event: &report.Event{
		Time: t0.Add(7 * time.Second), PID: 1500, TID: 1500, Comm: "cat", Op: "read",
		Path: "/proc/1/cmdline", Verdict: report.Allowed,
	}})
	m := fed(recs, 200, 50)
	screen := ansi.Strip(m.render())
	for _, want := range []string{"JAILED (Landlock)", "landlock (ABI 7) leaves open: inotify watches outside · reports cover opens and execs only",
		"1 reach got past this engine", "reached 1"} {
		if !strings.Contains(screen, want) {
			t.Errorf("screen lacks %q:\n%s", want, screen)
		}
	}
	sum := Summary(m.board, "/home/alice")
	for _, want := range []string{"JAILED (enforce, landlock (ABI 7))", "left open by this engine: inotify watches outside; reports cover opens and execs only", "reached 1"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
}

// TestLandlockAloneSaysNothingIsObserved: with no daemon, Landlock alone
// refuses and nothing reports it, so no escape seen is not "no escape
// attempts".
func TestLandlockAloneSaysNothingIsObserved(t *testing.T) {
	recs := sampleRecords()[:1]
	recs[0].Start.Engine = "landlock (ABI 7), alone"
	m := fed(recs, 200, 50)
	screen := ansi.Strip(m.render())
	for _, want := range []string{"JAILED (Landlock alone)", "escapes refused but not seen: no daemon to observe them"} {
		if !strings.Contains(screen, want) {
			t.Errorf("screen lacks %q:\n%s", want, screen)
		}
	}
	if strings.Contains(screen, "no escape attempts") {
		t.Errorf("the screen says no escape was attempted, with nothing observing:\n%s", screen)
	}
}

// TestWarningsShowInTheFooter: agent-lock's own warnings appear on the
// dashboard (which owns the terminal) until the next key, counted when
// there are several, and an agent-chosen name in one is not obeyed.
func TestWarningsShowInTheFooter(t *testing.T) {
	m := fed(sampleRecords(), 120, 40)
	m.Update(WarningMsg("no bpf file system at /sys/fs/bpf"))
	last := func() string {
		lines := strings.Split(ansi.Strip(m.View().Content), "\n")
		return lines[len(lines)-1]
	}
	if l := last(); !strings.Contains(l, "⚠ no bpf file system at /sys/fs/bpf (printed again at the end)") {
		t.Errorf("footer: %q", l)
	}
	m.Update(WarningMsg("an orphaned cell: \x1b]52;c;aGk=\x07kill failed"))
	if l := last(); !strings.Contains(l, "⚠ 2 warnings, the latest: an orphaned cell:") || strings.Contains(l, "\x1b") {
		t.Errorf("footer: %q", l)
	}
	press(m, "j")
	if l := last(); strings.Contains(l, "⚠") || !strings.Contains(l, "q quit") {
		t.Errorf("footer after a key: %q", l)
	}
}

// An escape whose record names no process (Landlock's audit records) shows
// "?", not a process called "" with pid 0.
func TestActor(t *testing.T) {
	if got := actor("", 0); got != "?" {
		t.Errorf("no process: %q", got)
	}
	if got := actor("cat", 42); got != "cat[42]" {
		t.Errorf("cat 42: %q", got)
	}
}

// TestNetworkEscape: a refused connection is ranked by its name and port,
// and its detail shows the rule (with the flag that grants it) and the
// address.
func TestNetworkEscape(t *testing.T) {
	recs := append(sampleRecords()[:1], report.Record{Type: report.TypeEscape, Event: &report.Event{
		Time: time.Date(2025, 6, 1, 17, 4, 5, 0, time.UTC), PID: 4100, TID: 4100, Comm: "node", Op: "connect",
		Path: "evil.example:443", Verdict: report.Blocked, Host: "evil.example", Addr: "203.0.113.9", Port: 443,
		Rule: "evil.example is not granted (--allow-net evil.example:443)",
	}})
	m := fed(recs, 120, 40)
	plain := ansi.Strip(screen(t, m, colorprofile.NoTTY))
	if !strings.Contains(plain, "evil.example:443") {
		t.Fatalf("the refused connection is not on the screen:\n%s", plain)
	}
	press(m, "enter")
	plain = ansi.Strip(screen(t, m, colorprofile.NoTTY))
	for _, want := range []string{"Detail · evil.example:443", "rule: evil.example is not granted (--allow-net evil.example:443)", "address: 203.0.113.9", "connect", "node[4100]"} {
		if !strings.Contains(plain, want) {
			t.Errorf("the detail lacks %q:\n%s", want, plain)
		}
	}
}
