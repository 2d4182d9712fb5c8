package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// metaPackage is the package whose dependencies name the suite's current
// cloud kernel; it exists in every suite since buster.
const metaPackage = "linux-image-cloud-amd64"

// aptRoot is a private apt installation: its own sources, lists and caches,
// and none of the host's configuration fragments.
type aptRoot struct {
	dir      string
	suites   []string
	mirror   string
	keyrings []string
	log      io.Writer
}

// config is the apt.conf handed over with APT_CONFIG. apt reads that file
// before Dir::Etc::parts, so emptying parts and main here keeps every host
// setting out (proxies from the environment still apply).
func (a *aptRoot) config() string {
	var b strings.Builder
	set := func(k, v string) { fmt.Fprintf(&b, "%s %q;\n", k, v) }
	set("Dir::Etc::main", "/dev/null")
	set("Dir::Etc::parts", "/dev/null")
	set("Dir::Etc::sourcelist", filepath.Join(a.dir, "sources.list"))
	set("Dir::Etc::sourceparts", "/dev/null")
	set("Dir::Etc::preferences", "/dev/null")
	set("Dir::Etc::preferencesparts", "/dev/null")
	set("Dir::State", filepath.Join(a.dir, "state"))
	set("Dir::State::lists", filepath.Join(a.dir, "lists"))
	// Resolve against an empty system: the host's installed packages must not
	// influence which kernel version is picked.
	set("Dir::State::status", "/dev/null")
	set("Dir::Cache", filepath.Join(a.dir, "cache"))
	set("Dir::Log", filepath.Join(a.dir, "log"))
	set("APT::Architecture", "amd64")
	b.WriteString("APT::Architectures { \"amd64\"; };\n")
	set("Acquire::Languages", "none")
	// The archive reachable from CI can be a frozen snapshot whose Release
	// files are past Valid-Until (forky's was, when this was written).
	// Signatures are still checked; only freshness is not.
	set("Acquire::Check-Valid-Until", "false")
	// Everything lives in a root-owned cache; dropping to _apt would only
	// produce "unsandboxed download" warnings.
	set("APT::Sandbox::User", "root")
	return b.String()
}

func (a *aptRoot) sourcesList() string {
	var b strings.Builder
	for _, s := range a.suites {
		fmt.Fprintf(&b, "deb [signed-by=%s] %s %s main\n", strings.Join(a.keyrings, ","), a.mirror, s)
	}
	return b.String()
}

func (a *aptRoot) setup() error {
	for _, d := range []string{"state", "lists/partial", "cache/archives/partial", "log"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(a.dir, "apt.conf"), []byte(a.config()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(a.dir, "sources.list"), []byte(a.sourcesList()), 0o644)
}

// run runs an apt tool in dir with the private configuration and returns its
// standard output; standard error goes to the log and, on failure, into the
// error.
func (a *aptRoot) run(ctx context.Context, dir string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "APT_CONFIG="+filepath.Join(a.dir, "apt.conf"), "LC_ALL=C")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(&stderr, a.log)
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

func (a *aptRoot) update(ctx context.Context) error {
	out, err := a.run(ctx, a.dir, "apt-get", "-q", "update")
	a.log.Write(out)
	if err != nil {
		return err
	}
	// apt-get update exits 0 when a repository is merely ignored, with the
	// reason on stderr; an empty package list is the reliable symptom.
	matches, _ := filepath.Glob(filepath.Join(a.dir, "lists", "*_Packages*"))
	if len(matches) == 0 {
		return fmt.Errorf("apt-get update: no package list for %s", strings.Join(a.suites, ", "))
	}
	return nil
}

// show returns the apt-cache stanzas of the named packages.
func (a *aptRoot) show(ctx context.Context, pkgs ...string) ([]stanza, error) {
	out, err := a.run(ctx, a.dir, "apt-cache", append([]string{"show", "--no-all-versions"}, pkgs...)...)
	if err != nil {
		return nil, err
	}
	return parseStanzas(out), nil
}

func (a *aptRoot) resolveKernel(ctx context.Context) (version string, pkgs []string, err error) {
	return resolveKernel(func(pkgs ...string) ([]stanza, error) { return a.show(ctx, pkgs...) })
}

// resolveKernel follows the exact-version dependencies of the cloud kernel
// meta package: they are the packages built from the same kernel source
// (linux-image-*, and on forky linux-binary-*, linux-modules-*, linux-base-*),
// while unversioned ones (kmod, initramfs-tools) are the host tools that an
// install would need and a download does not. show returns the candidate
// stanzas of the named packages.
func resolveKernel(show func(pkgs ...string) ([]stanza, error)) (version string, pkgs []string, err error) {
	st, err := show(metaPackage)
	if err != nil {
		return "", nil, err
	}
	if len(st) != 1 {
		return "", nil, fmt.Errorf("%s: %d candidates", metaPackage, len(st))
	}
	version = st[0]["Version"]
	seen := map[string]bool{metaPackage: true}
	queue := pinnedDeps(st[0])
	for len(queue) > 0 {
		var next []string
		for _, p := range queue {
			if !seen[p] {
				seen[p] = true
				next = append(next, p)
			}
		}
		if len(next) == 0 {
			break
		}
		pkgs = append(pkgs, next...)
		st, err := show(next...)
		if err != nil {
			return "", nil, err
		}
		queue = nil
		for _, s := range st {
			queue = append(queue, pinnedDeps(s)...)
		}
	}
	if len(pkgs) == 0 {
		return "", nil, fmt.Errorf("%s %s: no versioned dependencies", metaPackage, version)
	}
	return version, pkgs, nil
}

// stanza is one paragraph of a Debian control file, keyed by field name.
type stanza map[string]string

func parseStanzas(b []byte) []stanza {
	var out []stanza
	cur := stanza{}
	last := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			if len(cur) > 0 {
				out = append(out, cur)
				cur = stanza{}
			}
			last = ""
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				cur[last] += "\n" + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = k
			cur[k] = strings.TrimSpace(v)
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// pinnedDeps returns the Depends entries that require exactly the stanza's
// own version and have no alternatives.
func pinnedDeps(s stanza) []string {
	var out []string
	for _, dep := range strings.Split(s["Depends"], ",") {
		dep = strings.TrimSpace(dep)
		if dep == "" || strings.Contains(dep, "|") {
			continue
		}
		name, rel, ok := strings.Cut(dep, "(")
		if !ok {
			continue
		}
		rel = strings.TrimSuffix(strings.TrimSpace(rel), ")")
		op, ver, _ := strings.Cut(rel, " ")
		if op == "=" && strings.TrimSpace(ver) == s["Version"] {
			out = append(out, strings.TrimSpace(name))
		}
	}
	return out
}
