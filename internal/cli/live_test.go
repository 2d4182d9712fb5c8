package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// The VM's unprivileged test user (test/guest-suite.sh makes it).
const (
	uid  = 4242
	home = "/home/jailtest"
)

type term struct {
	t      *testing.T
	socket string
}

func (tm *term) tmux(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.socket}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (tm *term) screen(win string) string { return tm.tmux("capture-pane", "-p", "-J", "-t", win) }

// waitFor polls a window until its screen matches re. The bound only keeps
// a broken build from hanging the suite (QEMU without KVM is slow); it is
// not a speed target.
func (tm *term) waitFor(win, what string) string {
	tm.t.Helper()
	return tm.waitWithin(win, what, 90*time.Second)
}

// waitWithin is waitFor with its own bound, for what takes longer under
// emulation (a real agent's start).
func (tm *term) waitWithin(win, what string, within time.Duration) string {
	tm.t.Helper()
	re := regexp.MustCompile(what)
	deadline := time.Now().Add(within)
	for {
		s := tm.screen(win)
		if re.MatchString(s) {
			return s
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("window %s never showed %q:\n%s", win, what, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLiveDashboardAndWatch is the way a new user meets the dashboard: a
// session owns one terminal, the agent in a pane and the cell's live view
// beside it, `agent-lock watch` attaches from a second as the same user,
// the agent's escapes show up in both, ranked, with 🔥 on the key; the
// agent cannot read the recording, another user cannot watch, q ends the
// session and gives the terminal back.
func TestLiveDashboardAndWatch(t *testing.T) {
	if os.Getenv("AGENT_LOCK_VM") != "1" || os.Geteuid() != 0 {
		t.Skip("runs in the test VMs (make vmtest)")
	}
	bin := testenv.AgentLockBin(t)
	root, dir := testenv.ProjectDir(t, uid)
	// The key the agent reaches for, and a marker it must not see.
	ssh := filepath.Join(home, ".ssh")
	os.MkdirAll(ssh, 0o700)
	os.WriteFile(filepath.Join(ssh, "id_ed25519"), []byte("KEY\n"), 0o600)
	for _, p := range []string{ssh, filepath.Join(ssh, "id_ed25519")} {
		os.Chown(p, uid, uid)
	}

	agent := `echo "hello-from-agent-$((6*7))"; sleep 2
for i in 1 2 3; do cat ~/.ssh/id_ed25519; sleep 1; done
while [ ! -f target ]; do sleep 0.2; done
cat "$(cat target)" > recording-copy 2>&1 || echo refused > recording-verdict
touch ready; exec sleep 300`

	tm := &term{t: t, socket: filepath.Join(root, "tmux.sock")}
	env := "TZ=UTC TERM=xterm-256color SUDO_UID=4242 SUDO_GID=4242 SUDO_USER=jailtest"
	tm.tmux("-f", "/dev/null", "new-session", "-d", "-s", "s", "-n", "agent", "-x", "160", "-y", "45",
		"sh", "-c", fmt.Sprintf("cd %s && env %s %s . -- sh -c '%s'; echo session-exit=$?; sleep 600", dir, env, bin, agent))
	t.Cleanup(func() { exec.Command("tmux", "-S", tm.socket, "kill-server").Run() })

	// The agent works in its pane, the escape shows in the live view
	// beside it, and the dashboard, a key away, ranks it with 🔥.
	s := tm.waitFor("s:agent", `(?s)Latest escapes.*blocked read cat\[\d+\][\s│]+~/\.ssh/id_ed25519 🔥`)
	if !strings.Contains(s, "hello-from-agent-42") {
		t.Errorf("the agent's output is not in its pane:\n%s", s)
	}
	tm.tmux("send-keys", "-t", "s:agent", "C-]")
	s = tm.waitFor("s:agent", `\d+ read .*~/\.ssh/id_ed25519`)
	for _, want := range []string{"JAILED", "🔥"} {
		if !strings.Contains(s, want) {
			t.Errorf("the session's dashboard lacks %q:\n%s", want, s)
		}
	}
	// The same user attaches from a second terminal.
	list, err := exec.Command("setpriv", "--reuid=4242", "--regid=4242", "--init-groups",
		"env", "HOME="+home, bin, "watch", "--list").CombinedOutput()
	if err != nil {
		t.Fatalf("watch --list: %v\n%s", err, list)
	}
	m := regexp.MustCompile(`(?m)^(\d{8}T\d{6}Z-\d+)\s.*\benforce\b.*` + regexp.QuoteMeta(dir)).FindStringSubmatch(string(list))
	if m == nil {
		t.Fatalf("watch --list does not show the session in %s:\n%s", dir, list)
	}
	id := m[1]
	rec := filepath.Join(home, ".local/state/agent-lock", id+".jsonl")

	// The jailed agent tries to read its own recording.
	os.WriteFile(filepath.Join(dir, "target"), []byte(rec), 0o644)
	ready := filepath.Join(dir, "ready")
	for i := 0; i < 450; i++ {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if v, _ := os.ReadFile(filepath.Join(dir, "recording-verdict")); !strings.Contains(string(v), "refused") {
		c, _ := os.ReadFile(filepath.Join(dir, "recording-copy"))
		t.Errorf("the agent read the session recording: %q", c)
	}
	tm.waitFor("s:agent", regexp.QuoteMeta(id+".jsonl"))

	tm.tmux("new-window", "-t", "s", "-n", "watch", "sh", "-c",
		fmt.Sprintf("setpriv --reuid=4242 --regid=4242 --init-groups env HOME=%s TZ=UTC TERM=xterm-256color %s watch %s; echo watch-exit=$?; sleep 600", home, bin, id))
	s = tm.waitFor("s:watch", `3 read .*~/\.ssh/id_ed25519`)
	if !strings.Contains(s, "🔥") || !strings.Contains(s, "JAILED") {
		t.Errorf("watch does not flag the key:\n%s", s)
	}
	// The live panel streams in-bounds work too (a sample of it): the
	// agent's read of target, between its refused reads.
	tm.waitFor("s:watch", `ok +read +cat\[\d+\] .*/target`)
	tm.waitFor("s:agent", `ok +read +cat\[\d+\] .*/target`)

	// Another user may not watch it.
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"env", "HOME=/nonexistent", bin, "watch", rec).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "only root and the user who started the session") {
		t.Errorf("another user's watch: %v\n%s", err, out)
	}

	// q ends the session: the agent is stopped, the terminal restored, the
	// summary printed with where the recording is.
	tm.tmux("send-keys", "-t", "s:agent", "q")
	s = tm.waitFor("s:agent", `session-exit=`)
	for _, want := range []string{"agent-lock session: JAILED (enforce)", "~/.ssh/id_ed25519 🔥", "recording: " + rec} {
		if !strings.Contains(s, want) {
			t.Errorf("after q the terminal lacks %q:\n%s", want, s)
		}
	}
	if alt := strings.TrimSpace(tm.tmux("display-message", "-p", "-t", "s:agent", "#{alternate_on}")); alt != "0" {
		t.Error("the session left its terminal in the alternate screen")
	}
	if out, _ := exec.Command("pgrep", "-f", "^sleep 300$").Output(); len(out) > 0 {
		t.Errorf("the agent outlived q: %s", out)
	}

	// The watcher sees the end and detaches with q.
	tm.waitFor("s:watch", `ended, exit`)
	tm.tmux("send-keys", "-t", "s:watch", "q")
	tm.waitFor("s:watch", `watch-exit=0`)
}
