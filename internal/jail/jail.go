// Package jail loads agent-lock's BPF-LSM programs, tells them what the cell
// is, and reads back what they decided.
//
// The programs (bpf/jail.bpf.c) make every decision; this package never
// re-derives one. It loads and attaches all of them or none: a program that
// fails to load or attach is an error, and the caller must not start the
// agent (fail closed).
package jail

import (
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/bpfload"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/internal/spec"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// RuleFlags say what a rule root grants to the tree below it: the kernel's
// RULE_* bits (jail.h), which kernelRules makes from a description's
// spec.Access.
type RuleFlags uint32

const (
	Read    RuleFlags = 1 << 0 // read and execute
	Write   RuleFlags = 1 << 1 // every modifying operation
	Scratch RuleFlags = 1 << 2 // shared scratch place: only files the jail created
	Deny    RuleFlags = 1 << 3 // refused even inside a grant
	Socket  RuleFlags = 1 << 4 // a unix socket the jail may connect to
	Protect RuleFlags = 1 << 5 // Config.Protect's entries lie below it
	Grant   RuleFlags = 1 << 6 // a grant the user made: InGrants patterns apply below it
	Project RuleFlags = 1 << 7 // the project directory: InProject patterns apply below it
	// Named grants a file by its name in its folder, with its siblings
	// (the names that are its name, a dot and anything: F.tmp.123, F.lock,
	// F.backup), read-write with Write: programs save such a file by
	// writing a sibling and renaming it over the file, which makes a new
	// inode, and make it on first use. The file need not exist; its folder
	// must. The folder itself is granted nothing.
	Named RuleFlags = 1 << 8
	// InGit marks a root that lies in a git directory (a linked
	// worktree's, outside DIR): below it, git's names are protected as
	// below a .git (Protected.Git).
	InGit RuleFlags = 1 << 11
)

// ruleBits are the kernel's bits for a description's accesses.
var ruleBits = []struct {
	access spec.Access
	flags  RuleFlags
}{
	{spec.Read, Read}, {spec.Write, Write}, {spec.Scratch, Scratch}, {spec.Deny, Deny},
	{spec.Socket, Socket}, {spec.Protect, Protect}, {spec.Grant, Grant},
	{spec.Project, Project}, {spec.Named, Named}, {spec.InGit, InGit},
}

// kernelFlags are a description's accesses in the kernel's bits.
func kernelFlags(a spec.Access) RuleFlags {
	var f RuleFlags
	for _, b := range ruleBits {
		if a&b.access != 0 {
			f |= b.flags
		}
	}
	return f
}

// kernelRules are a description's rules as the kernel registers them.
func kernelRules(rules []spec.Rule) []Rule {
	out := make([]Rule, len(rules))
	for i, r := range rules {
		out[i] = Rule{Path: r.Path, Flags: kernelFlags(r.Access), Name: r.Name}
	}
	return out
}

// ruleSeal registers nothing: it asks the kernel to seal the rule root just
// opened (RULE_SEAL, jail.h).
const ruleSeal RuleFlags = 1 << 10

// Limits of the kernel's table of named files (jail.h).
const (
	NamedMax = 16
	NamedLen = 30
)

// Rule is one root as the kernel registers it: a path and its RULE_* bits.
type Rule struct {
	Path  string
	Flags RuleFlags
	// Name says where the rule comes from ("project directory",
	// "--allow", "home secret"); decisions it made carry it (Event.Rule).
	Name string
}

// Config describes one cell.
type Config struct {
	// CgroupID is the cgroup (v2) whose processes are jailed.
	CgroupID uint64
	// Audit makes the programs allow what they would refuse, and report it.
	Audit bool
	// StreamInBounds reports a sample of the allowed in-bounds opens too,
	// for a live view: at most one per CPU every InBoundsGap.
	StreamInBounds bool
	// EveryInBounds streams every in-bounds open instead (tests that
	// follow each one).
	EveryInBounds bool
	// TTYs are device numbers (kernel encoding) of the agent's terminal.
	TTYs []uint32
	// Rules are registered in order; a path that cannot be opened is an
	// error (the caller leaves out paths that do not exist).
	Rules []spec.Rule
	// Protect are entries the agent may read but not make or change:
	// below the Protect rule, and git's (Protected.Git) below every
	// writable rule.
	Protect []spec.Protected
	// Patterns are names refused below the rules their scope names.
	Patterns []spec.Pattern
	// Observe loads only the tracepoint programs, which watch opens and
	// execs and report what another LSM (Landlock) decided, for kernels
	// that cannot run the hooks. They refuse nothing: the caller must have
	// confined the agent by other means before it runs.
	Observe bool
	// OnlyFileOpen attaches the file_open hook alone: the reference
	// design (a jail of one hook) that make bench compares agent-lock
	// with. It is not a jail: every door but open(2) is left open.
	OnlyFileOpen bool
	// Warn, when set, is told what the cell could not do as asked and
	// holds anyway (one line each).
	Warn func(format string, args ...any)
	// PinDir, when set, is a directory on a bpf file system (which Load
	// creates) where the links are pinned, so that the programs stay
	// attached even if every process holding them dies: the cell then stays
	// closed until someone kills it (see session's sweep). Close unpins.
	PinDir string
	// SignalOwners is how many files given a signal owner by the cell the
	// kernel keeps a note of (0: 65,536). Past that, no file without a
	// note may signal a process outside the cell (tests make it small).
	SignalOwners uint32
}

// ErrNotSupported means the running kernel cannot run the jail.
var ErrNotSupported = kernel.ErrNotSupported

// Jail is a loaded, attached cell.
type Jail struct {
	pinDir string
	coll   *ebpf.Collection
	links  []link.Link
	reader *ringbuf.Reader
	names  *Namer
	// nameCache and comms belong to the reader (decode).
	nameCache []nameSlot
	nameSeed  maphash.Seed
	comms     map[[16]int8]string
	// rules names what event.rule numbers: a rule root (its index in the
	// registered rules + 1) or a protected entry (protRule + its node).
	rules map[uint32]string
	// denied are the denial roots, for the observers' refusals (decode).
	denied []Rule

	// sealed are the rule roots the kernel sealed (no denial above).
	sealed []string
	// loadTime is how long the kernel took to load and verify the
	// programs (and create the maps), in the background of the start
	// (Begin); attachTime and registerTime the two steps after it.
	loadTime, attachTime, registerTime time.Duration
	// loadWait is how long the start waited for the load (Begin): less
	// than loadTime when the load ran beside the network's set-up.
	loadWait time.Duration
	// ahead says the programs were loaded before the cell asked (a
	// daemon's spare, spare.go), attachedAhead that they came attached.
	ahead, attachedAhead bool
	// pins hold every granted root open, so that its inode, which the
	// kernel's rule names by address (struct rule.inode), is not freed
	// while the cell runs; LinkFiles passes duplicates to the reaper.
	pins []*os.File
	// killSeq: see KillSeq.
	killSeq uint32
	// retries counts registrations asked again (handshakeOpen).
	retries int
	warn    func(format string, args ...any)

	buf     []byte
	lastLen int
	clock   monoClock
}

// optionalHooks exist only on some kernels; the jail is complete without them
// where the kernel lacks the hook, because then the path they guard does not
// exist either.
var optionalHooks = map[string]bool{
	"file_ioctl_compat": true, // 6.8+: before it, compat ioctls reach file_ioctl
}

// optionalTracepoints are system calls some architectures lack (arm64 has
// no open or creat, only openat).
var optionalTracepoints = map[string]bool{
	"sys_enter_open": true, "sys_exit_open": true,
	"sys_enter_creat": true, "sys_exit_creat": true,
}

// observeOnly keeps the tracepoint programs and what they use: the hooks,
// and the local-storage maps only the hooks can use (they need the BPF LSM),
// are left out.
func observeOnly(spec *ebpf.CollectionSpec) {
	for name, p := range spec.Programs {
		if p.Type != ebpf.TracePoint {
			delete(spec.Programs, name)
		}
	}
	delete(spec.Maps, "marks")
	delete(spec.Maps, "pendings")
	delete(spec.Maps, "walks")
}

// mountTracefs makes the system-call tracepoints reachable: attaching one
// reads its id under tracefs, which minimal systems (our test VMs) do not
// mount.
func mountTracefs() error {
	const dir = "/sys/kernel/tracing"
	if _, err := os.Stat(filepath.Join(dir, "events")); err == nil {
		return nil
	}
	if _, err := os.Stat("/sys/kernel/debug/tracing/events"); err == nil {
		return nil
	}
	if err := unix.Mount("tracefs", dir, "tracefs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount tracefs on %s (the observers attach to system-call tracepoints): %w", dir, err)
	}
	return nil
}

