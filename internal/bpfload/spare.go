package bpfload

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// A spare is a collection verified before the cell that takes it asks:
// the kernel's verifier is most of a start (seconds under emulation). The
// daemon keeps one for each set of programs (Keeper) and passes it to the
// next session's agent-lock as descriptors (Hand), which that process
// takes back as a collection (Adopt).

// Keeper keeps one spare of T, loaded again each time one is taken.
type Keeper[T any] struct {
	mu      sync.Mutex
	load    func() (T, error)
	free    func(T)
	ready   func(T, error)
	loading chan struct{} // closed when the load under way (or waiting) ends
	stop    chan struct{} // closed by Close: a load not begun is not begun (or freed at once)
	spare   T
	has     bool
	closed  bool
}

// NewKeeper starts the first load. load makes a spare (at the idle
// class: Idle), free frees one nobody took, ready (when set) is told how
// each load ended.
func NewKeeper[T any](load func() (T, error), free func(T), ready func(T, error)) *Keeper[T] {
	k := &Keeper[T]{load: load, free: free, ready: ready, stop: make(chan struct{})}
	k.mu.Lock()
	k.refill(nil)
	k.mu.Unlock()
	return k
}

// refill starts the next load once after is closed (nil: now); k.mu is
// held.
func (k *Keeper[T]) refill(after <-chan struct{}) {
	done := make(chan struct{})
	k.loading = done
	go func() {
		defer close(done)
		if after != nil {
			select {
			case <-after:
			case <-k.stop:
				return
			}
		}
		v, err := k.load()
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.closed {
			if err == nil {
				k.free(v)
			}
			return
		}
		k.spare, k.has = v, err == nil
		if k.ready != nil {
			k.ready(v, err)
		}
	}()
}

// Take returns the spare and loads the next once after is closed (nil:
// at once): the session that takes it starts meanwhile, which a load
// beside it would slow (on a machine of few CPUs, and under emulation,
// whatever its scheduling class). ok is false until the next is loaded
// (the session loads its own then: the spare's load, at the idle class,
// would keep it waiting) or when a load failed. The caller hands the
// spare on or frees it.
func (k *Keeper[T]) Take(after <-chan struct{}) (v T, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.loading:
	default:
		return v, false
	}
	if k.closed {
		return v, false
	}
	v, ok = k.spare, k.has
	var zero T
	k.spare, k.has = zero, false
	k.refill(after)
	return v, ok
}

// Wait waits for the load under way.
func (k *Keeper[T]) Wait() {
	k.mu.Lock()
	loading := k.loading
	k.mu.Unlock()
	<-loading
}

// Close frees the spare held (the daemon is ending); a load under way
// frees its own when it ends, and one waiting to begin does not.
func (k *Keeper[T]) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.closed {
		close(k.stop)
	}
	k.closed = true
	if k.has {
		k.free(k.spare)
		var zero T
		k.spare, k.has = zero, false
	}
}

// Handed describes a collection passed to another process as
// descriptors: Programs[i], then Maps[j], then its Links attachments, in
// that order, from the first descriptor the receiver is told of.
type Handed struct {
	Object   uint32 // a checksum of the object the collection was loaded from
	Programs []HandedObject
	Maps     []HandedObject
	Links    int
}

// HandedObject is one program or map of a Handed collection.
type HandedObject struct {
	Name    string
	Section string `json:",omitempty"` // a program's ELF section
}

// Count is the number of descriptors h describes.
func (h Handed) Count() int { return len(h.Programs) + len(h.Maps) + h.Links }

