package cli_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// askDaemon speaks the daemon's protocol by hand, as a process of a cell
// could: python3 -c askDaemon SOCKET OP ARGS... asks for op with args, with
// its folder and standard streams.
const askDaemon = `import json, os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
req = json.dumps({"v": 1, "op": sys.argv[2], "env": ["PATH=/usr/bin:/bin"], "args": sys.argv[3:]}).encode()
socket.send_fds(s, [struct.pack(">I", len(req)) + req], [os.open(".", os.O_PATH | os.O_DIRECTORY), 0, 1, 2])
n = struct.unpack(">I", s.recv(4))[0]
print("reply:", s.recv(n).decode(), flush=True)
`

// TestDaemon: with agent-lock's daemon running, the test user runs
// agent-lock as themselves, no sudo, under each engine: the agent runs as
// the user with the user's PATH and variables (credentials withheld), the
// cell refuses and reports a read outside it, and the agent's exit status
// is the client's. A process of a cell that asks the daemon for a cell of
// its own choosing gets none (unjailed, the same request reads the
// secret: the test is real). Killing the client ends its session and
// everything in it; killing the daemon changes nothing for a running
// session, which stays confined and still tells its client how it ended.
// With no daemon, the BPF-LSM engine says how to start one.
func TestDaemon(t *testing.T) {
	bin, engs := lifecycleSetup(t)
	root, dir := testenv.ProjectDir(t, uid)
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(root, "daemon", "agent-lock.sock")
	daemon, dlog := startDaemonLog(t, bin, sock)
	// The daemon loads the next session's programs ahead, of the engine
	// auto picks here; a session of that engine takes them.
	aheadFor := map[string]string{"the BPF LSM's hooks": "bpf-lsm", "the Landlock engine's observers": "landlock"}
	ahead := func() string {
		for range 600 {
			// Ready since the last session took the one before.
			log := dlog()
			last := strings.LastIndex(log, "agent-lock daemon: session ")
			// And the next session's agent-lock, started ahead.
			if strings.LastIndex(log, "network programs are ready") <= last || strings.LastIndex(log, "a session is ready ahead") <= last {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if i := strings.LastIndex(log, "programs are ready: "); i >= 0 && i > last {
				what, _, _ := strings.Cut(log[i+len("programs are ready: "):], ",")
				return aheadFor[what]
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("the daemon loaded nothing ahead:\n%s", dlog())
		return ""
	}
	tookAhead := false

	secretPath := filepath.Join(root, "secret.txt")
	os.WriteFile(secretPath, []byte("the-secret-4242\n"), 0o600)
	os.Chown(secretPath, uid, uid)
	userBin := filepath.Join(dir, "bin")
	os.Mkdir(userBin, 0o755)
	os.WriteFile(filepath.Join(userBin, "myagent"), []byte(`#!/bin/sh
echo "uid=$(id -u)"; echo "path=$PATH"; echo "setting=$MY_SETTING"; echo "key=$ANTHROPIC_API_KEY"; echo "token=${GITHUB_TOKEN:-none}"
cat `+secretPath+`
exit 3
`), 0o755)
	os.WriteFile(filepath.Join(dir, "ask.py"), []byte(askDaemon), 0o644)
	userPath := userBin + ":/usr/local/bin:/usr/bin:/bin"
	asUser := func(socket string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + userPath, "HOME=" + u.HomeDir, "AGENT_LOCK_SOCKET=" + socket,
			"MY_SETTING=hello", "ANTHROPIC_API_KEY=sk-test", "GITHUB_TOKEN=ghp-test"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return cmd
	}

	// doctor, as the user, says the daemon answers.
	if out, _ := asUser(sock, "doctor", "--engine", "landlock").CombinedOutput(); !strings.Contains(string(out), "daemon         listening at "+sock) {
		t.Errorf("doctor did not see the daemon:\n%s", out)
	}

	for _, engine := range engs {
		t.Run(engine, func(t *testing.T) {
			rep := testenv.ReportPath(t, uid)
			readyFor := ahead()
			out, err := asUser(sock, "--headless", "--engine", engine, "--env", "ANTHROPIC_API_KEY", "--report", rep, ".", "--", "myagent").CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
				t.Fatalf("the agent's exit status 3 did not come back (%v):\n%s", err, out)
			}
			// The network's programs, which every session uses.
			if r, _ := os.ReadFile(rep); !strings.Contains(string(r), `"step":"network_load_ahead"`) {
				t.Errorf("the session did not take the network programs the daemon loaded ahead of it:\n%s\n%s", out, r)
			}
			// The agent-lock started ahead took the request.
			var mine string
			for _, l := range strings.Split(dlog(), "\n") {
				if strings.Contains(l, "agent-lock daemon: session ") && strings.HasSuffix(l, `"myagent"]`) {
					mine = l
				}
			}
			if !strings.Contains(mine, ", started ahead): ") {
				t.Errorf("the session was not the one started ahead (%q):\n%s", mine, dlog())
			}
			if r, _ := os.ReadFile(rep); readyFor == engine {
				tookAhead = true
				if !strings.Contains(string(r), `"step":"load_ahead"`) || !strings.Contains(string(r), `"step":"attach_ahead"`) {
					t.Errorf("the session did not take the programs the daemon loaded ahead of it (%s):\n%s\n%s", readyFor, out, r)
				}
			}
			for _, want := range []string{"uid=4242\n", "path=" + userPath + "\n", "setting=hello\n", "key=sk-test\n", "token=none\n"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("the agent did not print %q:\n%s", want, out)
				}
			}
			if strings.Contains(string(out), "the-secret") {
				t.Errorf("the agent read the secret:\n%s", out)
			}
			if r, _ := os.ReadFile(rep); !strings.Contains(string(r), `"path":"`+secretPath+`","verdict":"blocked"`) {
				t.Errorf("the refused read was not reported:\n%s", r)
			}

			// Unjailed, the request reads the secret; from the cell it must not.
			ask := []string{"ask.py", sock, "run", "--headless", "--allow", filepath.Dir(secretPath), ".", "--", "cat", secretPath}
			free := exec.Command("/usr/bin/python3", ask...)
			free.Dir, free.SysProcAttr = dir, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
			if out, err := free.CombinedOutput(); err != nil || !strings.Contains(string(out), "the-secret") {
				t.Fatalf("unjailed, the request did not read the secret (%v):\n%s", err, out)
			}
			out, _ = asUser(sock, append([]string{"--headless", "--engine", engine, "--report", "/dev/null", ".", "--", "/usr/bin/python3"}, ask...)...).CombinedOutput()
			if strings.Contains(string(out), "the-secret") || strings.Contains(string(out), `"exit"`) {
				t.Errorf("a process of a cell got a session from the daemon:\n%s", out)
			}
		})
	}

	if !tookAhead {
		t.Errorf("no session was of the engine the daemon loaded ahead for (%v):\n%s", engs, dlog())
	}

	// The session started ahead ended while it waits (SIGTERM, as a
	// system's shutdown sends): it takes no request, and the daemon
	// starts another, which takes the next (the client killed, below).
	ahead()
	readyPids := func() []string {
		var pids []string
		for _, m := range regexp.MustCompile(`a session is ready ahead \(pid (\d+)\)`).FindAllStringSubmatch(dlog(), -1) {
			pids = append(pids, m[1])
		}
		return pids
	}
	before := readyPids()
	idle, _ := strconv.Atoi(before[len(before)-1])
	syscall.Kill(idle, syscall.SIGTERM)
	for i := 0; len(readyPids()) == len(before); i++ {
		if i > 600 {
			t.Fatalf("no session started ahead again after the idle one was killed:\n%s", dlog())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(dlog(), "ended before any request") {
		t.Errorf("the daemon did not say the idle session ended:\n%s", dlog())
	}

	// The client killed: its session ends, and everything in it. It takes
	// the programs loaded ahead, and the next are loaded once its agent
	// runs (its session closes spareDesc.Started's pipe), not at its end.
	ahead()
	client := asUser(sock, "--headless", "--report", "/dev/null", ".", "--", "sh", "-c", "exec sleep 3217")
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, `^sleep 3217`)
	ahead()
	client.Process.Kill()
	client.Wait()
	waitGone(t, `sleep 3217`, 60*time.Second)

	// The session's agent-lock killed (SIGKILL: nothing of it runs on):
	// the reaper it started ahead, while it waited for a request, kills
	// the cell (the agent's child included, which no parent-death signal
	// reaches). It started its network's self-test ahead too, and moved
	// it into the cell.
	ahead()
	children := func(pid, re string) string {
		out, _ := exec.Command("pgrep", "-P", pid, "-af", re).Output()
		return strings.TrimSpace(string(out))
	}
	ready := regexp.MustCompile(`a session is ready ahead \(pid (\d+)\)`).FindAllStringSubmatch(dlog(), -1)
	if len(ready) == 0 {
		t.Fatalf("no session ready ahead:\n%s", dlog())
	}
	standby := ready[len(ready)-1][1]
	if children(standby, `__netprobe -$`) == "" || children(standby, `__reaper -$`) == "" {
		t.Errorf("the session ready ahead has not started its self-test and reaper: %q", children(standby, "."))
	}
	client = asUser(sock, "--headless", "--report", "/dev/null", ".", "--", "sh", "-c", "sleep 3231 & wait")
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, `^sleep 3231`)
	m := regexp.MustCompile(`session (\d+) for uid \d+ \(pid \d+, started ahead\): .*"sleep 3231 & wait"`).FindStringSubmatch(dlog())
	if m == nil {
		t.Fatalf("the session was not the one started ahead:\n%s", dlog())
	}
	if m[1] != standby {
		t.Errorf("the session %s was not the one ready ahead (%s)", m[1], standby)
	}
	if children(m[1], `__reaper -$`) == "" || children(m[1], `__reaper /`) != "" {
		t.Errorf("the session's reaper was not the one it started ahead: %q", children(m[1], `__reaper`))
	}
	if c := children(m[1], `__netprobe`); c != "" {
		t.Errorf("the session's network self-test started ahead was not the one it ran: %q", c)
	}
	pid, _ := strconv.Atoi(m[1])
	syscall.Kill(pid, syscall.SIGKILL)
	waitGone(t, `sleep 3231`, 60*time.Second)
	client.Wait()

	// The daemon killed: the session runs on, confined, and its client
	// still learns how it ended.
	client = asUser(sock, "--headless", "--report", "/dev/null", ".", "--", "sh", "-c",
		"sleep 4.321; cat "+secretPath+"; echo after=$?; exit 5")
	var outBuf strings.Builder
	client.Stdout, client.Stderr = &outBuf, &outBuf
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, `^sleep 4.321`)
	daemon.Process.Kill()
	daemon.Wait()
	err = client.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 || !strings.Contains(outBuf.String(), "after=1") || strings.Contains(outBuf.String(), "the-secret") {
		t.Errorf("after the daemon died, the session did not end confined with its status 5 (%v):\n%s", err, outBuf.String())
	}

	// No daemon: the BPF-LSM engine says how to start one (Landlock
	// jails alone: TestAloneWithoutDaemon).
	out, err := asUser(filepath.Join(root, "none.sock"), "--headless", "--engine", "bpf-lsm", ".", "--", "true").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), "sudo agent-lock install") {
		t.Errorf("with no daemon: %v\n%s", err, out)
	}
}