// parse parses the programs' object and, beside it, the kernel's BTF: Go's
// work before a load (tens of milliseconds natively, about half a second
// emulated), in Begin's background.
func parse() (*ebpf.CollectionSpec, *btf.Cache, error) {
	types := btf.NewCache()
	// The kernel's BTF beside the object; an error there comes again, and
	// is reported, where the load needs it.
	kernel := make(chan struct{})
	go func() {
		defer close(kernel)
		types.Kernel()
	}()
	spec, err := loadJail()
	<-kernel
	return spec, types, err
}

// Load loads and attaches the programs and registers cfg.Rules.
func Load(cfg Config) (*Jail, error) {
	return Begin(cfg).Attach(cfg.PinDir)
}

// Loading is a cell's programs being loaded and verified in the
// background (Begin), or a daemon's spare taken (spare.go: attached
// already, jailing nobody). No cell is written and no rule registered
// until Attach: until then nothing of it enforces or reports.
type Loading struct {
	cfg     Config
	done    chan struct{}
	v       *verified
	err     error
	claimed bool
}

// verified is what a load leaves for the attach.
type verified struct {
	key      loadKey
	coll     *ebpf.Collection
	sections map[string]string // each program's ELF section
	loadTime time.Duration
	// ahead says the load was made before the cell asked (a spare);
	// links are its programs' attachments, when it came attached.
	ahead bool
	links []link.Link
}

