package jail

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agent-lock/agent-lock/internal/spec"
	"github.com/cilium/ebpf"
)

// gitEntries are the protected paths that name git's files, with the name
// the kernel matches along a path and its class (jail.h GI_*). A .git names
// a git directory (or a file pointing to one): with it, the names of the
// folders git follows to other git directories (modules, worktrees) are
// matched too, so that no symlink takes their name.
var gitEntries = map[string]gitName{
	".git":                 {".git", giDotgit},
	".git/hooks":           {"hooks", giHooks},
	".git/config":          {"config", giConfig},
	".git/config.worktree": {"config.worktree", giConfigWorktree},
	".git/commondir":       {"commondir", giCommondir},
	".git/gitdir":          {"gitdir", giGitdir},
	".gitmodules":          {".gitmodules", giGitmodules},
}

// gitName is a name of git's the kernel knows, and its class.
type gitName struct {
	Name  string
	class uint32
}

// Classes of git's names (jail.h GI_*).
const (
	giDotgit         = 0
	giHooks          = 1
	giConfig         = 2
	giConfigWorktree = 3
	giCommondir      = 4
	giGitdir         = 5
	giGitmodules     = 6
	giFollowed       = 7
	gitRule          = 0x300000
	gitNameLen       = 16
)

// gitFollowed are the folders of a git directory that lead to other git
// directories (submodules', linked worktrees').
var gitFollowed = []string{"modules", "worktrees"}

// Limits of the kernel's protect trie (jail.h).
const (
	ProtectDepth   = 3
	ProtectNameMax = 31
	protRule       = 0x100000
	protTree       = 1 << 0
)

// CheckProtected says what is wrong with a protected entry, or nil.
func CheckProtected(e spec.Protected) error {
	path := e.Path
	if e.Git {
		if _, ok := gitEntries[path]; !ok {
			var names []string
			for p := range gitEntries {
				names = append(names, p)
			}
			sort.Strings(names)
			return fmt.Errorf("protected git entry %q: not one of git's files the kernel knows (%s)", path, strings.Join(names, " "))
		}
		return nil
	}
	parts := strings.Split(path, "/")
	if path == "" || strings.HasPrefix(path, "/") {
		return fmt.Errorf("protected path %q: give it relative to the project directory", path)
	}
	if len(parts) > ProtectDepth {
		return fmt.Errorf("protected path %q: at most %d components (protect a folder higher up instead)", path, ProtectDepth)
	}
	for _, p := range parts {
		switch {
		case p == "" || p == "." || p == "..":
			return fmt.Errorf("protected path %q: empty, . or .. component", path)
		case len(p) > ProtectNameMax:
			return fmt.Errorf("protected path %q: component %q is longer than %d bytes", path, p, ProtectNameMax)
		}
	}
	return nil
}

// protectTrie numbers the components of the protected paths that are not
// git's: node 0 is the root (DIR), each key is (parent node, name). It
// returns the map entries and the path of each node that a decision can
// name.
func protectTrie(entries []spec.Protected) (map[jailProtKey]jailProt, map[uint32]string, error) {
	out := map[jailProtKey]jailProt{}
	names := map[uint32]string{}
	next := uint32(1)
	sorted := append([]spec.Protected(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, e := range sorted {
		if err := CheckProtected(e); err != nil {
			return nil, nil, err
		}
		if e.Git {
			continue
		}
		parent := uint32(0)
		parts := strings.Split(e.Path, "/")
		for i, p := range parts {
			var k jailProtKey
			k.Parent = parent
			for j := range len(p) {
				k.Name[j] = int8(p[j])
			}
			v, ok := out[k]
			if !ok {
				v = jailProt{Node: next}
				next++
			}
			if i == len(parts)-1 {
				v.Flags |= protTree
				names[v.Node] = e.Path
			}
			out[k] = v
			parent = v.Node
		}
	}
	return out, names, nil
}

// gitTable is the kernel's table of git's names for the protected entries
// that are git's, the classes it holds (the program's git_names), and the
// rule name of each class.
func gitTable(entries []spec.Protected) (map[jailGitname]jailGitclass, uint32, map[uint32]string) {
	out := map[jailGitname]jailGitclass{}
	var classes uint32
	names := map[uint32]string{}
	add := func(name string, class uint32) {
		var k jailGitname
		k.Len = uint32(len(name))
		for i := range len(name) {
			k.Name[i] = int8(name[i])
		}
		out[k] = jailGitclass{Bits: 1 << class, Rule: gitRule + class}
		classes |= 1 << class
	}
	for _, e := range entries {
		g, ok := gitEntries[e.Path]
		if !e.Git || !ok {
			continue
		}
		add(g.Name, g.class)
		names[gitRule+g.class] = e.Path
		if g.class == giDotgit {
			for _, f := range gitFollowed {
				add(f, giFollowed)
			}
		}
	}
	return out, classes, names
}

// fillProtect writes the trie and git's names into the kernel's maps. A
// failed write is an error: the caller does not start the agent (fail
// closed).
func fillProtect(trieMap, gitMap *ebpf.Map, entries []spec.Protected) (map[uint32]string, error) {
	trie, names, err := protectTrie(entries)
	if err != nil {
		return nil, err
	}
	if len(trie) > int(trieMap.MaxEntries()) {
		return nil, fmt.Errorf("%d protected names, the kernel's table holds %d", len(trie), trieMap.MaxEntries())
	}
	for k, v := range trie {
		if err := trieMap.Put(k, v); err != nil {
			return nil, fmt.Errorf("protect %v: %w", names[v.Node], err)
		}
	}
	git, _, gitNames := gitTable(entries)
	for k, v := range git {
		if err := gitMap.Put(k, v); err != nil {
			return nil, fmt.Errorf("protect git's %s: %w", gitNames[v.Rule], err)
		}
	}
	out := map[uint32]string{}
	for node, path := range names {
		out[protRule+node] = path
	}
	for id, path := range gitNames {
		out[id] = path
	}
	return out, nil
}
