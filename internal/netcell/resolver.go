package netcell

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/netpolicy"
)

// resolver is the cell's DNS server, outside the cell: the programs send
// every query of the cell (to port 53, at any address) here. It answers A
// and AAAA for granted names by asking the system's resolver, records
// what it handed out (records), and refuses every other name without
// asking anyone, so a query name cannot carry a secret off the machine.
type resolver struct {
	c            *Cell
	udp          []*net.UDPConn
	tcp          []*net.TCPListener
	port4, port6 uint16

	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}

	probeMu sync.Mutex
	probes  map[string]netip.Addr // names the self-test asks, answered here

	seenMu sync.Mutex
	seen   map[seenKey]time.Time // refusals reported lately, to report a retry once

	search []string // the system's search domains
}

type seenKey struct {
	name string
	pid  uint32
}

// ttl is the time to live of the answers: short, since the agent's
// program caches them; the kernel keeps what was handed out for the
// cell's life either way.
const ttl = 60

// maxInFlight bounds the queries answered at once (each may wait on the
// upstream resolver).
const maxInFlight = 64

func newResolver(c *Cell) (*resolver, error) {
	r := &resolver{c: c, sem: make(chan struct{}, maxInFlight), probes: map[string]netip.Addr{}, seen: map[seenKey]time.Time{},
		search: c.cfg.Search}
	if r.search == nil {
		r.search = searchDomains("/etc/resolv.conf")
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	u4, t4, p4, err := listenDNS("127.0.0.1")
	if err != nil {
		return nil, fmt.Errorf("start the cell's resolver: %w", err)
	}
	r.udp, r.tcp, r.port4 = append(r.udp, u4), append(r.tcp, t4), p4
	// Without IPv6 on loopback the programs refuse the cell's IPv6 DNS
	// (the port stays 0): fail closed, not open.
	if u6, t6, p6, err := listenDNS("::1"); err == nil {
		r.udp, r.tcp, r.port6 = append(r.udp, u6), append(r.tcp, t6), p6
	}
	return r, nil
}

// listenDNS opens UDP and TCP on one port of ip: the programs redirect
// both protocols to the same port.
func listenDNS(ip string) (*net.UDPConn, *net.TCPListener, uint16, error) {
	var last error
	for range 32 {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
		if err != nil {
			return nil, nil, 0, err
		}
		port := u.LocalAddr().(*net.UDPAddr).Port
		t, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(ip), Port: port})
		if err == nil {
			return u, t, uint16(port), nil
		}
		u.Close()
		last = err
	}
	return nil, nil, 0, last
}

func (r *resolver) serve() {
	for _, u := range r.udp {
		r.c.servers.Go(func() { r.serveUDP(u) })
	}
	for _, t := range r.tcp {
		r.c.servers.Go(func() { r.serveTCP(t) })
	}
}

func (r *resolver) stop() {
	r.cancel()
	for _, u := range r.udp {
		u.Close()
	}
	for _, t := range r.tcp {
		t.Close()
	}
}

func (r *resolver) stopped() bool { return r.ctx.Err() != nil }

func (r *resolver) serveUDP(u *net.UDPConn) {
	var inflight sync.WaitGroup
	defer inflight.Wait()
	buf := make([]byte, 65536)
	for {
		n, from, err := u.ReadFromUDPAddrPort(buf)
		if err != nil {
			if !r.stopped() {
				r.c.fail(fmt.Errorf("the cell's resolver stopped: %w", err))
			}
			return
		}
		pkt := append([]byte(nil), buf[:n]...)
		select {
		case r.sem <- struct{}{}:
		case <-r.ctx.Done():
			return
		}
		inflight.Go(func() {
			defer func() { <-r.sem }()
			if resp := r.answer(pkt, from, unix.IPPROTO_UDP, 512); resp != nil {
				u.WriteToUDPAddrPort(resp, from)
			}
		})
	}
}

func (r *resolver) serveTCP(l *net.TCPListener) {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		conn, err := l.AcceptTCP()
		if err != nil {
			if !r.stopped() {
				r.c.fail(fmt.Errorf("the cell's resolver stopped: %w", err))
			}
			return
		}
		conns.Go(func() { r.serveConn(conn) })
	}
}

