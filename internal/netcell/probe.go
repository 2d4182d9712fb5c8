package netcell

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/netpolicy"
)

// ProbeArg is the hidden subcommand of the binary that runs the network
// self-test inside the cell (RunProbe): the program's main must hand it to
// RunProbe.
const ProbeArg = "__netprobe"

// Probe proves, before the agent runs, that the programs fire for the
// cell's processes and that the resolver answers them: a process started
// into the cell (this binary, as ProbeArg) must be refused a connection to
// loopback, an unconnected datagram and a raw socket, and must get the
// resolver's answer to a DNS query sent to 127.0.0.1:53 (redirected),
// coming back from the address it asked; and the refused connection must
// be reported. Run it while the cell's cgroup holds nothing else, and
// before the file engine's programs (it runs this binary, which lies
// outside any cell).
//
// The probe is the first process started into the cell: if the kernel
// kills it as it starts (SIGKILL, before it ran), bornKilled, unless nil,
// is told (the cell's cgroup.kill count must then be matched, as the
// session does) and, when it returns nil, the probe starts again.
func (c *Cell) Probe(ctx context.Context, cgroupFD int, bornKilled func() error) error {
	var rnd [4]byte
	rand.Read(rnd[:])
	name := fmt.Sprintf("probe-%x.agent-lock.invalid", rnd)
	answer := netip.AddrFrom4([4]byte{127, rnd[0] | 1, rnd[1], rnd[2] | 1})
	mode := "policy"
	switch {
	case c.cfg.Policy.Mode == netpolicy.Open:
		mode = "open"
	case c.cfg.Audit:
		mode = "audit"
	}
	if c.res != nil {
		defer c.res.probe(name, answer)()
	}
	// Loopback services the cell is not granted (a connection to a port
	// where nobody listens is refused as the kernel would, unreported).
	t4, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return fmt.Errorf("network self-test: %w", err)
	}
	defer t4.Close()
	u4, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return fmt.Errorf("network self-test: %w", err)
	}
	defer u4.Close()
	port6 := 0
	if t6, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv6loopback}); err == nil {
		defer t6.Close()
		port6 = t6.Addr().(*net.TCPAddr).Port
	}
	port4 := t4.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := []string{mode, name, answer.String(), strconv.Itoa(port4), strconv.Itoa(port6), strconv.Itoa(u4.LocalAddr().(*net.UDPAddr).Port)}
	var stdout, stderr strings.Builder
	var pid int
	if p := takeProbeAhead(); p != nil {
		out, serr, asked, err := p.run(ctx, cgroupFD, args)
		switch {
		case err == nil:
			stdout.WriteString(out)
			pid = p.cmd.Process.Pid
		case asked:
			return fmt.Errorf("the network self-test in the cell failed: %v: %s", err, strings.TrimSpace(serr))
		}
		// Not moved into the cell (gone meanwhile): one is started there.
	}
	if pid == 0 {
		if pid, err = probeBorn(ctx, cgroupFD, bornKilled, args, &stdout, &stderr); err != nil {
			return err
		}
	}
	return c.probeReports(stdout.String(), uint32(pid), port4)
}

