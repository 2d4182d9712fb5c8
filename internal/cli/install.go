package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agent-lock/agent-lock/internal/daemon"
	"github.com/agent-lock/agent-lock/internal/session"
)

// `sudo agent-lock install` sets the daemon up the way the system runs
// services: a systemd socket unit at the daemon's socket, which starts the
// service on the first connection. `uninstall` takes both away; sessions
// running go on to their end.

const installUsage = `Usage: sudo agent-lock install | uninstall

install writes and enables systemd units for agent-lock's daemon
(agent-lock.socket, listening at ` + daemon.DefaultSocket + `, and
agent-lock.service, started on the first connection), so that every local user
runs agent-lock as themselves, without sudo. uninstall disables and removes
them; sessions running go on to their end. Without systemd, run
sudo agent-lock daemon instead (in the foreground).

  --unit-dir DIR   where the units go (default /etc/systemd/system)
`

const socketUnit = `# Written by agent-lock install; agent-lock uninstall removes it.
[Unit]
Description=agent-lock daemon socket: users run agent-lock without sudo

[Socket]
ListenStream=%s
SocketMode=0666
DirectoryMode=0755
RemoveOnStop=yes

[Install]
WantedBy=sockets.target
`

const serviceUnit = `# Written by agent-lock install; agent-lock uninstall removes it.
[Unit]
Description=agent-lock daemon: starts each user's agent-lock session
Requires=agent-lock.socket
After=agent-lock.socket

[Service]
ExecStart=%s daemon
# Stopping or restarting the daemon leaves every session (its own
# agent-lock and the agent's cell) running, confined, to its end.
KillMode=process
`

var unitNames = []string{"agent-lock.socket", "agent-lock.service"}

// installCmd is `agent-lock install` and, with remove, `uninstall`.
func installCmd(args []string, remove bool, stdout, stderr io.Writer) int {
	name := "install"
	if remove {
		name = "uninstall"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	unitDir := fs.String("unit-dir", "/etc/systemd/system", "")
	help := fs.Bool("help", false, "")
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "agent-lock %s: %s\n", name, fmt.Sprintf(format, args...))
		return session.ExitFailed
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprint(stderr, installUsage)
		return session.ExitFailed
	}
	if *help {
		fmt.Fprint(stdout, installUsage)
		return 0
	}
	if os.Geteuid() != 0 {
		return fail("must run as root: sudo agent-lock %s", name)
	}
	if _, err := exec.LookPath("systemctl"); err != nil {
		return fail("systemctl is not here: without systemd, run sudo agent-lock daemon in the foreground (from your init or your container's entry point)")
	}
	if remove {
		// Disabled and stopped first: nothing listens once the files go.
		out, err := exec.Command("systemctl", "disable", "--now", "agent-lock.socket", "agent-lock.service").CombinedOutput()
		if err != nil && !bytes.Contains(out, []byte("does not exist")) && !bytes.Contains(out, []byte("not loaded")) {
			return fail("systemctl disable: %v: %s", err, strings.TrimSpace(string(out)))
		}
		for _, n := range unitNames {
			if err := os.Remove(filepath.Join(*unitDir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fail("%v", err)
			}
		}
		if out, err := exec.Command("systemctl", "daemon-reload").CombinedOutput(); err != nil {
			return fail("systemctl daemon-reload: %v: %s", err, strings.TrimSpace(string(out)))
		}
		fmt.Fprintln(stdout, "agent-lock: the daemon is uninstalled; running sessions go on to their end")
		return 0
	}
	bin, err := os.Executable()
	if err == nil {
		bin, err = filepath.EvalSymlinks(bin)
	}
	if err != nil {
		return fail("where is this binary: %v", err)
	}
	if err := rootsOnly(bin); err != nil {
		return fail("%v: the daemon runs it as root for every user, so only root may be able to change it; install it first (sudo install -m 755 %s /usr/local/bin/agent-lock) and run that one's install", err, bin)
	}
	units := map[string]string{
		"agent-lock.socket":  fmt.Sprintf(socketUnit, daemon.DefaultSocket),
		"agent-lock.service": fmt.Sprintf(serviceUnit, bin),
	}
	var written []string
	undo := func() {
		for _, p := range written {
			os.Remove(p)
		}
	}
	for _, n := range unitNames {
		p := filepath.Join(*unitDir, n)
		if err := os.WriteFile(p, []byte(units[n]), 0o644); err != nil {
			undo()
			return fail("%v", err)
		}
		written = append(written, p)
	}
	for _, c := range [][]string{{"daemon-reload"}, {"enable", "--now", "agent-lock.socket"}} {
		if out, err := exec.Command("systemctl", c...).CombinedOutput(); err != nil {
			undo()
			exec.Command("systemctl", "daemon-reload").Run()
			return fail("systemctl %s: %v: %s\n(without systemd running, use sudo agent-lock daemon in the foreground)", strings.Join(c, " "), err, strings.TrimSpace(string(out)))
		}
	}
	fmt.Fprintf(stdout, "agent-lock: the daemon listens at %s (systemd starts it on the first session); run agent-lock as yourself, without sudo\n", daemon.DefaultSocket)
	return 0
}

// rootsOnly says why someone other than root could change the file at
// path: it, or a folder above it, is not root's or is writable by others.
func rootsOnly(path string) error {
	for p := path; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		sticky := fi.IsDir() && fi.Mode()&os.ModeSticky != 0 && p != path
		if st.Uid != 0 {
			return fmt.Errorf("%s belongs to uid %d", p, st.Uid)
		}
		if fi.Mode().Perm()&0o022 != 0 && !sticky {
			return fmt.Errorf("%s may be written by others than root (mode %v)", p, fi.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}
