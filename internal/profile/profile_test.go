package profile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	dir := t.TempDir()
	// npm links the command to its package's entry: the link's own name
	// and its target's both select.
	pkg := filepath.Join(dir, "lib/node_modules/@openai/codex/bin/codex.js")
	os.MkdirAll(filepath.Dir(pkg), 0o755)
	os.WriteFile(pkg, nil, 0o755)
	link := filepath.Join(dir, "bin/cx")
	os.MkdirAll(filepath.Dir(link), 0o755)
	os.Symlink(pkg, link)
	for path, want := range map[string]string{
		"/usr/local/bin/claude": "claude", "/home/a/.local/bin/aider": "aider", link: "codex",
		"/usr/bin/python3": "python", "/usr/bin/node": "node", "/usr/bin/bash": "",
	} {
		p, ok := Detect(path)
		if p.Name != want || ok != (want != "") {
			t.Errorf("Detect(%s) = %q, %v; want %q", path, p.Name, ok, want)
		}
	}
}

func TestResolve(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{".claude", ".npm", ".nvm", ".local/bin"} {
		os.MkdirAll(filepath.Join(home, d), 0o755)
	}
	os.WriteFile(filepath.Join(home, ".claude.json"), []byte("{}"), 0o600)
	g, err := Resolve([]string{"claude"}, home)
	if err != nil {
		t.Fatal(err)
	}
	abs := func(rel ...string) []string {
		var out []string
		for _, r := range rel {
			out = append(out, filepath.Join(home, r))
		}
		return out
	}
	if !slices.Equal(g.Profiles, []string{"claude", "node"}) {
		t.Errorf("profiles %v, want claude with its toolchain", g.Profiles)
	}
	if want := abs(".claude", ".claude.json", ".npm"); !slices.Equal(g.Write, want) {
		t.Errorf("write %v, want %v", g.Write, want)
	}
	if want := abs(".local/bin", ".nvm"); !slices.Equal(g.Read, want) {
		t.Errorf("read %v, want %v", g.Read, want)
	}
	if !slices.Contains(g.Missing, filepath.Join(home, ".local/share/claude")) {
		t.Errorf("missing paths not listed: %v", g.Missing)
	}
	if !slices.Contains(g.Env, "ANTHROPIC_API_KEY") || slices.Contains(g.Env, "OPENAI_API_KEY") {
		t.Errorf("env %v: Claude's key, and no other agent's", g.Env)
	}
	if _, err := Resolve([]string{"cursor"}, home); err == nil || !strings.Contains(err.Error(), "claude, codex") {
		t.Errorf("unknown profile: %v", err)
	}
}

// Every profile grants inside the home only, never the home itself or a
// place the home's secrets live in.
func TestProfilesStayNarrow(t *testing.T) {
	secrets := []string{".ssh", ".aws", ".gnupg", ".config/gh", ".kube", ".netrc", ".git-credentials"}
	for _, p := range All() {
		for _, rel := range append(slices.Clone(p.Write), p.Read...) {
			if rel == "" || rel == "." || strings.HasPrefix(rel, "/") || strings.Contains(rel, "..") {
				t.Errorf("%s grants %q: must be a path below the home", p.Name, rel)
			}
			for _, s := range secrets {
				if rel == s || strings.HasPrefix(s, rel+"/") || strings.HasPrefix(rel, s+"/") {
					t.Errorf("%s grants %q, which holds or is %s", p.Name, rel, s)
				}
			}
		}
		for _, u := range p.Uses {
			if _, ok := ByName(u); !ok {
				t.Errorf("%s uses unknown profile %s", p.Name, u)
			}
		}
	}
}
