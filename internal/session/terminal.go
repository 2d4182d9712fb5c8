package session

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agent-lock/agent-lock/internal/profile"
)

// shells are the programs that, given no script and no -c, read commands
// from their terminal.
var shells = []string{"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "tcsh", "csh"}

// NeedsTerminal names the command when it would run an interactive
// session (the user's shell when command is empty, a shell with no script,
// an agent without its batch flags, profile.Profile.Batch), which needs a
// terminal of its own: the dashboard owns agent-lock's, and gives the
// agent /dev/null, so such a command would exit at once (or wait on
// nothing). "" for any other command.
func NeedsTerminal(command []string, shell string) string {
	if len(command) == 0 {
		command = []string{shell}
	}
	path := command[0]
	if !strings.Contains(path, "/") {
		if p, err := exec.LookPath(path); err == nil {
			path = p
		}
	}
	if p, ok := profile.Detect(path); ok {
		if p.Interactive(command) {
			return filepath.Base(command[0])
		}
		return ""
	}
	if !slices.Contains(shells, filepath.Base(path)) {
		return ""
	}
	for _, a := range command[1:] {
		switch {
		case a == "-i":
			return filepath.Base(command[0])
		case a == "-c" || !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "+"):
			return "" // a command string or a script
		}
	}
	return filepath.Base(command[0])
}
