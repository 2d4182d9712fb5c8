package dashboard

import (
	"fmt"
	"io"
	"regexp"
	"runtime"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/agent-lock/agent-lock/internal/report"
)

func TestBoardRanksAndTallies(t *testing.T) {
	b := NewBoard(0)
	for _, r := range sampleRecords() {
		b.Apply(r)
	}
	if b.Blocked != 32 || b.Reached != 0 || b.Escapes() != 32 {
		t.Errorf("blocked %d reached %d", b.Blocked, b.Reached)
	}
	if b.InBounds != 48213 || b.System != 9120 {
		t.Errorf("in-bounds %d system %d: the summary's counters were not taken", b.InBounds, b.System)
	}
	ts := b.Targets()
	if len(ts) != 15 {
		t.Fatalf("%d targets, want 15", len(ts))
	}
	top := ts[0]
	if top.Path != "/home/alice/.ssh/id_ed25519" || top.Count != 13 || !top.Sensitive {
		t.Errorf("top target %+v", top)
	}
	if top.Ops["read"] != 12 || top.Ops["write"] != 1 || top.MainOp() != "read" {
		t.Errorf("ops %v main %s", top.Ops, top.MainOp())
	}
	if len(top.Actors) != 1 || top.Actors[0] != (report.Actor{Comm: "node", PID: 1200}) {
		t.Errorf("actors %v", top.Actors)
	}
	if !top.First.Equal(t0.Add(time.Second)) || !top.Last.Equal(t0.Add(6*time.Second)) {
		t.Errorf("first %v last %v", top.First, top.Last)
	}
	if ts[1].Path != "/home/alice/.aws/credentials" || len(ts[1].Actors) != 5 {
		t.Errorf("second target %+v", ts[1])
	}
	// Ties in count: sensitive first, then by path.
	var ones []string
	for _, x := range ts {
		if x.Count == 1 {
			ones = append(ones, x.Path)
		}
	}
	if ones[0] != "/home/alice/.bash_history" {
		t.Errorf("among single attempts, the sensitive one is not first: %v", ones)
	}
}

func TestBoardBoundsPathsAndActors(t *testing.T) {
	b := NewBoard(100)
	for i := range 1000 {
		b.Add(report.Event{Time: t0, Comm: "find", PID: uint32(i), Op: "read",
			Path: fmt.Sprintf("/p/%d", i%300), Verdict: report.Blocked})
	}
	if n := len(b.Targets()); n != 100 {
		t.Errorf("%d paths kept, want the cap of 100", n)
	}
	// 300 distinct paths, 100 kept: the 200 others' 2/3 of 1000 events are
	// "more"; kept paths keep counting.
	var kept uint64
	for _, x := range b.Targets() {
		kept += x.Count
		if len(x.Actors) > maxActors {
			t.Fatalf("%s remembers %d actors", x.Path, len(x.Actors))
		}
	}
	if kept+b.MorePaths != 1000 || b.MorePaths == 0 {
		t.Errorf("kept %d + more %d != 1000", kept, b.MorePaths)
	}
	if b.Blocked != 1000 {
		t.Errorf("blocked %d: the cap must not lose counts", b.Blocked)
	}
	for _, x := range b.Targets() {
		if x.Count > 4 && !x.MoreActors {
			t.Errorf("%s: %d attempts by distinct pids but MoreActors unset", x.Path, x.Count)
		}
	}
}

func TestBoardRecentIsNewestLast(t *testing.T) {
	b := NewBoard(0)
	for i := range maxRecent + 10 {
		b.Add(report.Event{Time: t0, PID: uint32(i), Op: "read", Path: "/x"})
	}
	r := b.Recent(3)
	if len(r) != 3 || r[2].PID != maxRecent+9 || r[0].PID != maxRecent+7 {
		t.Errorf("recent %v", r)
	}
	if len(b.Recent(10*maxRecent)) != maxRecent {
		t.Errorf("recent is not bounded by maxRecent")
	}
}

