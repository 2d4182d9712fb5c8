package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// A spare is a load verified before the cell that takes it asks: the
// kernel's verifier is most of a start (seconds under emulation), and a
// load depends on the engine and the kernel alone (loadKey), the cell's
// settings being written after it (bpf/maps.h: cell). The daemon keeps one
// (Keeper) and hands it to the next session's agent-lock with its start
// (Hand); that process takes it (Adopt), and its Begin attaches it when it
// fits the cell, or loads as before when not. The Keeper attaches its
// spare too, with no cell written: the programs then jail nobody, and
// cost every process what one session's cost those outside its cell.

// Handed describes a spare's programs and maps passed to another process
// as descriptors: Programs[i], then Maps[j], then its Links attachments, in
// that order, from the first descriptor the receiver is told of.
type Handed struct {
	Key      loadKey
	Object   uint32 // crc32 of the object the spare was loaded from
	Programs []HandedObject
	Maps     []HandedObject
	Links    int // the programs' attachments, after the maps
	LoadNS   int64
}

// HandedObject is one program or map of a spare.
type HandedObject struct {
	Name    string
	Section string `json:",omitempty"` // a program's ELF section
}

// objectSum names the programs' object, so that a process never adopts a
// spare another build loaded.
var objectSum = sync.OnceValue(func() uint32 { return crc32.ChecksumIEEE(Object()) })

// Keeper keeps one spare load for the next session, for the engine this
// kernel runs: the BPF LSM's hooks, or where the kernel refuses them the
// observers of the Landlock engine.
type Keeper struct {
	mu      sync.Mutex
	observe func() bool
	loading chan struct{} // closed when the load under way ends
	spare   *verified
	log     func(format string, args ...any)
	closed  bool
}

// NewKeeper starts loading the first spare. observe, asked before each
// load, says to keep the Landlock engine's observers (this kernel refused
// the BPF LSM's programs); hooks the kernel refuses to load or attach as
// unsupported are replaced by the observers too.
func NewKeeper(observe func() bool, log func(format string, args ...any)) *Keeper {
	k := &Keeper{observe: observe, log: log}
	k.mu.Lock()
	k.refill()
	k.mu.Unlock()
	return k
}

// refill starts the next load; k.mu is held.
func (k *Keeper) refill() {
	done := make(chan struct{})
	k.loading = done
	go func() {
		defer close(done)
		v, err := k.load(loadKey{Observe: k.observe != nil && k.observe()})
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.closed {
			if v != nil {
				v.close()
			}
			return
		}
		k.spare = v
		if k.log == nil {
			return
		}
		if err != nil {
			k.log("the next session's programs could not be loaded ahead (it loads its own): %v", err)
		} else {
			what := "the BPF LSM's hooks"
			if v.key.Observe {
				what = "the Landlock engine's observers"
			}
			k.log("the next session's programs are ready: %s, loaded in %v", what, v.loadTime.Round(time.Millisecond))
		}
	}()
}

// load verifies and attaches a spare for key: the BPF LSM's hooks, or the
// observers where the kernel refuses those as unsupported.
func (k *Keeper) load(key loadKey) (*verified, error) {
	start := time.Now()
	v, err := verify(key, true)
	if err == nil {
		// Attached now too: attaching is seconds on some kernels under
		// emulation (6.1's trampolines). Until a session writes its
		// cell's settings the programs jail nobody.
		v.links, err = attachAll(v.coll, v.sections)
		if err != nil && !errors.Is(err, ErrNotSupported) {
			// Too many sessions run: the session attaches them.
			if k.log != nil {
				k.log("the next session's programs are loaded, not attached: %v", err)
			}
			err = nil
		}
		if err != nil {
			v.close()
			v = nil
		}
	}
	if err != nil && !key.Observe && errors.Is(err, ErrNotSupported) {
		return k.load(loadKey{Observe: true})
	}
	if v != nil {
		v.loadTime = time.Since(start)
	}
	return v, err
}

// Take returns the spare and starts loading the next; nil while the load
// is under way (the session loads its own then: the spare's load, at the
// idle class, would keep it waiting) or when it failed. The caller hands
// the spare on or closes it.
func (k *Keeper) Take() *Spare {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.loading:
	default:
		return nil
	}
	if k.closed {
		return nil
	}
	v := k.spare
	k.spare = nil
	k.refill()
	if v == nil {
		return nil
	}
	return &Spare{v: v}
}

// Wait waits for the load under way.
func (k *Keeper) Wait() {
	k.mu.Lock()
	loading := k.loading
	k.mu.Unlock()
	<-loading
}

// Close frees the spare held (the daemon is ending).
func (k *Keeper) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	// A load under way frees its spare when it ends.
	k.closed = true
	if k.spare != nil {
		k.spare.close()
		k.spare = nil
	}
}

// Spare is a load taken from a Keeper.
type Spare struct{ v *verified }