// TestDaemonPane: on a terminal, agent-lock run as the user through the
// daemon shows the agent in its pane, with the user's environment; with
// --headless the agent has a terminal as under sudo: a shell there has job
// control, ^C interrupts its command, and its exit status is the client's.
func TestDaemonPane(t *testing.T) {
	bin, engs := lifecycleSetup(t)
	root, dir := testenv.ProjectDir(t, uid)
	sock := filepath.Join(root, "daemon", "agent-lock.sock")
	startDaemon(t, bin, sock)
	asUser := fmt.Sprintf("cd %s && env -i PATH=/usr/bin:/bin TERM=xterm-256color MY_SETTING=pane AGENT_LOCK_SOCKET=%s /usr/bin/setpriv --reuid=%d --regid=%d --clear-groups %s --engine %s",
		dir, sock, uid, uid, bin, engs[0])
	tm := newTerm(t, root, asUser+" . -- sh -c 'echo setting=$MY_SETTING uid=$(id -u); sleep 600'; sleep 600")
	tm.Await("s:w", `setting=pane uid=4242`, waitBound)

	os.Mkdir(filepath.Join(root, "headless"), 0o755)
	tm = newTerm(t, filepath.Join(root, "headless"), asUser+" --headless --report /dev/null . -- bash --norc -i; echo client-exit=$?; sleep 600")
	tm.Await("s:w", `bash-[0-9.]+\$`, waitBound)
	tm.Do("send-keys", "-t", "s:w", "sleep 3219", "Enter")
	waitRunning(t, `^sleep 3219`, tm)
	tm.Do("send-keys", "-t", "s:w", "C-c")
	waitGone(t, `^sleep 3219`, 30*time.Second)
	tm.Do("send-keys", "-t", "s:w", "sleep 3221 &", "Enter", "jobs", "Enter")
	tm.Await("s:w", `Running +sleep 3221`, waitBound)
	tm.Do("send-keys", "-t", "s:w", "exit 4", "Enter")
	s := tm.Await("s:w", `client-exit=\d+`, waitBound)
	if !strings.Contains(s, "client-exit=4") || strings.Contains(s, "no job control") {
		t.Errorf("the headless shell through the daemon:\n%s", s)
	}

	// Output to a pipe: the terminal the agent gets as its input is the
	// shell's, which must keep it (a session taking it as its agent's
	// controlling terminal would take it from the shell).
	os.Mkdir(filepath.Join(root, "piped"), 0o755)
	tm = newTerm(t, filepath.Join(root, "piped"), "bash --norc -i")
	tm.Do("send-keys", "-t", "s:w", asUser+" --headless --report /dev/null . -- sh -c 'echo piped-$((6*7))' | cat; echo shell-tty=$(ps -o tty= -p $$)", "Enter")
	s = tm.Await("s:w", `(?m)^shell-tty=(pts/\d+|\?)\s*$`, waitBound)
	if !strings.Contains(s, "piped-42") || !regexp.MustCompile(`shell-tty=pts/\d+`).MatchString(s) {
		t.Errorf("a session's input the shell's terminal:\n%s", s)
	}
}

