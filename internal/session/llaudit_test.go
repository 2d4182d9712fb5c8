package session_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/landlock"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/test/testenv"
)

func setAudit(t *testing.T, on bool) {
	t.Helper()
	if err := landlock.SetAudit(on); err != nil {
		t.Fatal(err)
	}
}

// TestLandlockAuditRecords: under the Landlock engine, with the host's
// audit on, refusals the open/exec observers cannot see (mkdir, unlink,
// symlink, rename, truncate(2) outside DIR) are reported from Landlock's own
// audit records, once each, and counted; with audit off they are not, and
// the report's limits say why. Landlock writes such records from ABI 7
// (Linux 6.15): natively here (6.18) and on forky.
func TestLandlockAuditRecords(t *testing.T) {
	testenv.NeedVM(t)
	if abi := landlock.ABI(); abi < 7 {
		t.Skipf("Landlock ABI %d: it writes audit records from ABI 7 (Linux 6.15)", abi)
	}
	was, err := landlock.AuditOn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setAudit(t, was) })

	bin := testenv.AgentLockBin(t)
	root, dir := testenv.ProjectDir(t, 4242)
	out := filepath.Join(root, "outside")
	run := func(audit bool) ([]report.Event, *report.Start, *report.Summary) {
		t.Helper()
		setAudit(t, audit)
		os.RemoveAll(out)
		os.Mkdir(out, 0o755)
		for _, f := range []string{"f", "g"} {
			os.WriteFile(filepath.Join(out, f), []byte("keep\n"), 0o644)
			os.Chown(filepath.Join(out, f), 4242, 4242)
		}
		os.Chown(out, 4242, 4242) // only Landlock refuses
		rep := testenv.ReportPath(t, 4242)
		script := `mkdir "$1/d"; rm -f "$1/f"; ln -s x "$1/l"; mv "$1/g" "$1/h"
			python3 -c 'import os, sys; os.truncate(sys.argv[1] + "/f", 0)' "$1"; echo done`
		cmd := exec.Command(bin, "--engine", "landlock", "--headless", "--report", rep, dir, "--", "sh", "-c", script, "sh", out)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin")
		b, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(b), "done") {
			t.Fatalf("agent-lock: %v\n%s", err, b)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 2 {
			t.Fatalf("the jailed agent changed %s: %v\n%s", out, ents, b)
		}
		if f, _ := os.ReadFile(filepath.Join(out, "f")); string(f) != "keep\n" {
			t.Fatalf("the jailed agent truncated %s/f", out)
		}
		f, err := os.Open(rep)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var evs []report.Event
		var start *report.Start
		var sum *report.Summary
		report.Read(f, func(r report.Record) error {
			switch {
			case r.Event != nil && r.Event.Verdict == report.Blocked:
				evs = append(evs, *r.Event)
			case r.Start != nil:
				start = r.Start
			case r.Summary != nil:
				sum = r.Summary
			}
			return nil
		})
		if start == nil || sum == nil {
			t.Fatalf("report without start or summary: %+v %+v", start, sum)
		}
		return evs, start, sum
	}

	want := map[string]string{"mkdir": out, "unlink": out, "symlink": out, "rename": out, "truncate": filepath.Join(out, "f")}
	evs, start, sum := run(true)
	got := map[string]int{}
	for _, e := range evs {
		got[e.Op]++
		if p, ok := want[e.Op]; ok && (e.Path != p || e.Rule != "Landlock's audit record") {
			t.Errorf("%s reported as %+v, want path %s from Landlock's audit record", e.Op, e, p)
		}
	}
	for op := range want {
		if got[op] != 1 {
			t.Errorf("audit on: %d blocked %s records, want 1; report %+v", got[op], op, evs)
		}
	}
	if sum.Escapes != uint64(len(evs)) {
		t.Errorf("audit on: summary counts %d escapes, the report has %d", sum.Escapes, len(evs))
	}
	if l := strings.Join(start.Limits, "\n"); !strings.Contains(l, "Landlock's audit records") {
		t.Errorf("audit on: limits do not say where the other refusals come from:\n%s", l)
	}

	evs, start, _ = run(false)
	for _, e := range evs {
		if _, ok := want[e.Op]; ok {
			t.Errorf("audit off, yet reported: %+v", e)
		}
	}
	if l := strings.Join(start.Limits, "\n"); !strings.Contains(l, "audit is off") {
		t.Errorf("audit off: limits do not say so:\n%s", l)
	}
}
