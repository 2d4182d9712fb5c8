package spec

import (
	"strings"
	"testing"
)

func TestParsePattern(t *testing.T) {
	for glob, want := range map[string]struct {
		kind PatternKind
		lit  string
	}{
		"*.pem": {Suffix, ".pem"}, "id_*": {Prefix, "id_"}, ".env*": {Prefix, ".env"}, ".netrc": {Exact, ".netrc"},
	} {
		kind, lit, err := ParsePattern(glob)
		if err != nil || kind != want.kind || lit != want.lit {
			t.Errorf("%q: %v %q %v, want %v %q", glob, kind, lit, err, want.kind, want.lit)
		}
	}
	for _, bad := range []string{"*", "a*b", "*a*", "?x", "[ab]", "a/b*", "*" + strings.Repeat("x", PatternLen+1)} {
		if err := CheckPattern(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