// TestDaemonSecondUser: a second user can neither see nor touch the first
// user's session through the daemon: watch --list does not show it, its
// recording and its pane's socket are out of reach, its agent and its
// agent-lock take no signal, and the daemon has no request that names a
// session (asked to attach to, end, watch or list one, it says it has no
// such request: one added must answer another user with an error); the
// session runs on untouched. Root sees it.
func TestDaemonSecondUser(t *testing.T) {
	bin, engs := lifecycleSetup(t)
	root, dir := testenv.ProjectDir(t, uid)
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(root, "daemon", "agent-lock.sock")
	startDaemon(t, bin, sock)
	tm := newTerm(t, root, fmt.Sprintf("cd %s && env -i PATH=/usr/bin:/bin HOME=%s TERM=xterm-256color AGENT_LOCK_SOCKET=%s /usr/bin/setpriv --reuid=%d --regid=%d --clear-groups %s --engine %s . -- sh -c 'echo first-user-ready; exec sleep 3229'; sleep 600",
		dir, u.HomeDir, sock, uid, uid, bin, engs[0]))
	tm.Await("s:w", `first-user-ready`, waitBound)
	waitRunning(t, `^sleep 3229`)

	// Root sees it, with its recording and its pane's socket.
	list, err := exec.Command("env", "HOME="+u.HomeDir, bin, "watch", "--list").CombinedOutput()
	m := regexp.MustCompile(`(?m)^(\d{8}T\d{6}Z-\d+)\s+running\s.*` + regexp.QuoteMeta(dir)).FindStringSubmatch(string(list))
	if err != nil || m == nil {
		t.Fatalf("root's watch --list does not show the session in %s (%v):\n%s", dir, err, list)
	}
	id := m[1]
	rec := filepath.Join(u.HomeDir, ".local/state/agent-lock", id+".jsonl")
	paneSock := strings.TrimSuffix(rec, ".jsonl") + ".sock"
	if _, err := os.Stat(paneSock); err != nil {
		t.Fatalf("the session's pane socket: %v", err)
	}

	// The second user: a uid with no session, and a home of its own.
	const other = 4243
	otherHome := filepath.Join(root, "other")
	os.Mkdir(otherHome, 0o700)
	os.Chown(otherHome, other, other)
	asOther := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = otherHome, []string{"PATH=/usr/bin:/bin", "HOME=" + otherHome, "AGENT_LOCK_SOCKET=" + sock}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: other, Gid: other}}
		out, err := cmd.CombinedOutput()
		t.Logf("as %d, %s ... %s: %s(%v)", other, filepath.Base(name), args[len(args)-1], out, err)
		return fmt.Sprintf("%s(%v)", out, err)
	}
	if out := asOther(bin, "watch", "--list"); strings.Contains(out, id) {
		t.Errorf("the second user's watch --list shows the first's session:\n%s", out)
	}
	if out := asOther(bin, "watch", rec); !strings.Contains(out, "only root and the user who started the session can watch it") {
		t.Errorf("the second user watched the first's session:\n%s", out)
	}
	if out := asOther("/usr/bin/python3", "-c", "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print('connected')", paneSock); !strings.Contains(out, "PermissionError") {
		t.Errorf("the second user reached the first's pane socket:\n%s", out)
	}
	agents := running(`^sleep 3229`)
	sessions := running(`__daemon-session`)
	if len(agents) < 2 || len(sessions) < 2 {
		t.Fatalf("the agent (%q) or its agent-lock (%q) is not running", agents, sessions)
	}
	for _, pid := range []string{agents[0], sessions[0]} {
		if out := asOther("kill", "-KILL", pid); !strings.Contains(out, "exit status") {
			t.Errorf("the second user signalled %s:\n%s", pid, out)
		}
	}
	for _, op := range []string{"attach", "end", "watch", "list"} {
		if out := asOther("/usr/bin/python3", "-c", askDaemon, sock, op, id); !strings.Contains(out, `"error"`) || strings.Contains(out, `"exit"`) {
			t.Errorf("the daemon's answer to %s %s:\n%s", op, id, out)
		}
	}
	if len(running(`^sleep 3229`)) == 0 || !strings.Contains(tm.Shows("s:w"), "first-user-ready") {
		t.Errorf("the first user's session did not run on:\n%s", tm.Shows("s:w"))
	}
}

