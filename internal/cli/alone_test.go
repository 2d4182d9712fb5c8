package cli_test

import (
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

// connectPy connects to 127.0.0.1:PORT and says how it went.
const connectPy = `import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
    print("connect=ok")
except OSError as e:
    print("connect=" + type(e).__name__)
`

// ptracePy tries PTRACE_SEIZE on every thread of process ARG ("child": a
// child of its own) and prints the errnos it got (0: attached).
const ptracePy = `import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
def seize(tid):
    r = libc.ptrace(0x4206, tid, None, None)
    return 0 if r == 0 else ctypes.get_errno()
if sys.argv[1] == "child":
    c = subprocess.Popen(["sleep", "5"])
    print("ptrace-child=%d" % seize(c.pid), flush=True)
    c.kill()
else:
    errs = sorted(set(seize(int(t)) for t in os.listdir("/proc/%s/task" % sys.argv[1])))
    print("ptrace-" + sys.argv[1] + "=" + ",".join(map(str, errs)), flush=True)
`

// TestAloneWithoutDaemon: with no daemon and no root, agent-lock still
// jails under Landlock, alone, and says that nothing is observed: the
// agent runs as the user with the user's PATH and variables (credentials
// withheld) and its exit status, reads and writes DIR, is refused a file
// outside it and cannot signal the user's other processes (a PID
// namespace of its own) nor take over that namespace's init, which holds
// none of its sandbox (ptrace), a change to DIR's git hooks is put back and
// reported, what it leaves running dies with the session (and with a
// killed agent-lock), and TCP goes to
// the ports the
// policy names only (where Landlock holds TCP, ABI 4). Unjailed, the
// same reads and connection succeed (the test is real). The BPF-LSM
// engine, which needs the daemon, says how to start it.
func TestAloneWithoutDaemon(t *testing.T) {
	bin, _ := lifecycleSetup(t)
	root, dir := testenv.ProjectDir(t, uid)
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		t.Fatal(err)
	}
	secretPath := filepath.Join(root, "secret.txt")
	os.WriteFile(secretPath, []byte("the-secret-4242\n"), 0o600)
	os.Chown(secretPath, uid, uid)

	// A loopback service of the user's, outside the cell.
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)

	// A process of the user's, outside the cell.
	outside := exec.Command("sleep", "3331")
	outside.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := outside.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { outside.Process.Kill(); outside.Wait() }()
	outsidePID := strconv.Itoa(outside.Process.Pid)

	userBin := filepath.Join(dir, "bin")
	os.Mkdir(userBin, 0o755)
	os.WriteFile(filepath.Join(dir, "connect.py"), []byte(connectPy), 0o644)
	os.WriteFile(filepath.Join(dir, "ptrace.py"), []byte(ptracePy), 0o644)
	os.WriteFile(filepath.Join(userBin, "myagent"), []byte(`#!/bin/sh
echo "uid=$(id -u)"; echo "path=$PATH"; echo "setting=$MY_SETTING"; echo "key=$ANTHROPIC_API_KEY"; echo "token=${GITHUB_TOKEN:-none}"
cat `+secretPath+`; echo "secret=$?"
echo made > made.txt
printf '#!/bin/sh\necho pwned\n' > .git/hooks/pre-commit
/usr/bin/python3 connect.py `+port+`
kill -CONT `+outsidePID+` 2>/dev/null; echo "signal=$?"
/usr/bin/python3 ptrace.py child; /usr/bin/python3 ptrace.py 1
setsid sleep 3219 </dev/null >/dev/null 2>&1 &
bash -ic 'echo "rc=$RC_GREETING rckey=${AWS_SECRET_ACCESS_KEY:-none}"' 2>&1
(echo planted >> ~/.bashrc) 2>/dev/null || echo rc-write=refused
exit 3
`), 0o755)
	// The user's shell setup, with a secret in it: the agent's shells
	// read it without the secret (its scrubbed copy, mounted over it in
	// the cell), and cannot write it.
	bashrc := filepath.Join(u.HomeDir, ".bashrc")
	if was, err := os.ReadFile(bashrc); err == nil {
		t.Cleanup(func() { os.Remove(bashrc); os.WriteFile(bashrc, was, 0o644); os.Chown(bashrc, uid, uid) })
	} else {
		t.Cleanup(func() { os.Remove(bashrc) })
	}
	os.Remove(bashrc)
	const rc = "export RC_GREETING=hello-rc\nexport AWS_SECRET_ACCESS_KEY=rc-secret-4242\n"
	if err := os.WriteFile(bashrc, []byte(rc), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(bashrc, uid, uid)
	userPath := userBin + ":/usr/local/bin:/usr/bin:/bin"
	asUser := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + userPath, "HOME=" + u.HomeDir, "AGENT_LOCK_SOCKET=" + filepath.Join(root, "none.sock"),
			"MY_SETTING=hello", "ANTHROPIC_API_KEY=sk-test", "GITHUB_TOKEN=ghp-test"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return cmd
	}
	git := asUser()
	git.Path, git.Args = "/usr/bin/git", []string{"git", "init", "-q", "."}
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}

	// Unjailed, the user reads the secret (and the one in the shell
	// setup) and reaches the service.
	free := asUser()
	free.Path, free.Args = "/bin/sh", []string{"sh", "-c", "cat " + secretPath + " && /usr/bin/python3 connect.py " + port + "; kill -CONT " + outsidePID + "; echo signal=$?; bash -ic 'echo rckey=$AWS_SECRET_ACCESS_KEY' 2>/dev/null"}
	if out, err := free.CombinedOutput(); err != nil || !strings.Contains(string(out), "the-secret") || !strings.Contains(string(out), "connect=ok") ||
		!strings.Contains(string(out), "signal=0") || !strings.Contains(string(out), "rckey=rc-secret-4242") {
		t.Fatalf("unjailed, the user could not read the secrets, reach the service or signal their process (%v):\n%s", err, out)
	}

	rep := testenv.ReportPath(t, uid)
	out, err := asUser("--headless", "--engine", "landlock", "--env", "ANTHROPIC_API_KEY", "--report", rep, ".", "--", "myagent").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("the agent's exit status 3 did not come back (%v):\n%s", err, out)
	}
	for _, want := range []string{"no agent-lock daemon answers: Landlock alone jails the agent", "uid=4242\n", "path=" + userPath + "\n",
		"setting=hello\n", "key=sk-test\n", "token=none\n", "secret=1\n", "signal=1\n", "ptrace-child=0\n", "ptrace-1=1\n",
		"rc=hello-rc rckey=none\n", "rc-write=refused\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the session did not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "the-secret") || strings.Contains(string(out), "rc-secret") || strings.Contains(string(out), ".bashrc: Permission denied") {
		t.Errorf("the agent read a secret, or was refused ordinary work:\n%s", out)
	}
	if b, _ := os.ReadFile(bashrc); string(b) != rc {
		t.Errorf("~/.bashrc changed: %q", b)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "made.txt")); err != nil || string(b) != "made\n" {
		t.Errorf("the agent could not write in DIR: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git", "hooks", "pre-commit")); !os.IsNotExist(err) {
		t.Errorf("the agent's git hook was left in place (%v)", err)
	}
	r, _ := os.ReadFile(rep)
	if !strings.Contains(string(r), "pre-commit") {
		t.Errorf("the put-back hook was not reported:\n%s", r)
	}
	m := regexp.MustCompile(`"engine":"landlock \(ABI (\d+)\), alone"`).FindSubmatch(r)
	if m == nil {
		t.Fatalf("the report does not name the engine alone:\n%s", r)
	}
	abi, _ := strconv.Atoi(string(m[1]))
	// Landlock holds TCP from ABI 4; before, the start says it is open.
	if wantNet := "connect=PermissionError"; abi >= 4 && !strings.Contains(string(out), wantNet) {
		t.Errorf("ABI %d: the agent reached a port no rule names:\n%s", abi, out)
	} else if abi < 4 && !strings.Contains(string(r), "this kernel's has none") {
		t.Errorf("ABI %d: the report does not say the network is open:\n%s", abi, r)
	}
	// What the agent left running ended with the session.
	waitGone(t, `sleep 3219`, 30*time.Second)

	// ~/.bashrc a link through DIR (where an agent of an earlier
	// session may have pointed it) to the secret: the user reads the
	// secret through it; the agent's shells get no copy of it.
	os.Remove(bashrc)
	os.Symlink(filepath.Join(dir, "rc-link"), bashrc)
	os.Lchown(bashrc, uid, uid)
	os.Symlink(secretPath, filepath.Join(dir, "rc-link"))
	os.Lchown(filepath.Join(dir, "rc-link"), uid, uid)
	free = asUser()
	free.Path, free.Args = "/bin/cat", []string{"cat", bashrc}
	if out, err := free.CombinedOutput(); err != nil || !strings.Contains(string(out), "the-secret") {
		t.Fatalf("unjailed, the user did not read the secret through ~/.bashrc (%v):\n%s", err, out)
	}
	out, _ = asUser("--headless", "--engine", "landlock", "--report", "/dev/null", ".", "--", "sh", "-c", "cat ~/.bashrc; echo rc=$?").CombinedOutput()
	if strings.Contains(string(out), "the-secret") || !strings.Contains(string(out), "rc=1\n") ||
		!strings.Contains(string(out), "a link the agent may change: not copied") {
		t.Errorf("~/.bashrc through a link in DIR to a secret: read, or not said:\n%s", out)
	}
	os.Remove(bashrc)
	os.Remove(filepath.Join(dir, "rc-link"))

	// The port granted by name: reached.
	if abi >= 4 {
		out, err = asUser("--headless", "--engine", "landlock", "--allow-net", "localhost:"+port, "--report", "/dev/null", ".", "--",
			"/usr/bin/python3", "connect.py", port).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "connect=ok") {
			t.Errorf("the granted port was not reached (%v):\n%s", err, out)
		}
	}

	// agent-lock killed: the cell ends with it (its first process's
	// parent-death signal, the init's, whose end ends the namespace).
	client := asUser("--headless", "--engine", "landlock", "--report", "/dev/null", ".", "--", "sh", "-c", "exec sleep 3221")
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, `^sleep 3221`)
	client.Process.Kill()
	client.Wait()
	waitGone(t, `sleep 3221`, 30*time.Second)
	// Its folders (TMPDIR, the shell files' copies) are swept by the next
	// run alone.
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), "agent-lock-"+strconv.Itoa(client.Process.Pid)+"-*"))
	if len(left) != 2 {
		t.Errorf("the killed session left %v, want its TMPDIR and its copies' folder", left)
	}
	out, err = asUser("--headless", "--engine", "landlock", "--report", "/dev/null", ".", "--", "true").CombinedOutput()
	if err != nil || strings.Count(string(out), "cleaned up after agent-lock "+strconv.Itoa(client.Process.Pid)) != 2 {
		t.Errorf("the next run alone did not sweep the killed one's folders (%v):\n%s", err, out)
	}
	for _, p := range left {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}

	// A daemon that comes up while the agent runs alone starts no session
	// for it: the agent would get a cell of its own choosing. Unjailed,
	// the same request reads the secret (the test is real).
	sock := filepath.Join(root, "daemon", "agent-lock.sock")
	startDaemon(t, bin, sock)
	os.WriteFile(filepath.Join(dir, "ask.py"), []byte(askDaemon), 0o644)
	ask := "/usr/bin/python3 ask.py " + sock + " run --headless --allow " + filepath.Dir(secretPath) + " . -- cat " + secretPath
	free = asUser()
	free.Path, free.Args = "/bin/sh", []string{"sh", "-c", ask}
	if out, err := free.CombinedOutput(); err != nil || !strings.Contains(string(out), "the-secret") {
		t.Fatalf("unjailed, the request to the daemon did not read the secret (%v):\n%s", err, out)
	}
	out, _ = asUser("--headless", "--engine", "landlock", "--report", "/dev/null", ".", "--", "sh", "-c", ask).CombinedOutput()
	// From ABI 9 Landlock refuses the connection itself; before, the
	// daemon refuses the request.
	refused := strings.Contains(string(out), "no_new_privs") || (abi >= 9 && strings.Contains(string(out), "PermissionError"))
	if strings.Contains(string(out), "the-secret") || !refused {
		t.Errorf("the agent alone got a session from the daemon, or was not told why not:\n%s", out)
	}

	// agent-lock itself run under no_new_privs (in a sandbox: flatpak, a
	// NoNewPrivileges service), with the daemon up: the daemon would
	// refuse it, so it jails alone, and says why.
	sandboxed := asUser("--headless", "--engine", "landlock", "--report", "/dev/null", ".", "--", "sh", "-c", "cat "+secretPath+"; echo secret=$?")
	sandboxed.Env = append(sandboxed.Env, "AGENT_LOCK_SOCKET="+sock)
	sandboxed.Path, sandboxed.Args = "/usr/bin/setpriv", append([]string{"setpriv", "--no-new-privs", bin}, sandboxed.Args[1:]...)
	out, err = sandboxed.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "runs in an agent-lock cell or another sandbox (no_new_privs)") || !strings.Contains(string(out), "Landlock alone jails the agent") ||
		!strings.Contains(string(out), "secret=1\n") || strings.Contains(string(out), "the-secret") {
		t.Errorf("agent-lock under no_new_privs, the daemon up: not jailed alone, or not said (%v):\n%s", err, out)
	}

	// Where the kernel refuses the user a user namespace, agent-lock says
	// what the agent would lack and starts it only with --best-effort;
	// the ruleset then holds without namespaces, and what the agent left
	// running still dies with the session.
	const maxNS = "/proc/sys/user/max_user_namespaces"
	was, err := os.ReadFile(maxNS)
	if err == nil {
		if err = os.WriteFile(maxNS, []byte("0"), 0); err == nil {
			t.Cleanup(func() { os.WriteFile(maxNS, was, 0) })
		}
	}
	if err != nil && os.Getenv("AGENT_LOCK_NATIVE") != "" {
		// This machine's /proc/sys is its host's: the guests check it.
		t.Logf("without user namespaces: not checked here (%v)", err)
	} else if err != nil {
		t.Fatal(err)
	} else {
		bare := []string{"--headless", "--engine", "landlock", "--report", "/dev/null", ".", "--", "sh", "-c",
			"cat " + secretPath + "; echo secret=$?; echo in-dir > made2.txt; setsid sleep 3220 </dev/null >/dev/null 2>&1 &"}
		out, err = asUser(bare...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), "Run with --best-effort") {
			t.Errorf("without user namespaces and --best-effort, the agent started, or agent-lock did not say why not (%v):\n%s", err, out)
		}
		out, err = asUser(append([]string{"--best-effort"}, bare...)...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "this kernel refuses you a user namespace") || !strings.Contains(string(out), "secret=1\n") ||
			strings.Contains(string(out), "the-secret") {
			t.Errorf("without user namespaces, --best-effort (%v):\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "made2.txt")); err != nil {
			t.Errorf("without user namespaces the agent could not write in DIR: %v", err)
		}
		waitGone(t, `sleep 3220`, 30*time.Second)
	}

	// The BPF-LSM engine needs the daemon, and says how to start it.
	out, err = asUser("--headless", "--engine", "bpf-lsm", ".", "--", "true").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), "sudo agent-lock install") {
		t.Errorf("bpf-lsm with no daemon: %v\n%s", err, out)
	}
}
