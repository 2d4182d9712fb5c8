package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/spec"
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
	flags := map[string]spec.Access{}
	for _, r := range p.Rules() {
		flags[r.Path] |= r.Access
	}
	want := map[string]spec.Access{
		home:                                 spec.Read | spec.Grant,
		filepath.Join(home, "proj"):          spec.Read | spec.Write | spec.Project,
		filepath.Join(home, "cache"):         spec.Read | spec.Write | spec.Grant,
		filepath.Join(home, "ref"):           spec.Deny,
		filepath.Join(home, ".ssh"):          spec.Deny, // ...but never its secrets
		filepath.Join(home, ".aws"):          spec.Deny,
		filepath.Join(home, ".config/gh"):    spec.Deny,
		filepath.Join(home, ".bash_history"): spec.Deny,
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
	if len(d) != 1 || d[0].Path != filepath.Join(home, ".aws") {
		t.Errorf("denied %v, want only ~/.aws", d)
	}
}

func TestUnprotect(t *testing.T) {
	has := func(ps []spec.Protected, path string) bool {
		for _, p := range ps {
			if p.Path == path {
				return true
			}
		}
		return false
	}
	all, err := Unprotect("/p", nil)
	if err != nil || len(all) != len(Protected) {
		t.Fatalf("no --unprotect: %v %v", all, err)
	}
	for _, e := range Protected {
		if err := jail.CheckProtected(e); err != nil {
			t.Errorf("built-in entry: %v", err)
		}
	}
	got, err := Unprotect("/p", []string{".vscode", "/p/.git"})
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{".vscode", ".git", ".git/hooks", ".git/config"} {
		if has(got, gone) {
			t.Errorf("%s still protected", gone)
		}
	}
	if !has(got, ".envrc") || !has(got, PolicyFile) {
		t.Errorf("unrelated entries lifted: %v", got)
	}
	for _, tc := range []struct{ arg, want string }{
		{"src", "not a protected path"},
		{".git/hooks/pre-commit", "inside the protected .git/hooks"},
		{"/elsewhere/.envrc", "not inside the project directory"},
	} {
		if _, err := Unprotect("/p", []string{tc.arg}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--unprotect %s: %v, want %q", tc.arg, err, tc.want)
		}
	}
}

// A profile's grants are named after it and carry no Grant flag: the
// secret-name patterns are for the user's own grants.
func TestProfiledGrantsAndPatterns(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, "proj"), 0o755)
	os.MkdirAll(filepath.Join(home, ".npm"), 0o755)
	p := Policy{Dir: filepath.Join(home, "proj"), AllowWrite: []string{filepath.Join(home, ".npm")},
		Profiled: map[string]string{filepath.Join(home, ".npm"): "profile node"}, DenyPatterns: []string{"*.secret"}}
	for _, r := range p.Rules() {
		if r.Path == filepath.Join(home, ".npm") && (r.Access&spec.Grant != 0 || r.Name != "profile node") {
			t.Errorf("profile grant: %+v", r)
		}
	}
	pats := p.Patterns()
	if len(pats) != len(SecretPatterns)+1 || pats[0].Scope != spec.InGrants || pats[len(pats)-1].Scope != spec.InGrants|spec.InProject {
		t.Errorf("patterns %+v", pats)
	}
	for _, g := range SecretPatterns {
		if err := spec.CheckPattern(g); err != nil {
			t.Error(err)
		}
	}
}

// Files written by name: a granted file (--allow-write FILE, a profile's
// Files) is granted by its name, also before it exists, in its folder's
// real path; a missing file whose folder is missing, or a dangling
// symlink, grants nothing; a granted folder stays a tree.
func TestNamedFiles(t *testing.T) {
	home := t.TempDir()
	real := filepath.Join(home, "real")
	os.MkdirAll(filepath.Join(real, "cache"), 0o755)
	os.Symlink("real", filepath.Join(home, "h"))
	os.WriteFile(filepath.Join(real, "notes.md"), nil, 0o600)
	os.Symlink("nowhere", filepath.Join(real, "dangling.json"))
	p := Policy{
		Dir:        filepath.Join(real, "cache"),
		AllowWrite: []string{filepath.Join(real, "notes.md"), filepath.Join(real, "cache")},
		Files:      []string{filepath.Join(home, "h/conf.json"), filepath.Join(home, "gone/x.json"), filepath.Join(real, "dangling.json")},
	}
	flags := map[string]spec.Access{}
	for _, r := range p.Rules() {
		flags[r.Path] |= r.Access
	}
	named := spec.Read | spec.Write | spec.Grant | spec.Named
	for path, want := range map[string]spec.Access{
		filepath.Join(real, "notes.md"):      named,
		filepath.Join(real, "conf.json"):     named,
		filepath.Join(real, "cache"):         spec.Read | spec.Write | spec.Grant | spec.Project,
		filepath.Join(home, "gone/x.json"):   0,
		filepath.Join(real, "dangling.json"): 0,
		filepath.Join(real, "nowhere"):       0,
	} {
		if flags[path] != want {
			t.Errorf("%s: flags %b, want %b", path, flags[path], want)
		}
	}
}
