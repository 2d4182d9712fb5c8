package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// The one-terminal session as a user lives it, in a real terminal (tmux),
// under each engine this kernel runs: a jailed shell in the pane behaves as
// in a plain terminal (commands, a full-screen pager, ^C, ^Z and fg), a
// refused read shows in the live view, the agent's clipboard write and
// title stay in the pane, a resize reflows both, the dashboard is a key
// away, detach and attach from a second terminal bring the pane back, and
// when the agent exits the pane says so and waits for a key.
func TestOneTerminal(t *testing.T) {
	bin, engs := paneSetup(t)
	for _, engine := range engs {
		t.Run(engine, func(t *testing.T) {
			root, dir := testenv.ProjectDir(t, uid)
			secret(t, "id_rsa")
			tm := newTerm(t, root, fmt.Sprintf("cd %s && env %s PS1='pane$ ' %s --engine %s . -- bash --norc; echo session-exit=$?; sleep 600",
				dir, sudoEnv, bin, engine))
			tm.Do("set-option", "-g", "set-clipboard", "on")
			tm.Do("resize-window", "-t", "s:w", "-x", "100", "-y", "30")
			tm.Await("s:w", `(?s)pane\$.*JAILED`, waitBound)

			typed := func(keys, want string) string {
				t.Helper()
				tm.Do("send-keys", "-t", "s:w", keys, "Enter")
				return tm.Await("s:w", want, waitBound)
			}
			typed("echo $((6*7))", `(?m)^42\s*$`)
			// What scrolled off the pane is a Shift+PgUp away (27 rows
			// under the live strip: a page is 26 lines), and a
			// Shift+PgDn brings the agent's screen back.
			typed("seq 1 500", `(?m)^500\s*$`)
			tm.Do("send-keys", "-t", "s:w", "S-PPage")
			s := tm.Await("s:w", `scrolled back 26 of \d+ lines`, waitBound)
			if !regexp.MustCompile(`(?m)^449\s*$`).MatchString(s) || regexp.MustCompile(`(?m)^500\s*$`).MatchString(s) {
				t.Errorf("Shift+PgUp: the pane does not show the page before the screen:\n%s", s)
			}
			tm.Do("send-keys", "-t", "s:w", "S-NPage")
			tm.Await("s:w", `(?s)^.*\n500\s*\n\s*pane\$.*ctrl\+\]: dashboard`, waitBound)
			// A full-screen program in the alternate screen, and back.
			s = typed("less /etc/services", `tcpmux`)
			if strings.Contains(s, "pane$ less") {
				t.Errorf("less did not take the pane's screen:\n%s", s)
			}
			tm.Do("send-keys", "-t", "s:w", "q")
			tm.Await("s:w", `pane\$ less /etc/services\s*\n\s*pane\$`, waitBound)
			// ^C interrupts the foreground job; ^Z stops it and fg resumes it.
			tm.Do("send-keys", "-t", "s:w", "sleep 30", "Enter")
			waitRunning(t, "^sleep 30$", tm)
			tm.Do("send-keys", "-t", "s:w", "C-c")
			waitGone(t, "^sleep 30$", 30*time.Second)
			typed("echo rc=$?", `rc=130`)
			tm.Do("send-keys", "-t", "s:w", "sleep 31", "Enter")
			waitRunning(t, "^sleep 31$", tm)
			tm.Do("send-keys", "-t", "s:w", "C-z")
			tm.Await("s:w", `Stopped\s+sleep 31`, waitBound)
			typed("fg", `(?m)^sleep 31\s*$`)
			tm.Do("send-keys", "-t", "s:w", "C-\\")
			waitGone(t, "^sleep 31$", 30*time.Second)

			// The refused read, in the pane and in the live view.
			typed("cat ~/.ssh/id_rsa", `latest: .*blocked read cat\[\d+\] ~/\.ssh/id_rsa 🔥`)
			// The report may come before cat has said so.
			tm.Await("s:w", `cat: /home/jailtest/\.ssh/id_rsa: Permission denied`, waitBound)

			// The clipboard and the title stay in the pane; the clipboard
			// write is reported.
			typed(`printf '\033]52;c;%s\007\033]2;evil-title\007' $(printf LEAKED | base64); echo osc-done`, `title: evil-title`)
			tm.Await("s:w", `latest: .*blocked clipboard bash\[\d+\] \(terminal clipboard\)`, waitBound)
			if out, err := exec.Command("tmux", "-S", tm.Socket, "show-buffer").CombinedOutput(); err == nil || strings.Contains(string(out), "LEAKED") {
				t.Errorf("the agent's OSC 52 reached the terminal's clipboard: %q", out)
			}
			if raw := tm.Do("capture-pane", "-p", "-e", "-t", "s:w"); strings.Contains(raw, "\x1b]") {
				t.Errorf("the agent's sequences reached the terminal:\n%q", raw)
			}
			if title := tm.Do("display-message", "-p", "-t", "s:w", "#{pane_title}"); strings.Contains(title, "evil") {
				t.Errorf("the agent set the terminal's title: %q", title)
			}

			// Resize: the agent's terminal follows, and the live view goes
			// beside it on a wide terminal.
			typed("echo s1=$(stty size)", `(?m)^s1=27 100\s*$`)
			tm.Do("resize-window", "-t", "s:w", "-x", "170", "-y", "45")
			s = tm.Await("s:w", `Latest escapes`, waitBound)
			if !strings.Contains(s, "│") {
				t.Errorf("at 170 columns the live view is not beside the pane:\n%s", s)
			}
			// A resize reaches the agent a moment after the terminal's
			// (SIGWINCH, relayed): the shell waits for it, up to 10 s.
			sized := func(tag, size string) string {
				return fmt.Sprintf(`for i in $(seq 100); do [ "$(stty size)" = "%s" ] && break; sleep 0.1; done; echo %s=$(stty size)`, size, tag)
			}
			typed(sized("s2", "45 129"), `(?m)^s2=45 129\s`)
			tm.Do("resize-window", "-t", "s:w", "-x", "100", "-y", "30")
			typed(sized("s3", "27 100"), `(?m)^s3=27 100\s*$`)

			// The dashboard and back, the agent running on.
			tm.Do("send-keys", "-t", "s:w", "C-]")
			tm.Await("s:w", `Escape attempts · \d+ paths`, waitBound)
			tm.Await("s:w", `1 read +~/\.ssh/id_rsa`, waitBound)
			tm.Do("send-keys", "-t", "s:w", "C-]")
			typed("echo back", `(?m)^back\s*$`)

			// The agent may not attach to its own session's socket (the
			// kernel refuses the connect, or, where Landlock lets it
			// through, the session does); either way it is reported.
			rec := newestRecording(t)
			id := strings.TrimSuffix(filepath.Base(rec), ".jsonl")
			sock := strings.TrimSuffix(rec, ".jsonl") + ".sock"
			os.WriteFile(filepath.Join(dir, "attach.py"), []byte(`import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    print("connected")
    s.sendall(b'{"hello":{"env":[]}}\n')
    print("reply", s.recv(4096))
except OSError as e:
    print("refused", e)
`), 0o644)
			s = typed("python3 attach.py "+sock+"; echo attach-tried", `(?m)^attach-tried`)
			// Connected: the session refused it. Not: the kernel did, which
			// Landlock reports only with the host's audit on (a limit the
			// engine states), the BPF LSM always.
			connected := regexp.MustCompile(`(?m)^connected`).MatchString(s)
			typed("echo still-mine", `(?m)^still-mine\s`)
			tm.Do("send-keys", "-t", "s:w", "C-]")
			tm.Await("s:w", `Escape attempts`, waitBound)
			tm.Do("send-keys", "-t", "s:w", "d")
			s = tm.Await("s:w", `session-exit=0`, waitBound)
			if !strings.Contains(s, "detached") || !strings.Contains(s, "agent-lock attach "+id) {
				t.Errorf("the detach does not say how to come back:\n%s", s)
			}
			if pids := running(`^bash --norc$`); len(pids) == 0 {
				t.Fatal("the agent did not outlive the detach")
			}
			tm.Do("new-window", "-t", "s", "-n", "a2", "sh", "-c",
				fmt.Sprintf("setpriv --reuid=%d --regid=%d --init-groups env HOME=%s TERM=xterm-256color %s attach; echo attach-exit=$?; sleep 600", uid, uid, home, bin))
			// The pane as it was: the agent's screen, the live view.
			if s := tm.Await("s:a2", `(?m)^still-mine`, waitBound); !strings.Contains(s, "JAILED") {
				t.Errorf("the attached terminal lacks the live view:\n%s", s)
			}
			tm.Do("send-keys", "-t", "s:a2", "echo again-$((2+3))", "Enter")
			tm.Await("s:a2", `(?m)^again-5\s`, waitBound)

			// The agent exits: the pane says so and waits for a key, then
			// the summary (q in the dashboard is TestLiveDashboardAndWatch's
			// and TestSummaryAfterQIsTheRecordings').
			tm.Do("send-keys", "-t", "s:a2", "exit 3", "Enter")
			tm.Await("s:a2", `the agent has exited \(exit 3\): press any`, waitBound)
			waitGone(t, `^bash --norc$`, 30*time.Second)
			tm.Do("send-keys", "-t", "s:a2", "x")
			s = tm.Await("s:a2", `attach-exit=\d+`, waitBound)
			for _, want := range []string{"agent-lock session: JAILED", "~/.ssh/id_rsa 🔥", "recording: " + rec, "attach-exit=3"} {
				if !strings.Contains(s, want) {
					t.Errorf("after the agent's exit the terminal lacks %q:\n%s", want, s)
				}
			}
			r, err := testenv.ReadReport(rec)
			if err != nil || r.Summary == nil {
				t.Fatalf("the recording has no summary: %v", err)
			}
			clip, attach, connect := 0, 0, 0
			for _, e := range r.Escapes {
				switch {
				case e.Op == "clipboard":
					clip++
				case e.Op == "attach" && e.Path == sock:
					attach++
				case e.Op == "connect" && e.Path == sock:
					connect++
				}
			}
			if clip != 1 {
				t.Errorf("the recording has %d clipboard escapes, want 1", clip)
			}
			switch {
			case connected && attach == 0:
				t.Errorf("the agent connected to %s and the session's refusal is not in the recording", sock)
			case !connected && engine == "bpf-lsm" && connect == 0:
				t.Errorf("the kernel's refusal of the agent's connect to %s is not in the recording", sock)
			}
		})
	}
}

