package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // String() of each rule
		err  string
	}{
		{in: "api.example.com", want: []string{"api.example.com"}},
		{in: "API.Example.com.:443", want: []string{"API.Example.com.:443"}},
		{in: "*.example.com", want: []string{"*.example.com"}},
		{in: "*.example.com:8443", want: []string{"*.example.com:8443"}},
		{in: "203.0.113.5", want: []string{"203.0.113.5"}},
		{in: "203.0.113.0/24:22", want: []string{"203.0.113.0/24:22"}},
		{in: "2001:db8::1", want: []string{"2001:db8::1"}},
		{in: "[2001:db8::1]:443", want: []string{"[2001:db8::1]:443"}},
		{in: "localhost:5432", want: []string{"localhost:5432", "localhost:5432"}},
		{in: "10.0.0.5:5432", want: []string{"10.0.0.5:5432"}},
		{in: "169.254.169.254:80", want: []string{"169.254.169.254:80"}},
		{in: "localhost", err: "give a port"},
		{in: "10.0.0.5", err: "private addresses are granted with a port"},
		{in: "169.254.169.254", err: "link-local addresses are granted with a port"},
		{in: "127.0.0.1", err: "loopback addresses are granted with a port"},
		{in: "0.0.0.0/0", err: "holds loopback addresses"},
		{in: "[::1]", err: "loopback"},
		{in: "*", err: "--net open"},
		{in: "*.com", err: "top-level domain"},
		{in: "a.*.com", err: "* only as the first label"},
		{in: "exa mple.com", err: "not allowed in a host name"},
		{in: "example.com:0", err: "from 1 to 65535"},
		{in: "example.com:http", err: "from 1 to 65535"},
		{in: "", err: "empty"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			rs, err := Parse(tc.in, "--allow-net")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse(%q) = %v, %v; want an error with %q", tc.in, rs, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rs {
				got = append(got, r.String())
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("Parse(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestNameAndAddr(t *testing.T) {
	var p Policy
	for _, s := range []string{"api.example.com:443", "*.cdn.example.net", "localhost:5432", "203.0.113.0/24:22"} {
		rs, err := Parse(s, "--allow-net")
		if err != nil {
			t.Fatal(err)
		}
		p.Rules = append(p.Rules, rs...)
	}
	for _, tc := range []struct {
		name string
		port uint16
		want bool
	}{
		{"api.example.com", 443, true},
		{"API.EXAMPLE.COM.", 443, true},
		{"api.example.com", 80, false},
		{"api.example.com", 0, true}, // a DNS question names no port
		{"example.com", 443, false},
		{"x.api.example.com", 443, false},
		{"a.cdn.example.net", 8080, true},
		{"a.b.cdn.example.net", 443, true},
		{"cdn.example.net", 443, false}, // *. is the subdomains only
		{"evilcdn.example.net", 443, false},
	} {
		if got := len(p.Name(tc.name, tc.port)) > 0; got != tc.want {
			t.Errorf("Name(%q, %d) = %v, want %v", tc.name, tc.port, got, tc.want)
		}
	}
	for _, tc := range []struct {
		addr string
		port uint16
		want bool
	}{
		{"127.0.0.1", 5432, true},
		{"127.0.0.2", 5432, true},
		{"::1", 5432, true},
		{"::ffff:127.0.0.1", 5432, true},
		{"127.0.0.1", 5433, false},
		{"203.0.113.9", 22, true},
		{"203.0.113.9", 80, false},
		{"198.51.100.1", 22, false},
	} {
		if _, got := p.Addr(netip.MustParseAddr(tc.addr), tc.port); got != tc.want {
			t.Errorf("Addr(%s, %d) = %v, want %v", tc.addr, tc.port, got, tc.want)
		}
	}
	off := Policy{Mode: Off, Rules: p.Rules}
	if len(off.Name("api.example.com", 443)) > 0 {
		t.Error("--net off granted a name")
	}
	if _, ok := off.Addr(netip.MustParseAddr("127.0.0.1"), 5432); ok {
		t.Error("--net off granted an address")
	}
}

func TestRestricted(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"169.254.169.254": "link-local", "fe80::1": "link-local",
		"10.1.2.3": "private", "172.16.0.1": "private", "192.168.1.1": "private", "fd00::2": "private",
		"100.64.0.1": "shared (carrier-grade NAT)", "0.0.0.0": "unspecified", "224.0.0.251": "multicast",
		"203.0.113.10": "", "2001:db8::1": "", "8.8.8.8": "",
	} {
		got, ok := Restricted(netip.MustParseAddr(addr))
		if got != want || ok != (want != "") {
			t.Errorf("Restricted(%s) = %q, %v; want %q", addr, got, ok, want)
		}
	}
}

func TestHint(t *testing.T) {
	for _, tc := range []struct {
		host string
		port uint16
		want string
	}{
		{"evil.test", 443, "--allow-net evil.test:443"},
		{"evil.test", 0, "--allow-net evil.test"},
		{"::1", 5432, "--allow-net [::1]:5432"},
		{"::ffff:10.0.0.1", 80, "--allow-net 10.0.0.1:80"},
	} {
		if got := Hint(tc.host, tc.port); got != tc.want {
			t.Errorf("Hint(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.want)
		}
	}
}