// startDaemon runs agent-lock's daemon on sock, with flags, until the
// test ends; its log is shown if the test failed.
func startDaemon(t *testing.T, bin, sock string, flags ...string) *exec.Cmd {
	t.Helper()
	d, _ := startDaemonLog(t, bin, sock, flags...)
	return d
}

// startDaemonLog is startDaemon that also returns the daemon's log so far.
func startDaemonLog(t *testing.T, bin, sock string, flags ...string) (*exec.Cmd, func() string) {
	t.Helper()
	d, log, err := testenv.Daemon(bin, sock, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemon's log:\n%s", log())
		}
	})
	return d, log
}

// TestDaemonTwentyCells: twenty sessions through one daemon at once, each
// with a policy of its own (its own DIR); each reads its own file and
// reaches for the next one's, and each report holds its own refusal and no
// other cell's events.
//
// Natively, under the Landlock engine: under the BPF LSM each session
// attaches programs of its own, and the kernel links at most 38 to one
// hook, so at most 19 sessions run at once (the next is told why), and
// twenty sessions' start takes minutes under emulation.
func TestDaemonTwentyCells(t *testing.T) {
	if os.Getenv("AGENT_LOCK_NATIVE") != "1" {
		t.Skip("natively only (make native): under the BPF LSM at most 19 sessions run at once")
	}
	bin, engs := lifecycleSetup(t)
	root, _ := testenv.ProjectDir(t, uid)
	sock := filepath.Join(root, "daemon", "agent-lock.sock")
	startDaemon(t, bin, sock, "--per-user", "20", "--total", "20")
	const n = 20
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = filepath.Join(root, fmt.Sprintf("cell%02d", i))
		os.Mkdir(dirs[i], 0o755)
		os.WriteFile(filepath.Join(dirs[i], "own.txt"), []byte(fmt.Sprintf("own-%02d\n", i)), 0o644)
		os.Chown(dirs[i], uid, uid)
	}
	type result struct {
		out []byte
		err error
	}
	results := make([]chan result, n)
	reports := make([]string, n)
	for i := range dirs {
		results[i] = make(chan result, 1)
		reports[i] = testenv.ReportPath(t, uid)
		next := filepath.Join(dirs[(i+1)%n], "own.txt")
		cmd := exec.Command(bin, "--headless", "--engine", engs[0], "--report", reports[i], ".", "--",
			"sh", "-c", "cat own.txt; cat "+next+"; sleep 2")
		cmd.Dir, cmd.Env = dirs[i], []string{"PATH=/usr/bin:/bin", "AGENT_LOCK_SOCKET=" + sock}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		go func() {
			out, err := cmd.CombinedOutput()
			results[i] <- result{out, err}
		}()
	}
	for i := range dirs {
		r := <-results[i]
		own, next := fmt.Sprintf("own-%02d", i), fmt.Sprintf("own-%02d", (i+1)%n)
		if r.err != nil || !strings.Contains(string(r.out), own) || strings.Contains(string(r.out), next) {
			t.Errorf("cell %d (%v):\n%s", i, r.err, r.out)
			continue
		}
		rep, _ := os.ReadFile(reports[i])
		nextPath := filepath.Join(dirs[(i+1)%n], "own.txt")
		if !strings.Contains(string(rep), `"path":"`+nextPath+`","verdict":"blocked"`) {
			t.Errorf("cell %d's report lacks its refusal of %s:\n%s", i, nextPath, rep)
		}
		for j := range dirs {
			if j != i && j != (i+1)%n && strings.Contains(string(rep), dirs[j]+"/") {
				t.Errorf("cell %d's report names cell %d's files:\n%s", i, j, rep)
			}
		}
	}
}