// Hand returns the spare's description and its objects as files, in
// Handed's order, for another process to Adopt. The files are duplicates:
// the caller closes them and the Spare (Close) once the process started.
func (s *Spare) Hand() (Handed, []*os.File, error) {
	h := Handed{Key: s.v.key, Object: objectSum(), LoadNS: s.v.loadTime.Nanoseconds()}
	var files []*os.File
	add := func(name string, fd int) error {
		f, err := dupFile(fd, name)
		if err != nil {
			return fmt.Errorf("hand %s: %w", name, err)
		}
		files = append(files, f)
		return nil
	}
	fail := func(err error) (Handed, []*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return Handed{}, nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(s.v.coll.Programs)) {
		h.Programs = append(h.Programs, HandedObject{Name: name, Section: s.v.sections[name]})
		if err := add(name, s.v.coll.Programs[name].FD()); err != nil {
			return fail(err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.v.coll.Maps)) {
		h.Maps = append(h.Maps, HandedObject{Name: name})
		if err := add(name, s.v.coll.Maps[name].FD()); err != nil {
			return fail(err)
		}
	}
	// Attachments without a descriptor cannot be handed: the spare goes
	// unattached then (the receiver attaches it).
	fds, _ := linkFDs(s.v.links)
	for i, fd := range fds {
		if err := add(fmt.Sprintf("link%d", i), fd); err != nil {
			return fail(err)
		}
	}
	h.Links = len(fds)
	return h, files, nil
}

// Close frees the spare's objects (the receiver holds its own).
func (s *Spare) Close() { s.v.close() }

// adopted is the spare this process was handed, until a Begin takes it.
var adopted struct {
	sync.Mutex
	v *verified
}

// Adopt takes the spare described by manifest (Handed, as JSON), whose
// objects are this process's descriptors from first on, in Handed's order.
// The descriptors are made close-on-exec at once: nothing this process
// starts may hold them. A spare that does not fit is closed: the cell
// then loads its own.
func Adopt(manifest []byte, first int) error {
	var h Handed
	if err := json.Unmarshal(manifest, &h); err != nil {
		return fmt.Errorf("the spare load's description: %w", err)
	}
	n := len(h.Programs) + len(h.Maps) + h.Links
	for fd := first; fd < first+n; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			for fd := first; fd < first+n; fd++ {
				unix.Close(fd)
			}
			return fmt.Errorf("the spare load's descriptor %d: %w", fd, err)
		}
	}
	coll := &ebpf.Collection{Programs: map[string]*ebpf.Program{}, Maps: map[string]*ebpf.Map{}}
	var links []link.Link
	// fd is the first descriptor coll and links do not own yet.
	fd := first
	fail := func(err error) error {
		for _, l := range links {
			l.Close()
		}
		coll.Close()
		for ; fd < first+n; fd++ {
			unix.Close(fd)
		}
		return err
	}
	if h.Object != objectSum() {
		return fail(errors.New("the spare load is of another build's programs"))
	}
	sections := map[string]string{}
	for _, p := range h.Programs {
		prog, err := ebpf.NewProgramFromFD(fd)
		fd++ // taken, or closed by cilium/ebpf on an error
		if err != nil {
			return fail(fmt.Errorf("the spare load's program %s: %w", p.Name, err))
		}
		coll.Programs[p.Name] = prog
		sections[p.Name] = p.Section
	}
	for _, m := range h.Maps {
		mp, err := ebpf.NewMapFromFD(fd)
		fd++ // taken, or closed by cilium/ebpf on an error
		if err != nil {
			return fail(fmt.Errorf("the spare load's map %s: %w", m.Name, err))
		}
		coll.Maps[m.Name] = mp
	}
	for range h.Links {
		l, err := link.NewFromFD(fd)
		fd++ // taken, or closed by cilium/ebpf on an error
		if err != nil {
			return fail(fmt.Errorf("the spare load's attachment: %w", err))
		}
		links = append(links, l)
	}
	if coll.Maps[cellMap] == nil || coll.Maps["events"] == nil {
		return fail(errors.New("the spare load lacks the cell's maps"))
	}
	adopted.Lock()
	defer adopted.Unlock()
	if adopted.v != nil {
		adopted.v.close()
	}
	adopted.v = &verified{key: h.Key, coll: coll, sections: sections, loadTime: time.Duration(h.LoadNS), ahead: true, links: links}
	return nil
}

// takeAdopted returns the adopted spare if it fits k. One that does not is
// closed (a process runs one cell), but for the observers asked for the
// hooks: auto falls back to the Landlock engine, whose observers they are,
// where the kernel refuses the hooks (the reason the daemon loaded them).
func takeAdopted(k loadKey) *verified {
	adopted.Lock()
	defer adopted.Unlock()
	v := adopted.v
	if v == nil || v.key == k {
		adopted.v = nil
		return v
	}
	if !(v.key.Observe && !k.Observe) {
		adopted.v = nil
		v.close()
	}
	return nil
}

// dropAdopted closes a spare no cell took, once this process's cell is
// attached: its programs, attached and jailing nobody, would otherwise
// run for every process of the machine for the session's life.
func dropAdopted() {
	adopted.Lock()
	defer adopted.Unlock()
	if adopted.v != nil {
		adopted.v.close()
		adopted.v = nil
	}
}
