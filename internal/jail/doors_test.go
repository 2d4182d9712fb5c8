package jail_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// Doors of the cell other than its own reach: what comes in (connections,
// descriptors), what is left behind (the scratch places' marks, second
// names of denied files). The processes doors are in TestDecisions.

// TestDoors runs them in one cell, with a denied folder outside that has a
// second name in DIR, and a scratch root on a disk file system: each
// cell's load costs seconds of the verifier's time under emulation.
func TestDoors(t *testing.T) {
	var sec, scr string
	c := newCellWith(t, func(cfg *jail.Config, dir, out string) {
		sec = filepath.Join(out, "sec")
		os.Mkdir(sec, 0o700)
		os.WriteFile(filepath.Join(sec, "key"), []byte("SECRET-MARKER\n"), 0o600)
		if err := os.Link(filepath.Join(sec, "key"), filepath.Join(dir, "notes")); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{sec, filepath.Join(sec, "key"), filepath.Join(dir, "notes")} {
			os.Chown(p, testUID, testUID)
		}
		scr = mountExt4(t)
		cfg.SignalOwners = testSignalOwners
		cfg.Rules = append(policy.Policy{Dir: dir}.Rules(),
			spec.Rule{Path: sec, Access: spec.Deny, Name: "test denial"},
			spec.Rule{Path: scr, Access: spec.Scratch, Name: "test scratch"})
	})
	c.env = append(c.env, "SCR="+scr)
	t.Run("inbound unix", func(t *testing.T) { inboundUnix(t, c) })
	t.Run("file receive", func(t *testing.T) { fileReceive(t, c) })
	t.Run("denied hard link", func(t *testing.T) { deniedHardLink(t, c) })
	t.Run("scratch marks", func(t *testing.T) { scratchMarks(t, c, scr) })
	t.Run("signal owner", func(t *testing.T) { signalOwner(t, c) })
	t.Run("signal owners overflowed", func(t *testing.T) { signalOwnersOverflowed(t, c) })
}

// testSignalOwners is TestDoors' cell's room for notes of signal owners.
const testSignalOwners = 16

// signalOwnersOverflowed: a child fills the kernel's notes of signal
// owners with owners of its own (and is killed for the one too many, or
// not: the kill may be refused); a second makes an outside process the
// owner of a pipe it shares with its parent, which the kernel cannot note
// (the owner is set all the same); the parent then picks the signal,
// SIGTERM, and makes the pipe ready. With the notes full, the signal is
// refused. Unjailed, it kills the victim.
func signalOwnersOverflowed(t *testing.T, c *cell) {
	script := fmt.Sprintf(`import fcntl, os, signal, sys
r, w = os.pipe()
def child(f):
    pid = os.fork()
    if pid == 0:
        f()
        os._exit(0)
    os.waitpid(pid, 0)
def fill():
    keep = [os.pipe() for _ in range(%d)]
    for a, b in keep:
        fcntl.fcntl(a, fcntl.F_SETOWN, os.getpid())
child(fill)
child(lambda: fcntl.fcntl(r, fcntl.F_SETOWN, int(sys.argv[1])))
fcntl.fcntl(r, 10, signal.SIGTERM)  # F_SETSIG
fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
os.write(w, b"x")
print("written", flush=True)
`, 4*testSignalOwners)
	for _, jailed := range []bool{false, true} {
		victim := startVictim(t)
		cmd := c.command(`exec python3 -c "$SCRIPT" "$VICTIM"`)
		cmd.Env = append(cmd.Env, "SCRIPT="+script, fmt.Sprintf("VICTIM=%d", victim.pid()))
		if !jailed {
			cmd.SysProcAttr.UseCgroupFD = false
		}
		out, _ := cmd.CombinedOutput()
		died := victim.diedWithin(2 * time.Second)
		switch {
		case !strings.Contains(string(out), "written"):
			t.Fatalf("jailed=%v: the parent did not make the pipe ready: %s", jailed, out)
		case !jailed && !died:
			t.Fatalf("unjailed, the signal owner's SIGTERM did not reach the victim (the test is not real): %s", out)
		case jailed && died:
			t.Errorf("with the notes of signal owners full, the cell's owner killed a process outside it: %s", out)
		}
		if jailed && findSignal(c.events(), victim.pid()) == nil {
			t.Errorf("the refused SIGIO was not reported")
		}
	}
}

// victim is a process of the test user outside the cell, for a signal to
// kill.
type victim struct {
	cmd  *exec.Cmd
	gone chan error
}

