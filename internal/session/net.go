package session

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/agent-lock/agent-lock/internal/netcell"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
	"github.com/agent-lock/agent-lock/internal/profile"
	"github.com/agent-lock/agent-lock/internal/report"
)

// The cell's network (internal/netcell): the same cgroup programs, the
// resolver and the forwarder under either engine. This file is all the
// session knows of it: the plan's netpolicy.Policy, a netcell.Cell opened
// with the cell's cgroup (and proven by its self-test before the engine's
// programs load), its events written like the engine's, its counters
// added to the engine's, its links held by the reaper.

// netPolicy is the cell's network as o asks for it: the profiles' service
// hosts and the rules given (policy files', --allow-net), or --net off or
// open.
func netPolicy(o Options, prof profile.Grants) (netpolicy.Policy, error) {
	p := netpolicy.Policy{Mode: o.NetMode}
	if p.Mode != netpolicy.Grants {
		return p, nil
	}
	for _, h := range prof.Hosts {
		rs, err := netpolicy.Parse(h, "profile "+prof.From[h])
		if err != nil {
			return p, fmt.Errorf("profile %s's host %s: %w", prof.From[h], h, err)
		}
		p = p.With(rs...)
	}
	return p.With(o.AllowNet...), nil
}

// netPinSuffix names a session's network pins next to its engine's
// (pinDir): the engine's loader makes its own directory, and the network
// is opened first.
const netPinSuffix = "-net"

// openNet confines cg's network as p says, and proves it before anything
// else runs in the cell. Its links are pinned like the engine's, under
// either engine: they are enforcement, not only observation.
func openNet(cg *cgroup, p netpolicy.Policy, audit bool, warn warner) (*netcell.Cell, error) {
	pin := ""
	if base := pinBase(); base != "" {
		pin = filepath.Join(base, filepath.Base(cg.Path)+netPinSuffix)
	}
	nc, err := netcell.Open(netcell.Config{Cgroup: cg.Path, Policy: p, Audit: audit, PinDir: pin})
	if err != nil {
		return nil, fmt.Errorf("the cell's network: %w", err)
	}
	// The probe is the cell's first process: it matches the cell's kill
	// count by trial (cgroup.killedAtBirth).
	if err := nc.Probe(context.Background(), cg.FD(), cg.killedAtBirth); err != nil {
		nc.Close()
		return nil, fmt.Errorf("self-test failed, not starting the agent: %w", err)
	}
	return nc, nil
}

// writeNetEvent reports one decision about the cell's network: every
// refusal (and, with --audit or --net open, every reach let through), and
// the allowed ones that opens samples, like in-bounds opens.
func writeNetEvent(w report.Writer, ev netcell.Event, opens *sampler) {
	e := report.Event{
		Time: ev.Time, PID: ev.PID, TID: ev.TID, Comm: ev.Comm, Op: ev.Op,
		Path: ev.Target(), Rule: ev.Why, Host: ev.Host, Port: ev.Port,
	}
	if ev.Addr.IsValid() {
		e.Addr = ev.Addr.String()
	}
	switch ev.Verdict {
	case netcell.Allowed:
		if opens.take(ev.Time) {
			e.Verdict = report.InBounds
			w.Open(e)
		}
	case netcell.Audit, netcell.NetOpen:
		e.Verdict = report.Allowed
		w.Escape(e)
	default:
		e.Verdict = report.Blocked
		w.Escape(e)
	}
}
