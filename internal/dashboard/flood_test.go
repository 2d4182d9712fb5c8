package dashboard

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/agent-lock/agent-lock/internal/report"
)

// probe is the dashboard with a stopwatch: it notes when a key reaches
// Update and counts the screens drawn.
type probe struct {
	*Model
	keys  chan time.Time
	draws *atomic.Int64
}

func (p probe) Init() tea.Cmd { return p.Model.Init() }

func (p probe) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	if k, ok := msg.(tea.KeyPressMsg); ok && k.String() == "j" {
		p.keys <- time.Now()
	}
	_, cmd := p.Model.Update(msg)
	return p, cmd
}

func (p probe) View() tea.View {
	p.draws.Add(1)
	return p.Model.View()
}

// keyLatency runs a real Bubble Tea program (output discarded) fed rate
// escapes a second through a Sink, as a session feeds it, and presses a key
// b.N times: it returns the key latencies, sorted, and the screens drawn a
// second.
func keyLatency(b *testing.B, rate int) ([]time.Duration, float64) {
	m := New(Options{Home: "/home/alice"})
	draws := &atomic.Int64{}
	pr := probe{Model: m, keys: make(chan time.Time, 1), draws: draws}
	ctx, cancel := context.WithCancel(context.Background())
	p := tea.NewProgram(pr, tea.WithContext(ctx), tea.WithInput(nil), tea.WithOutput(io.Discard),
		tea.WithWindowSize(120, 40))
	ran := make(chan struct{})
	go func() { defer close(ran); p.Run() }()
	defer func() { cancel(); <-ran }()
	sink := NewSink(p.Send)
	defer sink.Close()
	sink.Start(report.Start{Time: time.Now(), Mode: report.Enforce, Dir: "/home/alice/project"})

	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		if rate == 0 {
			<-stop
			return
		}
		// rate a second, in 10 ms slices.
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		n := 0
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				for range rate / 100 {
					n++
					sink.Escape(report.Event{Time: now, Comm: "find", PID: uint32(n % 64), Op: "read",
						Path: fmt.Sprintf("/home/alice/src/%d/x", n%20000), Verdict: report.Blocked})
				}
			}
		}
	}()
	time.Sleep(200 * time.Millisecond) // the flood under way
	lat := make([]time.Duration, 0, b.N)
	before, began := draws.Load(), time.Now()
	b.ResetTimer()
	for range b.N {
		sent := time.Now()
		p.Send(tea.KeyPressMsg{Code: 'j', Text: "j"})
		lat = append(lat, (<-pr.keys).Sub(sent))
		time.Sleep(20 * time.Millisecond) // a person's key rate, not a benchmark's
	}
	b.StopTimer()
	fps := float64(draws.Load()-before) / time.Since(began).Seconds()
	close(stop)
	<-flooded
	slices.Sort(lat)
	return lat, fps
}

// BenchmarkKeyUnderFlood: with 100,000 escapes a second arriving, keys must
// answer within 100 ms and the screen keep redrawing at least 10 times a
// second (issue 4). It measures the same program idle in the same run and
// prints the key latency under flood as a ratio to that baseline.
func BenchmarkKeyUnderFlood(b *testing.B) {
	idle, idleFPS := keyLatency(b, 0)
	flood, floodFPS := keyLatency(b, 100_000)
	pct := func(l []time.Duration, q float64) float64 {
		return float64(l[int(q*float64(len(l)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(flood, 0.5), "key-p50-ms")
	b.ReportMetric(pct(flood, 0.99), "key-p99-ms")
	b.ReportMetric(floodFPS, "draws/s")
	b.ReportMetric(pct(flood, 0.99)/max(pct(idle, 0.99), 0.001), "p99-vs-idle")
	b.Logf("keys: p99 %.1f ms idle, %.1f ms under 100k escapes/s; screens drawn %.0f/s idle, %.0f/s under flood",
		pct(idle, 0.99), pct(flood, 0.99), idleFPS, floodFPS)
	b.ReportMetric(0, "ns/op")
}
