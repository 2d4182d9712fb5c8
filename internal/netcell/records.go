package netcell

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/agent-lock/agent-lock/internal/netpolicy"
)

// records are what the resolver handed to this cell: which names each
// address was given out for (for reports), and in the kernel's handed map
// the (address, port) pairs the cell may connect to through the forwarder.
// They last as long as the cell: an address handed out once stays
// reachable on the granted ports, as it would through a cache.
type records struct {
	handed *ebpf.Map
	policy netpolicy.Policy

	mu     sync.Mutex
	byAddr map[netip.Addr][]string // latest first
}

// maxNamesPerAddr bounds the names remembered for one address (a CDN's
// address answers for thousands).
const maxNamesPerAddr = 8

// hand records that name resolved to addrs and opens the granted ports of
// each that is not restricted (loopback, private, link-local: those need a
// grant by address). rules are the name's rules.
func (r *records) hand(name string, addrs []netip.Addr, rules []netpolicy.Rule) error {
	ports := grantedPorts(rules)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range addrs {
		a = a.Unmap()
		names := slices.DeleteFunc(r.byAddr[a], func(n string) bool { return n == name })
		names = append([]string{name}, names...)
		if len(names) > maxNamesPerAddr {
			names = names[:maxNamesPerAddr]
		}
		r.byAddr[a] = names
		if _, restricted := netpolicy.Restricted(a); restricted || r.handed == nil || len(rules) == 0 {
			continue
		}
		for _, p := range ports {
			k := netcellDestKey{Addr: addr16(a), Port: p}
			v := netcellGrant{}
			if err := r.handed.Update(&k, &v, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("hand %s (%s) to the kernel: %w", a, name, err)
			}
		}
	}
	return nil
}

// grantedPorts are the ports rules grant: [0] (every port) if any rule
// names none.
func grantedPorts(rules []netpolicy.Rule) []uint16 {
	var ports []uint16
	for _, r := range rules {
		if r.Port == 0 {
			return []uint16{0}
		}
		if !slices.Contains(ports, r.Port) {
			ports = append(ports, r.Port)
		}
	}
	return ports
}

// name is the name a was last handed out for, or "".
func (r *records) name(a netip.Addr) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.byAddr[a.Unmap()]; len(n) > 0 {
		return n[0]
	}
	return ""
}

// reverse is every name a was handed out for (PTR answers).
func (r *records) reverse(a netip.Addr) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.byAddr[a.Unmap()])
}
