// Package netcell confines a cell's network: cgroup programs on the
// cell's cgroup (bpf/netcell.bpf.c) that decide each connect(2) and each
// unconnected datagram, a resolver that answers the cell's DNS queries
// with the granted names only, and a forwarder that reads the name a
// connection carries (TLS SNI, HTTP Host) before it forwards a byte. It
// works under either engine: cgroup programs see every socket of the
// cell, whatever confines its files, and load where LSM programs cannot.
//
// What is granted is a netpolicy.Policy; what happened comes back as
// Events, the kernel's and the resolver's and the forwarder's in one
// stream. Fail closed: Open attaches every program or none, and a
// resolver or forwarder that stops is reported on Failed, after which the
// caller must kill the cell (its DNS and its connections to names would
// otherwise fail anyway: the programs send them to a listener that is
// gone).
package netcell

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/agent-lock/agent-lock/internal/bpfload"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
)

// Config describes one cell's network.
type Config struct {
	// Cgroup is the cell's cgroup directory (v2).
	Cgroup string
	Policy netpolicy.Policy
	// Audit lets what would be refused through, and reports it.
	Audit bool
	// PinDir, when set, is a directory on a bpf file system (created
	// here) where the links are pinned, so that the cell stays confined
	// if every process holding them dies. Close unpins.
	PinDir string
	// Lookup resolves a granted name upstream, for network "ip4" or
	// "ip6"; nil: the system's resolver (/etc/hosts, /etc/resolv.conf).
	Lookup func(ctx context.Context, network, name string) ([]netip.Addr, error)
	// Search are the search domains a resolver library adds to a name
	// (resolver.searched); nil: those of /etc/resolv.conf.
	Search []string
}

// Cell is a cgroup's network, confined.
type Cell struct {
	cfg  Config
	objs objects
	// loadTime is what getting the programs took: their verification,
	// or taking them when they were verified ahead of the cell (the
	// daemon's spare: ahead).
	loadTime time.Duration
	ahead    bool
	links    []link.Link
	reader   *ringbuf.Reader
	rec      *records
	res      *resolver
	fwd      *forwarder
	pinDir   string

	events chan Event
	failed chan error
	done   chan struct{}
	// readers: the ring buffer's reader, the resolver's and forwarder's
	// servers; events closes when all are done.
	readers sync.WaitGroup
	servers sync.WaitGroup

	// Counted in Go: what the resolver and the forwarder decided.
	allowed, refused atomic.Uint64

	closeOnce sync.Once
	// closer: the goroutine that closes events once readers and servers
	// are done has started.
	closer bool
}

// Open loads the programs, starts the resolver and the forwarder, and
// attaches the programs to cfg.Cgroup. Any failure undoes all of it.
func Open(cfg Config) (c *Cell, err error) {
	if cfg.Lookup == nil {
		r := &net.Resolver{PreferGo: true}
		cfg.Lookup = r.LookupNetIP
	}
	c = &Cell{cfg: cfg, events: make(chan Event, 1024), failed: make(chan error, 1), done: make(chan struct{})}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	open := cfg.Policy.Mode == netpolicy.Open
	var ports [4]uint16 // resolver 4, 6, forwarder 4, 6
	if !open {
		c.res, err = newResolver(c)
		if err != nil {
			return c, err
		}
		c.fwd, err = newForwarder(c)
		if err != nil {
			return c, err
		}
		ports = [4]uint16{c.res.port4, c.res.port6, c.fwd.port4, c.fwd.port6}
	}

	loading := time.Now()
	p := takeAdopted()
	if p == nil {
		if p, err = load(false); err != nil {
			return c, err
		}
	}
	c.loadTime, c.ahead = time.Since(loading), p.ahead
	mode := netcellNetModeNET_MODE_POLICY
	if open {
		mode = netcellNetModeNET_MODE_OPEN
	}
	var audit uint32
	if cfg.Audit {
		audit = 1
	}
	settings := netcellNetSettings{
		ResolverPort4: ports[0], ResolverPort6: ports[1],
		ForwardPort4: ports[2], ForwardPort6: ports[3],
		Mode: uint32(mode), Audit: audit,
	}
	// Written before the programs are attached (below): no socket of the
	// cell ever meets them unset.
	err = p.coll.Maps[settingsMap].Put(uint32(0), settings)
	if err == nil {
		err = p.coll.Assign(&c.objs.netcellPrograms)
	}
	if err == nil {
		err = p.coll.Assign(&c.objs.netcellMaps)
	}
	// What objs does not name is closed with the collection.
	p.Close()
	if err != nil {
		return c, fmt.Errorf("the network programs: %w", err)
	}
	c.rec = &records{handed: c.objs.Handed, policy: cfg.Policy, byAddr: map[netip.Addr][]string{}}
	if err := c.grantAddresses(); err != nil {
		return c, err
	}
	c.reader, err = ringbuf.NewReader(c.objs.NetEvents)
	if err != nil {
		return c, fmt.Errorf("network events: %w", err)
	}
	c.readers.Go(c.readKernel)
	if c.res != nil {
		c.res.serve()
		c.fwd.serve()
	}
	c.closer = true
	cell := c // c is nil after a failed Open; the goroutine outlives that
	go func() {
		cell.readers.Wait()
		cell.servers.Wait()
		close(cell.events)
	}()
	if err := c.attach(); err != nil {
		return c, err
	}
	if cfg.PinDir != "" {
		if err := c.pin(cfg.PinDir); err != nil {
			return c, err
		}
	}
	return c, nil
}