func startVictim(t *testing.T) *victim {
	t.Helper()
	v := &victim{cmd: exec.Command("sleep", "60"), gone: make(chan error, 1)}
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testUID, Gid: testUID}}
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { v.gone <- v.cmd.Wait() }()
	return v
}

func (v *victim) pid() int { return v.cmd.Process.Pid }

// diedWithin says whether the victim died within d; if not, it is killed.
func (v *victim) diedWithin(d time.Duration) bool {
	select {
	case <-v.gone:
		return true
	case <-time.After(d):
		v.cmd.Process.Kill()
		<-v.gone
		return false
	}
}

// findSignal is the first refused signal to pid.
func findSignal(evs []jail.Event, pid int) *jail.Event {
	for i := range evs {
		if evs[i].Denied && evs[i].Op == "signal" && evs[i].TargetPID == uint32(pid) {
			return &evs[i]
		}
	}
	return nil
}

// signalOwner: the cell's process makes an outside process its FIFO's
// signal owner, with F_SETSIG SIGTERM; the signal is sent when a process
// outside writes the FIFO, from that writer's context. The kernel refuses
// it and reports it as the setter's. Unjailed, the same kills the victim
// (so the test is real).
func signalOwner(t *testing.T, c *cell) {
	fifo := filepath.Join(c.dir, "owner.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(fifo, testUID, testUID)
	for _, jailed := range []bool{false, true} {
		victim := startVictim(t)
		cmd := c.command(fmt.Sprintf(`exec python3 -c '
import fcntl, os, signal, sys
r = os.open(%q, os.O_RDONLY | os.O_NONBLOCK)
fcntl.fcntl(r, fcntl.F_SETOWN, %d)
fcntl.fcntl(r, 10, signal.SIGTERM)  # F_SETSIG
fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
print("ready", flush=True)
sys.stdin.read()
'`, fifo, victim.pid()))
		if !jailed {
			cmd.SysProcAttr.UseCgroupFD = false
		}
		hold, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		done := startReady(t, cmd)
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("x"))
		w.Close()
		died := victim.diedWithin(2 * time.Second)
		hold.Close()
		out := done()
		switch {
		case !jailed && !died:
			t.Fatalf("unjailed, the signal owner's SIGTERM did not reach the victim (the test is not real): %s", out)
		case jailed && died:
			t.Errorf("the cell's signal owner killed a process outside it: %s", out)
		}
		if !jailed {
			continue
		}
		ev := findSignal(c.events(), victim.pid())
		switch {
		case ev == nil:
			t.Errorf("the refused SIGIO was not reported")
		case ev.PID != uint32(cmd.Process.Pid):
			t.Errorf("the refused SIGIO was reported for pid %d, not its setter %d (%+v)", ev.PID, cmd.Process.Pid, *ev)
		case ev.Detail != uint32(syscall.SIGTERM):
			t.Errorf("the refused signal is %d, want SIGTERM: %+v", ev.Detail, *ev)
		}
	}
}

// command is a shell snippet as the test user inside the cell, not started.
func (c *cell) command(script string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = c.dir
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + c.dir, "OUT=" + c.out, "DIR=" + c.dir}, c.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: testUID, Gid: testUID},
		UseCgroupFD: true, CgroupFD: c.cg.fd,
	}
	return cmd
}

