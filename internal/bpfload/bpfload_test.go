package bpfload

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// spec is n socket filters that each read the one array map "shared", and,
// if bad, one more program that the verifier refuses (it reads r2 unset).
func spec(n int, bad bool) *ebpf.CollectionSpec {
	s := &ebpf.CollectionSpec{
		Maps:     map[string]*ebpf.MapSpec{"shared": {Name: "shared", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1}},
		Programs: map[string]*ebpf.ProgramSpec{},
	}
	for i := range n {
		s.Programs[fmt.Sprintf("p%d", i)] = &ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: asm.Instructions{
			asm.LoadMapPtr(asm.R1, 0).WithReference("shared"),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		}}
	}
	if bad {
		// The largest, so loaded first: the others see the early stop.
		var ins asm.Instructions
		for range 16 {
			ins = append(ins, asm.Mov.Imm(asm.R0, 0))
		}
		s.Programs["bad"] = &ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: append(ins,
			asm.Mov.Reg(asm.R0, asm.R2),
			asm.Return(),
		)}
	}
	return s
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading programs needs root")
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// TestSharedMaps: every program is loaded, side by side, against the one map.
func TestSharedMaps(t *testing.T) {
	needRoot(t)
	ResetPeak()
	coll, err := Collection(spec(8, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	if len(coll.Programs) != 8 || len(coll.Maps) != 1 {
		t.Fatalf("%d programs and %d maps, want 8 and 1", len(coll.Programs), len(coll.Maps))
	}
	info, err := coll.Maps["shared"].Info()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := info.ID()
	for name, p := range coll.Programs {
		pi, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		ids, ok := pi.MapIDs()
		if !ok {
			t.Skip("this kernel does not say which maps a program uses")
		}
		if !slices.Equal(ids, []ebpf.MapID{want}) {
			t.Errorf("%s uses maps %v, want only %v", name, ids, want)
		}
	}
}

// TestRefusedProgram: one refused program fails the whole load, with the
// verifier's error, and leaves nothing open.
func TestRefusedProgram(t *testing.T) {
	needRoot(t)
	before := openFDs(t)
	coll, err := Collection(spec(8, true), nil)
	if err == nil {
		coll.Close()
		t.Fatal("a refused program was not an error")
	}
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		t.Errorf("no verifier error in %v", err)
	}
	if after := openFDs(t); after != before {
		fds, _ := os.ReadDir("/proc/self/fd")
		for _, fd := range fds {
			l, _ := os.Readlink("/proc/self/fd/" + fd.Name())
			t.Log(fd.Name(), l)
		}
		t.Errorf("%d descriptors open after the failed load, %d before", after, before)
	}
}

// TestBoundedAcrossCollections: collections loading at once share the
// process's GOMAXPROCS slots.
func TestBoundedAcrossCollections(t *testing.T) {
	needRoot(t)
	ResetPeak()
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			coll, err := Collection(spec(8, false), nil)
			if err == nil {
				coll.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if p, n := Peak(), runtime.GOMAXPROCS(0); p > n || p < 1 {
		t.Errorf("%d programs loaded at once, with %d slots", p, n)
	}
}
