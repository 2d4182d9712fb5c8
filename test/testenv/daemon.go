package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// StartDaemon starts agent-lock's daemon (r.AgentLock) with its socket in
// dir, which must be searchable by the test user, and makes r's jailed
// runs ask it. stop ends it.
func StartDaemon(r *Runner, dir string) (stop func(), err error) {
	sock := filepath.Join(dir, "daemon", "agent-lock.sock")
	// As many sessions as a suite may run at once, and some left over.
	d := exec.Command(r.AgentLock, "daemon", "--socket", sock, "--per-user", "32", "--total", "32")
	out, err := d.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := d.Start(); err != nil {
		return nil, err
	}
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	if !strings.Contains(line, "listening at") {
		d.Process.Kill()
		d.Wait()
		return nil, fmt.Errorf("the daemon did not start (%v): %s", err, line)
	}
	os.Chmod(filepath.Dir(sock), 0o755)
	// Its log (a line a session) is not the suite's to show; read, so
	// that it never blocks.
	go func() {
		for {
			if _, err := br.ReadString('\n'); err != nil {
				return
			}
		}
	}()
	r.Daemon = sock
	return func() {
		r.Daemon = ""
		d.Process.Kill()
		d.Wait()
	}, nil
}
