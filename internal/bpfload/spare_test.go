package bpfload

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// TestKeeper: a spare is taken only once loaded, each take starts the
// next load, a failed load leaves none, and what nobody took is freed at
// Close.
func TestKeeper(t *testing.T) {
	var mu sync.Mutex
	gate := make(chan struct{})
	n, freed := 0, map[int]bool{}
	fail := false
	load := func() (int, error) {
		<-gate
		mu.Lock()
		defer mu.Unlock()
		n++
		if fail {
			return 0, errors.New("refused")
		}
		return n, nil
	}
	free := func(v int) {
		mu.Lock()
		defer mu.Unlock()
		freed[v] = true
	}
	var readied []error
	k := NewKeeper(load, free, func(_ int, err error) { readied = append(readied, err) })
	if _, ok := k.Take(nil); ok {
		t.Fatal("a spare was taken while it loaded")
	}
	gate <- struct{}{}
	k.Wait()
	v, ok := k.Take(nil)
	if !ok || v != 1 {
		t.Fatalf("Take = %d, %v; want the first load", v, ok)
	}
	// The next load started with the take; it fails.
	mu.Lock()
	fail = true
	mu.Unlock()
	gate <- struct{}{}
	k.Wait()
	if _, ok := k.Take(nil); ok {
		t.Fatal("a failed load was taken")
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	gate <- struct{}{}
	k.Wait()
	// The third is taken; the fourth, held at Close, is freed then.
	if _, ok := k.Take(nil); !ok {
		t.Fatal("no spare after a failed load")
	}
	gate <- struct{}{}
	k.Wait()
	k.Close()
	if _, ok := k.Take(nil); ok {
		t.Fatal("a spare was taken after Close")
	}
	mu.Lock()
	defer mu.Unlock()
	if !freed[4] || freed[1] || freed[3] {
		t.Errorf("freed %v: want the fourth load only (the first and third were taken)", freed)
	}
	if len(readied) != 4 || readied[1] == nil || readied[0] != nil {
		t.Errorf("ready was told %v", readied)
	}
}

// TestKeeperAfter: the load after a Take begins only once the channel it
// was given closes (the session that took the spare has started), and not
// at all if the keeper closes first.
func TestKeeperAfter(t *testing.T) {
	var mu sync.Mutex
	begun := 0
	load := func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		begun++
		return begun, nil
	}
	loads := func() int {
		mu.Lock()
		defer mu.Unlock()
		return begun
	}
	k := NewKeeper(load, func(int) {}, nil)
	k.Wait()
	after := make(chan struct{})
	if _, ok := k.Take(after); !ok {
		t.Fatal("no spare")
	}
	time.Sleep(50 * time.Millisecond)
	if n := loads(); n != 1 {
		t.Fatalf("%d loads before the session started, want 1", n)
	}
	if _, ok := k.Take(nil); ok {
		t.Fatal("a spare was taken while the next waited for its session")
	}
	close(after)
	k.Wait()
	if n := loads(); n != 2 {
		t.Fatalf("%d loads once the session started, want 2", n)
	}
	if _, ok := k.Take(make(chan struct{})); !ok {
		t.Fatal("no spare after the wait")
	}
	k.Close()
	waited := make(chan struct{})
	go func() { k.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("a load waiting for its session still waits after Close")
	}
	if n := loads(); n != 2 {
		t.Fatalf("a load waiting for its session began after Close (%d loads)", n)
	}
}
