package jail_test

import (
	"maps"
	"os"
	"runtime"
	"testing"

	"github.com/agent-lock/agent-lock/internal/bpfload"
	"github.com/agent-lock/agent-lock/internal/jail"
)

// TestLoadsInParallel loads the cell's programs with cilium/ebpf's
// NewCollection, one after another, and then side by side (bpfload), and
// checks that the same programs came of both (the kernel's tags), that the
// second had several loading at once, and logs what each took.
// Under the BPF LSM it loads the hooks; elsewhere the observers.
func TestLoadsInParallel(t *testing.T) {
	f := needObservers(t)
	// The hooks where the BPF LSM runs them (the guests say so; elsewhere
	// a load tells: this build machine's kernel lists bpf and refuses).
	observe := true
	if f.BPFInLSM && os.Getenv("AGENT_LOCK_NATIVE") != "1" {
		observe = os.Getenv("AGENT_LOCK_VM") != "1" && tryLoad(t, f) != nil
	}
	load := func(serial bool) (map[string]string, *jail.Jail) {
		t.Helper()
		bpfload.Serial = serial
		defer func() { bpfload.Serial = false }()
		bpfload.ResetPeak()
		cg := newCgroup(t, f)
		j, err := jail.Load(jail.Config{CgroupID: cg.id, Observe: observe})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.Close() })
		tags, err := j.ProgramTags()
		if err != nil {
			t.Fatal(err)
		}
		return tags, j
	}
	serialTags, serial := load(true)
	if p := bpfload.Peak(); p != 0 {
		t.Errorf("the reference load (cilium/ebpf's NewCollection) went through bpfload's workers (%d at once)", p)
	}
	parallelTags, parallel := load(false)
	if !maps.Equal(serialTags, parallelTags) {
		t.Errorf("the loads differ:\nserial   %v\nparallel %v", serialTags, parallelTags)
	}
	if len(parallelTags) < 2 {
		t.Fatalf("only %d programs loaded", len(parallelTags))
	}
	if p, n := bpfload.Peak(), runtime.GOMAXPROCS(0); n > 1 && p < 2 || p > n {
		t.Errorf("%d programs were being loaded at once on %d CPUs", p, n)
	}
	t.Logf("%d programs (observers only: %v) on %d CPUs: serial load %v, parallel %v (%.2fx)", len(parallelTags), observe,
		runtime.GOMAXPROCS(0), serial.LoadTime(), parallel.LoadTime(), float64(parallel.LoadTime())/float64(serial.LoadTime()))
}

// TestAbandon: a load begun and abandoned (the start failed meanwhile)
// leaves nothing open, and cannot be attached after.
func TestAbandon(t *testing.T) {
	f := needObservers(t)
	cg := newCgroup(t, f)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	l := jail.Begin(jail.Config{CgroupID: cg.id, Observe: true})
	l.Abandon()
	l.Abandon()
	if after := fds(); after != before {
		t.Errorf("%d descriptors open after an abandoned load, %d before", after, before)
	}
	if j, err := l.Attach(""); err == nil {
		j.Close()
		t.Error("an abandoned load was attached")
	}
}
