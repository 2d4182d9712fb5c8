// Package spec is the vocabulary of a cell's description: the roots it
// grants or refuses, the entries it protects and the names it refuses, in
// no engine's terms. policy builds a description from flags, policy files
// and profiles; each engine (the BPF LSM's programs in jail, Landlock's
// ruleset in landlock) translates it into what its kernel interface holds,
// and says what it cannot.
package spec

import (
	"fmt"
	"strings"
)

// Access says what a rule root grants, or refuses, to the tree below it.
type Access uint32

const (
	Read    Access = 1 << iota // read and execute
	Write                      // every modifying operation
	Scratch                    // a shared scratch place: only files the cell created
	Deny                       // refused even inside a grant
	Socket                     // a unix socket the cell may connect to
	Protect                    // the description's Protected entries lie below it
	Grant                      // a grant the user made: InGrants patterns apply below it
	Project                    // the project directory: InProject patterns apply below it
	// Named grants a file by its name in its folder, with its siblings
	// (the names that are its name, a dot and anything: F.tmp.123, F.lock,
	// F.backup), read-write with Write: programs save such a file by
	// writing a sibling and renaming it over the file, which makes a new
	// inode, and make it on first use. The file need not exist; its folder
	// must. The folder itself is granted nothing.
	Named
	// InGit marks a root that lies in a git directory (a linked
	// worktree's, outside DIR): below it, git's names are protected as
	// below a .git (Protected.Git).
	InGit
)

// Rule is one root of the description: a path and what it grants.
type Rule struct {
	Path   string
	Access Access
	// Name says where the rule comes from ("project directory",
	// "--allow", "home secret"); decisions it made carry it.
	Name string
}

// Protected is an entry the agent may read but not make, change, replace or
// remove: a file the user's own tools execute outside the cell (.envrc,
// .git/hooks, ...). Entries are kept by name, so one that does not exist
// yet cannot be created either.
type Protected struct {
	// Path is relative to the project directory, slash-separated. An
	// entry that is not Git is protected below the rule root marked
	// Protect (DIR) only.
	Path string
	// Git marks one of git's files (.git, .git/hooks, .git/config,
	// .git/config.worktree, .git/commondir, .git/gitdir, .gitmodules):
	// protected in every repository below every writable rule, at any
	// depth.
	Git bool
}

// Pattern is a name refused wherever Scope says (the file's own name, not
// its folders'): "*.pem", "id_*", ".env*", or an exact name.
type Pattern struct {
	Glob  string
	Scope Scope
}

// Scope says below which rule roots a pattern applies.
type Scope uint32

const (
	InGrants  Scope = 1 << iota // below Grant roots (--allow, --allow-write)
	InProject                   // below the Project root (DIR)
)

// PatternKind is how a pattern matches a name.
type PatternKind int

const (
	Exact  PatternKind = iota + 1 // the whole name
	Prefix                        // PREFIX*
	Suffix                        // *SUFFIX
)

// PatternLen is the longest literal a pattern may hold (besides its *):
// the smallest any engine's table holds.
const PatternLen = 31

// ParsePattern says how glob matches and what it matches, or what is wrong
// with it: patterns are *SUFFIX, PREFIX* or an exact name, one name
// without /.
func ParsePattern(glob string) (PatternKind, string, error) {
	var kind PatternKind
	var lit string
	switch {
	case strings.HasPrefix(glob, "*") && !strings.ContainsAny(glob[1:], "*?["):
		kind, lit = Suffix, glob[1:]
	case strings.HasSuffix(glob, "*") && !strings.ContainsAny(glob[:len(glob)-1], "*?["):
		kind, lit = Prefix, glob[:len(glob)-1]
	case !strings.ContainsAny(glob, "*?["):
		kind, lit = Exact, glob
	default:
		return 0, "", fmt.Errorf("pattern %q: the kernel matches *SUFFIX, PREFIX* or an exact name", glob)
	}
	switch {
	case lit == "":
		return 0, "", fmt.Errorf("pattern %q matches every name", glob)
	case strings.Contains(lit, "/"):
		return 0, "", fmt.Errorf("pattern %q: a pattern matches one name, without /", glob)
	case len(lit) > PatternLen:
		return 0, "", fmt.Errorf("pattern %q: at most %d bytes besides the *", glob, PatternLen)
	}
	return kind, lit, nil
}

// CheckPattern says what is wrong with a glob, or nil.
func CheckPattern(glob string) error {
	_, _, err := ParsePattern(glob)
	return err
}

// Under reports whether the clean absolute path p is root or lies below
// it.
func Under(p, root string) bool {
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}
