// Package bpfload loads a collection's programs side by side.
//
// A program's load is the kernel's verifier, and the verifier runs in the
// loading thread: cilium/ebpf's NewCollection verifies one program after
// another, so a session's start waits for the sum of every program's
// verification (41 programs for the BPF LSM's cell). The kernel verifies
// privileged loads concurrently (no global lock since Linux 5.3), so here the
// maps are made once and the programs are verified by GOMAXPROCS workers:
// the start waits for the longest program, or the sum over the CPUs.
//
// What is loaded is the same as NewCollection's: the same specs, the same
// maps (each program's references point at the one set made first), the same
// frozen read-only data. Maps that hold programs or other maps are not
// filled: a collection with one is loaded by NewCollection itself. Any
// failure closes everything made and returns the error, the verifier's log
// included.
package bpfload

import (
	"errors"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Serial makes Collection cilium/ebpf's NewCollection, which loads one
// program after another: the tests' reference, and a way to rule this
// package out.
var Serial bool

// inFlight and peak count programs being loaded at once (Go's part of a
// program's load included); peak is what the tests read to see that loads
// overlap.
var inFlight, peak atomic.Int32

// slots bound the programs loading at once in this process, whatever the
// number of collections loading (the daemon starts cells side by side): a
// verification holds its memory until it ends, and more of them than CPUs
// gain nothing.
var slots = make(chan struct{}, runtime.GOMAXPROCS(0))

// Peak returns the most programs that were being loaded at once since the
// last ResetPeak.
func Peak() int { return int(peak.Load()) }

// ResetPeak forgets the peak.
func ResetPeak() { peak.Store(0) }

// Collection creates spec's maps, then loads its programs in parallel, at
// most GOMAXPROCS at a time, largest first (the largest decides how long it
// takes). cache holds the kernel's BTF, which the programs' relocations
// (CO-RE) read: the caller's, parsed already, or nil, and then parsed only
// if a program needs it, once for all of them.
func Collection(spec *ebpf.CollectionSpec, cache *btf.Cache) (*ebpf.Collection, error) {
	return collection(spec, cache, false)
}

// Idle is Collection for a load nobody waits for (the daemon's spare): its
// programs are verified on threads of the idle scheduling class, so that
// the sessions starting meanwhile, and their agents, are not slowed by it.
func Idle(spec *ebpf.CollectionSpec, cache *btf.Cache) (*ebpf.Collection, error) {
	return collection(spec, cache, true)
}

func collection(spec *ebpf.CollectionSpec, cache *btf.Cache, idle bool) (*ebpf.Collection, error) {
	if Serial || hasSpecialMaps(spec) {
		return ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Cache: cache})
	}
	if cache == nil {
		cache = btf.NewCache()
	}
	maps, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{
		Maps:      spec.Maps,
		Variables: spec.Variables,
		Types:     spec.Types,
		ByteOrder: spec.ByteOrder,
	}, ebpf.CollectionOptions{Cache: cache})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(spec.Programs))
	for name, p := range spec.Programs {
		if p.Type != ebpf.UnspecifiedProgram {
			names = append(names, name)
		}
	}
	sort.Slice(names, func(a, b int) bool {
		na, nb := len(spec.Programs[names[a]].Instructions), len(spec.Programs[names[b]].Instructions)
		if na != nb {
			return na > nb
		}
		return names[a] < names[b]
	})
	workers := runtime.GOMAXPROCS(0)
	progs := make([]*ebpf.Program, len(names))
	errs := make([]error, len(names))
	next := atomic.Int32{}
	var wg sync.WaitGroup
	for range min(workers, len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if idle {
				// This thread alone, and given back at the normal
				// class: Go's other goroutines must not run at the idle
				// one (a starved thread holding a runtime lock would
				// stall the daemon). If the class cannot be put back,
				// the thread is not given back: it ends with this
				// goroutine (or, the main thread, waits forever).
				runtime.LockOSThread()
				if unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0) == nil {
					defer func() {
						if unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}, 0) == nil {
							runtime.UnlockOSThread()
						}
					}()
				} else {
					runtime.UnlockOSThread()
				}
			}
			for {
				i := int(next.Add(1)) - 1
				if i >= len(names) {
					return
				}
				progs[i], errs[i] = program(spec, names[i], maps.Maps, cache)
				if errs[i] != nil {
					// The others still in flight finish; none is started.
					next.Store(int32(len(names)))
				}
			}
		}()
	}
	wg.Wait()
	coll := &ebpf.Collection{Programs: map[string]*ebpf.Program{}, Maps: maps.Maps, Variables: maps.Variables}
	for i, name := range names {
		if progs[i] != nil {
			coll.Programs[name] = progs[i]
		}
	}
	if err := errors.Join(errs...); err != nil {
		coll.Close()
		return nil, err
	}
	return coll, nil
}

// hasSpecialMaps says whether a map of spec holds programs or other maps,
// which NewCollection fills after loading the programs.
func hasSpecialMaps(spec *ebpf.CollectionSpec) bool {
	for _, m := range spec.Maps {
		switch m.Type {
		case ebpf.ProgramArray, ebpf.ArrayOfMaps, ebpf.HashOfMaps, ebpf.StructOpsMap:
			return true
		}
	}
	return false
}

// program loads one program of spec against the maps already made.
func program(spec *ebpf.CollectionSpec, name string, maps map[string]*ebpf.Map, cache *btf.Cache) (*ebpf.Program, error) {
	p := spec.Programs[name]
	// Only the maps the program names: the loader clones each one it is
	// given.
	used := map[string]*ebpf.MapSpec{}
	replace := map[string]*ebpf.Map{}
	for _, ins := range p.Instructions {
		if ref := ins.Reference(); ref != "" && ins.IsLoadFromMap() {
			if ms, ok := spec.Maps[ref]; ok {
				used[ref] = ms
				replace[ref] = maps[ref]
			}
		}
	}
	slots <- struct{}{}
	defer func() { <-slots }()
	n := inFlight.Add(1)
	for {
		old := peak.Load()
		if n <= old || peak.CompareAndSwap(old, n) {
			break
		}
	}
	defer inFlight.Add(-1)
	one, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{
		Maps:      used,
		Programs:  map[string]*ebpf.ProgramSpec{name: p},
		Types:     spec.Types,
		ByteOrder: spec.ByteOrder,
	}, ebpf.CollectionOptions{MapReplacements: replace, Cache: cache})
	if err != nil {
		return nil, err
	}
	defer one.Close()
	return one.DetachProgram(name), nil
}