// serveConn answers DNS over TCP: each message prefixed with its length.
func (r *resolver) serveConn(conn *net.TCPConn) {
	defer conn.Close()
	stop := context.AfterFunc(r.ctx, func() { conn.Close() })
	defer stop()
	from := conn.RemoteAddr().(*net.TCPAddr).AddrPort()
	var lenb [2]byte
	for {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(conn, lenb[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(lenb[:]))
		if _, err := io.ReadFull(conn, msg); err != nil {
			return
		}
		resp := r.answer(msg, from, unix.IPPROTO_TCP, 65535)
		if resp == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := conn.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

// query is one question being answered.
type query struct {
	hdr  dnsmessage.Header
	q    dnsmessage.Question
	name string // canonical
	edns bool
	size int // the largest answer the asker takes
	from netip.AddrPort
	peer sockInfo
}

// answer returns the response to pkt, or nil to drop it (not a query).
func (r *resolver) answer(pkt []byte, from netip.AddrPort, proto int, maxSize int) []byte {
	var p dnsmessage.Parser
	hdr, err := p.Start(pkt)
	if err != nil || hdr.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 || hdr.OpCode != 0 {
		return reply(query{hdr: hdr}, dnsmessage.RCodeFormatError, nil, "")
	}
	qy := query{hdr: hdr, q: qs[0], name: netpolicy.Canonical(qs[0].Name.String()), from: from, size: maxSize}
	if p.SkipAllAnswers() == nil && p.SkipAllAuthorities() == nil {
		for {
			h, err := p.AdditionalHeader()
			if err != nil {
				break
			}
			if h.Type == dnsmessage.TypeOPT {
				qy.edns = true
				if proto == unix.IPPROTO_UDP {
					qy.size = max(512, min(int(h.Class), 4096))
				}
			}
			if p.SkipAdditional() != nil {
				break
			}
		}
	}
	qy.peer, _ = r.c.peer(from, proto)
	return r.decide(qy, proto)
}

func (r *resolver) decide(qy query, proto int) []byte {
	if qy.q.Class != dnsmessage.ClassINET {
		return reply(qy, dnsmessage.RCodeNotImplemented, nil, "")
	}
	r.probeMu.Lock()
	probe, isProbe := r.probes[qy.name]
	r.probeMu.Unlock()
	switch {
	case isProbe:
		if qy.q.Type == dnsmessage.TypeA {
			return reply(qy, dnsmessage.RCodeSuccess, []netip.Addr{probe}, "")
		}
		return reply(qy, dnsmessage.RCodeSuccess, nil, "")
	case qy.name == "localhost" || strings.HasSuffix(qy.name, ".localhost"):
		// RFC 6761: answered here, never asked upstream.
		return reply(qy, dnsmessage.RCodeSuccess, []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}, "")
	case qy.q.Type == dnsmessage.TypePTR:
		return r.reverse(qy)
	case r.ownName(qy.name):
		// The machine's own name (git looks it up for its ident): not
		// the world's business, and nothing for the cell to reach.
		return reply(qy, dnsmessage.RCodeNameError, nil, "")
	}
	rules := r.c.cfg.Policy.Name(qy.name, 0)
	if len(rules) == 0 {
		// NXDOMAIN, not REFUSED: resolver libraries give up a search on
		// REFUSED, and a granted name asked with a search domain first
		// (ndots) would never be tried bare.
		if r.searched(qy.name) {
			return reply(qy, dnsmessage.RCodeNameError, nil, "")
		}
		why := "not granted (" + netpolicy.Hint(qy.name, 0) + ")"
		if r.c.cfg.Policy.Mode == netpolicy.Off {
			why = "--net off"
		}
		if !r.c.cfg.Audit {
			r.report(qy, proto, Refused, why)
			return reply(qy, dnsmessage.RCodeNameError, nil, "agent-lock refused "+qy.name+": "+why)
		}
		r.report(qy, proto, Audit, why)
	}
	var network string
	switch qy.q.Type {
	case dnsmessage.TypeA:
		network = "ip4"
	case dnsmessage.TypeAAAA:
		network = "ip6"
	default:
		// HTTPS, SVCB, MX, TXT, ...: no records. A granted name is
		// reached by its addresses.
		r.count(qy, proto, rules)
		return reply(qy, dnsmessage.RCodeSuccess, nil, "")
	}
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	addrs, err := r.c.cfg.Lookup(ctx, network, qy.name+".")
	var de *net.DNSError
	switch {
	case errors.As(err, &de) && de.IsNotFound:
		r.count(qy, proto, rules)
		return reply(qy, dnsmessage.RCodeNameError, nil, "")
	case err != nil:
		return reply(qy, dnsmessage.RCodeServerFailure, nil, "")
	}
	var out []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if (network == "ip4") == a.Is4() && len(out) < 16 && routable(a) {
			out = append(out, a)
		}
	}
	if err := r.c.rec.hand(qy.name, out, rules); err != nil {
		r.c.fail(err)
		return reply(qy, dnsmessage.RCodeServerFailure, nil, "")
	}
	r.count(qy, proto, rules)
	return reply(qy, dnsmessage.RCodeSuccess, out, "")
}

// searched reports whether name is a granted name with one of the
// system's search domains added (a resolver library tries those first
// when a name has fewer dots than its ndots): the library's search, not a
// reach, so it is answered NXDOMAIN unreported.
func (r *resolver) searched(name string) bool {
	for _, d := range r.search {
		if bare, ok := strings.CutSuffix(name, "."+d); ok && len(r.c.cfg.Policy.Name(bare, 0)) > 0 {
			return true
		}
	}
	return false
}

// searchDomains reads the search list of the system's resolv.conf.
func searchDomains(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && (f[0] == "search" || f[0] == "domain") {
			for _, d := range f[1:] {
				out = append(out, netpolicy.Canonical(d))
			}
		}
	}
	return out
}

