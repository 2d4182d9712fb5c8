package main

import "strings"

// terminalTechniques type into terminals.
var terminalTechniques = []Technique{
	{Name: "tiocsti", Family: "terminal", Doc: "TIOCSTI a line into the agent's own terminal, for the user's shell to run after it exits",
		Ops: ops("ioctl"), TTY: true, Skip: noLegacyTIOCSTI,
		Cmd: py(`import errno, fcntl, os, termios
try:
    os.close(os.open("/dev/tty", os.O_RDWR))
except OSError as e:
    if e.errno == errno.ENXIO:  # no controlling terminal: nothing would read the line
        print("no-controlling-tty:", e); raise SystemExit(1)
for c in b"tiocsti-ok\n":
    fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))`),
		Effect: outputHas("GOT:tiocsti-ok"),
		Excuse: func(o *outcome) string {
			if strings.Contains(o.out, "no-controlling-tty") {
				return "the agent has no controlling terminal"
			}
			return ""
		}},
	{Name: "write-other-pts", Family: "terminal", Doc: "write into another terminal of the user",
		Ops: ops("write"), Path: "/dev/pts/", Needs: needPTS,
		Cmd: bash("echo pts-inject-ok > {pts}"), Effect: serviceGot("pts", "pts-inject-ok")},
}

func noLegacyTIOCSTI(*Fixture) string {
	if sysctl("dev.tty.legacy_tiocsti") == "0" {
		return "dev.tty.legacy_tiocsti=0: TIOCSTI needs CAP_SYS_ADMIN even without a jail"
	}
	return ""
}
