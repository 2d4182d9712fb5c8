package netcell

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", hostA.String() + "/32", "dev", "lo"},
		{"addr", "add", hostB.String() + "/32", "dev", "lo"},
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
			if err := c.Probe(context.Background(), int(dir.Fd())); err != nil {
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
	if err := c.Probe(context.Background(), int(other.Fd())); err == nil {
		t.Fatal("the self-test passed in a cgroup without the programs")
	} else {
		t.Logf("as it should: %v", err)
	}
}
