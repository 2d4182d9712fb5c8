package report

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestTally(t *testing.T) {
	var tl Tally // the zero Tally is usable
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, e := range []Event{
		{Time: at(5), PID: 1, Comm: "cat", Op: "read", Path: "/k"},
		{Time: at(3), PID: 1, Comm: "cat", Op: "read", Path: "/k"}, // out of order
		{Time: at(9), PID: 2, Comm: "cat", Op: "read", Path: "/k", Sensitive: true},
		{Time: at(7), PID: 2, Comm: "sh", Op: "read", Path: "/k"},
		{Time: at(1), PID: 3, Comm: "sh", Op: "write", Path: "/k"},
		{Time: at(8), PID: 3, Comm: "sh", Op: "write", Path: "/j"},
		{Time: at(2), PID: 3, Comm: "sh", Op: "write", Path: "/j"},
		{Time: at(4), PID: 3, Comm: "sh", Op: "exec", Path: "/z"},
		{Time: at(6), PID: 3, Comm: "sh", Op: "exec", Path: "/y"},
	} {
		tl.Add(e)
	}
	want := []Entry{
		{Path: "/k", Op: "read", Count: 4, First: at(3), Last: at(9), Sensitive: true,
			Actors: []Actor{{"cat", 1}, {"cat", 2}, {"sh", 2}}},
		{Path: "/j", Op: "write", Count: 2, First: at(2), Last: at(8), Actors: []Actor{{"sh", 3}}},
		{Path: "/y", Op: "exec", Count: 1, First: at(6), Last: at(6), Actors: []Actor{{"sh", 3}}}, // more recent
		{Path: "/z", Op: "exec", Count: 1, First: at(4), Last: at(4), Actors: []Actor{{"sh", 3}}},
		{Path: "/k", Op: "write", Count: 1, First: at(1), Last: at(1), Actors: []Actor{{"sh", 3}}},
	}
	tests := []struct {
		n    int
		want []Entry
	}{{0, want}, {-1, want}, {2, want[:2]}, {5, want}, {100, want}}
	for _, tt := range tests {
		t.Run(fmt.Sprint("top ", tt.n), func(t *testing.T) {
			if got := tl.Top(tt.n); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if tl.Total() != 9 || tl.Len() != 5 || tl.Other() != (Other{}) {
		t.Errorf("total %d len %d other %+v", tl.Total(), tl.Len(), tl.Other())
	}
	// A report the kernel coalesced repeats into counts them all.
	tl.Add(Event{Time: at(10), PID: 1, Comm: "cat", Op: "read", Path: "/k", Repeats: 41})
	if got := tl.Top(1)[0].Count; got != 4+1+41 || tl.Total() != 9+42 {
		t.Errorf("after a report with 41 repeats: /k counts %d, total %d; want 46 and 51", got, tl.Total())
	}

	// Top hands out copies.
	top := tl.Top(1)
	top[0].Actors[0].Comm = "evil"
	if tl.Top(1)[0].Actors[0].Comm != "cat" {
		t.Error("Top shares Actors with the Tally")
	}
}

func TestTallyCap(t *testing.T) {
	tl := NewTally(3)
	for i := range 10 {
		tl.Add(Event{Time: t0.Add(time.Duration(i) * time.Second), Op: "read", Path: fmt.Sprint("/p", i%5)})
	}
	// /p0../p2 got entries; /p3 and /p4 (2 events each) went to Other.
	if tl.Len() != 3 {
		t.Errorf("len %d, want 3", tl.Len())
	}
	want := Other{Count: 4, First: t0.Add(3 * time.Second), Last: t0.Add(9 * time.Second)}
	if got := tl.Other(); got != want {
		t.Errorf("other %+v, want %+v", got, want)
	}
	if tl.Total() != 10 {
		t.Errorf("total %d", tl.Total())
	}
	// Existing entries keep counting after the cap.
	tl.Add(Event{Op: "read", Path: "/p0"})
	if top := tl.Top(1); top[0].Path != "/p0" || top[0].Count != 3 {
		t.Errorf("top %+v", top)
	}
}

func TestTallyActorCap(t *testing.T) {
	var tl Tally
	for pid := range uint32(MaxActors + 5) {
		tl.Add(Event{PID: pid, Comm: "fork", Op: "read", Path: "/k"})
		tl.Add(Event{PID: pid, Comm: "fork", Op: "read", Path: "/k"})
	}
	e := tl.Top(1)[0]
	if len(e.Actors) != MaxActors || !e.MoreActors || e.Count != 2*(MaxActors+5) {
		t.Errorf("actors %d more %v count %d", len(e.Actors), e.MoreActors, e.Count)
	}
	if e.Actors[0].PID != 0 || e.Actors[MaxActors-1].PID != MaxActors-1 {
		t.Errorf("actors not in first-seen order: %v", e.Actors)
	}
}

func TestTallyConcurrent(t *testing.T) {
	tl := NewTally(0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				tl.Add(Event{PID: uint32(g), Comm: "w", Op: "read", Path: fmt.Sprint("/", i%10)})
				if i%100 == 0 {
					tl.Top(3)
				}
			}
		})
	}
	wg.Wait()
	if tl.Total() != 8000 || tl.Len() != 10 {
		t.Errorf("total %d len %d", tl.Total(), tl.Len())
	}
	for _, e := range tl.Top(0) {
		if e.Count != 800 || len(e.Actors) != 8 {
			t.Errorf("%s: count %d actors %d", e.Path, e.Count, len(e.Actors))
		}
	}
}

