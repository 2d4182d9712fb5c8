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

// TestAloneWithoutDaemon: with no daemon and no root, agent-lock still
// jails under Landlock, alone, and says that nothing is observed: the
// agent runs as the user with the user's PATH and variables (credentials
// withheld) and its exit status, reads and writes DIR, is refused a file
// outside it, a change to DIR's git hooks is put back and reported, what
// it leaves running dies with the session, and TCP goes to the ports the
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

	userBin := filepath.Join(dir, "bin")
	os.Mkdir(userBin, 0o755)
	os.WriteFile(filepath.Join(dir, "connect.py"), []byte(connectPy), 0o644)
	os.WriteFile(filepath.Join(userBin, "myagent"), []byte(`#!/bin/sh
echo "uid=$(id -u)"; echo "path=$PATH"; echo "setting=$MY_SETTING"; echo "key=$ANTHROPIC_API_KEY"; echo "token=${GITHUB_TOKEN:-none}"
cat `+secretPath+`; echo "secret=$?"
echo made > made.txt
printf '#!/bin/sh\necho pwned\n' > .git/hooks/pre-commit
/usr/bin/python3 connect.py `+port+`
setsid sleep 3219 </dev/null >/dev/null 2>&1 &
exit 3
`), 0o755)
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

	// Unjailed, the user reads the secret and reaches the service.
	free := asUser()
	free.Path, free.Args = "/bin/sh", []string{"sh", "-c", "cat " + secretPath + " && /usr/bin/python3 connect.py " + port}
	if out, err := free.CombinedOutput(); err != nil || !strings.Contains(string(out), "the-secret") || !strings.Contains(string(out), "connect=ok") {
		t.Fatalf("unjailed, the user could not read the secret or reach the service (%v):\n%s", err, out)
	}

	rep := testenv.ReportPath(t, uid)
	out, err := asUser("--headless", "--engine", "landlock", "--env", "ANTHROPIC_API_KEY", "--report", rep, ".", "--", "myagent").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("the agent's exit status 3 did not come back (%v):\n%s", err, out)
	}
	for _, want := range []string{"no agent-lock daemon answers: Landlock alone jails the agent", "uid=4242\n", "path=" + userPath + "\n",
		"setting=hello\n", "key=sk-test\n", "token=none\n", "secret=1\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the session did not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "the-secret") {
		t.Errorf("the agent read the secret:\n%s", out)
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

	// The port granted by name: reached.
	if abi >= 4 {
		out, err = asUser("--headless", "--engine", "landlock", "--allow-net", "localhost:"+port, "--report", "/dev/null", ".", "--",
			"/usr/bin/python3", "connect.py", port).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "connect=ok") {
			t.Errorf("the granted port was not reached (%v):\n%s", err, out)
		}
	}

	// The BPF-LSM engine needs the daemon, and says how to start it.
	out, err = asUser("--headless", "--engine", "bpf-lsm", ".", "--", "true").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), "sudo agent-lock install") {
		t.Errorf("bpf-lsm with no daemon: %v\n%s", err, out)
	}
}
