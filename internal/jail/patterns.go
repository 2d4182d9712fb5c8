package jail

import (
	"fmt"

	"github.com/agent-lock/agent-lock/internal/spec"

	"github.com/cilium/ebpf"
)

// Limits of the kernel's pattern table (jail.h): PAT_LEN holds the
// description's longest literal and its NUL.
const (
	PatternMax = 16
	PatternLen = spec.PatternLen
	patRule    = 0x200000
	patExact   = 1
	patPrefix  = 2
	patSuffix  = 3

	patInGrants  = 1 << 0
	patInProject = 1 << 1
)

// compilePattern is a pattern in the kernel's terms (jail.h PAT_*).
func compilePattern(glob string) (kind uint32, lit string, err error) {
	k, lit, err := spec.ParsePattern(glob)
	if err != nil {
		return 0, "", err
	}
	switch k {
	case spec.Exact:
		kind = patExact
	case spec.Prefix:
		kind = patPrefix
	case spec.Suffix:
		kind = patSuffix
	}
	return kind, lit, nil
}

// kernelScope is a pattern's scope in the kernel's bits (jail.h PAT_IN_*).
func kernelScope(s spec.Scope) uint32 {
	var k uint32
	if s&spec.InGrants != 0 {
		k |= patInGrants
	}
	if s&spec.InProject != 0 {
		k |= patInProject
	}
	return k
}

// fillPatterns writes the patterns into the kernel's table and returns the
// count, the scopes in use and their names for decisions. A failed write is
// an error: the caller does not start the agent (fail closed).
func fillPatterns(m *ebpf.Map, pats []spec.Pattern) (uint32, uint32, map[uint32]string, error) {
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
		v := jailPattern{Kind: kind, Len: uint32(len(lit)), Scope: kernelScope(p.Scope)}
		for j := range len(lit) {
			v.S[j] = int8(lit[j])
		}
		if err := m.Put(uint32(i), v); err != nil {
			return 0, 0, nil, fmt.Errorf("deny pattern %s: %w", p.Glob, err)
		}
		scopes |= kernelScope(p.Scope)
		names[patRule+uint32(i)] = "deny pattern " + p.Glob
	}
	return uint32(len(pats)), scopes, names, nil
}