// attach puts every program on the cell's cgroup. The cgroup is empty
// while this runs (the caller starts nothing in it before Open returns),
// so no socket of the cell ever exists without all of them.
func (c *Cell) attach() error {
	progs := map[string]*ebpf.Program{
		"connect4": c.objs.Connect4, "connect6": c.objs.Connect6,
		"sendmsg4": c.objs.Sendmsg4, "sendmsg6": c.objs.Sendmsg6,
		"recvmsg4": c.objs.Recvmsg4, "recvmsg6": c.objs.Recvmsg6,
		"getpeername4": c.objs.Getpeername4, "getpeername6": c.objs.Getpeername6,
		"egress": c.objs.Egress, "sock_create": c.objs.SockCreate,
		"post_bind4": c.objs.PostBind4, "post_bind6": c.objs.PostBind6,
		"sock_release": c.objs.SockRelease,
	}
	var err error
	c.links, err = attachAll(progs, c.cfg.Cgroup)
	if err != nil {
		return fmt.Errorf("the cell: %w", err)
	}
	return nil
}

// attachAll attaches progs (ProgramNames) to the cgroup at path; on an
// error it returns the links made so far with it, for the caller to close.
func attachAll(progs map[string]*ebpf.Program, path string) ([]link.Link, error) {
	spec, err := parsed()
	if err != nil {
		return nil, fmt.Errorf("network programs: %w", err)
	}
	var links []link.Link
	for _, name := range ProgramNames {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: path, Attach: spec.Programs[name].AttachType, Program: progs[name]})
		if err != nil {
			return links, fmt.Errorf("attach network program %s: %w", name, err)
		}
		links = append(links, l)
	}
	return links, nil
}

// ProgramNames are the cell's network programs, in attach order.
var ProgramNames = []string{
	"sock_create", "post_bind4", "post_bind6", "sock_release", "egress",
	"recvmsg4", "recvmsg6", "getpeername4", "getpeername6",
	"sendmsg4", "sendmsg6", "connect4", "connect6",
}

// grantAddresses writes the policy's address rules into the kernel's
// trie: UDP as well as TCP, since an address is granted by the user by
// name and port.
func (c *Cell) grantAddresses() error {
	for i, r := range c.cfg.Policy.Rules {
		if r.IsName() || c.cfg.Policy.Mode != netpolicy.Grants {
			continue
		}
		p := r.Prefix
		if p.Addr().Is4() {
			p = netip.PrefixFrom(netip.AddrFrom16(p.Addr().As16()), p.Bits()+96)
		}
		k := netcellGrantKey{Prefixlen: uint32(16 + p.Bits()), Port: htons(r.Port), Addr: p.Addr().As16()}
		v := netcellGrant{Rule: uint32(i + 1), Flags: 1} // GRANT_UDP
		if err := c.objs.Grants.Update(&k, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("grant %s: %w", r, err)
		}
	}
	return nil
}

