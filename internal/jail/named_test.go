package jail_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/policy"
)

// TestNamedFiles: a file granted by name (jail.Named, as the claude profile
// grants ~/.claude.json) is saved the ways programs save it: in place,
// through a sibling renamed over it (a new inode, still granted), under a
// lock directory next to it, and made anew after it was removed; its
// folder may be listed, its other entries stay refused, and no sibling can
// bring an outside file into view.
func TestNamedFiles(t *testing.T) {
	var conf string
	c := newCellWith(t, func(cfg *jail.Config, dir, out string) {
		conf = filepath.Join(out, "conf.json")
		for name, body := range map[string]string{"conf.json": "{}\n", "conf.json.pem": "KEY-MARKER\n"} {
			p := filepath.Join(out, name)
			os.WriteFile(p, []byte(body), 0o600)
			os.Chown(p, testUID, testUID)
		}
		p := policy.Policy{Dir: dir, Files: []string{conf}}
		cfg.Rules, cfg.Patterns = p.Rules(), p.Patterns()
	})
	c.env = append(c.env, "CONF="+conf)

	cases := []struct {
		name, script string
		ok           bool
		op, path     string // the refusal reported, when !ok
		rule         string // its rule, when set
	}{
		{"in place", `cat "$CONF" >/dev/null && echo '{"a":1}' > "$CONF"`, true, "", "", ""},
		{"save through a sibling", `echo '{"b":2}' > "$CONF.tmp.77.ab" && mv "$CONF.tmp.77.ab" "$CONF" && grep -q b "$CONF" && echo more >> "$CONF"`, true, "", "", ""},
		{"lock", `mkdir "$CONF.lock" && touch "$CONF.lock" && rmdir "$CONF.lock"`, true, "", "", ""},
		{"backup", `cp "$CONF" "$CONF.backup" && cat "$CONF.backup" >/dev/null && rm "$CONF.backup"`, true, "", "", ""},
		{"the folder listed", `ls "$OUT" | grep -q secret`, true, "", "", ""},
		{"made anew", `rm "$CONF" && echo '{}' > "$CONF" && cat "$CONF" >/dev/null`, true, "", "", ""},
		{"another name", `echo x > "$OUT/conf.jsonx"`, false, "create", "project2/conf.jsonx", ""},
		{"a prefix", `echo x > "$OUT/conf.js"`, false, "create", "project2/conf.js", ""},
		{"a neighbour", `cat "$OUT/secret"`, false, "read", "project2/secret", ""},
		{"a neighbour renamed in", `mv "$OUT/secret" "$CONF.x"`, false, "rename", "project2/secret", ""},
		{"a neighbour linked in", `ln "$OUT/secret" "$CONF.x"`, false, "link", "project2/secret", ""},
		{"a neighbour through a sibling symlink", `ln -sf secret "$CONF.sl" && cat "$CONF.sl"`, false, "read", "project2/secret", ""},
		{"a secret's name", `cat "$CONF.pem"`, false, "read", "project2/conf.json.pem", "deny pattern *.pem"},
		{"inside a sibling folder", `mkdir -p "$CONF.d" && echo x > "$CONF.d/f"`, false, "create", "project2/conf.json.d/f", ""},
		{"a sibling folder moved", `mkdir -p "$CONF.e" && mv "$CONF.e" "$DIR/e"`, false, "rename", "project2/conf.json.e", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.run(tc.script)
			evs := c.events()
			if tc.ok {
				if err != nil || len(evs) != 0 {
					t.Fatalf("refused: %v\n%s\nreports: %+v", err, out, evs)
				}
				return
			}
			if err == nil {
				t.Fatalf("allowed:\n%s", out)
			}
			if strings.Contains(out, "MARKER") {
				t.Fatalf("leaked:\n%s", out)
			}
			for _, ev := range evs {
				if ev.Denied && ev.Op == tc.op && strings.Contains(ev.Path, tc.path) && strings.Contains(ev.Rule, tc.rule) {
					return
				}
			}
			t.Fatalf("no %s report of %s (rule %q) among %+v", tc.op, tc.path, tc.rule, evs)
		})
	}
	if b, err := os.ReadFile(filepath.Join(c.out, "secret")); err != nil || !strings.Contains(string(b), "SECRET-MARKER") {
		t.Fatalf("the neighbour was disturbed: %v %q", err, b)
	}
}

// TestSealedRoots: the kernel seals the rule roots with no denial above
// them (walks end there), and only those: a grant inside a denied folder
// stays unsealed, so the denial above it still wins, while the project
// directory is sealed and works as before.
func TestSealedRoots(t *testing.T) {
	var sub string
	c := newCellWith(t, func(cfg *jail.Config, dir, out string) {
		sub = filepath.Join(out, "sub")
		os.Mkdir(sub, 0o755)
		os.WriteFile(filepath.Join(sub, "f"), []byte("SUB-MARKER\n"), 0o644)
		p := policy.Policy{Dir: dir, Allow: []string{sub}, Deny: []string{out}}
		cfg.Rules = p.Rules()
	})
	sealed := c.j.Sealed()
	if !slices.Contains(sealed, c.dir) || slices.Contains(sealed, sub) {
		t.Fatalf("sealed %v: want the project directory %s, not %s (denied above)", sealed, c.dir, sub)
	}
	if out, err := c.run(`cat inside.txt && mkdir -p a/b && echo x > a/b/c && cat a/b/c`); err != nil {
		t.Fatalf("work in the sealed project directory: %v\n%s", err, out)
	}
	if evs := c.events(); len(evs) != 0 {
		t.Fatalf("work in the project directory was refused: %+v", evs)
	}
	c.env = append(c.env, "SUB="+sub)
	out, err := c.run(`cat "$SUB/f"`)
	if err == nil || strings.Contains(out, "MARKER") {
		t.Fatalf("a grant inside a denied folder was read: %v\n%s", err, out)
	}
	for _, ev := range c.events() {
		if ev.Denied && ev.Op == "read" && strings.HasSuffix(ev.Path, "project2/sub/f") && strings.HasPrefix(ev.Rule, "--deny") {
			return
		}
	}
	t.Fatal("the refusal was not reported with the denial's rule")
}
