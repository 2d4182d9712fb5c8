package dashboard

import (
	"context"
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/agent-lock/agent-lock/internal/report"
)

// batchWindow is how long a source gathers records before sending them:
// short enough that a decision shows within a tenth of a second, long
// enough that a flood costs one update per window, not one per event.
const batchWindow = 50 * time.Millisecond

// recordTime is when a record happened.
func recordTime(r report.Record) time.Time {
	switch {
	case r.Start != nil:
		return r.Start.Time
	case r.Event != nil:
		return r.Event.Time
	case r.Open != nil:
		return r.Open.Time
	case r.Summary != nil:
		return r.Summary.Time
	case r.Progress != nil:
		return r.Progress.Time
	}
	return time.Time{}
}

// Player replays a recorded session into a dashboard, at recorded speed or
// all at once. Its Now is the recording's clock, so the sparkline shows the
// recorded rate, not the replay's.
type Player struct {
	recs []report.Record
	fast bool

	mu  sync.Mutex
	pos time.Time // the recording's time played so far
}

// NewPlayer replays recs; fast sends them all at once.
func NewPlayer(recs []report.Record, fast bool) *Player {
	p := &Player{recs: recs, fast: fast}
	if len(recs) > 0 {
		p.pos = recordTime(recs[0])
	}
	return p
}

// Now is the recording's clock at the replay's current position.
func (p *Player) Now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pos
}

func (p *Player) advance(t time.Time) {
	p.mu.Lock()
	if t.After(p.pos) {
		p.pos = t
	}
	p.mu.Unlock()
}

// Play sends the records to send in batches, then EndMsg, and returns;
// it stops early when ctx is done.
func (p *Player) Play(ctx context.Context, send func(tea.Msg)) {
	if p.fast {
		for i := 0; i < len(p.recs); i += 4096 {
			batch := p.recs[i:min(i+4096, len(p.recs))]
			p.advance(recordTime(batch[len(batch)-1]))
			send(RecordsMsg(batch))
		}
		send(EndMsg{})
		return
	}
	wall := time.Now()
	var origin time.Time
	for i := 0; i < len(p.recs); {
		t := recordTime(p.recs[i])
		if origin.IsZero() && !t.IsZero() {
			origin = t
		}
		// Wait until the record is due at recorded speed...
		if !t.IsZero() {
			if d := time.Until(wall.Add(t.Sub(origin))); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
		// ...then send it with everything due within the batch window.
		j := i + 1
		for j < len(p.recs) {
			tj := recordTime(p.recs[j])
			if !tj.IsZero() && tj.Sub(origin) > time.Since(wall)+batchWindow {
				break
			}
			j++
		}
		p.advance(recordTime(p.recs[j-1]))
		send(RecordsMsg(p.recs[i:j]))
		i = j
	}
	send(EndMsg{})
}
