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

// TestLandlockEngine: with --engine landlock the agent works in DIR (files,
// git) and is refused outside it, and the refusal is reported by the
// observers, with the engine and its ABI in the start record. Runs in the
// test VMs and natively (make native), on any kernel with Landlock.
func TestLandlockEngine(t *testing.T) {
	if (os.Getenv("AGENT_LOCK_VM") != "1" && os.Getenv("AGENT_LOCK_NATIVE") != "1") || os.Geteuid() != 0 {
		t.Skip("runs in the test VMs (make vmtest) and natively as root (make native)")
	}
	abi := landlock.ABI()
	if abi == 0 {
		t.Fatal("Landlock is not available: every kernel of the matrix, and the development machines', has it")
	}
	bin := testenv.AgentLockBin(t)
	root, dir := testenv.ProjectDir(t, 4242)
	out := filepath.Join(root, "outside")
	os.Mkdir(out, 0o755)
	os.Chown(out, 4242, 4242)
	secret := filepath.Join(out, "secret")
	os.WriteFile(secret, []byte("LANDLOCK-SECRET\n"), 0o644)

	run := func(engine string) (string, []report.Record) {
		t.Helper()
		rep := testenv.ReportPath(t, 4242)
		os.RemoveAll(filepath.Join(dir, "g"))
		args := []string{"--headless", "--report", rep}
		if engine != "" {
			args = append(args, "--engine", engine)
		}
		script := `cat "$1" 2>&1; echo in > inside.txt && cat inside.txt
			git init -q g && cd g && echo x > f && git add f &&
			git -c user.name=a -c user.email=a@b commit -q -m x && git log --oneline | grep -q x && echo git-ok`
		cmd := exec.Command(bin, append(args, dir, "--", "sh", "-c", script, "sh", secret)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("agent-lock --engine %q: %v\n%s", engine, err, b)
		}
		f, err := os.Open(rep)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var recs []report.Record
		report.Read(f, func(r report.Record) error { recs = append(recs, r); return nil })
		return string(b), recs
	}

	output, recs := run("landlock")
	if strings.Contains(output, "LANDLOCK-SECRET") {
		t.Errorf("the jailed agent read the outside file:\n%s", output)
	}
	for _, want := range []string{"Permission denied", "in\n", "git-ok"} {
		if !strings.Contains(output, want) {
			t.Errorf("output lacks %q:\n%s", want, output)
		}
	}
	var engine string
	var blocked bool
	var sum *report.Summary
	for _, r := range recs {
		switch {
		case r.Start != nil:
			engine = r.Start.Engine
		case r.Event != nil:
			if r.Event.Path == secret && r.Event.Op == "read" && r.Event.Verdict == report.Blocked {
				blocked = true
			} else {
				t.Errorf("unexpected escape record: %+v", *r.Event)
			}
		case r.Summary != nil:
			sum = r.Summary
		}
	}
	t.Logf("engine %s (kernel's Landlock ABI %d)", engine, abi)
	if want := "landlock (ABI "; !strings.HasPrefix(engine, want) {
		t.Errorf("start record says engine %q, want %q...", engine, want)
	}
	if !blocked {
		t.Errorf("no blocked read of %s in the report: %+v", secret, recs)
	}
	if sum == nil || sum.InBounds == 0 || sum.Escapes != 1 {
		t.Errorf("summary %+v: want in-bounds opens and exactly one escape", sum)
	}

	// auto: the BPF LSM where it runs (every VM kernel), else Landlock.
	_, recs = run("")
	for _, r := range recs {
		if r.Start == nil {
			continue
		}
		inVM := os.Getenv("AGENT_LOCK_VM") == "1" && os.Getenv("AGENT_LOCK_NATIVE") != "1"
		if inVM && r.Start.Engine != "bpf-lsm" {
			t.Errorf("auto picked %q in a VM that runs the BPF LSM", r.Start.Engine)
		}
		t.Logf("auto picked %s", r.Start.Engine)
	}
}
