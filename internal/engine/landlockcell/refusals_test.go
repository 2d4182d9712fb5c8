package landlockcell

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/policy"
)

// TestLandlockRefusesWhatItCannotEnforce: each request the Landlock engine
// cannot enforce stops the session at start with why and what to do
// instead; --best-effort turns each into a warning; what it can enforce
// passes.
func TestLandlockRefusesWhatItCannotEnforce(t *testing.T) {
	dir := "/home/u/project"
	for _, tc := range []struct {
		name string
		p    policy.Policy
		want []string // in the error; none: no error
	}{
		{"name pattern", policy.Policy{Dir: dir, DenyPatterns: []string{"*.db"}},
			[]string{`--deny "*.db"`, "cannot refuse files by name", "--engine bpf-lsm", "--best-effort"}},
		{"denial inside DIR", policy.Policy{Dir: dir, Deny: []string{dir + "/data/secret"}},
			[]string{"--deny " + dir + "/data/secret lies inside the project directory", "could neither list " + dir, "--engine bpf-lsm"}},
		{"denial outside DIR", policy.Policy{Dir: dir, Deny: []string{"/home/u/other"}}, nil},
		{"denial of a sibling named like DIR", policy.Policy{Dir: dir, Deny: []string{dir + "-old"}}, nil},
		{"unprotect (the tripwire honours it)", policy.Policy{Dir: dir, Protect: policy.Protected[1:]}, nil},
		{"home secrets and agent-lock's own state (not the user's request)", policy.Policy{Dir: dir, Home: "/home/u",
			Private: []string{dir + "/.local/state/agent-lock"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var warned []string
			warn := func(f string, a ...any) { warned = append(warned, fmt.Sprintf(f, a...)) }
			err := refuseUnenforceable(tc.p, false, warn)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("not refused")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if err := refuseUnenforceable(tc.p, true, warn); err != nil {
				t.Errorf("--best-effort: %v", err)
			}
			if len(warned) == 0 || !strings.HasPrefix(warned[0], "--best-effort: --deny ") {
				t.Errorf("--best-effort warned %q", warned)
			}
		})
	}
}
