package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// The session's life as a shell user lives it, in a real terminal (tmux),
// under each engine this kernel runs: Ctrl-C reaches the jailed command,
// a closed terminal ends the session with nothing left behind, the summary
// printed after q is the recording's, and after agent-lock is killed the
// next run says what it cleaned up. Runs in the test VMs, and natively for
// the Landlock engine (make native).

// engines are the engines agent-lock doctor proves on this kernel.
func engines(t *testing.T, bin string) []string {
	var out []string
	for _, e := range []string{"bpf-lsm", "landlock"} {
		if exec.Command(bin, "doctor", "--engine", e).Run() == nil {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		t.Fatal("agent-lock doctor proves no engine on this kernel")
	}
	return out
}

func lifecycleSetup(t *testing.T) (bin string, engs []string) {
	if os.Getenv("AGENT_LOCK_VM") != "1" || os.Geteuid() != 0 {
		t.Skip("runs in the test VMs (make vmtest) and natively as root (make native)")
	}
	bin = testenv.AgentLockBin(t)
	return bin, engines(t, bin)
}

// sudoEnv is the environment sudo would give agent-lock, run by the test
// user; PATH has no folders of root's.
const sudoEnv = "TZ=UTC TERM=xterm-256color PATH=/usr/local/bin:/usr/bin:/bin SUDO_UID=4242 SUDO_GID=4242 SUDO_USER=jailtest"

// newTerm starts a tmux server with one window running shell command cmd.
func newTerm(t *testing.T, root, cmd string) *term {
	tm := &term{t: t, socket: filepath.Join(root, "tmux.sock")}
	tm.tmux("-f", "/dev/null", "new-session", "-d", "-s", "s", "-n", "w", "-x", "160", "-y", "45", "sh", "-c", cmd)
	t.Cleanup(func() { exec.Command("tmux", "-S", tm.socket, "kill-server").Run() })
	return tm
}

// running lists the processes whose command line matches re.
func running(re string) []string {
	out, _ := exec.Command("pgrep", "-af", re).Output()
	return strings.Fields(strings.TrimSpace(string(out)))
}

// waitGone polls until no process matches re; the bound only keeps a
// broken build from hanging the suite.
func waitGone(t *testing.T, re string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for len(running(re)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after %v still running: %s", within, strings.Join(running(re), " "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitRunning(t *testing.T, re string) {
	t.Helper()
	for i := 0; len(running(re)) == 0; i++ {
		if i > 450 {
			t.Fatalf("%s never started", re)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCtrlCReachesTheAgent: in --headless, the terminal's ^C interrupts
// the jailed command (agent-lock used to ignore SIGINT, and the agent
// inherited that), and the agent starts with SIGINT's default disposition.
func TestCtrlCReachesTheAgent(t *testing.T) {
	bin, engs := lifecycleSetup(t)
	for _, engine := range engs {
		t.Run(engine, func(t *testing.T) {
			root, dir := testenv.ProjectDir(t, uid)
			script := `import signal, time
print("disposition", signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
time.sleep(300)`
			os.WriteFile(filepath.Join(dir, "agent.py"), []byte(script), 0o644)
			tm := newTerm(t, root, fmt.Sprintf("cd %s && env %s %s --headless --engine %s --report /dev/null . -- python3 agent.py; echo session-exit=$?; sleep 600",
				dir, sudoEnv, bin, engine))
			tm.waitFor("s:w", `disposition True`)
			tm.tmux("send-keys", "-t", "s:w", "C-c")
			s := tm.waitFor("s:w", `session-exit=\d+`)
			if !strings.Contains(s, "KeyboardInterrupt") || !strings.Contains(s, "session-exit=130") {
				t.Errorf("^C did not interrupt the agent:\n%s", s)
			}
		})
	}
}

// TestClosedTerminalEndsTheSession: killing the terminal of a dashboard
// session (tmux kill-session) ends it: no agent-lock and no agent process
// left within 15 s, and the recording closed with its summary.
func TestClosedTerminalEndsTheSession(t *testing.T) {
	bin, engs := lifecycleSetup(t)
	for i, engine := range engs {
		t.Run(engine, func(t *testing.T) {
			root, dir := testenv.ProjectDir(t, uid)
			sleeper := fmt.Sprintf("sleep %d", 3100+i)
			tm := newTerm(t, root, fmt.Sprintf("cd %s && env %s %s --engine %s . -- sh -c 'exec %s'",
				dir, sudoEnv, bin, engine, sleeper))
			tm.waitFor("s:w", `JAILED`)
			waitRunning(t, "^"+sleeper+"$")
			rec := newestRecording(t)
			tm.tmux("kill-session", "-t", "s")
			// The bound for a user at a real terminal; TCG is
			// slower, so the check is generous but the same shape.
			waitGone(t, "^"+sleeper+"$", 15*time.Second)
			if pids := testenv.PidsOf(bin); len(pids) > 0 {
				time.Sleep(5 * time.Second)
				if pids := testenv.PidsOf(bin); len(pids) > 0 {
					t.Errorf("agent-lock processes left after the terminal closed: %v", pids)
				}
			}
			r, err := testenv.ReadReport(rec)
			if err != nil || r.Summary == nil {
				t.Errorf("the recording %s has no summary: %v", rec, err)
			}
		})
	}
}

// TestSummaryAfterQIsTheRecordings: the agent reaches out again in the
// grace agent-lock gives it after q; the summary printed must count those
// too, as the recording does.
func TestSummaryAfterQIsTheRecordings(t *testing.T) {
	bin, engs := lifecycleSetup(t)
	for _, engine := range engs {
		t.Run(engine, func(t *testing.T) {
			root, dir := testenv.ProjectDir(t, uid)
			ssh := filepath.Join(home, ".ssh")
			os.MkdirAll(ssh, 0o700)
			os.Chown(ssh, uid, uid)
			for i := 0; i < 10; i++ {
				// The user's own keys: a root-owned one is refused by its
				// mode before any LSM is asked, and the BPF LSM, asked
				// nothing, reports nothing.
				k := filepath.Join(ssh, fmt.Sprintf("k%d", i))
				os.WriteFile(k, []byte("KEY\n"), 0o600)
				os.Chown(k, uid, uid)
			}
			script := `trap 'for i in 0 1 2 3 4 5 6 7 8 9; do cat ~/.ssh/k$i; done; exit 0' TERM
cat ~/.ssh/k0 ~/.ssh/k1
touch ready
while :; do sleep 0.1; done`
			os.WriteFile(filepath.Join(dir, "agent.sh"), []byte(script), 0o644)
			tm := newTerm(t, root, fmt.Sprintf("cd %s && env %s %s --engine %s . -- bash agent.sh; echo session-exit=$?; sleep 600",
				dir, sudoEnv, bin, engine))
			tm.waitFor("s:w", `2 escape attempts blocked`)
			rec := newestRecording(t)
			tm.tmux("send-keys", "-t", "s:w", "C-]")
			tm.waitFor("s:w", `Escape attempts`)
			tm.tmux("send-keys", "-t", "s:w", "q")
			s := tm.waitFor("s:w", `session-exit=`)
			r, err := testenv.ReadReport(rec)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Escapes) != 12 {
				t.Fatalf("the recording has %d escapes, want 12 (2, then 10 in the grace)", len(r.Escapes))
			}
			if !strings.Contains(s, "verdict: 12 escape attempts blocked") {
				t.Errorf("the summary after q is not the recording's (12 blocked):\n%s", s)
			}
		})
	}
}

// TestNextRunCleansUpAfterAKill: agent-lock and its reaper killed at once
// (kill -9) leave a cell running, still confined, and a TMPDIR: watch
// --list shows the session as ended, and the next run kills the cell,
// removes the TMPDIR and says so.
func TestNextRunCleansUpAfterAKill(t *testing.T) {
	bin, engs := lifecycleSetup(t)
	for _, engine := range engs {
		t.Run(engine, func(t *testing.T) {
			_, dir := testenv.ProjectDir(t, uid)
			cmd := exec.Command(bin, "--headless", "--engine", engine, "--report", "/dev/null", dir, "--",
				"/bin/sh", "-c", "(while :; do echo tick >> ticks; sleep 0.1; done) & wait")
			cmd.Env = append(strings.Fields(sudoEnv), "HOME=/root")
			out, err := os.Create(filepath.Join(dir, "..", "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ticks := filepath.Join(dir, "ticks")
			for i := 0; i < 450; i++ {
				if b, _ := os.ReadFile(ticks); len(b) > 0 {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			rec := newestRecording(t)
			r, err := testenv.ReadReport(rec)
			if err != nil || r.Start == nil || r.Start.TmpDir == "" {
				t.Fatalf("the session's start record: %+v %v", r, err)
			}
			tmp := r.Start.TmpDir
			for _, pid := range testenv.PidsOf(bin) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			cmd.Wait()

			list := asUser(t, bin, "watch", "--list")
			id := strings.TrimSuffix(filepath.Base(rec), ".jsonl")
			if !regexp.MustCompile(regexp.QuoteMeta(id) + `\s+ended \(agent-lock was killed`).MatchString(list) {
				t.Errorf("watch --list does not show the killed session as ended:\n%s", list)
			}
			if _, err := os.Stat(tmp); err != nil {
				t.Fatalf("the killed session's TMPDIR is already gone: %v", err)
			}
			next := exec.Command(bin, "--headless", "--engine", engine, "--report", "/dev/null", dir, "--", "true")
			next.Env = cmd.Env
			b, err := next.CombinedOutput()
			if err != nil {
				t.Fatalf("next run: %v\n%s", err, b)
			}
			for _, want := range []string{"cleaned up after agent-lock " + strconv.Itoa(cmd.Process.Pid) + ", which was killed",
				"its TMPDIR " + tmp + " removed"} {
				if !strings.Contains(string(b), want) {
					t.Errorf("the next run does not say %q:\n%s", want, b)
				}
			}
			if _, err := os.Stat(tmp); !os.IsNotExist(err) {
				t.Errorf("the killed session's TMPDIR %s is still there: %v", tmp, err)
			}
			n := lines(ticks)
			time.Sleep(time.Second)
			if lines(ticks) != n {
				t.Error("the killed session's agent still runs after the next run")
			}
		})
	}
}

func asUser(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command("setpriv", append([]string{"--reuid=4242", "--regid=4242", "--init-groups",
		"env", "HOME=" + home, bin}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newestRecording is the test user's latest recording.
func newestRecording(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(home, ".local/state/agent-lock")
	var newest string
	var when time.Time
	for i := 0; i < 50 && newest == ""; i++ {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".jsonl") {
				continue
			}
			if fi, err := e.Info(); err == nil && fi.ModTime().After(when) {
				newest, when = filepath.Join(dir, e.Name()), fi.ModTime()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if newest == "" {
		t.Fatalf("no recording in %s", dir)
	}
	return newest
}

func lines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}