// close frees v's attachments and objects.
func (v *verified) close() {
	for _, l := range v.links {
		l.Close()
	}
	v.links = nil
	v.coll.Close()
}

// Begin loads and verifies cfg's programs in the background: the kernel's
// verifier is most of a start, and the session makes the cell's network
// meanwhile. cfg.PinDir is Attach's.
func Begin(cfg Config) *Loading {
	l := &Loading{cfg: cfg, done: make(chan struct{})}
	if v := takeAdopted(keyOf(cfg)); v != nil {
		l.v = v
		close(l.done)
		return l
	}
	go func() {
		defer close(l.done)
		l.v, l.err = verify(keyOf(cfg), false)
	}()
	return l
}

// Attach waits for the load, then attaches the programs (pinning their
// links in pinDir, if not ""), registers the rules and opens the event
// ring. The start's load step is the wait.
func (l *Loading) Attach(pinDir string) (*Jail, error) {
	if l.claimed {
		return nil, errors.New("load jail: attached twice")
	}
	l.claimed = true
	waiting := time.Now()
	<-l.done
	if l.err != nil {
		return nil, l.err
	}
	j, err := l.v.attach(l.cfg, pinDir, time.Since(waiting))
	if err == nil {
		dropAdopted()
	}
	return j, err
}

// Abandon frees a load no Attach will take (the start failed meanwhile).
func (l *Loading) Abandon() {
	if l.claimed {
		return
	}
	l.claimed = true
	<-l.done
	if l.v != nil {
		l.v.close()
	}
}

// loadKey is what a load depends on, the same for every cell it may
// serve: the rest of a Config is written after the load (cellSettings).
type loadKey struct {
	Observe, OnlyFileOpen bool
	SignalOwners          uint32
}

func keyOf(cfg Config) loadKey {
	return loadKey{Observe: cfg.Observe, OnlyFileOpen: cfg.OnlyFileOpen, SignalOwners: cfg.SignalOwners}
}

// verify loads the programs for k, none attached and no cell written;
// idle, at the idle scheduling class (bpfload.Idle).
func verify(k loadKey, idle bool) (*verified, error) {
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK. Not
	// cilium/ebpf's rlimit package: its init makes a bpf() call in every
	// process of this binary, the Landlock engine's first jailed process
	// included, where it would show as the agent's first escape.
	// Best effort: where root may not raise it (a container without
	// CAP_SYS_RESOURCE) the kernel is new enough not to need it, or the
	// load fails below with an error that says MEMLOCK.
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	unix.Setrlimit(unix.RLIMIT_MEMLOCK, &inf)
	// The kernel's BTF is parsed once: fitToKernel reads the hooks'
	// arguments in it, and the load its types for the relocations.
	spec, kernelTypes, err := parse()
	if err != nil {
		return nil, fmt.Errorf("load jail spec: %w", err)
	}
	if k.SignalOwners > 0 {
		spec.Maps["fowners"].MaxEntries = k.SignalOwners
	}
	if k.Observe {
		observeOnly(spec)
		if err := mountTracefs(); err != nil {
			return nil, err
		}
	} else {
		for name, p := range spec.Programs {
			if p.Type == ebpf.TracePoint {
				delete(spec.Programs, name)
			}
		}
		delete(spec.Maps, "calls")
		delete(spec.Maps, "obs_created")
		if err := fitToKernel(spec, kernelTypes); err != nil {
			return nil, err
		}
		if k.OnlyFileOpen {
			for name := range spec.Programs {
				if name != "file_open" {
					delete(spec.Programs, name)
				}
			}
		}
	}
	// The folders' walk cache (bpf/cache.h): its proof leans on x86's
	// ordering of loads (the kernel's: an amd64 binary may run emulated
	// elsewhere); elsewhere it is off, and so are the programs that count
	// folder moves for it. The benchmark's file_open alone has no
	// d_instantiate to drop a reused address's walk: off there too.
	walkCache := !k.Observe && !k.OnlyFileOpen && kernelIsX86()
	if !walkCache {
		delete(spec.Programs, "move_started")
		delete(spec.Programs, "move_done")
	}
	for name, v := range map[string]any{
		"observe_only": boolU32(k.Observe),
		"walk_cache":   boolU32(walkCache),
	} {
		vs, ok := spec.Variables[name]
		if !ok {
			return nil, fmt.Errorf("load jail: no variable %s", name)
		}
		if err := vs.Set(v); err != nil {
			return nil, fmt.Errorf("load jail: set %s: %w", name, err)
		}
	}

	sections := map[string]string{}
	for name, p := range spec.Programs {
		sections[name] = p.SectionName
	}
	loading := time.Now()
	load := bpfload.Collection
	if idle {
		load = bpfload.Idle
	}
	coll, err := load(spec, kernelTypes)
	loaded := time.Since(loading)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load jail objects: %w\n%+v", err, ve)
		}
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("load jail objects: %w: %w", ErrNotSupported, err)
		}
		return nil, fmt.Errorf("load jail objects: %w", err)
	}
	return &verified{key: k, coll: coll, sections: sections, loadTime: loaded}, nil
}

