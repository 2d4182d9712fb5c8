package landlockcell

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agent-lock/agent-lock/internal/landlock"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// Under the Landlock engine the tracepoint observers report opens and
// execs; where the host's audit is on (and Landlock has audit, ABI 7),
// Landlock's own records of what it refused report the rest: mkdir, unlink,
// rename, truncate, signals, sockets outside DIR. They are Landlock's
// verdicts, read, not derived.

// auditOps are the operations blockers stand for, first match wins: a
// rename's record lists every right the moved entry would gain (fs.read_file
// and fs.ioctl_dev among them) besides fs.refer. The open family
// (fs.read_file, fs.write_file, fs.execute, fs.read_dir, and fs.make_reg,
// fs.truncate and fs.ioctl_dev as an open needs them) is left out: the
// observers report opens with the name the process gave, where the record
// names only the directory.
var auditOps = []struct{ blocker, op string }{
	{"fs.refer", "rename"}, {"fs.remove_file", "unlink"}, {"fs.remove_dir", "rmdir"},
	{"fs.make_dir", "mkdir"}, {"fs.make_sym", "symlink"}, {"fs.make_char", "mknod"},
	{"fs.make_block", "mknod"}, {"fs.make_fifo", "mknod"}, {"fs.make_sock", "mknod"},
	{"fs.truncate", "truncate"}, {"fs.ioctl_dev", "ioctl"}, {"fs.resolve_unix", "connect"},
	{"net.bind_tcp", "bind"}, {"net.connect_tcp", "connect"},
	{"scope.abstract_unix_socket", "connect"}, {"scope.signal", "signal"}, {"ptrace", "ptrace"},
}

var openFamily = []string{"fs.read_file", "fs.write_file", "fs.execute", "fs.read_dir"}

// auditEvent is what the access records of one system call report (a
// rename writes one for each end), or false where the observers report it
// already (or it names nothing we know).
func auditEvent(recs []landlock.Record) (verdict.Event, bool) {
	var bl []string
	per := make([][]string, len(recs))
	for i, r := range recs {
		per[i] = r.Blockers()
		bl = append(bl, per[i]...)
	}
	op, by := "", -1
	for _, o := range auditOps {
		if i := slices.IndexFunc(per, func(b []string) bool { return slices.Contains(b, o.blocker) }); i >= 0 {
			op, by = o.op, i
			break
		}
	}
	// Within one directory a rename needs no fs.refer: it removes one
	// name and makes another.
	if (op == "unlink" || op == "rmdir") && slices.ContainsFunc(bl, func(b string) bool { return strings.HasPrefix(b, "fs.make_") }) {
		op = "rename"
	}
	if op == "" || (op == "truncate" || op == "ioctl") && slices.ContainsFunc(openFamily, func(b string) bool { return slices.Contains(bl, b) }) {
		return verdict.Event{}, false
	}
	r := recs[by]
	ev := verdict.Event{Time: r.Time, Op: op, Class: "outside", Denied: true, Path: r.Fields["path"],
		Rule: landlock.AuditRule}
	if p, err := strconv.ParseUint(r.Fields["opid"], 10, 32); err == nil {
		ev.TargetPID = uint32(p)
	}
	if ev.Path == "" {
		ev.Path = r.Fields["ocomm"]
	}
	return ev, true
}

// auditLimit is the last of the Landlock engine's limits: what its reports
// cover. why is "" where Landlock's records are read.
func auditLimit(why string) string {
	if why == "" {
		return "refusals other than opens and execs come from Landlock's audit records: they name the directory, not the entry, and not the process"
	}
	return "reports cover opens and execs only: " + why
}

// Reports is auditLimit for this host now, for doctor and policy.
func Reports(abi int) string { return auditLimit(auditOff(abi)) }

// auditOff says why Landlock's records cannot be read here, "" if they can.
func auditOff(abi int) string {
	if abi < 7 {
		return "Landlock records its refusals from ABI 7 (Linux 6.15)"
	}
	on, err := landlock.AuditOn()
	if err != nil {
		return err.Error()
	}
	if !on {
		return "the host's audit is off (auditctl -e 1 or auditd turns it on)"
	}
	return ""
}

// openAuditLog subscribes to Landlock's records where there are any to
// read; the string says why not otherwise. A failure leaves the observers
// reporting opens and execs, as on a host without audit: Landlock's
// enforcement does not depend on it.
func openAuditLog(abi int) (*landlock.AuditLog, string) {
	if why := auditOff(abi); why != "" {
		return nil, why
	}
	l, err := landlock.ListenAudit()
	if err != nil {
		return nil, err.Error()
	}
	return l, ""
}

// readAudit streams the access records of the cell's Landlock domains:
// those whose domain record names the agent's first process as the one
// that enforced it (or a process of the cell that sandboxed itself
// further, while it lives). Landlock writes a domain's record after the
// first access record it causes, so those wait for it. The records of one
// system call share a serial and come together: they are reported as one,
// once the next serial shows or the log has been quiet a moment.
func (c *cell) readAudit() {
	ours := map[uint64]bool{}
	held := map[uint64][][]landlock.Record{} // by domain: groups waiting for its record
	var group []landlock.Record
	report := func(g []landlock.Record) bool {
		ev, ok := auditEvent(g)
		if !ok {
			return true
		}
		c.auditEscapes.Add(1)
		select {
		case c.events <- ev:
			return true
		case <-c.done:
			return false
		}
	}
	flush := func() bool {
		g := group
		group = nil
		var access []landlock.Record
		for _, r := range g {
			if r.Type != landlock.RecordDomain {
				access = append(access, r)
				continue
			}
			if r.Fields["status"] != "allocated" {
				delete(ours, r.Domain)
				continue
			}
			pid, _ := strconv.Atoi(r.Fields["pid"])
			mine := pid != 0 && (int64(pid) == c.agentPID.Load() || c.inCell(pid))
			ours[r.Domain] = mine
			for _, h := range held[r.Domain] {
				if mine && !report(h) {
					return false
				}
			}
			delete(held, r.Domain)
		}
		if len(access) == 0 {
			return true
		}
		d := access[0].Domain
		mine, known := ours[d]
		switch {
		case !known:
			if len(held) > 256 {
				// Other domains of the host, logged before we listened.
				clear(held)
			}
			held[d] = append(held[d], access)
		case mine:
			return report(access)
		}
		return true
	}
	for {
		// Never an unbounded wait: drain's auditUntil could be stored
		// between the load below and SetDeadline, and then overridden.
		deadline := time.Now().Add(300 * time.Millisecond)
		if len(group) > 0 {
			deadline = time.Now().Add(50 * time.Millisecond)
		}
		if u := c.auditUntil.Load(); u != 0 && u < deadline.UnixNano() {
			deadline = time.Unix(0, u)
		}
		c.audit.SetDeadline(deadline)
		waited := time.Now()
		r, err := c.audit.Next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			quiet := len(group) == 0
			if !flush() {
				return
			}
			// Draining: done once the log has been quiet for a
			// whole wait begun after the drain, or at auditUntil.
			if u := c.auditUntil.Load(); u != 0 && (quiet && waited.UnixNano() >= u-int64(drainWait) || time.Now().UnixNano() >= u) {
				return
			}
			continue
		}
		if err != nil {
			flush()
			return
		}
		if len(group) > 0 && group[0].Serial != r.Serial && !flush() {
			return
		}
		group = append(group, r)
	}
}

// inCell says whether process pid is in the cell's cgroup.
func (c *cell) inCell(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok && rel != "/" && strings.HasSuffix(c.s.Cgroup.Path, rel) {
			return true
		}
	}
	return false
}
