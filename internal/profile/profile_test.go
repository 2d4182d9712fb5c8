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
	// No ~/.claude.json yet: it is granted by name all the same.
	g, err := Resolve([]string{"claude"}, home, nil)
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
	if want := abs(".claude", ".npm"); !slices.Equal(g.Write, want) {
		t.Errorf("write %v, want %v", g.Write, want)
	}
	if want := abs(".claude.json"); !slices.Equal(g.Files, want) || g.From[want[0]] != "claude" {
		t.Errorf("files %v (from %q), want %v from claude", g.Files, g.From[filepath.Join(home, ".claude.json")], want)
	}
	// A file whose folder is missing is not granted.
	if g, _ := Resolve([]string{"claude"}, filepath.Join(home, "nohome"), nil); len(g.Files) != 0 || !slices.Contains(g.Missing, filepath.Join(home, "nohome/.claude.json")) {
		t.Errorf("files %v, missing %v: ~/.claude.json granted in a home that does not exist", g.Files, g.Missing)
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
	if _, err := Resolve([]string{"cursor"}, home, nil); err == nil || !strings.Contains(err.Error(), "claude, codex") {
		t.Errorf("unknown profile: %v", err)
	}
}

// TestResolveMakesFirstRunFolders: on a first run (no ~/.codex yet) the
// profile's own folders are made through mkdir and granted; without mkdir
// (agent-lock policy) nothing is made and they are listed missing; a failed
// make is an error naming the folder and the profile.
func TestResolveMakesFirstRunFolders(t *testing.T) {
	home := t.TempDir()
	g, err := Resolve([]string{"codex"}, home, nil)
	if err != nil {
		t.Fatal(err)
	}
	codex, npm, skills := filepath.Join(home, ".codex"), filepath.Join(home, ".npm"), filepath.Join(home, ".agents/skills")
	if !slices.Contains(g.Missing, codex) || slices.Contains(g.Write, codex) || !slices.Equal(g.Unmade, []string{skills, codex, npm}) {
		t.Errorf("without mkdir: write %v, missing %v, unmade %v", g.Write, g.Missing, g.Unmade)
	}
	if _, err := os.Lstat(codex); err == nil {
		t.Error("made ~/.codex without being asked to")
	}
	var made []string
	mkdir := func(p string) error { made = append(made, p); return os.MkdirAll(p, 0o700) }
	if g, err = Resolve([]string{"codex"}, home, &Maker{Dir: mkdir}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(made, []string{codex, skills, npm}) {
		t.Errorf("made %v, want ~/.codex, ~/.agents/skills and ~/.npm", made)
	}
	if !slices.Contains(g.Write, codex) || !slices.Contains(g.Write, npm) || !slices.Contains(g.Read, skills) || slices.Contains(g.Missing, codex) {
		t.Errorf("with mkdir: write %v, missing %v", g.Write, g.Missing)
	}
	made = nil
	if Resolve([]string{"codex"}, home, &Maker{Dir: mkdir}); len(made) != 0 {
		t.Errorf("made %v again", made)
	}
	_, err = Resolve([]string{"gemini"}, home, &Maker{Dir: func(string) error { return os.ErrPermission }})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(home, ".gemini")) || !strings.Contains(err.Error(), "gemini profile") {
		t.Errorf("a failed make: %v", err)
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

// TestSeed: a profile's file its agent makes on a first run is made by the
// run (with its seed) before the cell opens, where its folder exists; the
// plan lists it as one a run makes, and an existing one is left alone.
func TestSeed(t *testing.T) {
	home := t.TempDir()
	cfg := filepath.Join(home, ".claude.json")
	g, err := Resolve([]string{"claude"}, home, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(g.Unmade, cfg) {
		t.Errorf("unmade %v: ~/.claude.json missing from what a run makes", g.Unmade)
	}
	var files []string
	mk := &Maker{Dir: func(p string) error { return os.MkdirAll(p, 0o700) },
		File: func(p, content string) error {
			files = append(files, p)
			return os.WriteFile(p, []byte(content), 0o600)
		}}
	if _, err := Resolve([]string{"claude"}, home, mk); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(cfg); err != nil || string(b) != "{}\n" || !slices.Equal(files, []string{cfg}) {
		t.Errorf("~/.claude.json: %q %v, made %v", b, err, files)
	}
	files = nil
	if Resolve([]string{"claude"}, home, mk); len(files) != 0 {
		t.Errorf("an existing file was made again: %v", files)
	}
}

// TestCommandLine: Codex's profile adds the setting that makes agent-lock
// its sandbox after the command's name; a command line that asks for its
// own sandbox keeps it, and gets a warning that says what to do.
func TestCommandLine(t *testing.T) {
	codex, _ := ByName("codex")
	argv, warn := codex.CommandLine([]string{"codex", "exec", "fix it"})
	if want := []string{"codex", "-c", `sandbox_mode="danger-full-access"`, "exec", "fix it"}; !slices.Equal(argv, want) || warn != "" {
		t.Errorf("argv %q (warning %q), want %q", argv, warn, want)
	}
	for _, own := range [][]string{{"codex", "--sandbox", "workspace-write"}, {"codex", "exec", "-s", "read-only", "x"}, {"codex", "--full-auto"}, {"codex", "--sandbox=workspace-write"}} {
		argv, warn := codex.CommandLine(own)
		if !slices.Equal(argv, own) || !strings.Contains(warn, "bubblewrap") || !strings.Contains(warn, "leave out "+own[len(own)-1]) && !strings.Contains(warn, "leave out -") {
			t.Errorf("%q: argv %q, warning %q", own, argv, warn)
		}
	}
	if argv, warn := codex.CommandLine([]string{"codex", "exec", "--", "--sandbox"}); len(argv) != 6 || warn != "" {
		t.Errorf("a prompt after -- read as a flag: %q %q", argv, warn)
	}
	claude, _ := ByName("claude")
	if argv, warn := claude.CommandLine([]string{"claude", "-p", "x"}); len(argv) != 3 || warn != "" {
		t.Errorf("claude's command line changed: %q %q", argv, warn)
	}
}
