package session

import (
	"os/exec"
	"testing"
)

// TestInCellSeesSandboxes: a process under no_new_privs (every process of
// a cell alone, and of any Landlock sandbox) counts as in a cell for the
// daemon and the attach socket; an ordinary one does not.
func TestInCellSeesSandboxes(t *testing.T) {
	for _, c := range []struct {
		argv []string
		in   bool
	}{
		{[]string{"sleep", "30"}, false},
		{[]string{"setpriv", "--no-new-privs", "sleep", "30"}, true},
	} {
		cmd := exec.Command(c.argv[0], c.argv[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// setpriv execs sleep: wait until it has set the flag.
		var in bool
		var err error
		for range 100 {
			if in, err = InCell(cmd.Process.Pid); in == c.in || err != nil {
				break
			}
			exec.Command("sleep", "0.01").Run()
		}
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil || in != c.in {
			t.Errorf("%v: InCell = %v, %v; want %v", c.argv, in, err, c.in)
		}
	}
}
