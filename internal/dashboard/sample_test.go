package dashboard

import (
	"fmt"
	"strings"
	"time"

	"github.com/agent-lock/agent-lock/internal/report"
)

// t0 is the sample session's start; tests run with time.Local = UTC.
var t0 = time.Date(2026, 6, 1, 17, 4, 2, 0, time.UTC)

// sampleRecords is a small enforce session: an agent working in
// /home/alice/proj that reaches for keys, another repository and history.
func sampleRecords() []report.Record {
	start := &report.Start{
		Time: t0, Mode: report.Enforce, Dir: "/home/alice/proj",
		Agent: []string{"claude", "--print", "fix the tests"}, PID: 1200,
		User: "alice", UID: 1000, Version: "test", Kernel: "6.12.0", Engine: "bpf-lsm",
	}
	recs := []report.Record{{Type: report.TypeStart, Start: start}}
	ev := func(sec int, comm string, pid uint32, op, path string) {
		e := &report.Event{
			Time: t0.Add(time.Duration(sec) * time.Second), PID: pid, TID: pid, Comm: comm,
			Op: op, Path: path, Verdict: report.Blocked, Sensitive: report.Sensitive(path),
		}
		for _, secret := range []string{".ssh", ".aws"} {
			if strings.HasPrefix(path, "/home/alice/"+secret+"/") {
				e.Rule = "home secret ~/" + secret
			}
		}
		recs = append(recs, report.Record{Type: report.TypeEscape, Event: e})
	}
	for i := range 12 {
		ev(1+i/4, "node", 1200, "read", "/home/alice/.ssh/id_ed25519")
	}
	for i := range 5 {
		ev(2+i, "cat", uint32(1300+i), "read", "/home/alice/.aws/credentials")
	}
	ev(3, "git", 1401, "read", "/home/alice/other-repo/.git/config")
	ev(3, "git", 1401, "read", "/home/alice/other-repo/.git/config")
	ev(4, "bash", 1402, "write", "/home/alice/.bashrc")
	ev(5, "python3", 1403, "read", "/home/alice/.bash_history")
	ev(5, "sh", 1404, "exec", "/home/alice/bin/helper")
	ev(6, "node", 1200, "unlink", "/home/alice/notes.txt")
	ev(6, "node", 1200, "write", "/home/alice/.ssh/id_ed25519")
	for i := range 8 {
		ev(7, "find", 1500, "read", fmt.Sprintf("/home/alice/src/project%d/README.md", i))
	}
	recs = append(recs, report.Record{Type: report.TypeSummary, Summary: &report.Summary{
		Time: t0.Add(9 * time.Second), ExitCode: 0, InBounds: 48213, System: 9120, Escapes: 32,
		Duration: 9 * time.Second,
	}})
	return recs
}
