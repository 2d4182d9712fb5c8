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
	"github.com/agent-lock/agent-lock/test/tmuxterm"
)

// The VM's unprivileged test user (test/guest-suite.sh makes it).
const (
	uid  = 4242
	home = "/home/jailtest"
)

// waitBound only keeps a broken build from hanging the suite (QEMU without
// KVM is slow); it is not a speed target.
const waitBound = 90 * time.Second

// TestLiveDashboardAndWatch is the way a new user meets the dashboard: a
// session owns one terminal, the agent in a pane and the cell's live view
// beside it, `agent-lock watch` attaches from a second as the same user,
// the agent's escapes show up in both, ranked, with 🔥 on the key; the
// agent cannot read the recording, another user cannot watch, q ends the
// session and gives the terminal back.
func TestLiveDashboardAndWatch(t *testing.T) {
	testenv.NeedVM(t)
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

	env := "TZ=UTC TERM=xterm-256color SUDO_UID=4242 SUDO_GID=4242 SUDO_USER=jailtest"
	tm := tmuxterm.New(t, filepath.Join(root, "tmux.sock"), 160, 45,
		fmt.Sprintf("cd %s && env %s %s . -- sh -c '%s'; echo session-exit=$?; sleep 600", dir, env, bin, agent))

	// The agent works in its pane, the escape shows in the live view
	// beside it, and the dashboard, a key away, ranks it with 🔥.
	s := tm.Await("s:w", `(?s)Latest escapes.*blocked read cat\[\d+\][\s│]+~/\.ssh/id_ed25519 🔥`, waitBound)
	if !strings.Contains(s, "hello-from-agent-42") {
		t.Errorf("the agent's output is not in its pane:\n%s", s)
	}
	tm.Do("send-keys", "-t", "s:w", "C-]")
	s = tm.Await("s:w", `\d+ read .*~/\.ssh/id_ed25519`, waitBound)
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
	tm.Await("s:w", regexp.QuoteMeta(id+".jsonl"), waitBound)

	tm.Do("new-window", "-t", "s", "-n", "watch", "sh", "-c",
		fmt.Sprintf("setpriv --reuid=4242 --regid=4242 --init-groups env HOME=%s TZ=UTC TERM=xterm-256color %s watch %s; echo watch-exit=$?; sleep 600", home, bin, id))
	s = tm.Await("s:watch", `3 read .*~/\.ssh/id_ed25519`, waitBound)
	if !strings.Contains(s, "🔥") || !strings.Contains(s, "JAILED") {
		t.Errorf("watch does not flag the key:\n%s", s)
	}
	// The live panel streams in-bounds work too (a sample of it): the
	// agent's read of target, between its refused reads.
	tm.Await("s:watch", `ok +read +cat\[\d+\] .*/target`, waitBound)
	tm.Await("s:w", `ok +read +cat\[\d+\] .*/target`, waitBound)

	// Another user may not watch it.
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"env", "HOME=/nonexistent", bin, "watch", rec).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "only root and the user who started the session") {
		t.Errorf("another user's watch: %v\n%s", err, out)
	}

	// q ends the session: the agent is stopped, the terminal restored, the
	// summary printed with where the recording is.
	tm.Do("send-keys", "-t", "s:w", "q")
	s = tm.Await("s:w", `session-exit=`, waitBound)
	// Either engine: the Landlock engine names itself after "enforce".
	for _, want := range []string{"agent-lock session: JAILED (enforce", "~/.ssh/id_ed25519 🔥", "recording: " + rec} {
		if !strings.Contains(s, want) {
			t.Errorf("after q the terminal lacks %q:\n%s", want, s)
		}
	}
	if alt := strings.TrimSpace(tm.Do("display-message", "-p", "-t", "s:w", "#{alternate_on}")); alt != "0" {
		t.Error("the session left its terminal in the alternate screen")
	}
	if out, _ := exec.Command("pgrep", "-f", "^sleep 300$").Output(); len(out) > 0 {
		t.Errorf("the agent outlived q: %s", out)
	}

	// The watcher sees the end and detaches with q.
	tm.Await("s:watch", `ended, exit`, waitBound)
	tm.Do("send-keys", "-t", "s:watch", "q")
	tm.Await("s:watch", `watch-exit=0`, waitBound)
}