// holdConnections opens n connections to the daemon as the test user and
// holds them, a frame's length sent and nothing more, until its standard
// input closes.
const holdConnections = `import socket, struct, sys
held = []
for i in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sys.argv[1])
        s.send(struct.pack(">I", 1 << 20))
    except OSError:
        pass
    held.append(s)
print("held", flush=True)
sys.stdin.read()
`

// TestDaemonLimits: the daemon outlasts a user who floods it (connections
// that never finish, past its descriptors), refuses root, counts the
// sessions running when it restarts as its own (a restart is no way
// around the bound), and says the same of a folder the user cannot reach
// as of one that does not exist.
func TestDaemonLimits(t *testing.T) {
	bin, engs := lifecycleSetup(t)
	root, dir := testenv.ProjectDir(t, uid)
	sock := filepath.Join(root, "daemon", "agent-lock.sock")
	os.MkdirAll(filepath.Dir(sock), 0o755)
	var dlog func() string
	start := func() *exec.Cmd {
		d, log := startDaemonLog(t, bin, sock, "--per-user", "1")
		dlog = log
		// 512 descriptors, which a flood of 700 connections held would
		// use up, were each one held.
		if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(d.Process.Pid), "--nofile=512:512").CombinedOutput(); err != nil {
			t.Fatalf("prlimit: %v: %s", err, out)
		}
		return d
	}
	// Until the daemon's agent-lock started ahead waits (since the last
	// session), which takes the next request.
	standby := func() {
		for range 600 {
			log := dlog()
			if strings.LastIndex(log, "a session is ready ahead") > strings.LastIndex(log, "agent-lock daemon: session ") {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("the daemon started no session ahead:\n%s", dlog())
	}
	asUser := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, []string{"PATH=/usr/bin:/bin", "AGENT_LOCK_SOCKET=" + sock}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return cmd
	}
	d := start()

	flood := asUser("/usr/bin/python3", "-c", holdConnections, sock, "700")
	in, _ := flood.StdinPipe()
	out, _ := flood.StdoutPipe()
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	if l, err := bufio.NewReader(out).ReadString('\n'); l != "held\n" {
		t.Fatalf("the flood: %q %v", l, err)
	}
	in.Close()
	flood.Wait()
	if got, err := asUser(bin, "--headless", "--engine", engs[0], "--report", "/dev/null", ".", "--", "echo", "after-the-flood").CombinedOutput(); err != nil || !strings.Contains(string(got), "after-the-flood") {
		t.Fatalf("after a flood the daemon did not start a session (%v):\n%s", err, got)
	}

	// Root is refused: it runs agent-lock itself.
	if c, err := net.Dial("unix", sock); err != nil {
		t.Error(err)
	} else {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		got, _ := io.ReadAll(c)
		c.Close()
		if !strings.Contains(string(got), "root runs agent-lock itself") {
			t.Errorf("root's request: %q", got)
		}
	}

	// One session a user: the second is refused, by a restarted daemon too.
	// The first is the one started ahead: counted once it took the request
	// (by its name), not while it waited.
	standby()
	long := asUser(bin, "--headless", "--engine", engs[0], "--report", "/dev/null", ".", "--", "sleep", "3223")
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { long.Process.Kill(); long.Wait() }()
	waitRunning(t, `^sleep 3223`)
	if !strings.Contains(dlog(), ", started ahead): ") {
		t.Fatalf("the first session was not the one started ahead:\n%s", dlog())
	}
	second := func() string {
		got, _ := asUser(bin, "--headless", "--report", "/dev/null", ".", "--", "true").CombinedOutput()
		return string(got)
	}
	if got := second(); !strings.Contains(got, "too many sessions running (1 of yours") {
		t.Errorf("a second session beside the first:\n%s", got)
	}
	firstLog := dlog()
	d.Process.Kill()
	d.Wait()
	os.Remove(sock)
	start()
	standby()
	if got := second(); !strings.Contains(got, "too many sessions running (1 of yours") {
		t.Errorf("a second session, the daemon restarted:\n%s", got)
	}
	long.Process.Kill()
	long.Wait()
	waitGone(t, `sleep 3223`, 60*time.Second)
	// And its agent-lock, still counted while it ends.
	if m := regexp.MustCompile(`session (\d+) for uid \d+ \(pid \d+, started ahead\): .*"sleep" "3223"`).FindStringSubmatch(firstLog); m != nil {
		for i := 0; ; i++ {
			if _, err := os.Stat("/proc/" + m[1]); err != nil {
				break
			}
			if i > 300 {
				t.Fatalf("the session %s did not end", m[1])
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// A folder the user may not reach reads as one that does not exist.
	hidden := filepath.Join(root, "private")
	os.MkdirAll(filepath.Join(hidden, "there"), 0o700)
	a, _ := asUser(bin, "--headless", filepath.Join(hidden, "there"), "--", "true").CombinedOutput()
	b, _ := asUser(bin, "--headless", filepath.Join(hidden, "nowhere"), "--", "true").CombinedOutput()
	if strings.ReplaceAll(string(a), "there", "X") != strings.ReplaceAll(string(b), "nowhere", "X") || !strings.Contains(string(a), "does not exist") {
		t.Errorf("a folder the user cannot reach:\n%s\nand one that does not exist:\n%s", a, b)
	}
}