// benchEvents is a runaway agent's stream: a few hundred paths, a handful of
// ops and tasks, in a repeating but not sequential order.
func benchEvents(paths int) []Event {
	ops := []string{"read", "write", "exec", "unlink"}
	comms := []string{"node", "cat", "git", "python3"}
	evs := make([]Event, 4096)
	for i := range evs {
		j := i * 7919 // scatter
		evs[i] = Event{
			Time: t0.Add(time.Duration(i) * time.Microsecond),
			PID:  uint32(1000 + j%4), TID: uint32(1000 + j%4), Comm: comms[j%4],
			Op: ops[j%3], Path: fmt.Sprintf("/home/alice/.cache/some/deeper/dir/file-%d.json", j%paths),
			Verdict: Blocked,
		}
	}
	return evs
}

func BenchmarkTallyAdd(b *testing.B) {
	for _, bc := range []struct {
		name     string
		paths    int
		capacity int
	}{
		{"hot", 300, 0},         // everything fits: the steady state
		{"overflow", 4096, 100}, // most events go to Other
	} {
		b.Run(bc.name, func(b *testing.B) {
			evs := benchEvents(bc.paths)
			tl := NewTally(bc.capacity)
			for _, e := range evs { // warm: entries exist
				tl.Add(e)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				tl.Add(evs[i&(len(evs)-1)])
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func BenchmarkTallyTop(b *testing.B) {
	tl := NewTally(0)
	for i := range DefaultMaxEntries {
		tl.Add(Event{Op: "read", Path: fmt.Sprint("/p/", i), Time: t0.Add(time.Duration(i))})
	}
	b.ReportAllocs()
	for b.Loop() {
		tl.Top(20)
	}
}

// The partial selection Top uses for small n agrees with a full sort.
func TestTallyTopSelection(t *testing.T) {
	tl := NewTally(0)
	for i := range 2000 {
		j := (i * 7919) % 997
		tl.Add(Event{Op: "read", Path: fmt.Sprint("/p/", j%300), Time: t0.Add(time.Duration(j) * time.Millisecond)})
	}
	all := tl.Top(0)
	for _, n := range []int{1, 2, 7, 50, 299} {
		if got := tl.Top(n); !reflect.DeepEqual(got, all[:n]) {
			t.Errorf("Top(%d) differs from the first %d of a full sort", n, n)
		}
	}
}
