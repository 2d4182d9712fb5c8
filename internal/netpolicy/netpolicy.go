// Package netpolicy says where a cell may connect: a plain description
// (--allow-net, --net, the policy files' allow-net and net, a profile's
// service hosts), with no BPF in it. internal/netcell turns it into
// programs, a resolver and a forwarder; `agent-lock policy` prints it.
//
// A rule grants a name (api.example.com, or *.example.com for its
// subdomains) or an address (an IP or a CIDR, or localhost), on one port
// or on every port. A name is reached through agent-lock's resolver, which
// answers only granted names and hands their addresses to the kernel; an
// address is granted as such. Loopback, link-local (the cloud metadata
// address 169.254.169.254) and private addresses are reached only through
// a rule that names them by address and port: a granted name whose
// address is one of them is refused, so a name an attacker controls cannot
// lead into the machine or its network.
package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Mode is what the cell's network is.
type Mode string

const (
	// Grants: the rules' names and addresses, nothing else (the default).
	Grants Mode = ""
	// Off: nothing; every connection and query is refused and reported.
	Off Mode = "off"
	// Open: everything, as without agent-lock's network programs; every
	// connection is reported.
	Open Mode = "open"
)

// ParseMode reads --net's value.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "grants":
		return Grants, nil
	case "off":
		return Off, nil
	case "open":
		return Open, nil
	}
	return "", fmt.Errorf("%q: use off (no network), open (every connection allowed and reported), or grants (the default: the hosts granted)", s)
}

// Rule grants one name or address, on one port (Port) or on all (0).
type Rule struct {
	// Host is a lowercase name without a trailing dot; "*.example.com"
	// grants the names below example.com (not example.com itself). Empty
	// for an address rule.
	Host string
	// Prefix is an address rule's addresses (a /32 or /128 for an IP).
	Prefix netip.Prefix
	Port   uint16
	// From says who granted it: "--allow-net", "profile claude", a
	// policy file's path.
	From string
	// Text is the rule as written, for messages.
	Text string
}

// IsName reports whether r grants a name (rather than an address).
func (r Rule) IsName() bool { return r.Host != "" }

func (r Rule) String() string {
	if r.Text != "" {
		return r.Text
	}
	var h string
	switch {
	case r.Host != "":
		h = r.Host
	case r.Prefix.IsSingleIP():
		h = r.Prefix.Addr().String()
	default:
		h = r.Prefix.String()
	}
	if r.Port == 0 {
		return h
	}
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(int(r.Port))
}

// Policy is a cell's network.
type Policy struct {
	Mode  Mode
	Rules []Rule
}

// Parse reads one --allow-net (or allow-net entry): HOST, *.DOMAIN,
// IP, CIDR or localhost, each optionally :PORT ([IPv6]:PORT). localhost
// is 127.0.0.0/8 and ::1, so it yields two rules. A loopback,
// link-local or private address needs a port.
func Parse(s, from string) ([]Rule, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("empty: give a host name, *.domain, an address or a CIDR, optionally with :PORT")
	}
	if s == "*" || strings.HasPrefix(s, "*:") {
		return nil, fmt.Errorf("%q: every host is --net open", orig)
	}
	host, port, err := splitPort(s)
	if err != nil {
		return nil, fmt.Errorf("%q: %v", orig, err)
	}
	mk := func(r Rule) Rule { r.Port, r.From, r.Text = port, from, s; return r }
	if strings.EqualFold(host, "localhost") {
		if port == 0 {
			return nil, fmt.Errorf("%q: give a port (--allow-net localhost:5432): loopback services are granted one port at a time", orig)
		}
		return []Rule{
			mk(Rule{Prefix: netip.MustParsePrefix("127.0.0.0/8")}),
			mk(Rule{Prefix: netip.MustParsePrefix("::1/128")}),
		}, nil
	}
	if p, err := parsePrefix(host); err == nil {
		if why, ok := restrictedPrefix(p); ok && port == 0 && !p.IsSingleIP() {
			return nil, fmt.Errorf("%q: it holds %s addresses, which are granted with a port (--allow-net %s:PORT)", orig, why, bracket(host))
		}
		if why, ok := Restricted(p.Addr()); ok && port == 0 {
			return nil, fmt.Errorf("%q: %s addresses are granted with a port (--allow-net %s:PORT)", orig, why, bracket(host))
		}
		return []Rule{mk(Rule{Prefix: p})}, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("%q: %v", orig, err)
	}
	return []Rule{mk(Rule{Host: name})}, nil
}

