package main

import (
	"fmt"
	"sort"

	"github.com/agent-lock/agent-lock/internal/landlock"
)

// Under -engine landlock the suite holds agent-lock to what that engine
// promises (landlock.Limits), no more and no less: a technique on the
// expected-leak list may leak at this ABI; one that leaks and is not on it
// fails; one on it that no longer leaks fails too, so that the list (and
// the limits agent-lock tells its users) stays true.

// expectedLeak is a side door of the Landlock engine until Landlock ABI
// closedAt (0: no ABI closes it).
type expectedLeak struct {
	closedAt int
	why      string
}

var landlockLeaks = map[string]expectedLeak{
	"inotify-watch-outside": {0, "Landlock does not mediate inotify watches"},
	"chmod-outside":         {0, "Landlock has no right for metadata changes"},
	"chown-outside":         {0, "Landlock has no right for metadata changes"},
	"utimes-outside":        {0, "Landlock has no right for metadata changes"},
	"setxattr-outside":      {0, "Landlock has no right for metadata changes"},
	"removexattr-outside":   {0, "Landlock has no right for metadata changes"},
	"getxattr-outside":      {0, "Landlock has no right for metadata"},
	"listxattr-outside":     {0, "Landlock has no right for metadata"},
	"hardlink-denied-read":  {0, "Landlock grants by path: a hard link in DIR made before the session is a name in DIR, whatever file it is"},
	"unix-inbound-path":     {0, "Landlock restricts what the agent reaches, not what reaches it"},
	"unix-inbound-abstract": {0, "Landlock restricts what the agent reaches, not what reaches it"},
	"unix-inbound-dgram":    {0, "Landlock restricts what the agent reaches, not what reaches it"},
	"scm-rights-receive":    {0, "Landlock does not check descriptors received over a socket"},
	"renice-outside":        {0, "Landlock has no say over other processes' scheduling, priority and limits"},
	"chrt-idle-outside":     {0, "Landlock has no say over other processes' scheduling, priority and limits"},
	"taskset-outside":       {0, "Landlock has no say over other processes' scheduling, priority and limits"},
	"ionice-outside":        {0, "Landlock has no say over other processes' scheduling, priority and limits"},
	"prlimit-outside":       {0, "Landlock has no say over other processes' scheduling, priority and limits"},
	"unix-socket-path":      {9, "pathname unix sockets are restricted from Landlock ABI 9"},
	"unix-dgram-sendto":     {9, "pathname unix sockets are restricted from Landlock ABI 9"},
	"truncate-outside":      {3, "truncate(2) is restricted from Landlock ABI 3"},
	"unix-socket-abstract":  {6, "abstract unix sockets are scoped from Landlock ABI 6"},
	"kill-term":             {6, "signals are scoped from Landlock ABI 6"},
	"kill-all":              {6, "signals are scoped from Landlock ABI 6"},
	"pidfd-send-signal":     {6, "signals are scoped from Landlock ABI 6"},
	"fsetown-signal":        {6, "signals are scoped from Landlock ABI 6"},
	"fsetown-ex-signal":     {6, "signals are scoped from Landlock ABI 6"},
	"fiosetown-signal":      {6, "signals are scoped from Landlock ABI 6"},
}

// The protected family (protected.go) is no leak under Landlock: the
// engine grants the project directory whole, but its tripwire puts each
// protected entry back as it was and reports the change ("undone"), so
// the techniques' effects are gone when the session ends. That includes
// git's files in the repositories below DIR's top that were there at the
// start and their worktrees' links; those of the repositories the agent
// makes are judged when the session ends, as under the BPF LSM, and what
// would run a command is moved aside ("plant").

// landlockUnreported are stopped before anything the observers watch.
var landlockUnreported = map[string]string{
	"open-by-handle":  "stopped before the open: writing /proc/PID/uid_map is refused",
	"io-uring-openat": "io_uring's opens do not pass the system-call tracepoints",
	"tiocsti":         "refused by the seccomp filter, which reports nothing (Landlock has no say over TIOCSTI)",
}

func init() {
	// The agent's /proc lists only the processes its Landlock domain may
	// trace (hidepid, session's mountns.go); another's is not found
	// (ENOENT), which the observers cannot tell from a process that is
	// gone. Landlock's audit records report the refused ptrace check.
	for _, n := range []string{"proc-pid-mem", "proc-pid-environ", "proc-pid-maps", "proc-pid-cwd", "proc-pid-root", "proc-pid-fd", "proc-pid-oom-adj"} {
		landlockUnreported[n] = "the victim is not in the agent's /proc (not found, which the observers cannot tell from a process that is gone); Landlock's audit records report the ptrace check"
	}
}

// landlockObserved are the operations the Landlock engine reports: its
// observers watch the open and exec family only (its tripwire reports
// every operation on protected entries, judged as any engine's record).
var landlockObserved = map[string]bool{"read": true, "write": true, "exec": true, "create": true}

// landlockAuditObserved are the operations Landlock's own audit records
// report besides (-landlock-audit; engine/landlockcell/audit.go).
var landlockAuditObserved = map[string]bool{"mkdir": true, "unlink": true, "rmdir": true, "rename": true,
	"symlink": true, "mknod": true, "truncate": true, "ioctl": true, "signal": true, "connect": true, "ptrace": true}

// landlockAudit turns the host's audit on for the run, and returns what
// puts it back.
func landlockAudit(engine string, abi int) (func(), error) {
	if engine != "landlock" || abi < 7 {
		return nil, fmt.Errorf("needs -engine landlock on Landlock ABI 7 or later (this kernel: %d)", abi)
	}
	was, err := landlock.AuditOn()
	if err != nil {
		return nil, err
	}
	if err := landlock.SetAudit(true); err != nil {
		return nil, err
	}
	fmt.Println("adversary: the host's audit is on for this run: Landlock's records report mkdir, unlink, rename, signals, ...")
	return func() { landlock.SetAudit(was) }, nil
}

// landlockJudge turns the verdict of a technique into what it means for
// the Landlock engine at abi; audited: with Landlock's audit records.
func landlockJudge(t *Technique, r result, abi int, audited bool) result {
	leak, listed := landlockLeaks[t.Name]
	expected := listed && (leak.closedAt == 0 || abi < leak.closedAt)
	switch {
	case r.status == "LEAK" && expected:
		r.status, r.detail = "EXPECTED", fmt.Sprintf("leaks as listed (%s): %s", leak.why, r.detail)
	case expected && r.status != "SKIP" && r.status != "VOID" && r.status != "ERROR":
		r.status, r.detail = "FIXED", fmt.Sprintf("listed as a leak at ABI %d (%s) but stopped: take it off test/adversary/landlock.go and landlock.Limits", abi, leak.why)
	case r.status == "UNREPORTED":
		if why, ok := landlockUnreported[t.Name]; ok {
			r.status, r.detail = "PASS", "stopped, not reported: "+why
		} else if len(t.Ops) > 0 && !landlockObserved[t.Ops[0]] && !(audited && landlockAuditObserved[t.Ops[0]]) {
			r.status, r.detail = "PASS", fmt.Sprintf("stopped, not reported: the Landlock engine observes opens and execs, not %s", t.Ops[0])
		}
	}
	return r
}

// landlockList prints the expected leaks at abi.
func landlockList(abi int) {
	var names []string
	for n, l := range landlockLeaks {
		if l.closedAt == 0 || abi < l.closedAt {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	fmt.Printf("adversary: Landlock ABI %d: %d expected leaks: %v\n", abi, len(names), names)
}

// landlockABI is the running kernel's.
func landlockABI() int { return landlock.ABI() }
