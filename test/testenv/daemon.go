package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Daemon starts agent-lock's daemon (bin) listening at sock, with flags,
// and returns it once it listens, with what reads its log so far.
func Daemon(bin, sock string, flags ...string) (d *exec.Cmd, log func() string, err error) {
	os.MkdirAll(filepath.Dir(sock), 0o755)
	// The test user reaches the socket through its folder.
	os.Chmod(filepath.Dir(sock), 0o755)
	d = exec.Command(bin, append([]string{"daemon", "--socket", sock}, flags...)...)
	out, err := d.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := d.Start(); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	if !strings.Contains(line, "listening at") {
		d.Process.Kill()
		d.Wait()
		return nil, nil, fmt.Errorf("the daemon did not start (%v): %s", err, line)
	}
	// Read as it comes, so that it never blocks the daemon.
	var mu sync.Mutex
	var b strings.Builder
	go func() {
		for {
			l, err := br.ReadString('\n')
			mu.Lock()
			b.WriteString(l)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return d, func() string {
		mu.Lock()
		defer mu.Unlock()
		return b.String()
	}, nil
}

// StartDaemon starts agent-lock's daemon (r.AgentLock) with its socket in
// dir, which must be searchable by the test user, and makes r's jailed
// runs ask it. stop ends it.
func StartDaemon(r *Runner, dir string) (stop func(), err error) {
	sock := filepath.Join(dir, "daemon", "agent-lock.sock")
	// As many sessions as a suite may run at once, and some left over.
	d, _, err := Daemon(r.AgentLock, sock, "--per-user", "32", "--total", "32")
	if err != nil {
		return nil, err
	}
	r.Daemon = sock
	return func() {
		r.Daemon = ""
		d.Process.Kill()
		d.Wait()
	}, nil
}
