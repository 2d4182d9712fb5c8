package netcell

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
)

// The tests run in a network namespace of their own (TestMain re-executes
// the test binary under unshare --net), where loopback carries the test
// "internet": addresses from the documentation ranges, added to lo there,
// which exist nowhere else. Nothing here reaches any other network.
const inNetns = "AGENT_LOCK_NETCELL_TEST_NETNS"

// Public test addresses on the namespace's loopback.
var (
	hostA = netip.MustParseAddr("203.0.113.10") // allowed.test and other.test
	hostB = netip.MustParseAddr("203.0.113.11") // refused.test
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ProbeArg {
		os.Exit(RunProbe(os.Args[2:]))
	}
	if os.Args[0] == ProbeArg {
		os.Exit(RunProbe(os.Args[1:]))
	}
	if os.Geteuid() != 0 {
		fmt.Println("netcell: tests need root (cgroup programs, a network namespace); skipped")
		os.Exit(m.Run())
	}
	if os.Getenv(inNetns) == "" {
		cmd := exec.Command("unshare", append([]string{"--net", "--", os.Args[0]}, os.Args[1:]...)...)
		cmd.Env = append(os.Environ(), inNetns+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.ExitCode())
			}
			fmt.Println("netcell: unshare --net:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(aheadChild) != "" {
		// TestAheadHandedOn's process, in the test's namespace already.
		os.Exit(m.Run())
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", hostA.String() + "/32", "dev", "lo"},
		{"addr", "add", hostB.String() + "/32", "dev", "lo"},
		// private.test's: the resolver answers only addresses this
		// machine has a route to.
		{"addr", "add", "10.200.0.9/32", "dev", "lo"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			fmt.Printf("netcell: ip %v: %v: %s\n", args, err, out)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// testCgroup makes a cgroup for the test's cell.
func testCgroup(t *testing.T) (string, *os.File) {
	t.Helper()
	var rnd [4]byte
	rand.Read(rnd[:])
	facts, err := kernel.Probe()
	if err != nil || facts.Cgroup2 == "" {
		t.Skipf("no cgroup v2 hierarchy (%v)", err)
	}
	p := filepath.Join(facts.Cgroup2, "agent-lock-netcell-test-"+hex.EncodeToString(rnd[:]))
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatalf("cgroup: %v", err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		os.WriteFile(filepath.Join(p, "cgroup.kill"), []byte("1"), 0)
		for range 100 {
			if os.Remove(p) == nil || !errors.Is(os.Remove(p), syscall.EBUSY) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return p, f
}

func rules(t *testing.T, specs ...string) netpolicy.Policy {
	t.Helper()
	var p netpolicy.Policy
	for _, s := range specs {
		rs, err := netpolicy.Parse(s, "--allow-net")
		if err != nil {
			t.Fatal(err)
		}
		p.Rules = append(p.Rules, rs...)
	}
	return p
}

// fakeDNS answers like an upstream resolver for the test names.
func fakeDNS(ctx context.Context, network, name string) ([]netip.Addr, error) {
	switch strings.TrimSuffix(name, ".") {
	case "allowed.test", "other.test", "api.sub.allowed.test":
		if network == "ip4" {
			return []netip.Addr{hostA}, nil
		}
		return nil, nil
	case "refused.test":
		return []netip.Addr{hostB}, nil
	case "private.test":
		return []netip.Addr{netip.MustParseAddr("10.200.0.9")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

func openCell(t *testing.T, cfg Config) (*Cell, *os.File) {
	t.Helper()
	path, dir := testCgroup(t)
	cfg.Cgroup = path
	if cfg.Lookup == nil {
		cfg.Lookup = fakeDNS
	}
	c, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(c.Close)
	return c, dir
}

func TestProbe(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"policy", Config{Policy: rules(t, "allowed.test")}},
		{"off", Config{Policy: netpolicy.Policy{Mode: netpolicy.Off}}},
		{"audit", Config{Policy: rules(t, "allowed.test"), Audit: true}},
		{"open", Config{Policy: netpolicy.Policy{Mode: netpolicy.Open}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, dir := openCell(t, tc.cfg)
			if err := c.Probe(context.Background(), int(dir.Fd()), nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestProbeFailsUnattached breaks the cell on purpose: a probe run in a
// cgroup without the programs must fail, or the self-test proves nothing.
func TestProbeFailsUnattached(t *testing.T) {
	needRoot(t)
	c, _ := openCell(t, Config{Policy: rules(t, "allowed.test")})
	_, other := testCgroup(t)
	if err := c.Probe(context.Background(), int(other.Fd()), nil); err == nil {
		t.Fatal("the self-test passed in a cgroup without the programs")
	} else {
		t.Logf("as it should: %v", err)
	}
}

// site serves "hello from HOST" over HTTP and HTTPS on hostA and hostB,
// with a certificate for the test names; it returns the CA's PEM.
func site(t *testing.T) string {
	t.Helper()
	ca, leaf := testCert(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s\n", r.Host) })
	for _, a := range []netip.Addr{hostA, hostB} {
		for _, port := range []uint16{80, 443} {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(a, port).String())
			if err != nil {
				t.Fatal(err)
			}
			if port == 443 {
				ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{leaf}})
			}
			srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
		}
	}
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func testCert(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "netcell test"},
		DNSNames:  []string{"allowed.test", "other.test", "api.sub.allowed.test", "refused.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// inCell runs argv in the cell (as root: the programs judge by cgroup,
// not by user) and returns its output.
func inCell(t *testing.T, dir *os.File, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// collect gathers the cell's events until the cell is drained.
func collect(c *Cell) func() []Event {
	var evs []Event
	done := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(done)
		ch := c.Events()
		for {
			select {
			case e, ok := <-ch:
				if !ok {
					return
				}
				evs = append(evs, e)
			case <-stop:
				for e := range c.Drain() {
					evs = append(evs, e)
				}
				return
			}
		}
	}()
	return func() []Event { close(stop); <-done; return evs }
}

// TestCell is the resolver, the forwarder and the programs together,
// with curl in the cell: a granted name works over HTTPS and HTTP;
// another name on its address, a refused name, an address nobody
// resolved, a private address under a granted name are refused, each
// reported with what it reached for; and a refused name is never asked
// upstream.
func TestCell(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	ca := site(t)
	var asked []string
	var mu sync.Mutex
	lookup := func(ctx context.Context, network, name string) ([]netip.Addr, error) {
		mu.Lock()
		asked = append(asked, strings.TrimSuffix(name, "."))
		mu.Unlock()
		return fakeDNS(ctx, network, name)
	}
	c, dir := openCell(t, Config{Policy: rules(t, "allowed.test", "private.test"), Lookup: lookup})
	events := collect(c)
	curl := func(args ...string) (string, error) {
		return inCell(t, dir, append([]string{"curl", "-sS", "-m", "10", "--cacert", ca}, args...)...)
	}
	for _, tc := range []struct {
		args []string
		ok   bool
		want string
	}{
		{[]string{"https://allowed.test/"}, true, "hello from allowed.test"},
		{[]string{"http://allowed.test/"}, true, "hello from allowed.test"},
		{[]string{"--resolve", "other.test:443:" + hostA.String(), "https://other.test/"}, false, "alert access denied"},
		{[]string{"-H", "Host: other.test", "http://allowed.test/"}, true, "agent-lock refused this request: other.test is not granted (--allow-net other.test:80)"},
		{[]string{"http://refused.test/"}, false, "Could not resolve host"},
		{[]string{"http://" + hostB.String() + "/"}, false, "Couldn't connect"},
		{[]string{"http://private.test/"}, false, "Couldn't connect"},
	} {
		out, err := curl(tc.args...)
		if (err == nil) != tc.ok || !strings.Contains(out, tc.want) {
			t.Errorf("curl %v: %v: %q, want ok=%v and %q", tc.args, err, out, tc.ok, tc.want)
		}
	}
	c.stopServers()
	evs := events()
	for _, want := range []struct{ op, target string }{
		{"connect", "other.test:443"}, {"connect", "other.test:80"}, {"resolve", "refused.test"},
		{"connect", hostB.String() + ":80"}, {"connect", "private.test:80"},
	} {
		found := false
		for _, e := range evs {
			if e.Verdict == Refused && e.Op == want.op && e.Target() == want.target && e.Comm == "curl" {
				found = true
			}
		}
		if !found {
			t.Errorf("no refused %s %s reported; got %v", want.op, want.target, evs)
		}
	}
	allowed := 0
	for _, e := range evs {
		if e.Verdict == Allowed && e.Op == "connect" && e.Target() == "allowed.test:443" {
			allowed++
		}
	}
	if allowed == 0 {
		t.Errorf("the granted connection was not offered to the live view: %v", evs)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range asked {
		if n == "refused.test" {
			t.Error("the refused name was asked upstream")
		}
	}
}

// TestFailedWhenAServerDies: a resolver or forwarder that stops while the
// cell runs is reported on Failed (the session then ends the cell); one
// stopped on purpose is not.
func TestFailedWhenAServerDies(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name string
		kill func(c *Cell)
	}{
		{"resolver", func(c *Cell) { c.res.udp[0].Close() }},
		{"forwarder", func(c *Cell) { c.fwd.lns[0].Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := openCell(t, Config{Policy: rules(t, "allowed.test")})
			tc.kill(c)
			select {
			case err := <-c.Failed():
				t.Logf("as it should: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("a dead server was not reported")
			}
		})
	}
	c, _ := openCell(t, Config{Policy: rules(t, "allowed.test")})
	for range c.Drain() {
	}
	select {
	case err := <-c.Failed():
		t.Errorf("a drained cell reported a failure: %v", err)
	default:
	}
}

// TestOwnServerKeptOnlyIfForgettable: the cell reaches its own loopback
// server, and no port stays the cell's own once its socket is gone, where
// whoever bound it next, outside the cell, would be reachable: not after a
// socket gave its ephemeral port back (connect(AF_UNSPEC)) and bound
// another, nor when the server's socket cannot be recorded for its release
// (own_by_sock full, or no memory for an entry).
func TestOwnServerKeptOnlyIfForgettable(t *testing.T) {
	needRoot(t)
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skip("needs " + python)
	}
	c, dir := openCell(t, Config{Policy: rules(t, "allowed.test")})
	py := func(script string) string {
		t.Helper()
		out, err := inCell(t, dir, python, "-c", script)
		if err != nil {
			t.Fatalf("python in the cell: %v: %s", err, out)
		}
		return strings.TrimSpace(out)
	}
	kept := func() []uint16 {
		t.Helper()
		var ports []uint16
		var k netcellOwnKey
		var v uint64
		it := c.objs.Own.Iterate()
		for it.Next(&k, &v) {
			ports = append(ports, k.Port)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return ports
	}
	// A loopback server, and the cell's connection to it: 0, or its errno.
	const own = `import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(socket.socket().connect_ex(s.getsockname()))`
	if got := py(own); got != "0" {
		t.Fatalf("the cell's connection to its own server: errno %s, want 0", got)
	}
	if ports := kept(); len(ports) != 0 {
		t.Errorf("own keeps ports %v after their sockets closed", ports)
	}
	// Bound, given back, bound again: the first port must go then.
	out := py(`import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0)); first = s.getsockname()[1]
unspec = ctypes.create_string_buffer(16)
if libc.connect(s.fileno(), unspec, 16) != 0: raise OSError(ctypes.get_errno(), "connect AF_UNSPEC")
s.bind(("127.0.0.1", 0)); print(first, s.getsockname()[1])`)
	var first, second int
	if _, err := fmt.Sscan(out, &first, &second); err != nil || first == second {
		t.Fatalf("the rebind: %q, want two ports", out)
	}
	if ports := kept(); len(ports) != 0 {
		t.Errorf("own keeps ports %v (the first bound %d, the second %d) after the socket closed", ports, first, second)
	}
	max := c.objs.OwnBySock.MaxEntries()
	for i := uint32(0); i < max; i++ {
		cookie := uint64(1<<62) + uint64(i)
		if err := c.objs.OwnBySock.Update(&cookie, &netcellOwnKey{Port: uint16(i%60000 + 1)}, ebpf.UpdateAny); err != nil {
			t.Fatalf("fill own_by_sock (%d of %d): %v", i, max, err)
		}
	}
	if got := py(own); got != fmt.Sprint(int(syscall.EPERM)) {
		t.Errorf("with own_by_sock full, the cell's connection to its own server: errno %s, want EPERM", got)
	}
	if ports := kept(); len(ports) != 0 {
		t.Errorf("own keeps ports %v, which their release could not forget", ports)
	}
}