// probeBorn runs the probe as the cell's first process (cloned into its
// cgroup), again while the kernel kills it at birth.
func probeBorn(ctx context.Context, cgroupFD int, bornKilled func() error, args []string, stdout, stderr *strings.Builder) (int, error) {
	var cmd *exec.Cmd
	for {
		cmd = exec.CommandContext(ctx, "/proc/self/exe", append([]string{ProbeArg}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgroupFD, Pdeathsig: syscall.SIGKILL}
		cmd.Dir = "/"
		stdout.Reset()
		stderr.Reset()
		cmd.Stdout, cmd.Stderr = stdout, stderr
		err := cmd.Run()
		if err == nil {
			return cmd.Process.Pid, nil
		}
		// Killed before it wrote a word: at birth (a SIGKILL later, the
		// out-of-memory killer's, is a failure like any other).
		if bornKilled != nil && ctx.Err() == nil && killed(err) && stdout.Len() == 0 {
			if err := bornKilled(); err != nil {
				return 0, err
			}
			continue
		}
		return 0, fmt.Errorf("the network self-test in the cell failed: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
}

// probeReports waits for the reports of every attempt the probe (pid)
// said it made: each is reported, and every report of it is taken here,
// so that none reaches the session's.
func (c *Cell) probeReports(stdout string, pid uint32, port4 int) error {
	var want int
	if _, err := fmt.Sscanf(strings.TrimPrefix(stdout, probeStarted), "reports %d", &want); err != nil {
		return fmt.Errorf("the network self-test said %q", stdout)
	}
	timeout := time.After(5 * time.Second)
	seen, lo := 0, false
	for seen < want || !lo {
		select {
		case e, ok := <-c.events:
			if !ok {
				return errors.New("the network event stream closed during the self-test")
			}
			if e.PID != pid {
				continue
			}
			seen++
			lo = lo || (e.Op == "connect" && int(e.Port) == port4 && e.Addr == netip.MustParseAddr("127.0.0.1"))
		case <-timeout:
			return fmt.Errorf("the network self-test's attempts were not all reported within 5s (%d of %d): the cell's network reports do not arrive", seen, want)
		}
	}
	return nil
}

// probeWaits is the probe's argument that makes it wait for the others on
// its standard input (StartProbeAhead).
const probeWaits = "-"

// probeAhead is a probe started before its cell, if any.
var probeAhead struct {
	sync.Mutex
	p *readyProbe
}

type readyProbe struct {
	cmd            *exec.Cmd
	in             *os.File
	stdout, stderr strings.Builder
	// exited is closed once it exited, before it is reaped (run reaps
	// it): until then its pid is its own, and no other process's can be
	// moved into the cell for it.
	exited chan struct{}
	// cgroup is the inode of the cgroup it was moved into ahead, 0 if
	// none.
	cgroup uint64
}

// moveInto moves process pid into the cgroup cgroupFD.
func moveInto(cgroupFD, pid int) error {
	fd, err := unix.Openat(cgroupFD, "cgroup.procs", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(strconv.Itoa(pid)))
	return err
}

// cgroupIno is the inode of the cgroup cgroupFD (its id), 0 if unknown.
func cgroupIno(cgroupFD int) uint64 {
	var st unix.Stat_t
	if unix.Fstat(cgroupFD, &st) != nil {
		return 0
	}
	return st.Ino
}

// StartProbeAhead starts the network self-test of this process's next
// cell now: a daemon's session started ahead (daemon.Standby) does it
// while no request waits, so that the probe's start (a Go process's, a
// tenth of a second under emulation) is not part of the session's. When
// cgroupFD is the next cell's cgroup, made ahead too, the probe is moved
// into it now: a move into a cgroup waits for an RCU grace period (5 to 11
// ms of a start, measured natively, where the hierarchy is not mounted
// favordynmods); else, or should the move fail, it is moved once the cell
// exists. Until told what to check it makes no socket. A probe never
// needed ends with this process.
func StartProbeAhead(cgroupFD int) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	runs, ran, err := os.Pipe()
	if err != nil {
		w.Close()
		return err
	}
	defer runs.Close()
	p := &readyProbe{in: w, exited: make(chan struct{})}
	p.cmd = exec.Command("/proc/self/exe", ProbeArg, probeWaits)
	p.cmd.Stdin = r
	p.cmd.ExtraFiles = []*os.File{ran}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.Dir = "/"
	err = p.cmd.Start()
	ran.Close()
	if err != nil {
		w.Close()
		return err
	}
	go func() {
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
		close(p.exited)
	}()
	// Until it runs (its end of runs closed): a session that took it at
	// once would wait for its start all the same.
	runs.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, runs); err != nil {
		w.Close()
		return fmt.Errorf("the network self-test did not start: %w", err)
	}
	if cgroupFD >= 0 && moveInto(cgroupFD, p.cmd.Process.Pid) == nil {
		p.cgroup = cgroupIno(cgroupFD)
	}
	probeAhead.Lock()
	defer probeAhead.Unlock()
	if old := probeAhead.p; old != nil {
		old.in.Close()
	}
	probeAhead.p = p
	return nil
}

func takeProbeAhead() *readyProbe {
	probeAhead.Lock()
	defer probeAhead.Unlock()
	p := probeAhead.p
	probeAhead.p = nil
	return p
}

// run moves the probe into the cell (cgroupFD), unless it was moved there
// ahead, and only then tells it what to check: every socket it makes is
// the cell's. It returns what it wrote once it ended, and whether it was
// asked (moved and told).
func (p *readyProbe) run(ctx context.Context, cgroupFD int, args []string) (stdout, stderr string, asked bool, err error) {
	defer p.in.Close()
	select {
	case <-p.exited:
		p.cmd.Wait()
		return "", "", false, errors.New("the probe started ahead ended")
	default:
	}
	// The cell's cgroup, held open by the session, keeps its inode: an
	// equal one is the same cgroup.
	if ino := cgroupIno(cgroupFD); ino == 0 || ino != p.cgroup {
		err = moveInto(cgroupFD, p.cmd.Process.Pid)
	}
	if err != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		return "", "", false, fmt.Errorf("move the probe into the cell: %w", err)
	}
	if _, err := p.in.WriteString(strings.Join(args, " ") + "\n"); err != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		return "", "", true, err
	}
	select {
	case <-p.exited:
	case <-ctx.Done():
		p.cmd.Process.Kill()
	}
	err = p.cmd.Wait()
	return p.stdout.String(), p.stderr.String(), true, err
}

// probeStarted is what RunProbe writes first.
const probeStarted = "started\n"