// cellMap is the map of the cell's settings (bpf/maps.h: cell).
const cellMap = ".data.cell"

// cellSettings checks cfg and returns the cell's settings for the
// programs, and its rules in the kernel's terms.
func cellSettings(cfg Config) (jailCellSettings, []Rule, error) {
	var c jailCellSettings
	if cfg.CgroupID == 0 {
		return c, nil, errors.New("load jail: no cgroup")
	}
	c.CgroupId = cfg.CgroupID
	c.AuditMode = boolU32(cfg.Audit)
	c.StreamInbounds = boolU32(cfg.StreamInBounds || cfg.EveryInBounds)
	c.InbGapNs = inbGap(cfg.EveryInBounds)
	copy(c.TtyRdev[:], cfg.TTYs)
	for _, p := range cfg.Patterns {
		if _, _, err := compilePattern(p.Glob); err != nil {
			return c, nil, fmt.Errorf("load jail: %w", err)
		}
		c.PatCount++
		c.PatScopes |= kernelScope(p.Scope)
	}
	if c.PatCount > PatternMax {
		return c, nil, fmt.Errorf("load jail: %d deny patterns, the kernel's table holds %d", c.PatCount, PatternMax)
	}
	for _, e := range cfg.Protect {
		if err := CheckProtected(e); err != nil {
			return c, nil, fmt.Errorf("load jail: %w", err)
		}
	}
	_, c.GitNames, _ = gitTable(cfg.Protect)
	rules := kernelRules(cfg.Rules)
	for _, r := range rules {
		if r.Flags&Named == 0 {
			continue
		}
		if err := checkNamed(r); err != nil {
			return c, nil, fmt.Errorf("load jail: %w", err)
		}
		c.NamedCount++
	}
	if c.NamedCount > NamedMax {
		return c, nil, fmt.Errorf("load jail: %d files granted by name, the kernel's table holds %d; grant their folders instead", c.NamedCount, NamedMax)
	}
	return c, rules, nil
}

// attach is the rest of a Load, once the kernel has verified v: waited is
// how long the start waited for that.
func (v *verified) attach(cfg Config, pinDir string, waited time.Duration) (*Jail, error) {
	coll, sections := v.coll, v.sections
	j := &Jail{coll: coll, rules: map[uint32]string{}, loadTime: v.loadTime, loadWait: waited, ahead: v.ahead, warn: cfg.Warn}
	if j.warn == nil {
		j.warn = func(string, ...any) {}
	}
	// A spare's attachments are j's from here: any failure below
	// detaches them with the rest (Close).
	j.links, v.links = v.links, nil
	j.attachedAhead = j.links != nil
	if keyOf(cfg) != v.key {
		j.Close()
		return nil, fmt.Errorf("load jail: a load for %+v given a cell that needs %+v", v.key, keyOf(cfg))
	}
	settings, cfgRules, err := cellSettings(cfg)
	if err != nil {
		j.Close()
		return nil, err
	}
	// Before the cell is written, like the rules: an entry that is not in
	// the table is not protected, so a failed write stops here.
	protNames, err := fillProtect(coll.Maps["protect"], coll.Maps["gitnames"], cfg.Protect)
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("load jail: %w", err)
	}
	for id, path := range protNames {
		j.rules[id] = "protected " + path
	}
	_, _, patNames, err := fillPatterns(coll.Maps["patterns"], cfg.Patterns)
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("load jail: %w", err)
	}
	for id, name := range patNames {
		j.rules[id] = name
	}
	// The cell's settings, once its tables are full: with none written
	// the programs jail no process (a spare's are attached already), and
	// nobody is in the cell's cgroup before the rules are registered.
	if err := coll.Maps[cellMap].Put(uint32(0), settings); err != nil {
		j.Close()
		return nil, fmt.Errorf("load jail: write the cell's settings: %w", err)
	}
	attaching := time.Now()
	// Attach before registering: registration goes through file_open. No
	// process is jailed yet, and an empty rule map denies everything, so
	// there is no moment at which the cell is open. A spare came
	// attached (above).
	if j.links == nil {
		if j.links, err = attachAll(coll, sections); err != nil {
			j.Close()
			return nil, err
		}
	}
	if pinDir != "" {
		if err := j.pin(pinDir); err != nil {
			j.Close()
			return nil, err
		}
	}
	j.attachTime = time.Since(attaching)
	registering := time.Now()
	rules := cfgRules
	if cfg.Observe {
		for _, r := range cfgRules {
			if r.Flags&Deny != 0 {
				j.denied = append(j.denied, r)
			}
		}
		// A socket cannot be opened, so no open-family tracepoint sees it;
		// the observers have no use for socket rules anyway.
		rules = nil
		for _, r := range cfgRules {
			if r.Flags&^Socket != 0 {
				r.Flags &^= Socket
				rules = append(rules, r)
			}
		}
	}
	if err := j.register(rules); err != nil {
		j.Close()
		return nil, err
	}
	j.reader, err = ringbuf.NewReader(coll.Maps["events"])
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("open event ring: %w", err)
	}
	j.names, err = NewNamer()
	if err != nil {
		j.Close()
		return nil, err
	}
	j.registerTime = time.Since(registering)
	return j, nil
}