func htons(p uint16) uint16 { return p<<8 | p>>8 }

func (c *Cell) pin(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pin network programs: %w", err)
	}
	c.pinDir = dir
	for i, l := range c.links {
		if err := l.Pin(filepath.Join(dir, fmt.Sprintf("net%d", i))); err != nil {
			return fmt.Errorf("pin network programs: %w", err)
		}
	}
	return nil
}

// LinkFiles returns duplicates of the links' descriptors, for a process
// that must keep the programs attached (the session's reaper).
func (c *Cell) LinkFiles() ([]*os.File, error) {
	files, err := bpfload.LinkFiles(c.links)
	if err != nil {
		return nil, fmt.Errorf("the network's programs: %w", err)
	}
	return files, nil
}

// Load says how long getting the programs took this cell, and whether
// they were verified ahead of it (the daemon's spare, Adopt).
func (c *Cell) Load() (time.Duration, bool) { return c.loadTime, c.ahead }

// Events is the stream of what the cell's network did: refusals, and
// allowed connections and queries (a caller samples those). It closes
// after Drain or Close.
func (c *Cell) Events() <-chan Event { return c.events }

// Failed delivers an error when the resolver or the forwarder stopped
// while the cell runs: the cell's DNS and its connections to names are
// then dead, and the caller must end the cell.
func (c *Cell) Failed() <-chan error { return c.failed }

func (c *Cell) fail(err error) {
	select {
	case <-c.done:
		return // stopping: listeners close on purpose
	default:
	}
	select {
	case c.failed <- err:
	default:
	}
}

// Counters are the cell's network totals: what was let through (the
// kernel's connections and datagrams, the resolver's answers, the
// forwarder's connections), what was reported as an escape (refused, or
// let through by --audit or --net open), and events lost.
type Counters struct {
	Allowed, Refused, Lost uint64
}

// Counters reads the totals.
func (c *Cell) Counters() (Counters, error) {
	get := func(slot netcellNetCounter) (uint64, error) {
		var per []uint64
		if err := c.objs.NetCounters.Lookup(uint32(slot), &per); err != nil {
			return 0, fmt.Errorf("network counters: %w", err)
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		return n, nil
	}
	var n Counters
	var err error
	if n.Allowed, err = get(netcellNetCounterNET_C_ALLOWED); err != nil {
		return n, err
	}
	if n.Refused, err = get(netcellNetCounterNET_C_REFUSED); err != nil {
		return n, err
	}
	if n.Lost, err = get(netcellNetCounterNET_C_LOST); err != nil {
		return n, err
	}
	n.Allowed += c.allowed.Load()
	n.Refused += c.refused.Load()
	return n, nil
}

// emit hands an event of the resolver or the forwarder to the stream,
// unless the cell is closing.
func (c *Cell) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	select {
	case c.events <- e:
	case <-c.done:
	}
}

// Drain stops the resolver and the forwarder, and lets the kernel's
// reader deliver what was queued before it was called; Events then
// closes. Call it when no process of the cell is left, and read Events
// until it closes.
func (c *Cell) Drain() <-chan Event {
	go func() {
		c.stopServers()
		if c.reader != nil {
			c.reader.Flush()
		}
	}()
	return c.events
}

func (c *Cell) stopServers() {
	if c.res != nil {
		c.res.stop()
	}
	if c.fwd != nil {
		c.fwd.stop()
	}
	c.servers.Wait()
}

// Close detaches the programs and stops everything. The caller must have
// killed the cell's processes first: a process of the cell must never run
// with its network unconfined.
func (c *Cell) Close() {
	c.closeOnce.Do(func() {
		close(c.done)
		c.stopServers()
		if c.pinDir != "" {
			os.RemoveAll(c.pinDir)
		}
		for _, l := range c.links {
			l.Close()
		}
		if c.reader != nil {
			c.reader.Close()
		}
		if c.closer {
			go func() {
				// Nobody reads anymore: drop what is left so that the
				// readers can end.
				for range c.events {
				}
			}()
		}
		c.readers.Wait()
		c.objs.netcellPrograms.Close()
		c.objs.netcellMaps.Close()
	})
}
