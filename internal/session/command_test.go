package session

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/policy"
)

// TestOutsideCommand: a command the cell grants nothing to read is
// refused before start with its path and the --allow that grants its
// install; so is a script whose interpreter lies outside. Commands in the
// system folders, DIR and the grants pass.
func TestOutsideCommand(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "project")
	opt := filepath.Join(root, "opt/agents")
	granted := filepath.Join(root, "granted")
	secret := filepath.Join(granted, "secret")
	for _, d := range []string{dir, filepath.Join(opt, "bin"), filepath.Join(opt, "lib/node_modules/agent/bin"), secret} {
		os.MkdirAll(d, 0o755)
	}
	write := func(p, content string) string {
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tool := write(filepath.Join(opt, "bin/tool"), "#!/bin/sh\n")
	npmEntry := write(filepath.Join(opt, "lib/node_modules/agent/bin/agent.js"), "#!/usr/bin/env sh\n")
	link := filepath.Join(dir, "agent")
	os.Symlink(npmEntry, link)
	script := write(filepath.Join(dir, "run.sh"), "#!"+tool+" -x\n")
	inGrant := write(filepath.Join(granted, "ok"), "#!/bin/sh\n")
	denied := write(filepath.Join(secret, "tool"), "#!/bin/sh\n")
	p := policy.Policy{Dir: dir, Allow: []string{granted}, Deny: []string{secret}}
	for _, tc := range []struct {
		path, want string
	}{
		{"/bin/sh", ""},
		{write(filepath.Join(dir, "mine.sh"), "#!/bin/sh\n"), ""},
		{inGrant, ""},
		{tool, "the command " + tool + " lies outside the cell" + `.*--allow ` + opt},
		{link, "the command " + link + " (" + npmEntry + ")" + `.*--allow ` + opt + " "},
		{script, "its interpreter " + tool + " lies outside" + `.*--allow ` + opt},
		{denied, "the command " + denied + " lies where the cell refuses everything" + `.*(--deny ` + secret + ")"},
	} {
		err := outsideCommand(p, tc.path, interpreter(tc.path, os.Getenv("PATH")))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.path, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != ExitCannotExec {
			t.Errorf("%s: %v, want exit %d", tc.path, err, ExitCannotExec)
			continue
		}
		before, after, _ := strings.Cut(tc.want, ".*")
		if msg := err.Error(); !strings.Contains(msg, before) || !strings.Contains(msg, after) {
			t.Errorf("%s: %q, want %q then %q", tc.path, msg, before, after)
		}
	}
}
