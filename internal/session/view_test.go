package session_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestAgentView: what the agent sees of the machine where it differs from
// agent-lock's view. Its /proc lists its own processes only (ps works, no
// other process is listed, nothing is reported); its shells read the
// user's shell setup (PATH, functions, variables) without the secrets
// assigned in it; and the copy they read cannot be written, while the
// user's own file stays as it was.
func TestAgentView(t *testing.T) {
	bin, dir := profileRun(t)
	if out, err := exec.Command("find", home, "-mindepth", "1", "-delete").CombinedOutput(); err != nil {
		t.Fatalf("empty the home: %v %s", err, out)
	}
	rc := "export PATH=\"$HOME/bin:$PATH\"\nexport VIEW_GREETING=hello\nexport GITHUB_TOKEN=view-secret-rc\nview_fn() { echo from-function; }\n"
	for _, name := range []string{".bashrc", ".profile"} {
		p := filepath.Join(home, name)
		if err := os.WriteFile(p, []byte(rc), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chown(p, 4242, 4242)
	}
	rep := testenv.ReportPath(t, 4242)
	script := `. ~/.bashrc; echo "greeting=$VIEW_GREETING token=${GITHUB_TOKEN:-unset} $(view_fn)"
sh -lc 'echo "login=$VIEW_GREETING"'
echo "pids: $(ps -eo pid= | tr -s ' \n' ' ') self=$$"
(echo planted >> ~/.bashrc) 2>/dev/null || echo refused-write`
	cmd := exec.Command(bin, "--headless", "--report", rep, dir, "--", "/bin/bash", "-c", script)
	cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
	outB, err := cmd.CombinedOutput()
	out := string(outB)
	if err != nil {
		t.Fatalf("agent-lock: %v\n%s", err, out)
	}
	for _, want := range []string{"greeting=hello token=unset from-function", "login=hello", "refused-write"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "view-secret-rc") {
		t.Errorf("the agent read the token the shell setup assigns:\n%s", out)
	}
	// The agent's processes only: bash, its subshells and ps; never pid 1.
	_, pids, _ := strings.Cut(out, "pids: ")
	pids, self, _ := strings.Cut(pids, "self=")
	self = strings.Fields(self)[0]
	listed := strings.Fields(pids)
	if len(listed) == 0 || len(listed) > 6 || !strings.Contains(" "+pids+" ", " "+self+" ") {
		t.Errorf("ps listed %v (self %s): want the agent's own few", listed, self)
	}
	for _, p := range listed {
		if n, _ := strconv.Atoi(p); n == 1 {
			t.Errorf("ps listed pid 1, outside the cell: %v", listed)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(home, ".bashrc")); string(b) != rc {
		t.Errorf("~/.bashrc changed: %q", b)
	}
	f, err := os.Open(rep)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var writes int
	report.Read(f, func(r report.Record) error {
		if e := r.Event; e != nil {
			if e.Op == "write" && e.Verdict == report.Blocked && e.Path == filepath.Join(home, ".bashrc") {
				writes++
			} else {
				t.Errorf("refused: %s %s %s [%s]", e.Verdict, e.Op, e.Path, e.Rule)
			}
		}
		return nil
	})
	if writes != 1 {
		t.Errorf("the write to ~/.bashrc was reported %d times, want once", writes)
	}
}
