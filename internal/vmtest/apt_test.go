package vmtest

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

func readStanzas(t *testing.T, name string) []stanza {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return parseStanzas(b)
}

func TestParseStanzas(t *testing.T) {
	st := readStanzas(t, "apt-cache-show-forky.txt")
	if len(st) != 2 {
		t.Fatalf("got %d stanzas, want 2", len(st))
	}
	if got := st[1]["Package"]; got != "linux-image-7.2.12+deb14-cloud-amd64" {
		t.Errorf("Package = %q", got)
	}
	if got := st[0]["Version"]; got != "7.2.12-1" {
		t.Errorf("Version = %q", got)
	}

	// Continuation lines belong to the field above them.
	st = parseStanzas([]byte("Package: a\nDescription: short\n long\n .\nVersion: 1\n\n\nPackage: b\n"))
	if len(st) != 2 || st[0]["Description"] != "short\nlong\n." || st[0]["Version"] != "1" || st[1]["Package"] != "b" {
		t.Errorf("parsed %q", st)
	}
}

func TestPinnedDeps(t *testing.T) {
	tests := []struct {
		name string
		s    stanza
		want []string
	}{
		{
			name: "forky image",
			s:    readStanzas(t, "apt-cache-show-forky.txt")[1],
			want: []string{"linux-base-7.2.12+deb14-cloud-amd64", "linux-binary-7.2.12+deb14-cloud-amd64", "linux-modules-7.2.12+deb14-cloud-amd64"},
		},
		{
			name: "bookworm meta",
			s:    readStanzas(t, "apt-cache-show-bookworm.txt")[0],
			want: []string{"linux-image-6.1.0-50-cloud-amd64"},
		},
		{
			name: "other versions and alternatives are not the kernel",
			s: stanza{
				"Version": "1-1",
				"Depends": "kmod, a (= 1-1) | b (= 1-1), c (>= 1-1), d (= 2-1), e (= 1-1)",
			},
			want: []string{"e"},
		},
		{name: "no depends", s: stanza{"Version": "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pinnedDeps(tt.s); !slices.Equal(got, tt.want) {
				t.Errorf("pinnedDeps = %q, want %q", got, tt.want)
			}
		})
	}
}

// fakeArchive answers apt-cache show from a fixed set of stanzas.
func fakeArchive(stanzas ...stanza) func(...string) ([]stanza, error) {
	return func(pkgs ...string) ([]stanza, error) {
		var out []stanza
		for _, p := range pkgs {
			found := false
			for _, s := range stanzas {
				if s["Package"] == p {
					out = append(out, s)
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("E: No packages found: %s", p)
			}
		}
		return out, nil
	}
}

func TestResolveKernel(t *testing.T) {
	forky := readStanzas(t, "apt-cache-show-forky.txt")
	leaf := func(name string) stanza { return stanza{"Package": name, "Version": "7.2.12-1"} }
	show := fakeArchive(append(forky,
		stanza{"Package": "linux-base-cloud-amd64", "Version": "7.2.12-1", "Depends": "linux-base-7.2.12+deb14-cloud-amd64 (= 7.2.12-1)"},
		leaf("linux-base-7.2.12+deb14-cloud-amd64"),
		leaf("linux-binary-7.2.12+deb14-cloud-amd64"),
		leaf("linux-modules-7.2.12+deb14-cloud-amd64"),
	)...)
	version, pkgs, err := resolveKernel(show)
	if err != nil {
		t.Fatal(err)
	}
	if version != "7.2.12-1" {
		t.Errorf("version = %q", version)
	}
	want := []string{
		"linux-base-cloud-amd64",
		"linux-image-7.2.12+deb14-cloud-amd64",
		"linux-base-7.2.12+deb14-cloud-amd64",
		"linux-binary-7.2.12+deb14-cloud-amd64",
		"linux-modules-7.2.12+deb14-cloud-amd64",
	}
	if !slices.Equal(pkgs, want) {
		t.Errorf("packages = %q, want %q", pkgs, want)
	}

	bookworm := readStanzas(t, "apt-cache-show-bookworm.txt")
	_, pkgs, err = resolveKernel(fakeArchive(append(bookworm,
		stanza{"Package": "linux-image-6.1.0-50-cloud-amd64", "Version": "6.1.176-1", "Depends": "kmod, linux-base (>= 4.3~)"})...))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"linux-image-6.1.0-50-cloud-amd64"}; !slices.Equal(pkgs, want) {
		t.Errorf("packages = %q, want %q", pkgs, want)
	}

	if _, _, err := resolveKernel(fakeArchive(stanza{"Package": metaPackage, "Version": "1"})); err == nil {
		t.Error("a meta package without versioned dependencies resolved")
	}
}

func TestAptConfigIgnoresHost(t *testing.T) {
	a := &aptRoot{dir: "/c/apt/forky", suites: []string{"forky"}, mirror: DefaultMirror, keyrings: []string{"/k1.gpg", "/k2.gpg"}}
	conf := a.config()
	for _, want := range []string{
		`Dir::Etc::parts "/dev/null";`,
		`Dir::Etc::main "/dev/null";`,
		`Dir::Etc::sourceparts "/dev/null";`,
		`Dir::Etc::sourcelist "/c/apt/forky/sources.list";`,
		`Dir::State::lists "/c/apt/forky/lists";`,
		`Dir::State::status "/dev/null";`,
		`Dir::Cache "/c/apt/forky/cache";`,
	} {
		if !strings.Contains(conf, want+"\n") {
			t.Errorf("apt.conf lacks %s", want)
		}
	}
	if got, want := a.sourcesList(), "deb [signed-by=/k1.gpg,/k2.gpg] http://deb.debian.org/debian forky main\n"; got != want {
		t.Errorf("sources.list = %q, want %q", got, want)
	}
}
