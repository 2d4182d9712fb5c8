package session_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestCleanStartEngines: a descriptor agent-lock inherited (as from a CI
// runner) reaches the agent under neither engine, and agent-lock says so.
// Runs in the test VMs only.
func TestCleanStartEngines(t *testing.T) {
	testenv.NeedVM(t)
	bin := testenv.AgentLockBin(t)
	root, dir := testenv.ProjectDir(t, 4242)
	secret := filepath.Join(root, "secret")
	if err := os.WriteFile(secret, []byte("SECRET-MARKER\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, engine := range []string{"bpf-lsm", "landlock"} {
		t.Run(engine, func(t *testing.T) {
			f, err := os.Open(secret)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd := exec.Command(bin, "--headless", "--report", "/dev/null", "--engine", engine, dir, "--",
				"/bin/sh", "-c", "ls /proc/self/fd > fds; cat <&4")
			cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242")
			null, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			defer null.Close()
			// fds 3 and 4, inherited (4: the Landlock engine's first
			// process gets its ruleset on 3, over whatever was there).
			cmd.ExtraFiles = []*os.File{null, f}
			out, _ := cmd.CombinedOutput()
			if strings.Contains(string(out), "SECRET-MARKER") {
				t.Fatalf("the agent read the inherited descriptor:\n%s", out)
			}
			if !strings.Contains(string(out), "descriptors 3, 4 inherited by agent-lock are not passed on") {
				t.Errorf("agent-lock did not say it kept fds 3 and 4 back:\n%s", out)
			}
			// ls lists its own directory descriptor (3) besides 0, 1, 2.
			fds, err := os.ReadFile(filepath.Join(dir, "fds"))
			if err != nil {
				t.Fatalf("the agent did not run: %v\n%s", err, out)
			}
			if got := strings.Join(strings.Fields(string(fds)), " "); got != "0 1 2 3" {
				t.Errorf("the agent's descriptors: %s\n%s", got, out)
			}
		})
	}
}
