package jail

import (
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/spec"
)

// Every access a description can say has its own kernel bit: an access
// added to spec without one would be silently granted nothing (or, worse,
// share another's bit).
func TestKernelFlags(t *testing.T) {
	var seen RuleFlags
	for bit := spec.Access(1); bit != 0 && bit <= spec.InGit; bit <<= 1 {
		f := kernelFlags(bit)
		if f == 0 || f&(f-1) != 0 || f&seen != 0 || f == ruleSeal {
			t.Errorf("access %#x: kernel bits %#x (seen %#x)", bit, f, seen)
		}
		seen |= f
	}
	if kernelScope(spec.InGrants|spec.InProject) != patInGrants|patInProject {
		t.Errorf("scopes: %#x", kernelScope(spec.InGrants|spec.InProject))
	}
}

func TestProtectTrie(t *testing.T) {
	entries := []spec.Protected{
		{Path: ".git/hooks", Git: true}, {Path: ".git", Git: true}, {Path: ".git/config", Git: true}, {Path: ".envrc"},
		{Path: ".claude/settings.json"},
	}
	trie, names, err := protectTrie(entries)
	if err != nil {
		t.Fatal(err)
	}
	key := func(parent uint32, name string) jailProtKey {
		var k jailProtKey
		k.Parent = parent
		for i := range len(name) {
			k.Name[i] = int8(name[i])
		}
		return k
	}
	node := func(parent uint32, name string) jailProt {
		t.Helper()
		v, ok := trie[key(parent, name)]
		if !ok {
			t.Fatalf("no entry %q below node %d", name, parent)
		}
		return v
	}
	// Git's entries are matched by name at any depth, not in the trie.
	if _, ok := trie[key(0, ".git")]; ok {
		t.Errorf(".git in the trie: %v", trie)
	}
	claude := node(0, ".claude")
	if claude.Flags != 0 {
		t.Errorf(".claude is only a way to settings.json, yet has flags %d", claude.Flags)
	}
	if v := node(claude.Node, "settings.json"); v.Flags != protTree || names[v.Node] != ".claude/settings.json" {
		t.Errorf(".claude/settings.json: %+v %q", v, names[v.Node])
	}
	if v := node(0, ".envrc"); v.Flags != protTree {
		t.Errorf(".envrc: %+v", v)
	}
	if len(trie) != 3 {
		t.Errorf("%d entries, want 3: %v", len(trie), trie)
	}

	git, classes, gitNames := gitTable(entries)
	gkey := func(name string) jailGitname {
		var k jailGitname
		k.Len = uint32(len(name))
		for i := range len(name) {
			k.Name[i] = int8(name[i])
		}
		return k
	}
	for name, class := range map[string]uint32{".git": giDotgit, "hooks": giHooks, "config": giConfig,
		"modules": giFollowed, "worktrees": giFollowed} {
		if v, ok := git[gkey(name)]; !ok || v.Bits != 1<<class || v.Rule != gitRule+class {
			t.Errorf("git name %s: %+v %v", name, v, ok)
		}
	}
	if len(git) != 5 || classes != 1<<giDotgit|1<<giHooks|1<<giConfig|1<<giFollowed {
		t.Errorf("git table %v, classes %#x", git, classes)
	}
	if gitNames[gitRule+giHooks] != ".git/hooks" || gitNames[gitRule+giDotgit] != ".git" {
		t.Errorf("git rule names %v", gitNames)
	}
	// Without .git, no folder is a git directory: modules and worktrees
	// are no one's names.
	git, _, _ = gitTable([]spec.Protected{{Path: ".gitmodules", Git: true}})
	if len(git) != 1 {
		t.Errorf("only .gitmodules: %v", git)
	}
}

func TestCheckProtected(t *testing.T) {
	for _, bad := range []string{"", "/abs", "a/b/c/d", "a//b", "../x", "a/./b", strings.Repeat("x", 32)} {
		if err := CheckProtected(spec.Protected{Path: bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, good := range []string{".git", ".git/hooks", "a/b/c", strings.Repeat("x", 31)} {
		if err := CheckProtected(spec.Protected{Path: good}); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for p := range gitEntries {
		if err := CheckProtected(spec.Protected{Path: p, Git: true}); err != nil {
			t.Errorf("git's %q: %v", p, err)
		}
		if g := gitEntries[p]; len(g.Name) >= gitNameLen {
			t.Errorf("git's %q: the kernel matches names shorter than %d bytes", p, gitNameLen)
		}
	}
	if err := CheckProtected(spec.Protected{Path: ".git/objects", Git: true}); err == nil || !strings.Contains(err.Error(), ".git/hooks") {
		t.Errorf("an unknown git name: %v", err)
	}
}

func TestCheckPattern(t *testing.T) {
	for _, good := range []string{"*.pem", "id_*", ".env*", ".netrc"} {
		if err := spec.CheckPattern(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for _, bad := range []string{"*", "a*b", "*a*", "?x", "[ab]", "a/b*", "*" + strings.Repeat("x", 32)} {
		if err := spec.CheckPattern(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	kind, lit, _ := compilePattern("*.pem")
	if kind != patSuffix || lit != ".pem" {
		t.Errorf("*.pem: %d %q", kind, lit)
	}
	kind, lit, _ = compilePattern("id_*")
	if kind != patPrefix || lit != "id_" {
		t.Errorf("id_*: %d %q", kind, lit)
	}
}
