package dashboard

import (
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/agent-lock/agent-lock/internal/report"
)

// maxPending bounds the records a Sink holds while the screen is busy. The
// recording keeps every record; past this the dashboard counts the excess
// as dropped rather than let a stalled terminal grow agent-lock's memory.
const maxPending = 1 << 17

// Sink is a report.Writer that feeds a live dashboard. Records are batched
// and sent at most every batchWindow, so a flood of escapes costs one
// screen update per window.
type Sink struct {
	send func(tea.Msg)

	mu      sync.Mutex
	pending RecordsMsg
	dropped uint64
	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

// NewSink starts a Sink sending to send (a tea.Program's Send).
func NewSink(send func(tea.Msg)) *Sink {
	s := &Sink{send: send, wake: make(chan struct{}, 1),
		done: make(chan struct{}), stopped: make(chan struct{})}
	go s.loop()
	return s
}

func (s *Sink) loop() {
	defer close(s.stopped)
	t := time.NewTicker(batchWindow)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.wake:
		case <-s.done:
			s.flush()
			return
		}
		s.flush()
	}
}

func (s *Sink) flush() {
	s.mu.Lock()
	batch := s.pending
	s.pending = nil
	s.mu.Unlock()
	if len(batch) > 0 {
		s.send(batch)
	}
}

func (s *Sink) add(r report.Record, now bool) {
	s.mu.Lock()
	if len(s.pending) < maxPending {
		s.pending = append(s.pending, r)
	} else {
		s.dropped++
	}
	s.mu.Unlock()
	if now {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (s *Sink) Start(st report.Start) error {
	s.add(report.Record{Type: report.TypeStart, Start: &st}, true)
	return nil
}

func (s *Sink) Escape(e report.Event) error {
	s.add(report.Record{Type: report.TypeEscape, Event: &e}, false)
	return nil
}

func (s *Sink) Open(e report.Event) error {
	s.add(report.Record{Type: report.TypeOpen, Open: &e}, false)
	return nil
}

func (s *Sink) Progress(p report.Progress) error {
	s.add(report.Record{Type: report.TypeProgress, Progress: &p}, false)
	return nil
}

func (s *Sink) Summary(sum report.Summary) error {
	s.add(report.Record{Type: report.TypeSummary, Summary: &sum}, true)
	return nil
}

// Close sends what is pending, stops the Sink and returns when it has.
func (s *Sink) Close() {
	s.once.Do(func() { close(s.done) })
	<-s.stopped
}

// Dropped is how many records the dashboard never saw.
func (s *Sink) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}
