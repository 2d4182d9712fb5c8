package netcell

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/bpfload"
)

// The programs' load: the kernel's verifier, the same for every cell (the
// cell's settings are written after it, bpf/netcell.h: net_settings), so
// that the daemon can verify the next session's ahead (Ahead), hand them
// to its agent-lock (Hand) and that process take them (Adopt) for Open.

// objects are a load's programs and maps, as Open keeps them.
type objects struct {
	netcellPrograms
	netcellMaps
}

// settingsMap holds the cell's settings (bpf/netcell.bpf.c: net).
const settingsMap = ".data.net"

// parsed is the programs' object, parsed once: the load copies it, the
// attach reads the programs' attach types in it.
var parsed = sync.OnceValues(loadNetcell)

// objectSum names the programs' object, so that a process never adopts
// programs another build loaded.
var objectSum = sync.OnceValue(func() uint32 { return crc32.ChecksumIEEE(_NetcellBytes) })

// Loaded is a verified load of the network programs, attached to nothing
// (but Warm's) and no cell's settings written: attached so, its programs
// would refuse every connection, datagram and name (bpf/netcell.h).
type Loaded struct {
	coll     *ebpf.Collection
	loadTime time.Duration
	ahead    bool
}

// Close frees the load (once handed on, the receiver holds its own).
func (p *Loaded) Close() { p.coll.Close() }

// Ahead loads the programs for a cell that has not asked yet (the
// daemon's spare), at the idle scheduling class (bpfload.Idle).
func Ahead() (*Loaded, error) { return load(true) }

func load(idle bool) (*Loaded, error) {
	// As internal/jail: kernels before 5.11 charge BPF memory to
	// RLIMIT_MEMLOCK; best effort.
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	unix.Setrlimit(unix.RLIMIT_MEMLOCK, &inf)
	spec, err := parsed()
	if err != nil {
		return nil, fmt.Errorf("load network programs: %w", err)
	}
	start := time.Now()
	verify := bpfload.Collection
	if idle {
		verify = bpfload.Idle
	}
	coll, err := verify(spec.Copy(), nil)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load network programs: %+v", ve)
		}
		return nil, fmt.Errorf("load network programs: %w", err)
	}
	if coll.Maps[settingsMap] == nil {
		coll.Close()
		return nil, errors.New("load network programs: no map of the cell's settings")
	}
	return &Loaded{coll: coll, loadTime: time.Since(start), ahead: idle}, nil
}

// LoadTime is how long the verification took.
func (p *Loaded) LoadTime() time.Duration { return p.loadTime }

// Handed describes a load passed to another process as descriptors.
type Handed struct {
	bpfload.Handed
}

// Hand returns the load's description and its objects as files, in
// Handed's order, for another process to Adopt. The files are duplicates:
// the caller closes them and the load once the process started.
func (p *Loaded) Hand() (Handed, []*os.File, error) {
	bh, files, err := bpfload.Hand(p.coll, nil, nil, objectSum())
	if err != nil {
		return Handed{}, nil, err
	}
	return Handed{Handed: bh}, files, nil
}

// adopted is the load this process was handed, until Open takes it.
var adopted struct {
	sync.Mutex
	p *Loaded
}

// Adopt takes the load described by manifest (Handed, as JSON), whose
// objects are this process's descriptors from first on. They are made
// close-on-exec at once: nothing this process starts may hold them. The
// next Open uses it.
func Adopt(manifest []byte, first int) error {
	var h Handed
	if err := json.Unmarshal(manifest, &h); err != nil {
		return fmt.Errorf("the network programs' description: %w", err)
	}
	coll, _, links, err := bpfload.Adopt(h.Handed, first, objectSum())
	if err != nil {
		return fmt.Errorf("the network programs loaded ahead: %w", err)
	}
	for _, l := range links {
		l.Close()
	}
	p := &Loaded{coll: coll, ahead: true}
	if err := p.complete(len(links)); err != nil {
		p.Close()
		return fmt.Errorf("the network programs loaded ahead: %w", err)
	}
	adopted.Lock()
	defer adopted.Unlock()
	if adopted.p != nil {
		adopted.p.Close()
	}
	adopted.p = p
	return nil
}

// complete says whether p holds every program and map of this build's
// object, and came with no attachment: a load Open can use as its own.
func (p *Loaded) complete(links int) error {
	spec, err := parsed()
	if err != nil {
		return err
	}
	if links > 0 {
		return errors.New("handed attached")
	}
	for name := range spec.Programs {
		if p.coll.Programs[name] == nil {
			return fmt.Errorf("no program %s", name)
		}
	}
	for name := range spec.Maps {
		if p.coll.Maps[name] == nil {
			return fmt.Errorf("no map %s", name)
		}
	}
	return nil
}

// takeAdopted returns the adopted load, once.
func takeAdopted() *Loaded {
	adopted.Lock()
	defer adopted.Unlock()
	p := adopted.p
	adopted.p = nil
	return p
}

// Warm keeps a set of the programs attached to the cgroup at path, which
// must stay empty, until Close. A cgroup program's attach turns its hook
// on for the whole kernel when it is the first of its kind (a static key:
// the kernel rewrites its own code, which is slow under emulation: 106 ms
// for the 13 attaches of a cell's start on 7.2, 37 ms with these on); with
// these attached the hooks stay on, and a cell's attach only adds its
// programs. They run for no process (none is in the cgroup; one put there
// would be refused every connection: no cell's settings are written), and
// cost every socket operation of the machine what one cell's cost those
// outside it: one look at the socket's cgroup's empty list.
func Warm(path string) (io.Closer, error) {
	p, err := load(true)
	if err != nil {
		return nil, err
	}
	links, err := attachAll(p.coll.Programs, path)
	w := &warmed{p: p, links: links}
	if err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

type warmed struct {
	p     *Loaded
	links []link.Link
}

func (w *warmed) Close() error {
	for _, l := range w.links {
		l.Close()
	}
	w.p.Close()
	return nil
}
