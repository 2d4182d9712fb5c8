package session

import "testing"

func TestNeedsTerminal(t *testing.T) {
	for _, tc := range []struct {
		command []string
		want    string
	}{
		{nil, "bash"},
		{[]string{"bash"}, "bash"},
		{[]string{"/bin/sh", "-l"}, "sh"},
		{[]string{"bash", "-c", "make"}, ""},
		{[]string{"bash", "script.sh"}, ""},
		{[]string{"bash", "-i", "-c", "x"}, "bash"},
		{[]string{"claude"}, "claude"},
		{[]string{"claude", "fix the bug"}, "claude"},
		{[]string{"claude", "-p", "fix the bug"}, ""},
		{[]string{"claude", "--version"}, ""},
		{[]string{"claude", "mcp", "list"}, ""},
		{[]string{"codex"}, "codex"},
		{[]string{"codex", "exec", "fix it"}, ""},
		{[]string{"gemini", "--prompt=hi"}, ""},
		{[]string{"gemini", "-m", "x", "hello"}, "gemini"},
		{[]string{"make", "test"}, ""},
		{[]string{"python3"}, ""},
	} {
		if got := NeedsTerminal(tc.command, "/bin/bash"); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.command, got, tc.want)
		}
	}
}
