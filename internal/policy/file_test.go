package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadFile(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	for _, d := range []string{"ref", "cache"} {
		os.Mkdir(filepath.Join(home, d), 0o755)
	}
	os.Mkdir(filepath.Join(dir, "data"), 0o755)
	write := func(text string) string {
		p := filepath.Join(dir, PolicyFile)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	f, err := LoadFile(write(`# a project's policy
engine = "bpf-lsm"
allow = ["~/ref"]
allow-write = [
  "~/cache",
]
deny = ["data"]
env = ["GITHUB_TOKEN"]
`), home, dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.Engine != "bpf-lsm" || f.Allow[0] != filepath.Join(home, "ref") || f.AllowWrite[0] != filepath.Join(home, "cache") ||
		f.Deny[0] != filepath.Join(dir, "data") || f.Env[0] != "GITHUB_TOKEN" {
		t.Errorf("decoded %+v", f)
	}
	if key, line := f.Widens(); key != "allow" || line != 3 {
		t.Errorf("Widens() = %q, %d; want allow, 3", key, line)
	}
	if f, _ := LoadFile(filepath.Join(dir, "missing.toml"), home, dir); f != nil {
		t.Error("a missing file is not nil")
	}

	// Each error names the file, the line and the key.
	for _, tc := range []struct {
		text, key string
		line      int
		msg       string
	}{
		{"allow = [\"~/ref\"]\nallow-write = [\n  \"~/cache\",\n  \"~/nope\",\n]\n", "allow-write", 4, "no such file"},
		{"deny = [\"data\"]\nalow = [\"~/ref\"]\n", "alow", 2, "unknown key"},
		{"\n\nengine = \"fast\"\n", "engine", 3, "use auto, bpf-lsm or landlock"},
		{"env = [\"A\"]\nallow = \"~/ref\"\n", "allow", 2, "incompatible types"},
		{"allow = [\"~/ref\"\ndeny = 1\n", "", 2, ""},
		{"env = [\"A=1\"]\n", "env", 1, "variable name"},
	} {
		_, err := LoadFile(write(tc.text), home, dir)
		var fe *FileError
		if !errors.As(err, &fe) {
			t.Errorf("%q: %v, want a FileError", tc.text, err)
			continue
		}
		if fe.Line != tc.line || (tc.key != "" && fe.Key != tc.key) || !strings.Contains(fe.Msg, tc.msg) ||
			!strings.HasPrefix(err.Error(), filepath.Join(dir, PolicyFile)+":") {
			t.Errorf("%q: %v (line %d key %q), want line %d key %q containing %q", tc.text, err, fe.Line, fe.Key, tc.line, tc.key, tc.msg)
		}
	}
	// The user's file names absolute or ~/ paths.
	hp := filepath.Join(home, "p.toml")
	os.WriteFile(hp, []byte("allow = [\"ref\"]\n"), 0o644)
	if _, err := LoadFile(hp, home, ""); err == nil || !strings.Contains(err.Error(), "~/") {
		t.Errorf("relative path in the user's file: %v", err)
	}
}

func TestTrust(t *testing.T) {
	home, proj := t.TempDir(), t.TempDir()
	real, _ := filepath.EvalSymlinks(proj)
	sum := strings.Repeat("ab", 32)
	hp := filepath.Join(home, "p.toml")
	os.WriteFile(hp, []byte("[[trusted]]\nproject = \""+proj+"\"\nsha256 = \""+strings.Repeat("cd", 32)+"\"\n"+
		"[[trusted]]\nproject = \""+proj+"\"\nsha256 = \""+sum+"\"\n"), 0o644)
	f, err := LoadFile(hp, home, "")
	if err != nil {
		t.Fatal(err)
	}
	if tr, ok := f.TrustFor(real); !ok || tr.SHA256 != sum {
		t.Errorf("TrustFor: %+v %v, want the last entry", tr, ok)
	}
	if _, ok := f.TrustFor(home); ok {
		t.Error("an untrusted folder is trusted")
	}
	narrow := &File{Deny: []string{"/x"}}
	if k, _ := narrow.Widens(); k != "" {
		t.Errorf("deny widens? %q", k)
	}
	// Trust by path, the old form, is refused with how to trust now.
	os.WriteFile(hp, []byte("\ntrusted-projects = [\""+proj+"\"]\n"), 0o644)
	if _, err := LoadFile(hp, home, ""); err == nil || !strings.Contains(err.Error(), ":2: trusted-projects:") ||
		!strings.Contains(err.Error(), "agent-lock trust DIR") {
		t.Errorf("trusted-projects: %v", err)
	}
	os.WriteFile(hp, []byte("[[trusted]]\nproject = \""+proj+"\"\nsha256 = \"nothex\"\n"), 0o644)
	if _, err := LoadFile(hp, home, ""); err == nil || !strings.Contains(err.Error(), ":3: trusted.sha256:") {
		t.Errorf("a bad hash: %v", err)
	}
	// The hash is of the bytes, and Changes says what differs.
	a, _ := Parse("a", []byte("env = [\"A\"]\n"), home, proj)
	b, _ := Parse("a", []byte("env = [\"A\", \"B\"]\n"), home, proj)
	if a.Sum == b.Sum || len(a.Sum) != 64 {
		t.Errorf("sums %s %s", a.Sum, b.Sum)
	}
	if c := b.Changes(a); len(c) != 1 || c[0] != `env: ["A"] -> ["A" "B"]` {
		t.Errorf("Changes = %q", c)
	}
}
