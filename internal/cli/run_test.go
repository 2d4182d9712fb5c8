package cli

import (
	"reflect"
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
