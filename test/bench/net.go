package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/agent-lock/agent-lock/test/netlab"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// The network workloads, in the lab's small internet (test/netlab):
//
//	connect-name  N connections to a granted name (allowed.test), each one
//	              byte there and back: agent-lock's resolver answered the
//	              name once, each connection goes through its forwarder
//	connect-addr  the same to an address granted with its port: the
//	              kernel's decision alone, no forwarder
//	bulk-name     one download of many bytes from the granted name,
//	              through the forwarder
//
// Each worker times itself, so agent-lock's start is not counted.
var netWorkloads = []string{"connect-name", "connect-addr", "bulk-name"}

// netGrants are the jailed runs' network: the name and the address.
var netGrants = []string{"--profile", "none", "--allow-net", "allowed.test", "--allow-net", "203.0.113.11:9000"}

var netResultRE = regexp.MustCompile(`(connect-name|connect-addr|bulk-name)_ns=(\d+)`)

// network runs the network workloads unjailed and under agent-lock, the
// modes taking turns (in reverse order every other round), and prints
// their times and ratios as the file workloads'.
func (b *bench) network(ctx context.Context, kernel string) error {
	l, err := netlab.New(ctx)
	if err != nil {
		return fmt.Errorf("the network lab: %w", err)
	}
	defer l.Close()
	connects, size := 300, int64(256<<20)
	if b.c.opens < 10000 { // -smoke
		connects, size = 20, 8<<20
	}
	argv := []string{b.worker, "-worker", "net", "allowed.test", "203.0.113.11", strconv.Itoa(connects), strconv.FormatInt(size, 10)}
	modes := []string{"unjailed", "agent-lock"}
	times := map[string]map[string][]time.Duration{}
	for _, w := range netWorkloads {
		times[w] = map[string][]time.Duration{}
	}
	for round := range b.c.repeat {
		order := slices.Clone(modes)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, mode := range order {
			var res testenv.Result
			if mode == "unjailed" {
				res = b.r.Run(ctx, testenv.Proc{Argv: l.Wrap(argv, b.r.User.UID, b.r.User.GID), Dir: b.dir,
					Env: b.r.UserEnv(filepath.Join(b.r.User.Home, "tmp"))})
			} else {
				report := b.r.NextReport()
				jargv := b.r.JailArgv(b.dir, report, testenv.StartWrapper(argv), netGrants...)
				res = b.r.Run(ctx, testenv.Proc{Argv: l.Wrap(jargv, 0, 0), Dir: b.dir, Env: b.r.RootEnv(), Timeout: b.r.JailTimeout()})
				b.r.ReadReport(&res, report)
				if p := testenv.JailProblem(res); p != "" {
					return fmt.Errorf("network, agent-lock: %s", p)
				}
				if len(res.Report.Escapes) > 0 {
					return fmt.Errorf("network, agent-lock: a workload was refused something: %s [%s]", res.Report.Escapes[0], res.Report.Escapes[0].Rule)
				}
			}
			got := netResultRE.FindAllStringSubmatch(string(res.Output), -1)
			if res.Exit != 0 || len(got) != len(netWorkloads) {
				return fmt.Errorf("network, %s: exit %d: %s", mode, res.Exit, testenv.Tail(res.Output, 5))
			}
			for _, m := range got {
				ns, _ := strconv.ParseInt(m[2], 10, 64)
				times[m[1]][mode] = append(times[m[1]][mode], time.Duration(ns))
			}
		}
	}
	for _, w := range netWorkloads {
		base := times[w]["unjailed"]
		for _, mode := range modes {
			ts := times[w][mode]
			ratio := float64(median(ts)) / float64(median(base))
			lo, hi := roundRatios(ts, base)
			what := fmt.Sprintf("%.0f µs a connection", float64(median(ts).Microseconds())/float64(connects))
			if w == "bulk-name" {
				what = fmt.Sprintf("%.0f MiB/s", float64(size)/(1<<20)/median(ts).Seconds())
			}
			fmt.Printf("%-12s %-10s %10s %10s %10s %7.2fx %11s  %s\n", w, mode, round(slices.Min(ts)), round(median(ts)), round(slices.Max(ts)), ratio,
				fmt.Sprintf("%.2f-%.2f", lo, hi), what)
			fmt.Printf("BENCH kernel=%s workload=%s mode=%s n=%d min_ns=%d median_ns=%d max_ns=%d ratio=%.3f round_ratio_min=%.3f round_ratio_max=%.3f\n",
				kernel, w, mode, len(ts), slices.Min(ts), median(ts), slices.Max(ts), ratio, lo, hi)
		}
	}
	return nil
}

// netWorker is the worker's side (-worker net NAME ADDR CONNECTS BYTES):
// it resolves NAME once, then times each workload against the lab's
// benchmark server.
func netWorker(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "worker: net NAME ADDR CONNECTS BYTES")
		return 2
	}
	n, err1 := strconv.Atoi(args[2])
	size, err2 := strconv.ParseInt(args[3], 10, 64)
	addr, err3 := netip.ParseAddr(args[1])
	if err1 != nil || err2 != nil || err3 != nil {
		fmt.Fprintln(os.Stderr, "worker: net: bad arguments")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", args[0])
	if err != nil || len(ips) == 0 {
		fmt.Fprintln(os.Stderr, "worker: net: resolve:", err)
		return 1
	}
	named := netip.AddrPortFrom(ips[0], netlab.BenchPort).String()
	for _, w := range []struct {
		name string
		f    func() error
	}{
		{"connect-name", func() error { return pings(ctx, named, n) }},
		{"connect-addr", func() error { return pings(ctx, netip.AddrPortFrom(addr, netlab.BenchPort).String(), n) }},
		{"bulk-name", func() error { return bulk(ctx, named, size) }},
	} {
		start := time.Now()
		if err := w.f(); err != nil {
			fmt.Fprintf(os.Stderr, "worker: %s: %v\n", w.name, err)
			return 1
		}
		fmt.Printf("%s_ns=%d\n", w.name, time.Since(start).Nanoseconds())
	}
	return 0
}

// pings makes n connections to addr, each one byte there and back.
func pings(ctx context.Context, addr string, n int) error {
	var d net.Dialer
	b := []byte{'p'}
	for range n {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		if _, err := c.Write(b); err != nil {
			c.Close()
			return err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			c.Close()
			return err
		}
		c.Close()
	}
	return nil
}

// bulk reads size bytes from addr.
func bulk(ctx context.Context, addr string, size int64) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(binary.BigEndian.AppendUint64([]byte{'b'}, uint64(size))); err != nil {
		return err
	}
	got, err := io.CopyN(io.Discard, c, size)
	if err != nil {
		return fmt.Errorf("read %d of %d bytes: %w", got, size, err)
	}
	return nil
}