// Hand returns coll's description and its programs, maps and the links'
// descriptors as files, in Handed's order; object names the build it was
// loaded from. The files are close-on-exec duplicates: the caller closes
// them once the receiver started. Links without a descriptor cannot be
// handed: none is then (the receiver attaches the programs itself).
func Hand(coll *ebpf.Collection, sections map[string]string, links []link.Link, object uint32) (Handed, []*os.File, error) {
	h := Handed{Object: object}
	var files []*os.File
	add := func(name string, fd int) error {
		f, err := DupFile(fd, name)
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
	for _, name := range slices.Sorted(maps.Keys(coll.Programs)) {
		h.Programs = append(h.Programs, HandedObject{Name: name, Section: sections[name]})
		if err := add(name, coll.Programs[name].FD()); err != nil {
			return fail(err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(coll.Maps)) {
		h.Maps = append(h.Maps, HandedObject{Name: name})
		if err := add(name, coll.Maps[name].FD()); err != nil {
			return fail(err)
		}
	}
	fds, _ := linkFDs(links)
	for i, fd := range fds {
		if err := add(fmt.Sprintf("link%d", i), fd); err != nil {
			return fail(err)
		}
	}
	h.Links = len(fds)
	return h, files, nil
}

// Adopt takes the collection h describes, whose objects are this
// process's descriptors from first on, and returns it with its programs'
// sections and its links. The descriptors are made close-on-exec at once:
// nothing this process starts may hold them. On any error every one of
// them is closed.
func Adopt(h Handed, first int, object uint32) (*ebpf.Collection, map[string]string, []link.Link, error) {
	n := h.Count()
	for fd := first; fd < first+n; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			for fd := first; fd < first+n; fd++ {
				unix.Close(fd)
			}
			return nil, nil, nil, fmt.Errorf("descriptor %d: %w", fd, err)
		}
	}
	coll := &ebpf.Collection{Programs: map[string]*ebpf.Program{}, Maps: map[string]*ebpf.Map{}}
	var links []link.Link
	// fd is the first descriptor coll and links do not own yet.
	fd := first
	fail := func(err error) (*ebpf.Collection, map[string]string, []link.Link, error) {
		for _, l := range links {
			l.Close()
		}
		coll.Close()
		for ; fd < first+n; fd++ {
			unix.Close(fd)
		}
		return nil, nil, nil, err
	}
	if h.Object != object {
		return fail(errors.New("loaded from another build's programs"))
	}
	sections := map[string]string{}
	for _, p := range h.Programs {
		prog, err := ebpf.NewProgramFromFD(fd)
		fd++ // taken, or closed by cilium/ebpf on an error
		if err != nil {
			return fail(fmt.Errorf("program %s: %w", p.Name, err))
		}
		coll.Programs[p.Name] = prog
		sections[p.Name] = p.Section
	}
	for _, m := range h.Maps {
		mp, err := ebpf.NewMapFromFD(fd)
		fd++ // taken, or closed by cilium/ebpf on an error
		if err != nil {
			return fail(fmt.Errorf("map %s: %w", m.Name, err))
		}
		coll.Maps[m.Name] = mp
	}
	for range h.Links {
		l, err := link.NewFromFD(fd)
		fd++ // taken, or closed by cilium/ebpf on an error
		if err != nil {
			return fail(fmt.Errorf("attachment: %w", err))
		}
		links = append(links, l)
	}
	return coll, sections, links, nil
}

// LinkFiles returns close-on-exec duplicates of the links' descriptors,
// for a process that must keep the programs attached (a session's
// reaper): all of them, or none and an error.
func LinkFiles(links []link.Link) ([]*os.File, error) {
	fds, ok := linkFDs(links)
	if !ok {
		return nil, errors.New("link has no descriptor")
	}
	var files []*os.File
	for _, fd := range fds {
		f, err := DupFile(fd, "bpf-link")
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("dup link: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// linkFDs returns the links' descriptors; ok is false if one has none
// (a kernel without BPF links for its type).
func linkFDs(links []link.Link) (fds []int, ok bool) {
	for _, l := range links {
		fdl, ok := l.(interface{ FD() int })
		if !ok || fdl.FD() < 0 {
			return nil, false
		}
		fds = append(fds, fdl.FD())
	}
	return fds, true
}

// DupFile duplicates fd, close-on-exec and above the standard streams, as
// a file named name.
func DupFile(fd int, name string) (*os.File, error) {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(d), name), nil
}