// startReady starts cmd and waits for it to print "ready"; the rest of its
// output is returned by the function it gives back, once cmd ended.
func startReady(t *testing.T, cmd *exec.Cmd) func() string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	ready := make(chan string, 1)
	go func() {
		l, _ := r.ReadString('\n')
		ready <- l
	}()
	select {
	case l := <-ready:
		if strings.TrimSpace(l) != "ready" {
			cmd.Wait()
			t.Fatalf("jailed listener: %q %s", l, errb.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("jailed listener not ready: %s", errb.String())
	}
	return func() string {
		rest, _ := io.ReadAll(r)
		cmd.Wait()
		return string(rest) + errb.String()
	}
}

// findEvent is the first denied event of op whose path holds path.
func findEvent(evs []jail.Event, op, path string) *jail.Event {
	for i := range evs {
		if evs[i].Denied && evs[i].Op == op && strings.Contains(evs[i].Path, path) {
			return &evs[i]
		}
	}
	return nil
}

// inboundUnix: a process outside may not connect or send to a socket of
// the cell (pathname or abstract), and is reported as the caller; the
// cell's own processes talk to it as before.
func inboundUnix(t *testing.T, c *cell) {
	abstract := fmt.Sprintf("agent-lock-test-%d", os.Getpid())
	c.env = append(c.env, "ABSTRACT="+abstract)
	done := startReady(t, c.command(`exec python3 -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX); s.bind("in.sock"); s.listen(4)
a = socket.socket(socket.AF_UNIX); a.bind("\0" + os.environ["ABSTRACT"]); a.listen(4)
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); d.bind("dg.sock")
print("ready", flush=True)
c = socket.socket(socket.AF_UNIX); c.connect("in.sock"); c.sendall(b"own")
print("inside:", s.accept()[0].recv(16).decode(), flush=True)
socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"own-dgram", "dg.sock")
print("inside:", d.recv(16).decode(), flush=True)
s.settimeout(1); a.settimeout(1); d.settimeout(1)
for x in (s, a):
    try: x.accept(); print("LEAK: an outside connection came in")
    except socket.timeout: pass
try: print("LEAK:", d.recv(64))
except socket.timeout: pass
'`))

	sock := filepath.Join(c.dir, "in.sock")
	if conn, err := net.Dial("unix", sock); err == nil {
		conn.Close()
		t.Error("an outside process connected to the cell's pathname socket")
	}
	if conn, err := net.Dial("unix", "@"+abstract); err == nil {
		conn.Close()
		t.Error("an outside process connected to the cell's abstract socket")
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, []byte("LEAK"), 0, &unix.SockaddrUnix{Name: filepath.Join(c.dir, "dg.sock")}); err == nil {
		t.Error("an outside process sent a datagram to the cell's socket")
	}
	out := done()
	if strings.Contains(out, "LEAK") || !strings.Contains(out, "inside: own\n") || !strings.Contains(out, "inside: own-dgram") {
		t.Errorf("jailed side:\n%s", out)
	}
	evs := c.events()
	for _, want := range []struct{ op, path string }{{"connect-in", sock}, {"connect-in", ""}, {"send-in", filepath.Join(c.dir, "dg.sock")}} {
		ev := findEvent(evs, want.op, want.path)
		if ev == nil {
			t.Errorf("no %s report for %q among %+v", want.op, want.path, evs)
			continue
		}
		if ev.PID != uint32(os.Getpid()) {
			t.Errorf("%s reported for pid %d, not the outside caller %d", want.op, ev.PID, os.Getpid())
		}
	}
	for _, ev := range evs {
		if ev.Op == "connect" || ev.Op == "send" {
			t.Errorf("the cell's own traffic was reported: %+v", ev)
		}
	}
}

// fileReceive: a descriptor received over a unix socket is judged as an
// open of its file with its mode: an outside file's is dropped and
// reported, a pipe's and one of DIR's files arrive.
func fileReceive(t *testing.T, c *cell) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "their end")
	defer unix.Close(pair[0])
	cmd := c.command(`exec python3 -c '
import array, os, socket
s = socket.socket(fileno=3)
print("ready", flush=True)
for _ in range(3):
    msg, anc, flags, _ = s.recvmsg(64, socket.CMSG_SPACE(4 * 4))
    fds = array.array("i")
    for level, kind, data in anc:
        fds.frombytes(data[:len(data) - len(data) % 4])
    got = [os.read(f, 64).decode().strip() for f in fds]
    print(msg.decode(), "truncated" if flags & socket.MSG_CTRUNC else "whole", got, flush=True)
'`)
	cmd.ExtraFiles = []*os.File{theirs}
	done := startReady(t, cmd)
	theirs.Close()

	secret := filepath.Join(c.out, "secret")
	send := func(what string, f *os.File) {
		t.Helper()
		if err := unix.Sendmsg(pair[0], []byte(what), unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
			t.Fatalf("send %s: %v", what, err)
		}
	}
	outside, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	send("outside", outside)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	pw.WriteString("through-a-pipe\n")
	pw.Close()
	send("pipe", pr)
	inside, err := os.Open(filepath.Join(c.dir, "inside.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	send("inside", inside)

	out := done()
	for _, want := range []string{"outside truncated []", "pipe whole ['through-a-pipe']", "inside whole ['inside']"} {
		if !strings.Contains(out, want) {
			t.Errorf("jailed side has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "SECRET-MARKER") {
		t.Fatalf("the outside file was read through the received descriptor:\n%s", out)
	}
	evs := c.events()
	if findEvent(evs, "receive", "project2/secret") == nil {
		t.Errorf("no receive report for the outside file among %+v", evs)
	}
	if len(evs) != 1 {
		t.Errorf("want one report, got %+v", evs)
	}
}

// deniedHardLink: a file below a denied folder is refused by every name
// it had when the cell started, a hard link in DIR included; files of the
// folder with one name, and DIR's own, are as before.
func deniedHardLink(t *testing.T, c *cell) {
	out, err := c.run(`cat notes`)
	if err == nil || strings.Contains(out, "SECRET-MARKER") {
		t.Fatalf("the denied file read through its second name: %v\n%s", err, out)
	}
	evs := c.events()
	ev := findEvent(evs, "read", filepath.Join(c.dir, "notes"))
	if ev == nil || ev.Rule != "test denial" {
		t.Fatalf("want a read of %s refused by the test denial, got %+v", filepath.Join(c.dir, "notes"), evs)
	}
	// A link made now, by the cell, to one of DIR's files reads as before.
	if out, err := c.run(`ln inside.txt again && cat again`); err != nil {
		t.Fatalf("DIR's own hard link: %v\n%s", err, out)
	}
	if evs := c.events(); len(evs) != 0 {
		t.Fatalf("DIR's own hard link was reported: %+v", evs)
	}
}

// mountExt4 mounts a fresh ext4 file system (a loop device over a file) at
// a new directory, world-writable and sticky like /var/tmp, and returns it.
func mountExt4(t *testing.T) string {
	t.Helper()
	return mountLoop(t, "ext4", []string{"mkfs.ext4", "-q", "-F"}, 32<<20, 0o1777)
}

// mountLoop makes a file system of type fs (mkfs, given the image's path
// last) on a loop device over a file of size bytes, mounts it at a new
// directory of the given mode that the test user can reach, and returns
// it. Outside the test VMs, a machine that cannot skips the test.
func mountLoop(t *testing.T, fs string, mkfs []string, size int64, mode os.FileMode) string {
	t.Helper()
	base := t.TempDir()
	img, mnt := filepath.Join(base, "fs.img"), filepath.Join(base, fs)
	os.Mkdir(mnt, 0o755)
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Truncate(img, size)
	for _, argv := range [][]string{append(mkfs, img), {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			if os.Getenv("AGENT_LOCK_VM") == "1" {
				t.Fatalf("%v: %v: %s", argv, err, out)
			}
			t.Skipf("no %s on a loop device here: %v: %s", fs, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	os.Chmod(mnt, mode)
	return mnt
}

// scratchMarks: in a shared scratch place on a disk file system, the
// cell may use what it made (files, folders, FIFOs, symlinks, sockets) and
// nothing else, however it fails creates: a create refused after the LSM
// allowed it (mknod of a device) leaves its name pending, and freeing that
// name (removing its folder) hands its memory to the next lookup, which
// for files out of the dentry cache instantiates a fresh dentry there. That
// lookup must not take the mark.
func scratchMarks(t *testing.T, c *cell, scr string) {
	if out, err := c.run(`set -e; cd "$SCR"
echo mine > own; cat own >/dev/null; echo more >> own
mkdir d; echo x > d/f; cat d/f >/dev/null; mkfifo d/p; ln -s ../own d/l; cat d/l >/dev/null
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("d/s")'
rm -r d own`); err != nil {
		t.Fatalf("the cell's own scratch files: %v\n%s", err, out)
	}
	if evs := c.events(); len(evs) != 0 {
		t.Fatalf("the cell's own scratch files were reported: %+v", evs)
	}

	const n = 64
	for i := 0; i < n; i++ {
		p := filepath.Join(scr, fmt.Sprintf("foreign%02d", i))
		os.WriteFile(p, []byte("SECRET-MARKER\n"), 0o644)
		os.Chown(p, testUID, testUID)
	}
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	out, _ := c.run(`exec python3 -c '
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
membarrier = {"x86_64": 324, "aarch64": 283}[platform.machine()]
scr = os.environ["SCR"]
got = 0
for i in range(` + strconv.Itoa(n) + `):
    os.mkdir(scr + "/d")
    try:
        os.mknod(scr + "/d/x", 0o20600, os.makedev(1, 3))
    except PermissionError:
        pass
    os.rmdir(scr + "/d")
    libc.syscall(membarrier, 1, 0)  # MEMBARRIER_CMD_GLOBAL: an RCU grace period
    try:
        print(open("%s/foreign%02d" % (scr, i)).read().strip()); got += 1
    except PermissionError:
        pass
print("read", got)
'`)
	if strings.Contains(out, "SECRET-MARKER") {
		t.Fatalf("files made outside were read through the cell's marks:\n%s", out)
	}
	if !strings.Contains(out, "read 0") {
		t.Fatalf("the attempt did not run:\n%s", out)
	}
	if findEvent(c.events(), "read", filepath.Join(scr, "foreign")) == nil {
		t.Fatal("the refused reads were not reported")
	}
}
