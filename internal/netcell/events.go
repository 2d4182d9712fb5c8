package netcell

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/netpolicy"
)

// Verdict is what happened to one reach of the cell's network.
type Verdict int

const (
	// Refused: the kernel, the resolver or the forwarder refused it.
	Refused Verdict = iota + 1
	// Allowed: it was granted (a caller samples these for a live view).
	Allowed
	// Audit: it would have been refused; --audit let it through.
	Audit
	// NetOpen: --net open let it through; every one is reported.
	NetOpen
)

// Event is one decision about the cell's network, by whichever part made
// it: the kernel (connect, send, socket), the resolver (resolve) or the
// forwarder (connect, with the name the connection carried).
type Event struct {
	Time     time.Time
	PID, TID uint32
	Comm     string
	// Op is "connect", "send" (a datagram without connect), "resolve"
	// or "socket".
	Op string
	// Host is the name: the one queried (resolve), the one the
	// connection carried (TLS SNI, HTTP Host), or the one the resolver
	// handed the address out for; "" for an address nobody resolved.
	Host  string
	Addr  netip.Addr // the destination; the nameserver asked, for resolve
	Port  uint16
	Proto string // "tcp", "udp", "raw", ...
	// Verdict is what was done.
	Verdict Verdict
	// Why says what decided: the rule that allowed it, or why it was
	// refused, with the flag that would allow it where one would.
	Why string
}

// Target is how a report shows what was reached: host:port, or the
// address, or the socket's kind.
func (e Event) Target() string {
	switch {
	case e.Op == "socket":
		return e.Proto + " socket"
	case e.Op == "resolve":
		return e.Host
	case e.Host != "":
		return hostPort(e.Host, e.Port)
	case e.Addr.IsValid():
		return hostPort(e.Addr.String(), e.Port)
	}
	return ""
}

func hostPort(h string, port uint16) string {
	if a, err := netip.ParseAddr(h); err == nil && a.Is6() {
		h = "[" + h + "]"
	}
	if port == 0 {
		return h
	}
	return h + ":" + strconv.Itoa(int(port))
}

var protoNames = map[uint16]string{
	unix.IPPROTO_TCP: "tcp", unix.IPPROTO_UDP: "udp", unix.IPPROTO_ICMP: "icmp",
	unix.IPPROTO_ICMPV6: "icmpv6", unix.IPPROTO_SCTP: "sctp", unix.IPPROTO_UDPLITE: "udplite",
	unix.IPPROTO_RAW: "raw", 262: "mptcp",
}

func protoName(p uint16, sockType uint8) string {
	if sockType == unix.SOCK_RAW {
		if n, ok := protoNames[p]; ok && p != unix.IPPROTO_RAW {
			return "raw " + n
		}
		return "raw"
	}
	if n, ok := protoNames[p]; ok {
		return n
	}
	return "protocol " + strconv.Itoa(int(p))
}

var opNames = map[netcellNetOp]string{
	netcellNetOpNET_OP_CONNECT: "connect",
	netcellNetOpNET_OP_SEND:    "send",
	netcellNetOpNET_OP_SOCKET:  "socket",
}

// readKernel delivers the programs' events until the ring buffer is
// closed or flushed.
func (c *Cell) readKernel() {
	clock := newMonoClock()
	for {
		rec, err := c.reader.Read()
		if err != nil {
			if !errors.Is(err, os.ErrClosed) && !errors.Is(err, ringbuf.ErrClosed) && !errors.Is(err, ringbuf.ErrFlushed) {
				c.fail(fmt.Errorf("read network events: %w", err))
			}
			return
		}
		e, err := c.decode(rec.RawSample, clock)
		if err != nil {
			continue
		}
		select {
		case c.events <- e:
		case <-c.done:
			return
		}
	}
}

func (c *Cell) decode(raw []byte, clock monoClock) (Event, error) {
	var k netcellNetEvent
	if len(raw) < int(unsafe.Sizeof(k)) {
		return Event{}, fmt.Errorf("network event of %d bytes", len(raw))
	}
	k = *(*netcellNetEvent)(unsafe.Pointer(&raw[0]))
	e := Event{
		Time: clock.wall(k.TsNs), PID: k.Pid, TID: k.Tid, Comm: cstr(k.Comm[:]),
		Op: opNames[netcellNetOp(k.Op)], Port: k.Port, Proto: protoName(k.Proto, k.Type),
	}
	if e.Op == "" {
		e.Op = "net" + strconv.Itoa(int(k.Op))
	}
	switch netcellNetVerdict(k.Verdict) {
	case netcellNetVerdictNET_REFUSED:
		e.Verdict = Refused
	case netcellNetVerdictNET_AUDIT:
		e.Verdict = Audit
	case netcellNetVerdictNET_OPEN:
		e.Verdict = NetOpen
	default:
		e.Verdict = Allowed
	}
	if e.Op == "socket" {
		e.Why = "raw, ICMP and SCTP sockets are refused: they reach past addresses and ports"
		if e.Verdict == NetOpen {
			e.Why = "--net open"
		}
		return e, nil
	}
	e.Addr = netip.AddrFrom16(k.Addr).Unmap()
	e.Host = c.rec.name(e.Addr)
	e.Why = c.why(e, k.Rule)
	return e, nil
}

// why explains a kernel decision: the rule that granted it, or why it was
// refused and the flag that would grant it.
func (c *Cell) why(e Event, rule uint32) string {
	if e.Verdict == NetOpen {
		return "--net open"
	}
	if e.Verdict == Allowed {
		if rule > 0 && int(rule) <= len(c.cfg.Policy.Rules) {
			r := c.cfg.Policy.Rules[rule-1]
			return r.From + " " + r.String()
		}
		return ""
	}
	if c.cfg.Policy.Mode == netpolicy.Off {
		return "--net off"
	}
	if kind, ok := netpolicy.Restricted(e.Addr); ok {
		return fmt.Sprintf("%s address: granted only by address and port (%s)", kind, netpolicy.Hint(e.Addr.String(), e.Port))
	}
	if e.Proto == "udp" {
		if e.Host != "" {
			return "UDP to a name is refused (QUIC falls back to TCP); only DNS goes out, through agent-lock's resolver"
		}
		return fmt.Sprintf("UDP is refused but to agent-lock's resolver and to addresses granted with a port (%s)", netpolicy.Hint(e.Addr.String(), e.Port))
	}
	if e.Host != "" {
		// The address was handed out for a granted name, but not for
		// this port.
		return fmt.Sprintf("%s is granted on other ports (%s)", e.Host, netpolicy.Hint(e.Host, e.Port))
	}
	return fmt.Sprintf("an address no granted name resolved to (grant the name: --allow-net HOST, or the address: %s)", netpolicy.Hint(e.Addr.String(), e.Port))
}

func cstr(b []int8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	out := make([]byte, n)
	for i := range n {
		out[i] = byte(b[i])
	}
	return string(out)
}

// monoClock turns the kernel's monotonic nanoseconds into wall time.
type monoClock struct{ offset time.Duration }

func newMonoClock() monoClock {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	mono := time.Duration(ts.Nano())
	return monoClock{offset: time.Duration(time.Now().UnixNano()) - mono}
}

func (m monoClock) wall(ns uint64) time.Time {
	return time.Unix(0, int64(time.Duration(ns)+m.offset))
}

// addr16 is a as the programs key it: 16 bytes, IPv4 mapped.
func addr16(a netip.Addr) [16]byte {
	return a.As16()
}
