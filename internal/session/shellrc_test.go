package session

import (
	"slices"
	"strings"
	"testing"
)

// TestScrubRC: assignments of secret-looking variables leave the copy (and
// the lines their quoted values run on to), named in a comment; PATH,
// aliases, functions and other variables stay as written.
func TestScrubRC(t *testing.T) {
	in := `# my setup
export PATH="$HOME/.local/bin:$PATH"
export GITHUB_TOKEN=ghp_secret1
OPENAI_API_KEY='sk-secret2'; export OPENAI_API_KEY
alias ll='ls -l'
greet() { echo hi; }
export AWS_SECRET_ACCESS_KEY="multi
line secret3"
declare -x DB_PASSWORD=secret4
EDITOR=vim
set -gx ANTHROPIC_API_KEY secret5
export THEME=dark TOKEN_LIMIT=10
`
	out, withheld := scrubRC(in)
	for _, s := range []string{"secret1", "secret2", "secret3", "secret4", "secret5"} {
		if strings.Contains(out, s) {
			t.Errorf("%s left in the copy:\n%s", s, out)
		}
	}
	for _, keep := range []string{`export PATH="$HOME/.local/bin:$PATH"`, "alias ll='ls -l'", "greet() { echo hi; }", "EDITOR=vim", "export THEME=dark TOKEN_LIMIT=10", "# my setup"} {
		if !strings.Contains(out, keep+"\n") {
			t.Errorf("%q lost:\n%s", keep, out)
		}
	}
	want := []string{"GITHUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "ANTHROPIC_API_KEY"}
	if !slices.Equal(withheld, want) {
		t.Errorf("withheld %v, want %v", withheld, want)
	}
	if n := strings.Count(out, "withheld from the agent"); n != len(want) {
		t.Errorf("%d comments for %d withheld:\n%s", n, len(want), out)
	}
	if got := strings.Count(out, "\n"); got != strings.Count(in, "\n")-1 {
		t.Errorf("%d lines, want %d (the multi-line value is one comment):\n%s", got, strings.Count(in, "\n")-1, out)
	}
}