// killed says whether err is a process's end by SIGKILL.
func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// RunProbe is ProbeArg's main, in the cell: args are the mode (policy,
// audit or open), the name to ask, the address the resolver answers, and
// the loopback ports of a TCP listener (IPv4, IPv6: 0 for none) and a UDP
// socket the cell is not granted. It exits 0 when every check holds, and
// says what failed otherwise.
func RunProbe(args []string) int {
	if len(args) == 1 && args[0] == probeWaits {
		// Started ahead: it says it runs (closing fd 3), and what to
		// check comes on standard input, once this process is in the
		// cell.
		unix.Close(3)
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil {
			return 0 // never needed
		}
		args = strings.Fields(line)
	}
	// First, so that a kill after the start is not taken for one at birth
	// (Probe).
	fmt.Print(probeStarted)
	if len(args) != 6 {
		fmt.Fprintln(os.Stderr, "netprobe: want MODE NAME ADDR TCP4PORT TCP6PORT UDP4PORT")
		return 2
	}
	mode, name := args[0], args[1]
	want, err := netip.ParseAddr(args[2])
	var ports [3]int
	for i := range ports {
		if err == nil {
			ports[i], err = strconv.Atoi(args[3+i])
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netprobe:", err)
		return 2
	}
	var fails []string
	reports := 0 // each connect, datagram and socket attempt is reported
	check := func(what string, err error) {
		if err != nil {
			fails = append(fails, what+": "+err.Error())
		}
	}
	refused := func(err error) error {
		switch {
		case mode == "policy" && !errors.Is(err, unix.EPERM):
			return fmt.Errorf("want EPERM (refused by the cell's programs), got %v", errOrNil(err))
		case mode != "policy" && errors.Is(err, unix.EPERM):
			return errors.New("refused, but nothing is refused in this mode")
		}
		return nil
	}
	lo4 := netip.MustParseAddr("127.0.0.1")
	check("connect to a loopback listener", refused(connectTCP(lo4, ports[0])))
	if ports[1] != 0 {
		check("connect to an IPv6 loopback listener", refused(connectTCP(netip.IPv6Loopback(), ports[1])))
		reports++
	}
	check("sendto a loopback UDP socket", refused(sendUDP(lo4, ports[2])))
	reports += 3 // with the IPv4 connect above and the raw socket below
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP); err == nil {
		unix.Close(fd)
		check("raw socket", refused(nil))
	} else {
		check("raw socket", refused(err))
	}
	if mode != "open" {
		check("DNS, connected UDP, to 127.0.0.1:53", askDNS(name, want, true))
		check("DNS, unconnected UDP, to 127.0.0.1:53", askDNS(name, want, false))
	}
	if len(fails) > 0 {
		fmt.Fprintln(os.Stderr, strings.Join(fails, "; "))
		return 1
	}
	fmt.Printf("reports %d\n", reports)
	return 0
}

func errOrNil(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}

func sockaddr(a netip.Addr, port int) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4(), Port: port}
	}
	return &unix.SockaddrInet6{Addr: a.As16(), Port: port}
}

func family(a netip.Addr) int {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func connectTCP(a netip.Addr, port int) error {
	fd, err := unix.Socket(family(a), unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, sockaddr(a, port))
}

func sendUDP(a netip.Addr, port int) error {
	fd, err := unix.Socket(family(a), unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Sendto(fd, []byte("agent-lock probe"), 0, sockaddr(a, port))
}

// askDNS asks 127.0.0.1:53 for name's A record, as a resolver library
// would, and checks the answer and where it came from.
func askDNS(name string, want netip.Addr, connected bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	ns := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: 53}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x4a4c, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		return err
	}
	if connected {
		if err := unix.Connect(fd, ns); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		if _, err := unix.Write(fd, q); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		peer, err := unix.Getpeername(fd)
		if err != nil {
			return fmt.Errorf("getpeername: %w", err)
		}
		if p4, ok := peer.(*unix.SockaddrInet4); !ok || p4.Addr != ns.Addr || p4.Port != 53 {
			return fmt.Errorf("getpeername says %v, not the 127.0.0.1:53 asked", peer)
		}
	} else if err := unix.Sendto(fd, q, 0, ns); err != nil {
		return fmt.Errorf("sendto: %w", err)
	}
	buf := make([]byte, 1500)
	// A receive with a timeout is not restarted after a signal, and the
	// Go runtime sends itself some (SIGURG, to preempt goroutines): EINTR
	// is no answer yet (seen under load in forky).
	var n int
	var from unix.Sockaddr
	for {
		n, from, err = unix.Recvfrom(fd, buf, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	if f4, ok := from.(*unix.SockaddrInet4); !ok || f4.Addr != ns.Addr || f4.Port != 53 {
		return fmt.Errorf("the answer came from %v, not from the 127.0.0.1:53 asked", from)
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[:n])
	if err != nil || h.ID != 0x4a4c || h.RCode != dnsmessage.RCodeSuccess {
		return fmt.Errorf("a bad answer (%v, rcode %v)", err, h.RCode)
	}
	p.SkipAllQuestions()
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			return fmt.Errorf("the answer does not hold %s: the query did not reach agent-lock's resolver", want)
		}
		if rh.Type == dnsmessage.TypeA {
			r, err := p.AResource()
			if err == nil && netip.AddrFrom4(r.A) == want {
				return nil
			}
			continue
		}
		p.SkipAnswer()
	}
}
