package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// fakeSudo stands in for sudo (not on the test machines): a process the
// user ran setuid root (real uid the user's, effective root) that holds
// the user's environment, and runs its command as root with sudo's
// (env_reset) and waits for it, as sudo does.
//
// With "wait" first it waits for a line on its standard input before it
// runs the command: it does not start setuid as sudo does, so the dynamic
// loader does not ignore the user's LD_PRELOAD for it, and what that
// names is made only after it started.
const fakeSudo = `import os, subprocess, sys
if sys.argv[1] == "wait":
    sys.stdin.readline()
    del sys.argv[1]
os.setresuid(4242, 0, 0)
env = dict(kv.split("=", 1) for kv in sys.argv[1].split())
sys.exit(subprocess.call(sys.argv[2:], env=env, preexec_fn=lambda: os.setresuid(0, 0, 0)))`

// TestSudoKeepsTheUsersEnvironment: run through sudo, which gives
// agent-lock root's PATH and none of the user's variables, the agent
// still gets the user's environment: its command is found on the user's
// PATH, a variable the user set and a key passed with --env reach it, a
// credential-looking one is still withheld, and what sudo kept (TERM)
// is agent-lock's. Run with sudo's environment alone, agent-lock does not
// find the command: the test is real.
func TestSudoKeepsTheUsersEnvironment(t *testing.T) {
	bin, engs := lifecycleSetup(t)
	root, dir := testenv.ProjectDir(t, uid)
	userBin := filepath.Join(dir, "bin")
	os.Mkdir(userBin, 0o755)
	agent := filepath.Join(userBin, "myagent")
	if err := os.WriteFile(agent, []byte(`#!/bin/sh
echo "path=$PATH"; echo "setting=$MY_SETTING"; echo "key=$ANTHROPIC_API_KEY"; echo "token=${GITHUB_TOKEN:-none}"; echo "term=$TERM"
`), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{userBin, agent} {
		os.Chown(p, uid, uid)
	}
	// The user's LD_PRELOAD: it may reach the agent, as it would
	// without sudo, but no process of agent-lock's that holds a
	// capability (the Landlock engine's first process of the cell holds
	// CAP_SYS_ADMIN until it drops it, and an ambient capability does not
	// make an exec a secure one): each process that loads it writes its
	// capabilities down.
	capLog := filepath.Join(dir, "preload.log")
	preload := filepath.Join(dir, "probe.so")
	probe := func() {
		src := filepath.Join(t.TempDir(), "probe.c")
		os.WriteFile(src, []byte(`#include <stdio.h>
#include <string.h>
__attribute__((constructor)) static void probe(void) {
	char line[256];
	FILE *s = fopen("/proc/self/status", "r"), *o = fopen("`+capLog+`", "a");
	if (!s || !o)
		return;
	while (fgets(line, sizeof line, s))
		if (!strncmp(line, "CapEff:", 7))
			fputs(line, o);
	fclose(s);
	fclose(o);
}
`), 0o644)
		if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", preload, src).CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
		os.Chown(preload, uid, uid)
	}
	userPath := userBin + ":/usr/local/bin:/usr/bin:/bin"
	sudoEnv := "TERM=xterm-256color PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin " +
		"SUDO_UID=4242 SUDO_GID=4242 SUDO_USER=jailtest HOME=/root USER=root LOGNAME=root"
	args := []string{"--headless", "--engine", engs[0], "--env", "ANTHROPIC_API_KEY", "--report", "/dev/null", dir, "--", "myagent"}

	alone := exec.Command(bin, args...)
	alone.Env = strings.Fields(sudoEnv)
	out, err := alone.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "myagent: command not found") {
		t.Fatalf("with sudo's environment alone the command was found (%v):\n%s", err, out)
	}

	// Debian's python3 by its path: a version manager's shim on PATH
	// (pyenv's) would change the environment it holds.
	cmd := exec.Command("/usr/bin/python3", append([]string{"-c", fakeSudo, "wait", sudoEnv, bin}, args...)...)
	cmd.Env = []string{"PATH=" + userPath, "TERM=dumb", "MY_SETTING=hello", "ANTHROPIC_API_KEY=sk-test", "GITHUB_TOKEN=ghp-test",
		"HOME=/home/jailtest", "LD_PRELOAD=" + preload}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var outBuf strings.Builder
	cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	probe()
	in.Write([]byte("\n"))
	err = cmd.Wait()
	out = []byte(outBuf.String())
	if err != nil {
		t.Fatalf("under sudo: %v\n%s", err, out)
	}
	for _, want := range []string{"path=" + userPath + "\n", "setting=hello\n", "key=sk-test\n", "token=none\n", "term=xterm-256color\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("under sudo the agent did not print %q:\n%s", want, out)
		}
	}
	caps, err := os.ReadFile(capLog)
	if err != nil || !strings.Contains(string(caps), "CapEff:\t0000000000000000\n") {
		t.Errorf("the user's LD_PRELOAD did not reach the agent (%v): %q", err, caps)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(caps)), "\n") {
		if line != "CapEff:\t0000000000000000" {
			t.Errorf("the user's LD_PRELOAD ran in a process with capabilities: %q", line)
		}
	}

	// On a terminal the session is run by an agent-lock of its own, one
	// process further from sudo.
	tm := newTerm(t, root, fmt.Sprintf("env -i PATH=%s MY_SETTING=pane /usr/bin/python3 -c '%s' '%s' %s --engine %s %s -- myagent; sleep 600",
		userPath, fakeSudo, sudoEnv, bin, engs[0], dir))
	tm.Await("s:w", `setting=pane`, waitBound)
}
