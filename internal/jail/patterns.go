package jail

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
)

// Pattern is a name the kernel refuses wherever Scope says (the file's own
// name, not its folders'): "*.pem", "id_*", ".env*", or an exact name.
type Pattern struct {
	Glob  string
	Scope PatternScope
}

// PatternScope says below which rule roots a pattern applies.
type PatternScope uint32

const (
	InGrants  PatternScope = 1 << 0 // below Grant roots (--allow, --allow-write)
	InProject PatternScope = 1 << 1 // below the Project root (DIR)
)

// Limits of the kernel's pattern table (jail.h).
const (
	PatternMax = 16
	PatternLen = 31
	patRule    = 0x200000
	patExact   = 1
	patPrefix  = 2
	patSuffix  = 3
)

// CheckPattern says what is wrong with a glob, or nil: the kernel matches
// "*suffix", "prefix*" and exact names only.
func CheckPattern(glob string) error {
	_, _, err := compilePattern(glob)
	return err
}

func compilePattern(glob string) (kind uint32, lit string, err error) {
	switch {
	case strings.HasPrefix(glob, "*") && !strings.ContainsAny(glob[1:], "*?["):
		kind, lit = patSuffix, glob[1:]
	case strings.HasSuffix(glob, "*") && !strings.ContainsAny(glob[:len(glob)-1], "*?["):
		kind, lit = patPrefix, glob[:len(glob)-1]
	case !strings.ContainsAny(glob, "*?["):
		kind, lit = patExact, glob
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

// fillPatterns writes the patterns into the kernel's table and returns the
// count, the scopes in use and their names for decisions. A failed write is
// an error: the caller does not start the agent (fail closed).
func fillPatterns(m *ebpf.Map, pats []Pattern) (uint32, uint32, map[uint32]string, error) {
	if len(pats) > PatternMax {
		return 0, 0, nil, fmt.Errorf("%d deny patterns, the kernel's table holds %d", len(pats), PatternMax)
	}
	names := map[uint32]string{}
	var scopes uint32
	for i, p := range pats {
		kind, lit, err := compilePattern(p.Glob)
		if err != nil {
			return 0, 0, nil, err
		}
		v := jailPattern{Kind: kind, Len: uint32(len(lit)), Scope: uint32(p.Scope)}
		for j := range len(lit) {
			v.S[j] = int8(lit[j])
		}
		if err := m.Put(uint32(i), v); err != nil {
			return 0, 0, nil, fmt.Errorf("deny pattern %s: %w", p.Glob, err)
		}
		scopes |= uint32(p.Scope)
		names[patRule+uint32(i)] = "deny pattern " + p.Glob
	}
	return uint32(len(pats)), scopes, names, nil
}
