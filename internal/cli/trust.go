package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/session"
)

const trustUsage = `Usage: agent-lock trust [DIR]

Trusts the project's policy file (DIR/.agent-lock.toml, DIR defaulting to
the current directory) as it is now, so that it may widen the cell (grant,
unprotect, pass variables) and not only deny. It prints what the file
grants, then adds its SHA-256 to your own policy file
(~/.config/agent-lock/policy.toml, a [[trusted]] entry) and keeps a copy
in ~/.config/agent-lock/trusted/. If the file changes afterwards, by anyone
or any agent, agent-lock refuses to start in the project and says what
changed, until you trust it again. Needs no sudo.
`

// trust records the user's trust in a project's policy file, by content.
func trust(args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "agent-lock trust: %v\n", err)
		return session.ExitFailed
	}
	fs := flag.NewFlagSet("trust", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, trustUsage)
			return 0
		}
		return fail(fmt.Errorf("%v\n%s", err, trustUsage))
	}
	if fs.NArg() > 1 {
		return fail(fmt.Errorf("name one project directory\n%s", trustUsage))
	}
	agent, err := session.InvokingUser(true)
	if err == session.ErrNotRoot {
		agent, err = currentUser()
	}
	if err != nil {
		return fail(err)
	}
	dir, err := session.ResolveDir(fs.Arg(0))
	if err != nil {
		return fail(err)
	}
	if err := trustFile(agent, dir, stdout); err != nil {
		return fail(err)
	}
	return 0
}

// trustFile trusts dir's policy file for agent, as the user: a copy of it
// kept by hash, and a [[trusted]] entry appended to the user's file.
func trustFile(agent session.Agent, dir string, stdout io.Writer) error {
	id := agent.ID()
	path := filepath.Join(dir, policy.PolicyFile)
	b, err := asuser.ReadFile(id, path, policy.MaxFileSize)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s has no policy file (%s): nothing to trust", dir, policy.PolicyFile)
	}
	if err != nil {
		return err
	}
	f, err := policy.Parse(path, b, agent.Home, dir)
	if err != nil {
		return err
	}
	// The copy first: it is what a later refusal compares against.
	copyDir := filepath.Join(agent.Home, policy.TrustedDir)
	if err := asuser.MkdirAll(id, copyDir); err != nil {
		return err
	}
	if err := asuser.Replace(id, filepath.Join(copyDir, f.Sum+".toml"), strings.NewReader(string(b)), 0o600); err != nil {
		return err
	}
	entry := fmt.Sprintf("\n[[trusted]] # added by agent-lock trust\nproject = %q\nsha256 = %q\n", dir, f.Sum)
	userFile := filepath.Join(agent.Home, policy.HomeFile)
	err = asuser.Do(id, func() error {
		if err := os.MkdirAll(filepath.Dir(userFile), 0o700); err != nil {
			return err
		}
		// Appending keeps the user's own text and comments; the last
		// entry for a project is the one that counts.
		out, err := os.OpenFile(userFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		if _, err := out.WriteString(entry); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		// A symlink (a dotfiles manager's) is not written through.
		return fmt.Errorf("could not add the trust to %s (%v); add these lines to it yourself:%s", userFile, err, entry)
	}
	fmt.Fprintf(stdout, "trusted %s as it is now (sha256 %s), in %s\n", path, f.Sum[:12], userFile)
	if key, line := f.Widens(); key != "" {
		fmt.Fprintf(stdout, "it widens the cell (first: %s, line %d); agent-lock policy %s shows the whole cell\n", key, line, dir)
	} else {
		fmt.Fprintln(stdout, "it only denies: it needed no trust")
	}
	return nil
}

// loadPolicy reads the policy file at path as id, or nil where there is
// none.
func loadPolicy(id asuser.ID, path, home, base string) (*policy.File, error) {
	b, err := asuser.ReadFile(id, path, policy.MaxFileSize)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &policy.FileError{Path: path, Msg: err.Error()}
	}
	return policy.Parse(path, b, home, base)
}

// checkTrust refuses a project's file that widens the cell unless the
// user's file trusts it as it is now; a changed file is refused with what
// changed, from the copy agent-lock trust kept.
func checkTrust(id asuser.ID, homeFile, projFile *policy.File, home, dir string) error {
	key, line := projFile.Widens()
	if key == "" {
		return nil
	}
	var t policy.Trust
	ok := false
	if homeFile != nil {
		t, ok = homeFile.TrustFor(dir)
	}
	if !ok {
		return &policy.FileError{Path: projFile.Path, Line: line, Key: key, Msg: fmt.Sprintf(
			"a project's policy file may only deny: it came with the project, and would widen the cell; "+
				"read it, and if you agree run `agent-lock trust %s`, or pass the setting as a flag", dir)}
	}
	if t.SHA256 == projFile.Sum {
		return nil
	}
	what := "its trusted copy is gone, so what changed cannot be said"
	if b, err := asuser.ReadFile(id, filepath.Join(home, policy.TrustedDir, t.SHA256+".toml"), policy.MaxFileSize); err == nil {
		if old, err := policy.Parse(projFile.Path, b, home, dir); err == nil {
			what = "what changed: " + strings.Join(projFile.Changes(old), "; ")
			if len(projFile.Changes(old)) == 0 {
				what = "its settings are the same, its text is not"
			}
		}
	}
	return &policy.FileError{Path: projFile.Path, Msg: fmt.Sprintf(
		"changed since you trusted it (sha256 %s then, %s now): %s; nothing ran. Read it, and if you agree run `agent-lock trust %s`",
		t.SHA256[:12], projFile.Sum[:12], what, dir)}
}