// attachAll attaches coll's programs (sections: their ELF sections).
func attachAll(coll *ebpf.Collection, sections map[string]string) ([]link.Link, error) {
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		for _, l := range links {
			l.Close()
		}
		return nil, err
	}
	for name, prog := range coll.Programs {
		var l link.Link
		var err error
		switch prog.Type() {
		case ebpf.LSM:
			l, err = link.AttachLSM(link.LSMOptions{Program: prog})
		case ebpf.TracePoint:
			group, tp, _ := strings.Cut(strings.TrimPrefix(sections[name], "tracepoint/"), "/")
			l, err = link.Tracepoint(group, tp, prog, nil)
			if errors.Is(err, os.ErrNotExist) && optionalTracepoints[tp] {
				prog.Close()
				delete(coll.Programs, name)
				continue
			}
		default:
			l, err = link.AttachTracing(link.TracingOptions{Program: prog})
		}
		if err != nil {
			if prog.Type() == ebpf.TracePoint {
				return fail(fmt.Errorf("attach %s to %s: %w", name, sections[name], err))
			}
			if errors.Is(err, unix.E2BIG) {
				// Each session attaches programs of its own, and the
				// kernel links at most BPF_MAX_TRAMP_LINKS (38 on x86)
				// to one function: the sessions running hold them all.
				return fail(fmt.Errorf("attach %s: too many agent-lock sessions run at once (the kernel attaches at most 38 programs to one hook, and each session attaches its own): end one and start this one again: %w", name, err))
			}
			return fail(fmt.Errorf("attach %s: %w: %w", name, ErrNotSupported, err))
		}
		links = append(links, l)
	}
	return links, nil
}

