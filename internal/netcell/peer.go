package netcell

import (
	"net/netip"

	"golang.org/x/sys/unix"
)

// sockInfo is what the programs recorded of a redirected socket of the
// cell: where it was going and who made it.
type sockInfo struct {
	addr     netip.Addr
	port     uint16
	kind     uint8
	pid, tid uint32
	comm     string
}

const (
	kindDNS     = uint8(netcellNetKindNET_KIND_DNS)
	kindForward = uint8(netcellNetKindNET_KIND_FORWARD)
)

// peer finds the cell's socket that a connection or datagram to the
// resolver or the forwarder came from, by its port on loopback. A
// dual-stack socket's IPv4 traffic arrives from an IPv4 address but is
// keyed under AF_INET6 (the socket's family), so both are tried.
func (c *Cell) peer(from netip.AddrPort, proto int) (sockInfo, bool) {
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		k := netcellPeerKey{Port: from.Port(), Proto: uint8(proto), Family: fam}
		var v netcellSockInfo
		if err := c.objs.Peers.Lookup(&k, &v); err != nil {
			continue
		}
		return sockInfo{
			addr: netip.AddrFrom16(v.Addr).Unmap(), port: v.Port, kind: v.Kind,
			pid: v.Pid, tid: v.Tid, comm: cstr(v.Comm[:]),
		}, true
	}
	return sockInfo{}, false
}