func bracket(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

// splitPort splits HOST[:PORT] and [IPv6]:PORT. A bare IPv6 address (or
// CIDR) has no port.
func splitPort(s string) (string, uint16, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, errors.New("missing ]")
		}
		host, rest := s[1:end], s[end+1:]
		if rest == "" {
			return host, 0, nil
		}
		if !strings.HasPrefix(rest, ":") {
			return "", 0, errors.New("after ] comes :PORT")
		}
		p, err := parsePort(rest[1:])
		return host, p, err
	}
	if strings.Count(s, ":") > 1 {
		return s, 0, nil // IPv6 without brackets: no port
	}
	host, p, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0, nil
	}
	port, err := parsePort(p)
	return host, port, err
}

func parsePort(p string) (uint16, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q: give a number from 1 to 65535", p)
	}
	return uint16(n), nil
}

func parsePrefix(h string) (netip.Prefix, error) {
	if strings.Contains(h, "/") {
		p, err := netip.ParsePrefix(h)
		if err != nil {
			return p, err
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// checkName accepts DNS names: labels of letters, digits, - and _, and a
// leading "*." for the subdomains of a name.
func checkName(n string) error {
	rest := n
	if strings.HasPrefix(n, "*.") {
		rest = n[2:]
		if !strings.Contains(rest, ".") {
			return errors.New("*. is for the subdomains of a domain with a dot (*.example.com), not of a top-level domain")
		}
	}
	if rest == "" || len(rest) > 253 {
		return errors.New("not a host name")
	}
	for _, l := range strings.Split(rest, ".") {
		if l == "" || len(l) > 63 {
			return errors.New("not a host name (an empty or too long label)")
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				if c == '*' {
					return errors.New("* only as the first label (*.example.com)")
				}
				return fmt.Errorf("%q is not allowed in a host name", c)
			}
		}
	}
	return nil
}

// Restricted says whether a is an address only an address rule with a
// port may grant, and which kind: loopback, link-local (the metadata
// address), private, shared (carrier-grade NAT), multicast, unspecified or
// reserved.
func Restricted(a netip.Addr) (string, bool) {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return "invalid", true
	case a.IsLoopback():
		return "loopback", true
	case a.IsMulticast():
		return "multicast", true
	case a.IsLinkLocalUnicast():
		return "link-local", true
	case a.IsPrivate():
		return "private", true
	case a.IsUnspecified():
		return "unspecified", true
	}
	for _, r := range reserved {
		if r.p.Contains(a) {
			return r.why, true
		}
	}
	return "", false
}

var reserved = []struct {
	p   netip.Prefix
	why string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

// restrictedPrefix says whether a CIDR overlaps restricted addresses
// (0.0.0.0/0 holds loopback).
func restrictedPrefix(p netip.Prefix) (string, bool) {
	for _, r := range []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fe80::/10"),
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("fc00::/7"),
	} {
		if p.Overlaps(r) {
			why, _ := Restricted(r.Addr())
			return why, true
		}
	}
	return "", false
}

// Matches reports whether the name rule r grants name (lowercase, no
// trailing dot) on port.
func (r Rule) Matches(name string, port uint16) bool {
	if r.Host == "" || (r.Port != 0 && port != 0 && r.Port != port) {
		return false
	}
	if suffix, ok := strings.CutPrefix(r.Host, "*."); ok {
		return strings.HasSuffix(name, "."+suffix)
	}
	return name == r.Host
}

// Name returns the rules that grant name on port (0: on any port).
func (p Policy) Name(name string, port uint16) []Rule {
	if p.Mode != Grants {
		return nil
	}
	name = Canonical(name)
	var out []Rule
	for _, r := range p.Rules {
		if r.Matches(name, port) {
			out = append(out, r)
		}
	}
	return out
}

// Addr returns the first address rule that grants a on port.
func (p Policy) Addr(a netip.Addr, port uint16) (Rule, bool) {
	if p.Mode != Grants {
		return Rule{}, false
	}
	a = a.Unmap()
	for _, r := range p.Rules {
		if r.Host == "" && r.Prefix.Contains(a) && (r.Port == 0 || r.Port == port) {
			return r, true
		}
	}
	return Rule{}, false
}

// Canonical is name as rules compare it: lowercase, no trailing dot.
func Canonical(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// Hint is the flag that would grant host (a name or an address) on port:
// what a refusal tells the user.
func Hint(host string, port uint16) string {
	if a, err := netip.ParseAddr(host); err == nil {
		host = bracket(a.Unmap().String())
	}
	if port == 0 {
		return "--allow-net " + host
	}
	return "--allow-net " + host + ":" + strconv.Itoa(int(port))
}

// With returns p with rules added (deduplicated by text and origin).
func (p Policy) With(rules ...Rule) Policy {
	out := Policy{Mode: p.Mode, Rules: slices.Clone(p.Rules)}
	for _, r := range rules {
		if !slices.ContainsFunc(out.Rules, func(o Rule) bool { return o.Text == r.Text && o.Prefix == r.Prefix && o.Host == r.Host }) {
			out.Rules = append(out.Rules, r)
		}
	}
	return out
}