// fitToKernel keeps the program variant whose arguments match this kernel's
// hook and drops hooks the kernel does not have (only optional ones).
func fitToKernel(spec *ebpf.CollectionSpec, kernelTypes *btf.Cache) error {
	kspec, err := kernelTypes.Kernel()
	if err != nil {
		return fmt.Errorf("read kernel BTF: %w: %w", ErrNotSupported, err)
	}
	params := func(hook string) (int, bool) {
		var fn *btf.Func
		if err := kspec.TypeByName("bpf_lsm_"+hook, &fn); err != nil {
			return 0, false
		}
		proto, ok := fn.Type.(*btf.FuncProto)
		if !ok {
			return 0, false
		}
		return len(proto.Params), true
	}
	// inode_setattr gained an idmap argument in front after 6.1.
	if n, ok := params("inode_setattr"); ok && n == 2 {
		delete(spec.Programs, "inode_setattr")
	} else {
		delete(spec.Programs, "inode_setattr_noidmap")
	}
	// The key_free hook went away in 6.10; its replacement is an fentry
	// on the function that still runs for every freed key.
	if _, ok := params("key_free"); ok {
		delete(spec.Programs, "key_freed")
	} else {
		delete(spec.Programs, "key_free")
		var fn *btf.Func
		if err := kspec.TypeByName("security_key_free", &fn); err != nil {
			return fmt.Errorf("kernel has neither the key_free hook nor security_key_free: %w", ErrNotSupported)
		}
	}
	for name, p := range spec.Programs {
		if p.Type != ebpf.LSM {
			continue
		}
		if _, ok := params(p.AttachTo); ok {
			continue
		}
		if optionalHooks[name] {
			delete(spec.Programs, name)
			continue
		}
		return fmt.Errorf("kernel has no LSM hook %s: %w", p.AttachTo, ErrNotSupported)
	}
	return nil
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// register records each rule root under the identity the kernel gives it:
// agent-lock opens the path while the registration slot names this process,
// and file_open writes (dev, inode) as it sees them into the rule map.
func (j *Jail) register(rules []Rule) error {
	// One thread, one open at a time: the slot is consumed by the next
	// open of this process.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer j.coll.Maps["reg"].Put(uint32(0), jailRegistration{})
	var named uint32
	var links linkScan
	for i, r := range rules {
		id := uint32(i + 1)
		j.rules[id] = r.Name
		if r.Flags&Named != 0 {
			if err := j.registerNamed(r, id, named); err != nil {
				return err
			}
			named++
			continue
		}
		slot := jailRegistration{Flags: uint32(r.Flags), Id: id}
		if _, err := j.handshake(r.Path, slot); err != nil {
			return fmt.Errorf("register %s: %w", r.Path, err)
		}
		if r.Flags&Deny != 0 {
			if err := j.denyLinked(r.Path, id, &links); err != nil {
				return err
			}
		}
	}
	links.done(j.warn)
	// With every rule in place, the kernel seals the roots that have no
	// denial above them, as it sees their ancestors: walks up from a
	// target end at the first sealed root once they know the nearest
	// rule, instead of climbing to the file system's root on every open.
	// Not sealed is only slower.
	for _, r := range rules {
		if r.Flags&(Deny|Named) != 0 {
			continue
		}
		after, err := j.handshake(r.Path, jailRegistration{Flags: uint32(ruleSeal)})
		if err != nil {
			return fmt.Errorf("seal %s: %w", r.Path, err)
		}
		if after.Sealed == 1 {
			j.sealed = append(j.sealed, r.Path)
		}
	}
	return nil
}

// handshake puts slot (for this process, at the current sequence number)
// into the registration map, opens path so that the kernel sees it, and
// returns the slot as the kernel left it, which must have counted the open.
func (j *Jail) handshake(path string, slot jailRegistration) (jailRegistration, error) {
	return j.handshakeOpen(path, slot, 0)
}

// handshakeOpen is handshake with more flags for the open. A registration
// the kernel did not count is asked again, a few times, before it is an
// error: the Landlock engine's observers (tracepoint programs) missed one
// once in some thousand sessions under emulation (bookworm, 6.1), and CI
// saw two misses in a row once (forky, 7.2, sealing a file). Why is not
// known: the kernel skips a tracepoint program on a CPU where another BPF
// program or a bpf() map call is under way (bpf_prog_active), but
// TestRegistrationUnderMapCalls, making such calls without pause, saw no
// skip. So the error says what the kernel did see and how often it skipped
// these programs. A miss is no weakness: a registration not counted fails
// the start.
func (j *Jail) handshakeOpen(path string, slot jailRegistration, flags int) (jailRegistration, error) {
	var after jailRegistration
	var err error
	for try := 0; try < handshakeTries; try++ {
		if try > 0 {
			j.retries++
			time.Sleep(time.Duration(try) * time.Millisecond)
		}
		if after, err = j.handshakeOnce(path, slot, flags); err != errNotRecorded {
			return after, err
		}
	}
	seen := "no open of it was seen"
	if after.Ino != 0 {
		seen = fmt.Sprintf("its open was seen, as inode %d of device %d:%d, which no rule names",
			after.Ino, after.Dev>>20, after.Dev&0xfffff) // the kernel's dev_t: 12 bits of major, 20 of minor
	}
	return after, fmt.Errorf("%w: %d tries; %s; the kernel skipped these programs %d times",
		err, handshakeTries, seen, j.recursionMisses())
}

// handshakeTries bounds handshakeOpen's tries, which are quick: ten
// misses in a row are the programs not seeing agent-lock's opens at all.
const handshakeTries = 10

var errNotRecorded = errors.New("the kernel did not record it (are the programs attached elsewhere?)")

// recursionMisses is how many times the kernel skipped this jail's
// programs, for handshakeOpen's error.
func (j *Jail) recursionMisses() uint64 {
	var n uint64
	for _, p := range j.coll.Programs {
		if st, err := p.Stats(); err == nil {
			n += st.RecursionMisses
		}
	}
	return n
}

func (j *Jail) handshakeOnce(path string, slot jailRegistration, flags int) (jailRegistration, error) {
	regMap := j.coll.Maps["reg"]
	var zero uint32
	var before, after jailRegistration
	if err := regMap.Lookup(zero, &before); err != nil {
		return after, err
	}
	// register's thread, locked: the kernel takes its opens alone.
	slot.Tgid, slot.Tid, slot.Seq = uint32(os.Getpid()), uint32(unix.Gettid()), before.Seq
	if err := regMap.Put(zero, slot); err != nil {
		return after, err
	}
	// Sockets refuse open with ENXIO after file_open ran; FIFOs must not
	// block. Either way the hook has seen the inode.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY|flags, 0)
	if err != nil {
		if !errors.Is(err, unix.ENXIO) {
			return after, err
		}
		fd = -1
	}
	pinned := false
	if fd >= 0 {
		defer func() {
			if !pinned {
				unix.Close(fd)
			}
		}()
	}
	if err := regMap.Lookup(zero, &after); err != nil {
		return after, err
	}
	if after.Clash == 1 {
		return after, fmt.Errorf("its inode number (%d) is already another registered root's on the same file system "+
			"(btrfs subvolumes number their inodes alike), and the BPF LSM engine cannot tell the two apart: "+
			"use --engine landlock", after.Ino)
	}
	if after.Seq != before.Seq+1 {
		return after, errNotRecorded
	}
	if slot.Flags != uint32(ruleSeal) {
		j.killSeq = after.KillSeq
		pinned = j.keepRoot(fd, RuleFlags(slot.Flags))
	}
	return after, nil
}

// keepRoot keeps fd, just registered with flags, open for the session when the
// rule grants something (struct rule.inode): a folder or a file. Sockets
// are held by their binding (and cannot be opened); FIFOs and devices are
// not held, as an open reader changes what writers see: should their
// inode be evicted, their grant fails closed.
func (j *Jail) keepRoot(fd int, flags RuleFlags) bool {
	var st unix.Stat_t
	if fd < 0 || flags&^(Deny|Protect|Grant|Project|InGit) == 0 || unix.Fstat(fd, &st) != nil {
		return false
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG {
		return false
	}
	j.pins = append(j.pins, os.NewFile(uintptr(fd), "rule-root"))
	return true
}

// checkNamed says what is wrong with a Named rule, or nil.
func checkNamed(r Rule) error {
	base := filepath.Base(r.Path)
	switch {
	case r.Flags&^(Named|Read|Write|Grant) != 0 || r.Flags&Read == 0:
		return fmt.Errorf("file %s granted by name: flags %#x (read, write and grant only)", r.Path, uint32(r.Flags))
	case !filepath.IsAbs(r.Path) || base == "/" || base == "." || base == "..":
		return fmt.Errorf("file %s granted by name: not an absolute file path", r.Path)
	case len(base) > NamedLen:
		return fmt.Errorf("file %s granted by name: its name is over %d bytes; grant its folder instead", r.Path, NamedLen)
	}
	return nil
}

// registerNamed registers the folder of r, a file granted by name, with
// RULE_NAMED, and writes the file's name into slot of the named table
// under the folder's group: the one the kernel says the folder has, which
// is an earlier registration's when the folder has two named files (or two
// paths). The folder's registration names no rule (id 0), so it keeps the
// id of any other rule on it.
func (j *Jail) registerNamed(r Rule, id, slot uint32) error {
	after, err := j.handshake(filepath.Dir(r.Path), jailRegistration{Flags: uint32(Named), Named: slot + 1})
	if err == nil && after.Named == 0 {
		err = errors.New("the kernel gave its folder no group")
	}
	if err != nil {
		return fmt.Errorf("register %s (its folder): %w", r.Path, err)
	}
	base := filepath.Base(r.Path)
	e := jailNamed{Group: after.Named, Len: uint32(len(base)), Rule: id, Flags: uint32(r.Flags &^ (Named | Grant))}
	for i := range len(base) {
		e.Name[i] = int8(base[i])
		e.Mask[i/8] |= 0xff << (8 * (i % 8)) // little-endian: byte i%8 of word i/8
	}
	// A failed write leaves the file ungranted, never more: the agent is
	// refused what it was meant to have, and the error stops the start.
	if err := j.coll.Maps["named_files"].Put(slot, e); err != nil {
		return fmt.Errorf("register %s: %w", r.Path, err)
	}
	return nil
}

// Sealed are the rule roots the kernel sealed: nothing above them is
// denied, so walks up from a target end there.
func (j *Jail) Sealed() []string { return slices.Clone(j.sealed) }

// LoadTime is how long the kernel took to load and verify the programs.
func (j *Jail) LoadTime() time.Duration { return j.loadTime }

// Steps are the load and what followed it: attaching the programs (and
// pinning them), then registering the rules through file_open and
// opening the event ring.
func (j *Jail) Steps() []report.Step {
	load, attach := "load", "attach"
	if j.ahead {
		load = "load_ahead"
	}
	if j.attachedAhead {
		attach = "attach_ahead"
	}
	return []report.Step{{Name: load, Time: j.loadWait}, {Name: attach, Time: j.attachTime},
		{Name: "register", Time: j.registerTime}}
}

// KillSeq is how many times cgroup.kill was written in the cgroup of the
// process that loaded the jail, as the kernel counts it: 0 where it does not
// count (kernels before 6.14 without its backport). Such kernels kill a
// process cloned into another cgroup when that cgroup's count differs from
// its parent's own (CLONE_INTO_CGROUP, which the cell's processes are
// started with): the caller matches the cell's count to this before it
// starts anything there.
func (j *Jail) KillSeq() uint32 { return j.killSeq }

// LinkFiles returns duplicates of the attachment descriptors, and of the
// granted roots' (pins). Whoever holds them keeps the programs attached and
// the rules' inodes alive; the reaper holds them so that the jail outlives
// agent-lock until every jailed process is dead.
func (j *Jail) LinkFiles() ([]*os.File, error) {
	files, err := bpfload.LinkFiles(j.links)
	if err != nil {
		return nil, err
	}
	for _, p := range j.pins {
		f, err := bpfload.DupFile(int(p.Fd()), "rule-root")
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("dup rule root: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// pin pins every link under dir.
func (j *Jail) pin(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("pin programs: %w", err)
	}
	j.pinDir = dir
	for i, l := range j.links {
		if err := l.Pin(filepath.Join(dir, fmt.Sprintf("link%d", i))); err != nil {
			return fmt.Errorf("pin programs: %w", err)
		}
	}
	return nil
}

// Counters are totals kept by the kernel, summed over CPUs.
type Counters = verdict.Counters

// Made says whether the jail made the file f is open on (any mode,
// O_PATH included) in this session: the mark the kernel keeps on the
// inodes the jail creates (jail.h, struct mark). Only the BPF LSM keeps
// marks; the observers' cells have none, and Made fails there.
func (j *Jail) Made(f *os.File) (bool, error) {
	m := j.coll.Maps["marks"]
	if m == nil {
		return false, errors.New("this cell keeps no marks of what the jail made (the observers' cell)")
	}
	var created uint32
	err := m.Lookup(int32(f.Fd()), &created)
	runtime.KeepAlive(f)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up the jail's mark on %s: %w", f.Name(), err)
	}
	return created != 0, nil
}

// Counters reads the kernel's counters.
func (j *Jail) Counters() (Counters, error) {
	m := j.coll.Maps["counters"]
	get := func(slot jailAlCounter) (uint64, error) {
		var per []uint64
		if err := m.Lookup(uint32(slot), &per); err != nil {
			return 0, err
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		return sum, nil
	}
	var c Counters
	for _, f := range []struct {
		slot jailAlCounter
		dst  *uint64
	}{
		{jailAlCounterCNT_INBOUNDS, &c.InBounds},
		{jailAlCounterCNT_SYSTEM, &c.System},
		{jailAlCounterCNT_ESCAPES, &c.Escapes},
		{jailAlCounterCNT_LOST, &c.Lost},
		{jailAlCounterCNT_FORK_DENIED, &c.ForkDenied},
		{jailAlCounterCNT_GIT_MADE, &c.GitMade},
		{jailAlCounterCNT_REPEATS, &c.Repeats},
	} {
		v, err := get(f.slot)
		if err != nil {
			return c, fmt.Errorf("read counters: %w", err)
		}
		*f.dst = v
	}
	return c, nil
}

// HookStats are the kernel's runs and time of each program that ran,
// sorted by name; nil when the kernel's BPF statistics are off
// (kernel.bpf_stats_enabled), which is the default: they cost two clock
// reads a run.
func (j *Jail) HookStats() []HookStat {
	var hs []HookStat
	for name, p := range j.coll.Programs {
		st, err := p.Stats()
		if err != nil || st.RunCount == 0 || st.Runtime == 0 {
			continue
		}
		hs = append(hs, HookStat{Name: name, Runs: st.RunCount, Time: st.Runtime})
	}
	slices.SortFunc(hs, func(a, b HookStat) int { return strings.Compare(a.Name, b.Name) })
	return hs
}

// HookStat is one program's runs and total time.
type HookStat = verdict.HookStat

// Flush makes Read return the events already in the ring and then
// ErrFlushed, once. It is safe to call while Read blocks (a deadline is not:
// the reader holds its lock while it waits).
func (j *Jail) Flush() error { return j.reader.Flush() }

// Close detaches the programs and frees the maps. Jailed processes that are
// still alive are no longer confined after this: the caller kills them first.
func (j *Jail) Close() error {
	if j.pinDir != "" {
		os.RemoveAll(j.pinDir) // unpins: the links now live only as long as their fds
	}
	if j.reader != nil {
		j.reader.Close()
	}
	for _, l := range j.links {
		l.Close()
	}
	j.links = nil
	for _, p := range j.pins {
		p.Close()
	}
	j.pins = nil
	if j.coll != nil {
		j.coll.Close()
	}
	return nil
}

// InBoundsGap is the least time between two in-bounds samples of one CPU
// (Config.StreamInBounds): a live view is refreshed a few times a second,
// and a build opens thousands of files in that time.
const InBoundsGap = 100 * time.Millisecond

func inbGap(every bool) uint64 {
	if every {
		return 0
	}
	return uint64(InBoundsGap)
}

// kernelIsX86 says whether the running kernel is x86-64's.
func kernelIsX86() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return unix.ByteSliceToString(u.Machine[:]) == "x86_64"
}

// Object is the BPF object the programs are loaded from.
func Object() []byte { return _JailBytes }
