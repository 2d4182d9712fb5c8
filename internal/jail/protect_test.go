package jail

import (
	"strings"
	"testing"
)

func TestProtectTrie(t *testing.T) {
	trie, names, roots, err := protectTrie(protectRoot{entries: []Protected{
		{Path: ".git/hooks"}, {Path: ".git", DirOnly: true}, {Path: ".git/config"}, {Path: ".envrc"},
		{Path: ".claude/settings.json"},
	}}, protectRoot{prefix: "/r/.git/worktrees/w/", entries: []Protected{{Path: "commondir"}, {Path: "config"}}})
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
	git := node(0, ".git")
	if git.Flags != protEntry || names[git.Node] != ".git" {
		t.Errorf(".git: %+v %q, want the entry flag only", git, names[git.Node])
	}
	for _, n := range []string{"hooks", "config"} {
		if v := node(git.Node, n); v.Flags != protTree || names[v.Node] != ".git/"+n {
			t.Errorf(".git/%s: %+v %q", n, v, names[v.Node])
		}
	}
	claude := node(0, ".claude")
	if claude.Flags != 0 {
		t.Errorf(".claude is only a way to settings.json, yet has flags %d", claude.Flags)
	}
	if v := node(claude.Node, "settings.json"); v.Flags != protTree {
		t.Errorf(".claude/settings.json: %+v", v)
	}
	if v := node(0, ".envrc"); v.Flags != protTree {
		t.Errorf(".envrc: %+v", v)
	}
	// The second root's entries lie below its own node, named with its
	// path; DIR's config is not its config.
	if len(roots) != 2 || roots[0] != 0 || roots[1] == 0 {
		t.Fatalf("root nodes %v", roots)
	}
	if v := node(roots[1], "commondir"); v.Flags != protTree || names[v.Node] != "/r/.git/worktrees/w/commondir" {
		t.Errorf("second root's commondir: %+v %q", v, names[v.Node])
	}
	if _, ok := trie[key(0, "commondir")]; ok {
		t.Error("the second root's entries leak into DIR's")
	}
	if v := node(roots[1], "config"); v.Node == node(git.Node, "config").Node {
		t.Error("the two roots share a node")
	}
	if len(trie) != 8 {
		t.Errorf("%d entries, want 8: %v", len(trie), trie)
	}
	seen := map[uint32]bool{0: true, roots[1]: true}
	for _, v := range trie {
		if seen[v.Node] {
			t.Errorf("node %d used twice", v.Node)
		}
		seen[v.Node] = true
	}
}

func TestCheckProtected(t *testing.T) {
	for _, bad := range []string{"", "/abs", "a/b/c/d", "a//b", "../x", "a/./b", strings.Repeat("x", 32)} {
		if err := CheckProtected(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, good := range []string{".git", ".git/hooks", "a/b/c", strings.Repeat("x", 31)} {
		if err := CheckProtected(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}

func TestCheckPattern(t *testing.T) {
	for _, good := range []string{"*.pem", "id_*", ".env*", ".netrc"} {
		if err := CheckPattern(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for _, bad := range []string{"*", "a*b", "*a*", "?x", "[ab]", "a/b*", "*" + strings.Repeat("x", 32)} {
		if err := CheckPattern(bad); err == nil {
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
