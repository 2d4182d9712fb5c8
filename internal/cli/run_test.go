package cli

import (
	"reflect"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/agent-lock/agent-lock/internal/dashboard"
)

// TestWarningsWhileTheDashboardRuns: the session's warnings reach the
// dashboard line by line, however they were split into writes, and all of
// them are there to print once the terminal is back.
func TestWarningsWhileTheDashboardRuns(t *testing.T) {
	var sent []tea.Msg
	w := &warnings{send: func(m tea.Msg) { sent = append(sent, m) }}
	for _, s := range []string{"agent-lock: no bpf", " file system\nagent-lock: flush", " events: EBADF\n", "tail"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	want := []tea.Msg{dashboard.WarningMsg("no bpf file system"), dashboard.WarningMsg("flush events: EBADF")}
	if !reflect.DeepEqual(sent, want) {
		t.Errorf("sent %q, want %q", sent, want)
	}
	if got := w.taken(); !reflect.DeepEqual(got, []string{"agent-lock: no bpf file system", "agent-lock: flush events: EBADF", "tail"}) {
		t.Errorf("taken: %q", got)
	}
}

// --pane-key takes a key the agent can spare, and says which when not.
func TestPaneKeyFlag(t *testing.T) {
	o, err := parse([]string{"--pane-key", "f12", "--exit-with-agent", "--", "bash"})
	if err != nil || o.paneKey != "f12" || !o.exitWithAgent {
		t.Errorf("parse: %+v, %v", o, err)
	}
	// Without the flag, the policy files decide (TestPolicyFilePaneKey).
	if o, _ := parse([]string{"--", "bash"}); o.paneKey != "" {
		t.Errorf("without the flag the pane key is %q before the policy files", o.paneKey)
	}
	for _, k := range []string{"ctrl+c", "ctrl+z", "q", "shift+tab"} {
		if _, err := parse([]string{"--pane-key", k}); err == nil || !strings.Contains(err.Error(), "--pane-key") {
			t.Errorf("--pane-key %s: %v", k, err)
		}
	}
}
