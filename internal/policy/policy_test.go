package policy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-lock/agent-lock/internal/jail"
)

func TestGrantsAndDenials(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{"proj", "ref", "cache", ".ssh", ".aws", ".config/gh"} {
		os.MkdirAll(filepath.Join(home, d), 0o755)
	}
	os.WriteFile(filepath.Join(home, ".bash_history"), nil, 0o600)
	p := Policy{
		Dir:        filepath.Join(home, "proj"),
		Allow:      []string{home}, // read the whole home...
		AllowWrite: []string{filepath.Join(home, "cache")},
		Deny:       []string{filepath.Join(home, "ref")},
		Home:       home,
	}
	flags := map[string]jail.RuleFlags{}
	for _, r := range p.Rules() {
		flags[r.Path] |= r.Flags
	}
	want := map[string]jail.RuleFlags{
		home:                                 jail.Read,
		filepath.Join(home, "proj"):          jail.Read | jail.Write,
		filepath.Join(home, "cache"):         jail.Read | jail.Write,
		filepath.Join(home, "ref"):           jail.Deny,
		filepath.Join(home, ".ssh"):          jail.Deny, // ...but never its secrets
		filepath.Join(home, ".aws"):          jail.Deny,
		filepath.Join(home, ".config/gh"):    jail.Deny,
		filepath.Join(home, ".bash_history"): jail.Deny,
	}
	for path, f := range want {
		if flags[path] != f {
			t.Errorf("%s: flags %b, want %b", path, flags[path], f)
		}
	}
	// Secrets that do not exist are not rules (identity needs an inode).
	if _, ok := flags[filepath.Join(home, ".gnupg")]; ok {
		t.Error("a missing ~/.gnupg became a rule")
	}
}

// A project inside a secret folder keeps working: that secret is not denied.
func TestDenialsSpareTheProject(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".ssh", "proj"), 0o755)
	os.MkdirAll(filepath.Join(home, ".aws"), 0o755)
	p := Policy{Dir: filepath.Join(home, ".ssh", "proj"), Home: home}
	d := p.Denied()
	if len(d) != 1 || d[0] != filepath.Join(home, ".aws") {
		t.Errorf("denied %v, want only ~/.aws", d)
	}
}