func TestBoardRate(t *testing.T) {
	b := NewBoard(0)
	add := func(sec, n int) {
		for range n {
			b.Add(report.Event{Time: t0.Add(time.Duration(sec) * time.Second), Op: "read", Path: "/x"})
		}
	}
	add(0, 3)
	add(2, 5)
	add(1, 1) // out of order, still counted in its second
	got := b.Rate(t0.Add(2*time.Second), 4)
	want := []uint64{0, 3, 1, 5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rate %v, want %v", got, want)
	}
	// Idle seconds after the last event show as zero.
	if got := b.Rate(t0.Add(4*time.Second), 3); fmt.Sprint(got) != "[5 0 0]" {
		t.Errorf("rate two seconds later %v", got)
	}
	// A jump past the window clears it.
	add(500, 1)
	if got := b.Rate(t0.Add(500*time.Second), 3); fmt.Sprint(got) != "[0 0 1]" {
		t.Errorf("rate after a long gap %v", got)
	}
}

// A single blocked attempt among millions must keep a cell of the bar.
func TestSegmentsNeverRoundAwayACategory(t *testing.T) {
	for _, w := range []int{4, 10, 80, 200} {
		for _, counts := range [][]uint64{
			{5_000_000, 0, 1, 0},
			{5_000_000, 3_000_000, 1, 1},
			{1, 1, 1, 1},
			{0, 0, 7, 0},
			{10, 0, 0, 0},
			{999, 1, 0, 0},
		} {
			cells := segments(counts, w)
			sum := 0
			for i, c := range cells {
				sum += c
				if counts[i] > 0 && c < 1 {
					t.Errorf("w=%d %v: category %d rounded away: %v", w, counts, i, cells)
				}
				if counts[i] == 0 && c != 0 {
					t.Errorf("w=%d %v: empty category %d got cells: %v", w, counts, i, cells)
				}
			}
			if sum != w {
				t.Errorf("w=%d %v: cells %v sum to %d", w, counts, cells, sum)
			}
		}
	}
}

func BenchmarkBoardAdd(b *testing.B) {
	board := NewBoard(0)
	events := make([]report.Event, 4096)
	for i := range events {
		events[i] = report.Event{Time: t0.Add(time.Duration(i) * time.Millisecond), Comm: "find",
			PID: uint32(i % 50), Op: "read", Path: fmt.Sprintf("/home/a/src/%d", i%9000), Verdict: report.Blocked}
	}
	b.ResetTimer()
	for i := range b.N {
		board.Add(events[i%len(events)])
	}
}

// The sparkline's rate counts in-bounds and system decisions too, from the
// growth of the kernel's tallies between progress records.
func TestRateCountsProgress(t *testing.T) {
	b := NewBoard(0)
	prog := func(sec int, in, sys uint64) {
		b.Apply(report.Record{Type: report.TypeProgress, Progress: &report.Progress{
			Time: t0.Add(time.Duration(sec) * time.Second), InBounds: in, System: sys}})
	}
	prog(0, 100, 20)
	prog(1, 150, 20)
	b.Add(report.Event{Time: t0.Add(time.Second), Op: "read", Path: "/x"})
	prog(2, 150, 20) // nothing new
	got := b.Rate(t0.Add(2*time.Second), 3)
	if fmt.Sprint(got) != "[120 51 0]" {
		t.Errorf("rate %v, want [120 51 0]", got)
	}
	if b.InBounds != 150 || b.System != 20 {
		t.Errorf("tallies %d %d", b.InBounds, b.System)
	}
}

