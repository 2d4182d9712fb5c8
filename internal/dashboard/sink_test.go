package dashboard

import (
	"sync"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/agent-lock/agent-lock/internal/report"
)

// A flood reaches the dashboard in a few batches, in order, complete.
func TestSinkBatchesInOrder(t *testing.T) {
	var mu sync.Mutex
	var batches int
	var got []report.Record
	s := NewSink(func(m tea.Msg) {
		mu.Lock()
		defer mu.Unlock()
		batches++
		got = append(got, m.(RecordsMsg)...)
	})
	s.Start(report.Start{Dir: "/p"})
	for i := range 50_000 {
		s.Escape(report.Event{PID: uint32(i), Op: "read", Path: "/x"})
	}
	s.Summary(report.Summary{ExitCode: 7})
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 50_002 {
		t.Fatalf("%d records arrived, want 50002", len(got))
	}
	if got[0].Start == nil || got[len(got)-1].Summary == nil {
		t.Error("start or summary out of place")
	}
	for i, r := range got[1 : len(got)-1] {
		if r.Event.PID != uint32(i) {
			t.Fatalf("record %d out of order: pid %d", i, r.Event.PID)
		}
	}
	if batches > 1000 {
		t.Errorf("%d batches for 50,002 records: the sink is not batching", batches)
	}
	if s.Dropped() != 0 {
		t.Errorf("dropped %d", s.Dropped())
	}
}

// A stalled screen costs dropped records, not unbounded memory.
func TestSinkBoundsAStalledScreen(t *testing.T) {
	release := make(chan struct{})
	s := NewSink(func(tea.Msg) { <-release })
	s.Start(report.Start{})
	for range 3 * maxPending {
		s.Escape(report.Event{Op: "read"})
	}
	s.mu.Lock()
	pending := len(s.pending)
	s.mu.Unlock()
	if pending > maxPending {
		t.Errorf("%d records pending, cap is %d", pending, maxPending)
	}
	if s.Dropped() == 0 {
		t.Error("nothing counted as dropped")
	}
	close(release)
	s.Close()
}
