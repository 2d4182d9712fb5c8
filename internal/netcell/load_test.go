package netcell

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf/link"

	"github.com/agent-lock/agent-lock/internal/bpfload"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
)

const aheadChild = "AGENT_LOCK_NETCELL_AHEAD"

// TestAheadHandedOn: programs a Keeper verified ahead are handed to
// another process as descriptors (as the daemon hands them to a session's
// agent-lock), which opens a cell with them: the cell's load is the one
// made ahead, its settings written then (the self-test passes in policy
// mode, which refuses, and in open mode, which lets through and reports),
// and nothing the process starts holds the descriptors.
func TestAheadHandedOn(t *testing.T) {
	if mode := os.Getenv(aheadChild); mode != "" {
		aheadCell(t, mode)
		return
	}
	needRoot(t)
	k := bpfload.NewKeeper(Ahead, (*Loaded).Close, nil)
	defer k.Close()
	for _, mode := range []string{"policy", "open"} {
		t.Run(mode, func(t *testing.T) {
			k.Wait()
			p, ok := k.Take(nil)
			if !ok {
				t.Fatal("no programs loaded ahead")
			}
			h, files, err := p.Hand()
			p.Close() // the descriptors handed keep the objects
			if err != nil {
				t.Fatal(err)
			}
			desc, err := json.Marshal(h)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestAheadHandedOn$", "-test.v")
			cmd.Env = append(os.Environ(), aheadChild+"="+mode, "AGENT_LOCK_NETCELL_DESC="+string(desc))
			cmd.ExtraFiles = files
			out, err := cmd.CombinedOutput()
			for _, f := range files {
				f.Close()
			}
			if err != nil || !strings.Contains(string(out), "AHEAD-TAKEN") {
				t.Fatalf("the process handed the programs: %v\n%s", err, out)
			}
			t.Logf("%s", out)
		})
	}
}

func aheadCell(t *testing.T, mode string) {
	if err := Adopt([]byte(os.Getenv("AGENT_LOCK_NETCELL_DESC")), 3); err != nil {
		t.Fatal(err)
	}
	held, err := exec.Command("/bin/sh", "-c", `for f in /proc/$$/fd/*; do readlink "$f"; done; true`).Output()
	if err != nil || strings.Contains(string(held), "bpf") {
		t.Fatalf("a process started after the programs were taken holds: %v\n%s", err, held)
	}
	cfg := Config{Policy: rules(t, "allowed.test")}
	if mode == "open" {
		cfg.Policy = netpolicy.Policy{Mode: netpolicy.Open}
	}
	c, dir := openCell(t, cfg)
	if d, ahead := c.Load(); !ahead {
		t.Fatalf("the cell loaded its own programs (%v)", d)
	}
	if err := c.Probe(context.Background(), int(dir.Fd()), nil); err != nil {
		t.Fatal(err)
	}
	t.Log("AHEAD-TAKEN")
}

// TestWarm: the programs Warm keeps are attached to its cgroup, one for
// each of the cell's hooks, and refuse a process put there (no cell's
// settings written), while processes outside it keep their network and a
// cell opened meanwhile passes its self-test; Close detaches them.
func TestWarm(t *testing.T) {
	needRoot(t)
	path, dir := testCgroup(t)
	w, err := Warm(path)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := parsed()
	if err != nil {
		t.Fatal(err)
	}
	attached := func() int {
		n := 0
		for _, name := range ProgramNames {
			q, err := link.QueryPrograms(link.QueryOptions{Target: int(dir.Fd()), Attach: spec.Programs[name].AttachType})
			if err != nil {
				t.Fatal(err)
			}
			n += len(q.Programs)
		}
		return n
	}
	if n := attached(); n != len(ProgramNames) {
		t.Errorf("%d programs attached to the warm cgroup, want %d", n, len(ProgramNames))
	}
	// Outside: this process's own loopback connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("a process outside the warm cgroup lost its network: %v", err)
	}
	conn.Close()
	// Inside, with no cell's settings written, the programs refuse: a
	// process put there may not connect, to loopback either.
	port := ln.Addr().(*net.TCPAddr).Port
	inside := exec.Command("/usr/bin/python3", "-c", fmt.Sprintf(`import socket
try:
    socket.create_connection(("127.0.0.1", %d), timeout=5)
    print("connected")
except PermissionError:
    print("refused")`, port))
	inside.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	if out, err := inside.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "refused" {
		t.Errorf("a process in the warm cgroup, whose settings no cell wrote: %v: %s", err, out)
	}
	c, cdir := openCell(t, Config{Policy: rules(t, "allowed.test")})
	if err := c.Probe(context.Background(), int(cdir.Fd()), nil); err != nil {
		t.Fatalf("a cell beside the warm programs: %v", err)
	}
	w.Close()
	if n := attached(); n != 0 {
		t.Errorf("%d programs still attached after Close", n)
	}
}
