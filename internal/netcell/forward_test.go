package netcell

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// clientHello is the first flight of a real TLS client for serverName.
func clientHello(t *testing.T, serverName string) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""}).Handshake()
		c.Close()
	}()
	buf := make([]byte, 64<<10)
	n, err := io.ReadAtLeast(s, buf, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := 5 + (int(buf[3])<<8 | int(buf[4]))
	for n < want {
		m, err := s.Read(buf[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
	return buf[:want]
}

func TestServerName(t *testing.T) {
	for _, name := range []string{"allowed.test", "a.very.long.name.of.a.host.example.com", ""} {
		hello := clientHello(t, name)
		msg, err := readClientHello(bufio.NewReader(bytes.NewReader(hello)))
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		got, err := serverName(msg)
		if err != nil || got != name {
			t.Errorf("serverName = %q, %v; want %q", got, err, name)
		}
	}
}

// TestServerNameAcrossRecords: a ClientHello may be split over several
// TLS records (large key shares); the name is read from the whole.
func TestServerNameAcrossRecords(t *testing.T) {
	hello := clientHello(t, "split.test")
	body := hello[5:]
	half := len(body) / 2
	var split []byte
	for _, part := range [][]byte{body[:half], body[half:]} {
		split = append(split, 0x16, hello[1], hello[2], byte(len(part)>>8), byte(len(part)))
		split = append(split, part...)
	}
	msg, err := readClientHello(bufio.NewReader(bytes.NewReader(split)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := serverName(msg); err != nil || got != "split.test" {
		t.Errorf("serverName = %q, %v", got, err)
	}
	// Cut short: an error, not a name.
	if _, err := readClientHello(bufio.NewReader(bytes.NewReader(split[:len(split)-3]))); err == nil {
		t.Error("a truncated ClientHello was read")
	}
}

// TestServerNameMalformed feeds every truncation and every one-byte
// corruption of a real ClientHello: the parser must neither panic (the
// forwarder reads what the cell sends) nor make up a name.
func TestServerNameMalformed(t *testing.T) {
	hello := clientHello(t, "allowed.test")
	msg, _ := readClientHello(bufio.NewReader(bytes.NewReader(hello)))
	check := func(m []byte, what string) {
		if name, err := serverName(m); err == nil && !bytes.Contains(m, []byte(name)) {
			t.Fatalf("%s: a name that is not in the message: %q", what, name)
		}
	}
	for cut := range len(msg) {
		check(msg[:cut], "truncated")
	}
	for i := range len(msg) {
		m := append([]byte(nil), msg...)
		m[i] ^= 0xff
		check(m, "corrupted")
	}
}

func TestHTTPHost(t *testing.T) {
	for _, tc := range []struct {
		head, want, err string
	}{
		{head: "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", want: "allowed.test"},
		{head: "GET / HTTP/1.1\r\nhost: Allowed.Test:8080\r\nAccept: */*\r\n\r\n", want: "allowed.test"},
		{head: "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", want: "2001:db8::1"},
		{head: "GET http://other.test/x HTTP/1.1\r\n\r\n", want: "other.test"},
		{head: "GET http://other.test/x HTTP/1.1\r\nHost: allowed.test\r\n\r\n", err: "different hosts"},
		{head: "CONNECT other.test:443 HTTP/1.1\r\n\r\n", want: "other.test"},
		{head: "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", err: "two Host headers"},
		{head: "GET / HTTP/1.0\r\n\r\n", err: "without a Host"},
		{head: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", err: "HTTP/2 without TLS"},
	} {
		got, err := httpHost([]byte(tc.head))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("httpHost(%q) = %q, %v; want an error with %q", tc.head, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("httpHost(%q) = %q, %v; want %q", tc.head, got, err, tc.want)
		}
	}
}

func TestLooksHTTP(t *testing.T) {
	for in, want := range map[string]bool{"GET / HTTP/1.1": true, "POS": true, "SSH-2.0-OpenSSH": false, "\x16\x03\x01": false, "": false} {
		if got := looksHTTP([]byte(in)); got != want {
			t.Errorf("looksHTTP(%q) = %v", in, got)
		}
	}
}

func TestPTRAddr(t *testing.T) {
	for name, want := range map[string]string{
		"10.113.0.203.in-addr.arpa": "203.0.113.10",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa": "2001:db8::1",
	} {
		a, ok := ptrAddr(name)
		if !ok || a != netip.MustParseAddr(want) {
			t.Errorf("ptrAddr(%q) = %v, %v; want %s", name, a, ok, want)
		}
	}
	for _, bad := range []string{"1.2.3.in-addr.arpa", "x.1.2.3.in-addr.arpa", "g.ip6.arpa", "example.com"} {
		if _, ok := ptrAddr(bad); ok {
			t.Errorf("ptrAddr(%q) read an address", bad)
		}
	}
}
