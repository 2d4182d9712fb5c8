package dashboard

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/test/tmuxterm"
)

// TestReplayInTmux runs `agent-lock replay` in a real terminal and drives it
// as a user would: cursor, detail, copy, resize, quit.
func TestReplayInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is needed for the end-to-end dashboard test: make deps installs it")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent-lock")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/agent-lock").CombinedOutput(); err != nil {
		t.Fatalf("build agent-lock: %v\n%s", err, out)
	}
	rec := filepath.Join(dir, "session.jsonl")
	f, err := os.Create(rec)
	if err != nil {
		t.Fatal(err)
	}
	w := report.NewJSON(f)
	for _, r := range sampleRecords() {
		switch {
		case r.Start != nil:
			err = w.Start(*r.Start)
		case r.Event != nil:
			err = w.Escape(*r.Event)
		case r.Summary != nil:
			err = w.Summary(*r.Summary)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	shell := fmt.Sprintf("TZ=UTC %s replay --fast %s; echo replay-exit=$?; sleep 600", bin, rec)
	tm := tmuxterm.New(t, filepath.Join(dir, "tmux.sock"), 120, 40, shell)
	const win = "s:w"
	// The bound is generous because it is not a performance assertion:
	// it only stops a broken dashboard from hanging the suite.
	waitFor := func(want string) string {
		t.Helper()
		return tm.Await(win, regexp.QuoteMeta(want), 20*time.Second)
	}
	keys := func(k ...string) {
		t.Helper()
		tm.Type(win, k...)
	}
	// Let the application's OSC 52 fill a tmux buffer we can read back.
	tm.Do("set-option", "-g", "set-clipboard", "on")

	s := waitFor("Escape attempts · 15 paths")
	for _, want := range []string{"JAILED", "32 escape attempts blocked", "🔥     13 read     /home/alice/.ssh/id_ed25519", " │ "} {
		if !strings.Contains(s, want) {
			t.Errorf("first screen lacks %q:\n%s", want, s)
		}
	}

	keys("j", "Enter")
	waitFor("Detail · /home/alice/.aws/credentials")
	keys("Escape")
	waitFor("Escape attempts · 15 paths")

	keys("c")
	waitFor("agent-lock session: JAILED (enforce) in /home/alice/proj")
	buf := ""
	for range 100 {
		if out, err := exec.Command("tmux", "-S", tm.Socket, "show-buffer").Output(); err == nil {
			buf = string(out)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(buf, "verdict: 32 escape attempts blocked") {
		t.Errorf("OSC 52 did not reach the terminal's clipboard; tmux buffer: %q", buf)
	}
	keys("x") // any key closes the summary
	waitFor("Escape attempts · 15 paths")

	tm.Do("resize-window", "-t", win, "-x", "80", "-y", "24")
	// Stacked, the live panel's title is a line of its own (capture-pane
	// -J keeps the spaces a redraw left after it, or not: CI saw both).
	s = tm.Await(win, `(?m)^Live *$`, 20*time.Second)
	if strings.Contains(s, " │ ") {
		t.Errorf("at 80 columns the panels are still side by side:\n%s", s)
	}
	for i, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if len([]rune(l)) > 80 {
			t.Errorf("line %d overflows 80 columns: %q", i, l)
		}
	}

	keys("q")
	s = waitFor("replay-exit=0")
	if !strings.Contains(s, "verdict: 32 escape attempts blocked") {
		t.Errorf("the summary was not printed at the end:\n%s", s)
	}
	if alt := strings.TrimSpace(tm.Do("display-message", "-p", "-t", win, "#{alternate_on}")); alt != "0" {
		t.Errorf("the terminal was left in the alternate screen (alternate_on=%s)", alt)
	}
	if strings.Contains(s, "Escape attempts ·") {
		t.Errorf("the dashboard is still on the restored screen:\n%s", s)
	}
}

// A bad recording is refused before the terminal is touched.
func TestReplayRejectsBadFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"type":"start","time":"2026-01-01T00:00:00Z","mode":"enforce","dir":"/p","agent":["x"],"pid":1,"user":"a","uid":1,"version":"v","kernel":"k","engine":"bpf-lsm"}
{"type":"escape", "oops"
`), 0o644)
	cmd := exec.Command("go", "run", "../../cmd/agent-lock", "replay", bad)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("replay of a broken file succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), bad+": report line 2") {
		t.Errorf("the error does not name the file and line:\n%s", out)
	}
	if strings.Contains(string(out), "\x1b[") {
		t.Errorf("a refused file still wrote to the terminal: %q", out)
	}
}
