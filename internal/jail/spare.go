package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"time"

	"github.com/agent-lock/agent-lock/internal/bpfload"
)

// The jail's spare (bpfload.Keeper): a load depends on the engine and the
// kernel alone (loadKey), the cell's settings being written after it
// (bpf/maps.h: cell). The daemon keeps one and hands it to the next
// session's agent-lock with its start; that process takes it (Adopt), and
// its Begin attaches it when it fits the cell, or loads as before when
// not. The Keeper attaches its spare too, with no cell written: the
// programs then jail nobody, and cost every process what one session's
// cost those outside its cell.

// Handed describes a spare passed to another process as descriptors
// (bpfload.Handed), with the load it is.
type Handed struct {
	bpfload.Handed
	Key    loadKey
	LoadNS int64
}

// objectSum names the programs' object, so that a process never adopts a
// spare another build loaded.
var objectSum = sync.OnceValue(func() uint32 { return crc32.ChecksumIEEE(Object()) })

// Keeper keeps one spare load for the next session, for the engine this
// kernel runs: the BPF LSM's hooks, or where the kernel refuses them the
// observers of the Landlock engine.
type Keeper struct{ k *bpfload.Keeper[*verified] }

// NewKeeper starts loading the first spare. observe, asked before each
// load, says to keep the Landlock engine's observers (this kernel refused
// the BPF LSM's programs); hooks the kernel refuses to load or attach as
// unsupported are replaced by the observers too.
func NewKeeper(observe func() bool, log func(format string, args ...any)) *Keeper {
	load := func() (*verified, error) { return loadSpare(loadKey{Observe: observe != nil && observe()}, log) }
	ready := func(v *verified, err error) {
		if log == nil {
			return
		}
		if err != nil {
			log("the next session's programs could not be loaded ahead (it loads its own): %v", err)
			return
		}
		what := "the BPF LSM's hooks"
		if v.key.Observe {
			what = "the Landlock engine's observers"
		}
		log("the next session's programs are ready: %s, loaded in %v", what, v.loadTime.Round(time.Millisecond))
	}
	return &Keeper{bpfload.NewKeeper(load, (*verified).close, ready)}
}

// loadSpare verifies and attaches a spare for key: the BPF LSM's hooks,
// or the observers where the kernel refuses those as unsupported.
func loadSpare(key loadKey, log func(format string, args ...any)) (*verified, error) {
	start := time.Now()
	v, err := verify(key, true)
	if err == nil {
		// Attached now too: attaching is seconds on some kernels under
		// emulation (6.1's trampolines). Until a session writes its
		// cell's settings the programs jail nobody.
		v.links, err = attachAll(v.coll, v.sections)
		if err != nil && !errors.Is(err, ErrNotSupported) {
			// Too many sessions run: the session attaches them.
			if log != nil {
				log("the next session's programs are loaded, not attached: %v", err)
			}
			err = nil
		}
		if err != nil {
			v.close()
			v = nil
		}
	}
	if err != nil && !key.Observe && errors.Is(err, ErrNotSupported) {
		return loadSpare(loadKey{Observe: true}, log)
	}
	if v != nil {
		v.loadTime = time.Since(start)
	}
	return v, err
}

// Take returns the spare and loads the next once after is closed (nil:
// at once); nil while the next is not loaded or when a load failed
// (bpfload.Keeper.Take). The caller hands the spare on or closes it.
func (k *Keeper) Take(after <-chan struct{}) *Spare {
	v, ok := k.k.Take(after)
	if !ok {
		return nil
	}
	return &Spare{v: v}
}

// Wait waits for the load under way.
func (k *Keeper) Wait() { k.k.Wait() }

// Close frees the spare held (the daemon is ending).
func (k *Keeper) Close() { k.k.Close() }

// Spare is a load taken from a Keeper.
type Spare struct{ v *verified }

// Hand returns the spare's description and its objects as files, in
// Handed's order, for another process to Adopt. The files are duplicates:
// the caller closes them and the Spare (Close) once the process started.
// Attachments without a descriptor cannot be handed: the spare then goes
// unattached (the receiver attaches it).
func (s *Spare) Hand() (Handed, []*os.File, error) {
	bh, files, err := bpfload.Hand(s.v.coll, s.v.sections, s.v.links, objectSum())
	if err != nil {
		return Handed{}, nil, err
	}
	return Handed{Handed: bh, Key: s.v.key, LoadNS: s.v.loadTime.Nanoseconds()}, files, nil
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
// starts may hold them. A spare that does not fit is closed: the cell then
// loads its own.
func Adopt(manifest []byte, first int) error {
	var h Handed
	if err := json.Unmarshal(manifest, &h); err != nil {
		return fmt.Errorf("the spare load's description: %w", err)
	}
	coll, sections, links, err := bpfload.Adopt(h.Handed, first, objectSum())
	if err != nil {
		return fmt.Errorf("the spare load: %w", err)
	}
	v := &verified{key: h.Key, coll: coll, sections: sections, loadTime: time.Duration(h.LoadNS), ahead: true, links: links}
	if coll.Maps[cellMap] == nil || coll.Maps["events"] == nil {
		v.close()
		return errors.New("the spare load lacks the cell's maps")
	}
	adopted.Lock()
	defer adopted.Unlock()
	if adopted.v != nil {
		adopted.v.close()
	}
	adopted.v = v
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