// TestExitWithAgent: with --exit-with-agent the session ends with the
// agent, no key asked for (without, TestOneTerminal's pane waits).
func TestExitWithAgent(t *testing.T) {
	bin, engs := paneSetup(t)
	root, dir := testenv.ProjectDir(t, uid)
	tm := newTerm(t, root, fmt.Sprintf("cd %s && env %s %s --exit-with-agent --engine %s . -- sh -c 'echo agent-ran; exit 4'; echo session-exit=$?; sleep 600",
		dir, sudoEnv, bin, engs[0]))
	s := tm.Await("s:w", `session-exit=\d+`, waitBound)
	for _, want := range []string{"session-exit=4", "agent-lock session: JAILED"} {
		if !strings.Contains(s, want) {
			t.Errorf("the terminal lacks %q:\n%s", want, s)
		}
	}
}

// TestHeadlessOnATerminal: --headless leaves the terminal to the agent and
// writes nothing over its screen while it runs; one summary after.
func TestHeadlessOnATerminal(t *testing.T) {
	bin, engs := paneSetup(t)
	for _, engine := range engs {
		t.Run(engine, func(t *testing.T) {
			root, dir := testenv.ProjectDir(t, uid)
			secret(t, "id_rsa")
			tm := newTerm(t, root, fmt.Sprintf("cd %s && env %s %s --headless --engine %s . -- sh -c 'cat ~/.ssh/id_rsa 2>/dev/null; sleep 2; echo agent-output-end'; echo session-exit=$?; sleep 600",
				dir, sudoEnv, bin, engine))
			s := tm.Await("s:w", `session-exit=\d+`, waitBound)
			before, after, ok := strings.Cut(s, "agent-output-end")
			if !ok {
				t.Fatalf("the agent's output is not on the terminal:\n%s", s)
			}
			if strings.Contains(before, "id_rsa") || strings.Contains(before, "BLOCKED") {
				t.Errorf("agent-lock wrote over the agent's screen while it ran:\n%s", before)
			}
			for _, want := range []string{"agent-lock session: JAILED", "~/.ssh/id_rsa 🔥", "session recorded in"} {
				if !strings.Contains(after, want) {
					t.Errorf("the summary after the agent exits lacks %q:\n%s", want, after)
				}
			}
			if n := len(regexp.MustCompile(`agent-lock session:`).FindAllString(after, -1)); n != 1 {
				t.Errorf("%d summaries, want one:\n%s", n, after)
			}
		})
	}
}

// paneSetup is lifecycleSetup for the terminal's tests: in the VM guests
// the BPF LSM only, natively every engine (there: Landlock). The pane is
// the same code under either engine; what differs (the agent's terminal
// granted, the refusals reported) is checked once for each, and CI's
// minutes under emulation are not spent twice on the rest.
func paneSetup(t *testing.T) (string, []string) {
	bin, engs := lifecycleSetup(t)
	if os.Getenv("AGENT_LOCK_NATIVE") != "1" && slices.Contains(engs, "bpf-lsm") {
		engs = []string{"bpf-lsm"}
	}
	return bin, engs
}

// secret puts a key the agent will reach for in the test user's ~/.ssh.
func secret(t *testing.T, name string) {
	t.Helper()
	ssh := filepath.Join(home, ".ssh")
	os.MkdirAll(ssh, 0o700)
	p := filepath.Join(ssh, name)
	if err := os.WriteFile(p, []byte("KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{ssh, p} {
		os.Chown(f, uid, uid)
	}
}
