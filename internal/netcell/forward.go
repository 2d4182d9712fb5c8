package netcell

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/netpolicy"
)

// forwarder carries the cell's TCP connections to the addresses the
// resolver handed out for granted names. An address often serves many
// names (a CDN, a cloud load balancer), so the address alone does not say
// which site the cell reaches: the forwarder reads the name the connection
// carries, the TLS ClientHello's server name or the HTTP request's Host,
// and forwards nothing of a connection whose name is not granted. A
// refused HTTP request gets a 403 that says why and which flag would
// allow it; a refused TLS connection a fatal alert (access_denied), then a
// clean close.
//
// Protocols that carry no name (SSH, git://, a database's own) are
// forwarded on the address's grant alone, as the kernel decided; the
// server speaks first in some of them, so the upstream connection is made
// at once and its bytes are relayed while the forwarder waits for the
// cell's first bytes.
type forwarder struct {
	c            *Cell
	lns          []*net.TCPListener
	port4, port6 uint16
	ctx          context.Context
	cancel       context.CancelFunc
}

// maxHello bounds what is read to find the name: a ClientHello with
// post-quantum key shares is a few kilobytes, an HTTP request head rarely
// more than a few.
const maxHello = 64 << 10

func newForwarder(c *Cell) (*forwarder, error) {
	f := &forwarder{c: c}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	l4, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("start the cell's forwarder: %w", err)
	}
	f.lns, f.port4 = append(f.lns, l4), uint16(l4.Addr().(*net.TCPAddr).Port)
	if l6, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv6loopback}); err == nil {
		f.lns, f.port6 = append(f.lns, l6), uint16(l6.Addr().(*net.TCPAddr).Port)
	}
	return f, nil
}

func (f *forwarder) serve() {
	for _, l := range f.lns {
		f.c.servers.Go(func() { f.accept(l) })
	}
}

func (f *forwarder) stop() {
	f.cancel()
	for _, l := range f.lns {
		l.Close()
	}
}

func (f *forwarder) accept(l *net.TCPListener) {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		conn, err := l.AcceptTCP()
		if err != nil {
			if f.ctx.Err() == nil {
				f.c.fail(fmt.Errorf("the cell's forwarder stopped: %w", err))
			}
			return
		}
		conns.Go(func() { f.handle(conn) })
	}
}

// handle forwards one connection of the cell, or refuses it.
func (f *forwarder) handle(client *net.TCPConn) {
	defer client.Close()
	stop := context.AfterFunc(f.ctx, func() { client.Close() })
	defer stop()
	from := client.RemoteAddr().(*net.TCPAddr).AddrPort()
	info, ok := f.c.peer(from, unix.IPPROTO_TCP)
	if !ok || info.kind != kindForward {
		// Not a redirected connection of the cell (the cell cannot
		// connect here directly: loopback is refused to it).
		return
	}
	dst := netip.AddrPortFrom(info.addr, info.port)

	// The server may speak first: connect now, relay what it says.
	type dialed struct {
		conn *net.TCPConn
		err  error
	}
	upc := make(chan dialed, 1)
	go func() {
		d := net.Dialer{Timeout: 30 * time.Second}
		c, err := d.DialContext(f.ctx, "tcp", dst.String())
		if err != nil {
			upc <- dialed{nil, err}
			return
		}
		upc <- dialed{c.(*net.TCPConn), nil}
	}()

	// The cell's first bytes say which name it reaches.
	br := bufio.NewReaderSize(client, maxHello)
	firstc := make(chan error, 1)
	go func() {
		_, err := br.Peek(1)
		firstc <- err
	}()

	var up *net.TCPConn
	var relay sync.WaitGroup
	defer relay.Wait()
	defer func() {
		if up != nil {
			up.Close()
			return
		}
		// Refused before the upstream connection was made: close it
		// when it is.
		go func() {
			if d := <-upc; d.conn != nil {
				d.conn.Close()
			}
		}()
	}()
	first := false
	for up == nil || !first {
		select {
		case d := <-upc:
			if d.err != nil {
				// The cell sees a reset, as from a failed connect.
				client.SetLinger(0)
				upc <- d // for the deferred clean-up
				return
			}
			up = d.conn
			relay.Go(func() {
				io.Copy(client, up)
				client.CloseWrite()
			})
		case err := <-firstc:
			if err != nil {
				return
			}
			first = true
			name, proto, refuse := f.name(br)
			if refuse == "" {
				refuse = f.check(name, proto, info.port)
			}
			if refuse != "" && !f.c.cfg.Audit {
				f.refuse(client, info, dst, name, proto, refuse)
				return
			}
			f.allowed(info, dst, name, refuse)
			firstc = nil
		}
	}
	// The buffered first bytes, then the rest (splice(2) from here).
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
		br.Discard(n)
	}
	io.Copy(up, client)
	up.CloseWrite()
}