// BenchmarkPipeline is the Go side of an escape after decoding (see jail's
// BenchmarkDecode): classifying the path as sensitive, as the session does,
// and aggregating it on the board.
func BenchmarkPipeline(b *testing.B) {
	board := NewBoard(0)
	paths := make([]string, 4096)
	for i := range paths {
		paths[i] = fmt.Sprintf("/home/alice/src/project%d/node_modules/pkg/lib/file%d.js", i%40, i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p := paths[i%len(paths)]
		board.Add(report.Event{Time: t0.Add(time.Duration(i) * time.Microsecond), Comm: "node", PID: 1200,
			Op: "read", Path: p, Verdict: report.Blocked, Sensitive: report.Sensitive(p)})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkMemoryAfter10M: the live side of agent-lock after ten million
// escapes on a hundred thousand distinct paths, each through the session's
// JSON writer (the recording, to a discarded file) and the dashboard's
// board, which must stay bounded (issue 6: under 64 MiB). Reports the live
// heap after the events against the heap before them, same run.
func BenchmarkMemoryAfter10M(b *testing.B) {
	const events = 10_000_000
	paths := make([]string, 100_000)
	for i := range paths {
		paths[i] = fmt.Sprintf("/home/alice/src/project%d/node_modules/pkg/lib/file%d.js", i%40, i)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	for range b.N {
		board := NewBoard(0)
		rec := report.NewJSON(io.Discard)
		before := heap()
		for i := range events {
			p := paths[i%len(paths)]
			e := report.Event{Time: t0.Add(time.Duration(i) * time.Microsecond), Comm: "node", PID: uint32(1200 + i%50),
				Op: "read", Path: p, Verdict: report.Blocked, Sensitive: report.Sensitive(p)}
			rec.Escape(e)
			board.Add(e)
		}
		after := heap()
		runtime.KeepAlive(board)
		b.ReportMetric(float64(after)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(after)/float64(max(before, 1)), "vs-before")
		b.ReportMetric(float64(events)/b.Elapsed().Seconds()*float64(b.N), "events/s")
	}
}

// TestOpensJoinOnlyTheLiveStream: an in-bounds sample ("open" record) shows
// in the live stream and nowhere else: not a target, not a tally, not the
// rate (the kernel's counters carry those), whatever verdict it carries.
func TestOpensJoinOnlyTheLiveStream(t *testing.T) {
	b := NewBoard(0)
	e := report.Event{Time: t0, PID: 9, Comm: "cc", Op: "read", Path: "/home/alice/project/main.c", Verdict: report.Blocked}
	b.Apply(report.Record{Type: report.TypeOpen, Open: &e})
	if b.Blocked != 0 || b.Reached != 0 || len(b.Targets()) != 0 || b.Escapes() != 0 {
		t.Errorf("an open counted as an escape: blocked %d reached %d targets %d", b.Blocked, b.Reached, len(b.Targets()))
	}
	if r := b.Recent(5); len(r) != 1 || r[0].Path != e.Path || r[0].Verdict != report.InBounds {
		t.Errorf("recent = %+v", r)
	}
	if rate := b.Rate(t0, 5); rate[4] != 0 {
		t.Errorf("rate %v counts the sample", rate)
	}
	m := New(Options{Home: "/home/alice", Now: func() time.Time { return t0 }})
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 30})
	m.Update(RecordsMsg{{Type: report.TypeOpen, Open: &e}})
	if s := ansi.Strip(m.View().Content); !regexp.MustCompile(`ok +read +cc\[9\] .*project/main\.c`).MatchString(s) {
		t.Errorf("the live panel does not show the open:\n%s", s)
	}
}

// TestBoardCountsRepeats: a report the kernel coalesced repeats into
// counts as that many escapes, in the totals and on its target.
func TestBoardCountsRepeats(t *testing.T) {
	b := NewBoard(0)
	b.Add(report.Event{Time: t0, PID: 7, Comm: "loop", Op: "read", Path: "/home/alice/.ssh/id_rsa", Verdict: report.Blocked})
	b.Add(report.Event{Time: t0.Add(time.Second), PID: 7, Comm: "loop", Op: "read", Path: "/home/alice/.ssh/id_rsa",
		Verdict: report.Blocked, Repeats: 999})
	if b.Blocked != 1001 || b.Escapes() != 1001 {
		t.Errorf("blocked %d, escapes %d; want 1001", b.Blocked, b.Escapes())
	}
	if ts := b.Targets(); len(ts) != 1 || ts[0].Count != 1001 || ts[0].Ops["read"] != 1001 || ts[0].Blocked != 1001 {
		t.Errorf("targets %+v", ts)
	}
	// The summary's repeats beyond those the events carried: after the
	// last report of their escape, counted with the session's.
	b.Apply(report.Record{Type: report.TypeSummary, Summary: &report.Summary{Escapes: 1501, Repeats: 1499}})
	if b.Blocked != 1501 || b.Escapes() != 1501 {
		t.Errorf("after the summary: blocked %d, escapes %d; want 1501, as the summary says", b.Blocked, b.Escapes())
	}
}
