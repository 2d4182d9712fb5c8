package netcell

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// ask sends one query to the cell's resolver (from outside the cell: the
// answer is the same, the report names no process) and returns the
// answer's rcode, addresses or PTR names, and Extended DNS Error text.
func ask(t *testing.T, c *Cell, name string, typ dnsmessage.Type) (dnsmessage.RCode, []string, string) {
	t.Helper()
	conn, err := net.Dial("udp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), c.res.port4).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: typ, Class: dnsmessage.ClassINET})
	b.StartAdditionals()
	var rh dnsmessage.ResourceHeader
	rh.SetEDNS0(1232, dnsmessage.RCodeSuccess, false)
	b.OPTResource(rh, dnsmessage.OPTResource{})
	q, _ := b.Finish()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(q); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("%s: no answer: %v", name, err)
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[:n])
	if err != nil || h.ID != 7 {
		t.Fatalf("%s: a bad answer: %v", name, err)
	}
	p.SkipAllQuestions()
	var got []string
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			break
		}
		switch rh.Type {
		case dnsmessage.TypeA:
			r, _ := p.AResource()
			got = append(got, netip.AddrFrom4(r.A).String())
		case dnsmessage.TypePTR:
			r, _ := p.PTRResource()
			got = append(got, r.PTR.String())
		default:
			p.SkipAnswer()
		}
	}
	p.SkipAllAuthorities()
	ede := ""
	for {
		rh, err := p.AdditionalHeader()
		if err != nil {
			break
		}
		if rh.Type != dnsmessage.TypeOPT {
			p.SkipAdditional()
			continue
		}
		opt, _ := p.OPTResource()
		for _, o := range opt.Options {
			if o.Code == 15 && len(o.Data) >= 2 {
				ede = string(o.Data[2:])
			}
		}
	}
	return h.RCode, got, ede
}

// TestResolver: granted names are answered from upstream, refused ones
// never asked there (NXDOMAIN with an Extended DNS Error that says why),
// a granted name with a search domain added is a search (NXDOMAIN,
// unreported), localhost is answered here, reverse names from what was
// handed out, other record types of a granted name come back empty.
func TestResolver(t *testing.T) {
	needRoot(t)
	var mu sync.Mutex
	var asked []string
	lookup := func(ctx context.Context, network, name string) ([]netip.Addr, error) {
		mu.Lock()
		asked = append(asked, strings.TrimSuffix(name, "."))
		mu.Unlock()
		return fakeDNS(ctx, network, name)
	}
	c, _ := openCell(t, Config{Policy: rules(t, "allowed.test", "*.sub.allowed.test"), Lookup: lookup, Search: []string{"corp.example"}})
	events := collect(c)

	if rc, got, _ := ask(t, c, "allowed.test", dnsmessage.TypeA); rc != dnsmessage.RCodeSuccess || strings.Join(got, ",") != hostA.String() {
		t.Errorf("allowed.test: %v %v", rc, got)
	}
	if rc, got, _ := ask(t, c, "API.Sub.Allowed.Test", dnsmessage.TypeA); rc != dnsmessage.RCodeSuccess || strings.Join(got, ",") != hostA.String() {
		t.Errorf("a granted subdomain, in capitals: %v %v", rc, got)
	}
	rc, got, ede := ask(t, c, "c2VjcmV0.refused.test", dnsmessage.TypeA)
	if rc != dnsmessage.RCodeNameError || len(got) > 0 || !strings.Contains(ede, "agent-lock refused c2vjcmv0.refused.test: not granted (--allow-net c2vjcmv0.refused.test)") {
		t.Errorf("a refused name: %v %v %q", rc, got, ede)
	}
	if rc, _, ede := ask(t, c, "allowed.test.corp.example", dnsmessage.TypeA); rc != dnsmessage.RCodeNameError || ede != "" {
		t.Errorf("a granted name with a search domain: %v %q", rc, ede)
	}
	if rc, got, _ := ask(t, c, "localhost", dnsmessage.TypeA); rc != dnsmessage.RCodeSuccess || strings.Join(got, ",") != "127.0.0.1" {
		t.Errorf("localhost: %v %v", rc, got)
	}
	if rc, got, _ := ask(t, c, "10.113.0.203.in-addr.arpa", dnsmessage.TypePTR); rc != dnsmessage.RCodeSuccess || len(got) == 0 || got[0] != "api.sub.allowed.test." {
		t.Errorf("the reverse of a handed-out address: %v %v", rc, got)
	}
	if rc, _, _ := ask(t, c, "11.113.0.203.in-addr.arpa", dnsmessage.TypePTR); rc != dnsmessage.RCodeNameError {
		t.Errorf("the reverse of an address nobody was handed: %v", rc)
	}
	if rc, got, _ := ask(t, c, "allowed.test", dnsmessage.TypeTXT); rc != dnsmessage.RCodeSuccess || len(got) > 0 {
		t.Errorf("TXT of a granted name: %v %v", rc, got)
	}
	c.stopServers()
	refused := 0
	for _, e := range events() {
		if e.Op == "resolve" && e.Verdict == Refused {
			refused++
			if e.Host != "c2vjcmv0.refused.test" {
				t.Errorf("reported %q", e.Host)
			}
		}
	}
	if refused != 1 {
		t.Errorf("%d refused queries reported, want 1 (the search is no reach)", refused)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range asked {
		if strings.Contains(n, "refused.test") || strings.Contains(n, "corp.example") || n == "localhost" {
			t.Errorf("%s was asked upstream", n)
		}
	}
}