// Protocols whose name the forwarder reads.
const (
	protoTLS   = "tls"
	protoHTTP  = "http"
	protoOther = ""
)

// name reads the name the connection's first bytes carry: the TLS server
// name, the HTTP Host. refuse is set when the protocol should carry a
// name and does not in a way that can be read.
func (f *forwarder) name(br *bufio.Reader) (name, proto, refuse string) {
	b, _ := br.Peek(br.Buffered())
	switch {
	case len(b) > 0 && b[0] == 0x16:
		hello, err := readClientHello(br)
		if err != nil {
			return "", protoTLS, "a TLS ClientHello that could not be read (" + err.Error() + ")"
		}
		sni, err := serverName(hello)
		if err != nil {
			return "", protoTLS, "a TLS ClientHello that could not be read (" + err.Error() + ")"
		}
		if sni == "" {
			return "", protoTLS, "TLS without a server name: the name reached cannot be checked"
		}
		return netpolicy.Canonical(sni), protoTLS, ""
	case looksHTTP(b):
		head, err := readHead(br)
		if err != nil {
			return "", protoHTTP, "an HTTP request whose head could not be read (" + err.Error() + ")"
		}
		host, err := httpHost(head)
		if err != nil {
			return "", protoHTTP, err.Error()
		}
		return host, protoHTTP, ""
	}
	return "", protoOther, ""
}

// check says why name may not be reached on port, or "".
func (f *forwarder) check(name, proto string, port uint16) string {
	if proto == protoOther {
		return ""
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return fmt.Sprintf("%s names an address, not a granted name (%s)", name, netpolicy.Hint(name, port))
	}
	if len(f.c.cfg.Policy.Name(name, port)) == 0 {
		return fmt.Sprintf("%s is not granted (%s)", name, netpolicy.Hint(name, port))
	}
	return ""
}

// refuse answers a refused connection as its protocol allows, and reports
// it.
func (f *forwarder) refuse(client *net.TCPConn, info sockInfo, dst netip.AddrPort, name, proto, why string) {
	f.c.refused.Add(1)
	f.c.emit(Event{PID: info.pid, TID: info.tid, Comm: info.comm, Op: "connect", Host: hostOr(name, f.c.rec.name(dst.Addr())),
		Addr: dst.Addr(), Port: dst.Port(), Proto: "tcp", Verdict: Refused, Why: why})
	client.SetWriteDeadline(time.Now().Add(5 * time.Second))
	switch proto {
	case protoTLS:
		// A fatal access_denied alert (RFC 8446 6.2), in a TLS 1.0
		// record so every version of client reads it.
		client.Write([]byte{0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 49})
	case protoHTTP:
		body := "agent-lock refused this request: " + why + ".\n" +
			"agent-lock confines this agent's network to the names granted to it; " +
			"add the flag above (or allow-net in a policy file) to grant one.\n"
		fmt.Fprintf(client, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\n"+
			"Content-Length: %d\r\nConnection: close\r\nX-Agent-Lock: refused\r\n\r\n%s", len(body), body)
	}
	client.CloseWrite()
	// Let the client read the answer before the close.
	client.SetReadDeadline(time.Now().Add(2 * time.Second))
	io.Copy(io.Discard, io.LimitReader(client, 1<<20))
}

func (f *forwarder) allowed(info sockInfo, dst netip.AddrPort, name, audit string) {
	e := Event{PID: info.pid, TID: info.tid, Comm: info.comm, Op: "connect", Host: hostOr(name, f.c.rec.name(dst.Addr())),
		Addr: dst.Addr(), Port: dst.Port(), Proto: "tcp", Verdict: Allowed}
	if audit != "" {
		f.c.refused.Add(1)
		e.Verdict, e.Why = Audit, audit
	} else {
		f.c.allowed.Add(1)
		if rs := f.c.cfg.Policy.Name(e.Host, dst.Port()); len(rs) > 0 {
			e.Why = rs[0].From + " " + rs[0].String()
		}
	}
	f.c.emit(e)
}

func hostOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// readClientHello returns the handshake message of a ClientHello, which
// may span several TLS records.
func readClientHello(br *bufio.Reader) ([]byte, error) {
	var msg []byte
	off := 0
	for {
		hdr, err := br.Peek(off + 5)
		if err != nil {
			return nil, err
		}
		h := hdr[off:]
		if h[0] != 0x16 {
			return nil, errors.New("not a handshake record")
		}
		n := int(h[3])<<8 | int(h[4])
		if n == 0 || off+5+n > maxHello {
			return nil, errors.New("record too long")
		}
		rec, err := br.Peek(off + 5 + n)
		if err != nil {
			return nil, err
		}
		msg = append(msg, rec[off+5:]...)
		off += 5 + n
		if len(msg) >= 4 {
			if msg[0] != 1 {
				return nil, errors.New("not a ClientHello")
			}
			want := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
			if want > maxHello {
				return nil, errors.New("ClientHello too long")
			}
			if len(msg) >= want {
				return msg[:want], nil
			}
		}
	}
}

// serverName reads the server_name extension (RFC 6066) of a ClientHello
// handshake message; "" when it has none.
func serverName(m []byte) (string, error) {
	bad := errors.New("malformed ClientHello")
	p := 4 + 2 + 32 // header, version, random
	if len(m) < p+1 {
		return "", bad
	}
	skip := func(lenBytes int) bool {
		if len(m) < p+lenBytes {
			return false
		}
		n := 0
		for i := range lenBytes {
			n = n<<8 | int(m[p+i])
		}
		p += lenBytes + n
		return p <= len(m)
	}
	if !skip(1) || !skip(2) || !skip(1) { // session id, cipher suites, compression
		return "", bad
	}
	if p == len(m) {
		return "", nil // no extensions
	}
	if len(m) < p+2 {
		return "", bad
	}
	end := p + 2 + (int(m[p])<<8 | int(m[p+1]))
	p += 2
	if end > len(m) {
		return "", bad
	}
	for p+4 <= end {
		typ, n := int(m[p])<<8|int(m[p+1]), int(m[p+2])<<8|int(m[p+3])
		p += 4
		if p+n > end {
			return "", bad
		}
		if typ == 0 {
			ext := m[p : p+n]
			if len(ext) < 2 {
				return "", bad
			}
			list := ext[2:]
			for len(list) >= 3 {
				kind, l := list[0], int(list[1])<<8|int(list[2])
				if 3+l > len(list) {
					return "", bad
				}
				if kind == 0 {
					return string(list[3 : 3+l]), nil
				}
				list = list[3+l:]
			}
			return "", bad
		}
		p += n
	}
	return "", nil
}

var httpMethods = []string{"GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE ", "PRI "}

func looksHTTP(b []byte) bool {
	for _, m := range httpMethods {
		n := min(len(m), len(b))
		if n > 0 && string(b[:n]) == m[:n] {
			return true
		}
	}
	return false
}

// readHead reads an HTTP request's head (up to the empty line).
func readHead(br *bufio.Reader) ([]byte, error) {
	for {
		b, _ := br.Peek(br.Buffered())
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			return b[:i+4], nil
		}
		if i := bytes.Index(b, []byte("\n\n")); i >= 0 {
			return b[:i+2], nil
		}
		if len(b) >= maxHello {
			return nil, errors.New("request head too long")
		}
		// Wait for more.
		if _, err := br.Peek(len(b) + 1); err != nil {
			return nil, err
		}
	}
}

// httpHost is the host an HTTP/1 request names: its Host header, or the
// authority of an absolute request target.
func httpHost(head []byte) (string, error) {
	lines := strings.Split(strings.ReplaceAll(string(head), "\r\n", "\n"), "\n")
	reqLine := strings.Fields(lines[0])
	if len(reqLine) < 2 {
		return "", errors.New("a malformed HTTP request")
	}
	if reqLine[0] == "PRI" {
		return "", errors.New("HTTP/2 without TLS: the name it reaches cannot be read")
	}
	host := ""
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), "host") {
			if host != "" {
				return "", errors.New("an HTTP request with two Host headers")
			}
			host = strings.TrimSpace(v)
		}
	}
	if t := reqLine[1]; strings.Contains(t, "://") {
		rest := t[strings.Index(t, "://")+3:]
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			rest = rest[:i]
		}
		if host != "" && !strings.EqualFold(stripPort(host), stripPort(rest)) {
			return "", errors.New("an HTTP request whose target and Host name different hosts")
		}
		host = rest
	}
	if reqLine[0] == "CONNECT" && host == "" {
		host = reqLine[1]
	}
	if host == "" {
		return "", errors.New("an HTTP request without a Host: the name reached cannot be checked")
	}
	return netpolicy.Canonical(stripPort(host)), nil
}

func stripPort(h string) string {
	if strings.HasPrefix(h, "[") {
		if i := strings.Index(h, "]"); i > 0 {
			return h[1:i]
		}
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.Count(h, ":") == 1 {
		if _, err := strconv.Atoi(h[i+1:]); err == nil {
			return h[:i]
		}
	}
	return h
}