// ownName reports whether name is this machine's host name, bare or with
// a search domain added.
func (r *resolver) ownName(name string) bool {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return false
	}
	h = netpolicy.Canonical(h)
	first, _, _ := strings.Cut(h, ".")
	n, _, _ := strings.Cut(name, ".")
	return name == h || n == first && len(r.c.cfg.Policy.Name(name, 0)) == 0
}

// routable reports whether this machine has a route to a (a UDP
// connect looks the route up and sends nothing). An address without one
// is left out of the answer: the cell's connection would reach the
// forwarder, whose own connection would then fail, and a program whose
// connect succeeded does not fall back to the name's other addresses
// (IPv6 answers on a machine without IPv6).
func routable(a netip.Addr) bool {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 9)))
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// count tallies a granted query and offers it to the live view.
func (r *resolver) count(qy query, proto int, rules []netpolicy.Rule) {
	if len(rules) == 0 {
		return // audit: reported as such already
	}
	r.c.allowed.Add(1)
	r.emit(qy, proto, Allowed, rules[0].From+" "+rules[0].String())
}

// reverse answers a PTR query from what this cell was handed: nothing is
// asked upstream (a reverse name can carry a secret as well as any).
func (r *resolver) reverse(qy query) []byte {
	a, ok := ptrAddr(qy.name)
	if !ok {
		return reply(qy, dnsmessage.RCodeNameError, nil, "")
	}
	names := r.c.rec.reverse(a)
	if len(names) == 0 {
		return reply(qy, dnsmessage.RCodeNameError, nil, "")
	}
	return replyPTR(qy, names)
}

// report emits a refused (or audited) query, once per name and process
// every few seconds: resolver libraries retry, and ask for A, AAAA and
// HTTPS records of one name at once.
func (r *resolver) report(qy query, proto int, v Verdict, why string) {
	k := seenKey{qy.name, qy.peer.pid}
	now := time.Now()
	r.seenMu.Lock()
	if len(r.seen) > 4096 {
		clear(r.seen)
	}
	last, dup := r.seen[k]
	if !dup || now.Sub(last) > 2*time.Second {
		r.seen[k] = now
	}
	r.seenMu.Unlock()
	if dup && now.Sub(last) <= 2*time.Second {
		return
	}
	// Counted as reported: a library's retry is not another reach.
	r.c.refused.Add(1)
	r.emit(qy, proto, v, why)
}

func (r *resolver) emit(qy query, proto int, v Verdict, why string) {
	e := Event{
		PID: qy.peer.pid, TID: qy.peer.tid, Comm: qy.peer.comm, Op: "resolve", Host: qy.name,
		Addr: qy.peer.addr, Port: qy.peer.port, Proto: "udp", Verdict: v, Why: why,
	}
	if proto == unix.IPPROTO_TCP {
		e.Proto = "tcp"
	}
	r.c.emit(e)
}

