package jail

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
)

// Protected is an entry below the rule root marked Protect (DIR) that the
// agent may read but not make, change, replace or remove: a file the user's
// own tools execute outside the jail (.git/hooks, .envrc, ...). Entries are
// kept by name, so one that does not exist yet cannot be created either.
type Protected struct {
	// Path is relative to the root, slash-separated: at most ProtectDepth
	// components of at most ProtectNameMax bytes each.
	Path string
	// DirOnly protects only the name itself: it may be made as a
	// directory (mkdir), never as a file, link or symlink, nor renamed
	// onto, and what lies below it is not protected by this entry (.git:
	// git init may make it, a .git file pointing elsewhere may not).
	DirOnly bool
}

// Limits of the kernel's protect trie (jail.h).
const (
	ProtectDepth   = 3
	ProtectNameMax = 31
	protRule       = 0x100000
	protTree       = 1 << 0
	protEntry      = 1 << 1
)

// CheckProtected says what is wrong with a protected path, or nil.
func CheckProtected(path string) error {
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

// protectTrie numbers the components of the protected paths: node 0 is the
// first root (DIR), each key is (parent node, name). Each further root (a
// git worktree's git directory) gets a node of its own, returned in order,
// below which its entries lie; their names are prefixed with the root's
// path. It returns the map entries and the path of each node that a
// decision can name.
func protectTrie(roots ...protectRoot) (map[jailProtKey]jailProt, map[uint32]string, []uint32, error) {
	out := map[jailProtKey]jailProt{}
	names := map[uint32]string{}
	var rootNodes []uint32
	next := uint32(1)
	for i, root := range roots {
		top := uint32(0)
		if i > 0 {
			top = next
			next++
		}
		rootNodes = append(rootNodes, top)
		sorted := append([]Protected(nil), root.entries...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
		for _, e := range sorted {
			if err := CheckProtected(e.Path); err != nil {
				return nil, nil, nil, err
			}
			parent := top
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
					if e.DirOnly {
						v.Flags |= protEntry
					} else {
						v.Flags |= protTree
					}
					names[v.Node] = root.prefix + e.Path
				}
				out[k] = v
				parent = v.Node
			}
		}
	}
	return out, names, rootNodes, nil
}

// protectRoot is one root's protected entries, named with prefix.
type protectRoot struct {
	prefix  string
	entries []Protected
}

// fillProtect writes the trie into the kernel's map. A failed write is an
// error: the caller does not start the agent (fail closed).
func fillProtect(m *ebpf.Map, roots ...protectRoot) (map[uint32]string, []uint32, error) {
	trie, names, rootNodes, err := protectTrie(roots...)
	if err != nil {
		return nil, nil, err
	}
	if len(trie) > int(m.MaxEntries()) {
		return nil, nil, fmt.Errorf("%d protected names, the kernel's table holds %d", len(trie), m.MaxEntries())
	}
	for k, v := range trie {
		if err := m.Put(k, v); err != nil {
			return nil, nil, fmt.Errorf("protect %v: %w", names[v.Node], err)
		}
	}
	return names, rootNodes, nil
}
