package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestInstall: install writes the socket and service units and has
// systemd (a stand-in systemctl that logs its arguments) reload and start
// the socket; a systemctl that fails leaves no unit behind; a binary that
// a user could change is refused; uninstall stops and removes them.
func TestInstall(t *testing.T) {
	testenv.NeedVM(t)
	bin := testenv.AgentLockBin(t)
	bin, _ = filepath.EvalSymlinks(bin)
	tmp := t.TempDir()
	units, fake, log := filepath.Join(tmp, "units"), filepath.Join(tmp, "bin"), filepath.Join(tmp, "systemctl.log")
	os.Mkdir(units, 0o755)
	os.Mkdir(fake, 0o755)
	systemctl := func(failOn string) {
		os.WriteFile(filepath.Join(fake, "systemctl"), []byte("#!/bin/sh\necho \"$*\" >> "+log+"\ncase \"$*\" in *'"+failOn+"'*) echo 'Failed to connect to bus' >&2; exit 1;; esac\n"), 0o755)
	}
	run := func(b string, args ...string) (string, int) {
		cmd := exec.Command(b, args...)
		cmd.Env = []string{"PATH=" + fake + ":/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return string(out), code
	}

	systemctl("enable")
	if out, code := run(bin, "install", "--unit-dir", units); code != 125 || !strings.Contains(out, "Failed to connect to bus") {
		t.Errorf("a failing systemctl: exit %d:\n%s", code, out)
	}
	if ents, _ := os.ReadDir(units); len(ents) != 0 {
		t.Errorf("a failed install left %v", ents)
	}

	systemctl("never")
	os.Remove(log)
	if out, code := run(bin, "install", "--unit-dir", units); code != 0 {
		t.Fatalf("install: exit %d:\n%s", code, out)
	}
	sock, _ := os.ReadFile(filepath.Join(units, "agent-lock.socket"))
	svc, _ := os.ReadFile(filepath.Join(units, "agent-lock.service"))
	if !strings.Contains(string(sock), "ListenStream=/run/agent-lock/agent-lock.sock\n") || !strings.Contains(string(sock), "SocketMode=0666") {
		t.Errorf("the socket unit:\n%s", sock)
	}
	if !strings.Contains(string(svc), "ExecStart="+bin+" daemon\n") || !strings.Contains(string(svc), "KillMode=process") {
		t.Errorf("the service unit:\n%s", svc)
	}
	if l, _ := os.ReadFile(log); string(l) != "daemon-reload\nenable --now agent-lock.socket\n" {
		t.Errorf("systemctl was run as:\n%s", l)
	}

	// A copy a user owns: the daemon would run it as root.
	userDir := filepath.Join(tmp, "user")
	os.Mkdir(userDir, 0o755)
	os.Chown(userDir, uid, uid)
	copyBin := filepath.Join(userDir, "agent-lock")
	if b, err := os.ReadFile(bin); err != nil || os.WriteFile(copyBin, b, 0o755) != nil {
		t.Fatal(err)
	}
	if out, code := run(copyBin, "install", "--unit-dir", units); code != 125 || !strings.Contains(out, "belongs to uid 4242") {
		t.Errorf("a binary in a user's folder: exit %d:\n%s", code, out)
	}
	if out, code := run(copyBin, "daemon", "--socket", filepath.Join(tmp, "d.sock")); code != 125 || !strings.Contains(out, "belongs to uid 4242") {
		t.Errorf("a daemon from a user's folder: exit %d:\n%s", code, out)
	}

	os.Remove(log)
	if out, code := run(bin, "uninstall", "--unit-dir", units); code != 0 {
		t.Fatalf("uninstall: exit %d:\n%s", code, out)
	}
	if ents, _ := os.ReadDir(units); len(ents) != 0 {
		t.Errorf("uninstall left %v", ents)
	}
	if l, _ := os.ReadFile(log); string(l) != "disable --now agent-lock.socket agent-lock.service\ndaemon-reload\n" {
		t.Errorf("systemctl was run as:\n%s", l)
	}
}

// TestDaemonSocketActivation: the daemon takes the socket systemd hands it
// (systemd-socket-activate does as the socket unit would), and a user's
// session runs through it.
func TestDaemonSocketActivation(t *testing.T) {
	bin, engs := lifecycleSetup(t)
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate is not installed")
	}
	root, dir := testenv.ProjectDir(t, uid)
	sock := filepath.Join(root, "activated.sock")
	d := exec.Command(activate, "-l", sock, bin, "daemon")
	out, err := d.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	buf := make([]byte, 256)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "Listening on") {
		t.Fatalf("systemd-socket-activate: %s", buf[:n])
	}
	go func() {
		for {
			if _, err := out.Read(buf); err != nil {
				return
			}
		}
	}()
	os.Chmod(sock, 0o666)
	cmd := exec.Command(bin, "--headless", "--engine", engs[0], "--report", "/dev/null", ".", "--", "sh", "-c", "echo uid=$(id -u)")
	cmd.Dir, cmd.Env = dir, []string{"PATH=/usr/bin:/bin", "AGENT_LOCK_SOCKET=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	got, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "uid=4242\n") {
		t.Errorf("a session through the activated daemon (%v):\n%s", err, got)
	}
}
