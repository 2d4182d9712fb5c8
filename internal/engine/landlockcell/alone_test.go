package landlockcell

import (
	"os"
	"slices"
	"testing"

	"github.com/agent-lock/agent-lock/internal/netpolicy"
)

// TestAlonePorts: what a cell alone holds of the network, by port.
func TestAlonePorts(t *testing.T) {
	if p := AlonePorts(netpolicy.Policy{Mode: netpolicy.Open}); p != nil {
		t.Errorf("--net open: %+v, want nothing held", p)
	}
	if p := AlonePorts(netpolicy.Policy{Mode: netpolicy.Off}); p == nil || len(p.TCP) != 0 || len(p.UDP) != 0 || !p.NoBind {
		t.Errorf("--net off: %+v, want everything refused", p)
	}
	p := AlonePorts(netpolicy.Policy{Rules: []netpolicy.Rule{{Port: 5432}, {Port: 0}, {Port: 443}}})
	if p == nil || !slices.Equal(p.TCP, []uint16{80, 443, 5432}) || !slices.Equal(p.UDP, []uint16{53}) || p.NoBind {
		t.Errorf("grants: %+v, want TCP 80, 443, 5432 and UDP 53", p)
	}
	if p := AlonePorts(netpolicy.Policy{}); p == nil || len(p.TCP) != 0 {
		t.Errorf("no grants: %+v, want no TCP port", p)
	}
}

// TestKeeperAlone: a cell alone has no cgroup to tell the user's changes
// by, so the tripwire keeps none (every change undone); with a cgroup, a
// process outside it is the user's.
func TestKeeperAlone(t *testing.T) {
	if keeper("") != nil {
		t.Error("a cell alone keeps changes as the user's")
	}
	if k := keeper("/sys/fs/cgroup/agent-lock/no-such-cell"); k == nil || !k(os.Getpid()) {
		t.Error("a process outside the cell's cgroup is not the user's")
	}
}