// reply builds the response to qy: rcode, the addresses as A or AAAA
// records, and where the asker speaks EDNS and refuse is set, an Extended
// DNS Error (RFC 8914, "Prohibited") that says who refused and why: dig
// shows it beside the NXDOMAIN.
func reply(qy query, rcode dnsmessage.RCode, addrs []netip.Addr, refuse string) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{
		ID: qy.hdr.ID, Response: true, OpCode: qy.hdr.OpCode, RecursionDesired: qy.hdr.RecursionDesired,
		RecursionAvailable: true, RCode: rcode,
	})
	b.EnableCompression()
	if qy.q.Name.Length > 0 {
		b.StartQuestions()
		b.Question(qy.q)
		b.StartAnswers()
		rh := dnsmessage.ResourceHeader{Name: qy.q.Name, Class: dnsmessage.ClassINET, TTL: ttl}
		for _, a := range addrs {
			if a.Is4() {
				b.AResource(rh, dnsmessage.AResource{A: a.As4()})
			} else {
				b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
	}
	if qy.edns {
		b.StartAdditionals()
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(1232, dnsmessage.RCodeSuccess, false)
		var opt dnsmessage.OPTResource
		if refuse != "" {
			data := binary.BigEndian.AppendUint16(nil, 18) // Prohibited
			opt.Options = append(opt.Options, dnsmessage.Option{Code: 15, Data: append(data, refuse...)})
		}
		b.OPTResource(rh, opt)
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	if qy.size > 0 && len(msg) > qy.size {
		// Too long for UDP: the header and question, truncated, so the
		// asker retries over TCP.
		q := qy
		q.hdr.Truncated = true
		return truncated(q, rcode)
	}
	return msg
}

func truncated(qy query, rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: qy.hdr.ID, Response: true, Truncated: true, RecursionDesired: qy.hdr.RecursionDesired,
		RecursionAvailable: true, RCode: rcode,
	})
	b.StartQuestions()
	b.Question(qy.q)
	msg, _ := b.Finish()
	return msg
}

func replyPTR(qy query, names []string) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: qy.hdr.ID, Response: true, RecursionDesired: qy.hdr.RecursionDesired, RecursionAvailable: true,
	})
	b.EnableCompression()
	b.StartQuestions()
	b.Question(qy.q)
	b.StartAnswers()
	rh := dnsmessage.ResourceHeader{Name: qy.q.Name, Class: dnsmessage.ClassINET, TTL: ttl}
	for _, n := range names {
		if dn, err := dnsmessage.NewName(n + "."); err == nil {
			b.PTRResource(rh, dnsmessage.PTRResource{PTR: dn})
		}
	}
	msg, _ := b.Finish()
	return msg
}

// ptrAddr reads the address of a reverse name (d.c.b.a.in-addr.arpa, or
// the 32 nibbles of ip6.arpa).
func ptrAddr(name string) (netip.Addr, bool) {
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa"); ok {
		l := strings.Split(rest, ".")
		if len(l) != 4 {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(l[3] + "." + l[2] + "." + l[1] + "." + l[0])
		return a, err == nil
	}
	if rest, ok := strings.CutSuffix(name, ".ip6.arpa"); ok {
		l := strings.Split(rest, ".")
		if len(l) != 32 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i := range 32 {
			if len(l[i]) != 1 {
				return netip.Addr{}, false
			}
			var v byte
			switch c := l[i][0]; {
			case c >= '0' && c <= '9':
				v = c - '0'
			case c >= 'a' && c <= 'f':
				v = c - 'a' + 10
			default:
				return netip.Addr{}, false
			}
			// l[0] is the last nibble.
			pos := 31 - i
			if pos%2 == 0 {
				b[pos/2] |= v << 4
			} else {
				b[pos/2] |= v
			}
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}

// probe makes the resolver answer name with a (the self-test's query).
func (r *resolver) probe(name string, a netip.Addr) func() {
	r.probeMu.Lock()
	r.probes[name] = a
	r.probeMu.Unlock()
	return func() {
		r.probeMu.Lock()
		delete(r.probes, name)
		r.probeMu.Unlock()
	}
}
