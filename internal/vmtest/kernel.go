package vmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Kernel is one entry of the test matrix: the current cloud kernel of a
// Debian suite.
type Kernel struct {
	Suite string // Debian suite name, e.g. "bookworm"
}

func (k Kernel) String() string { return k.Suite }

// Kernels returns the test matrix, oldest kernel first: bookworm (6.1),
// trixie (6.12) and forky (7.x). Between them they span the BPF LSM
// behaviour of the kernels agent-lock users run.
func Kernels() []Kernel {
	return []Kernel{{Suite: "bookworm"}, {Suite: "trixie"}, {Suite: "forky"}}
}

// LookupKernel returns the matrix entry for a suite name.
func LookupKernel(suite string) (Kernel, error) {
	for _, k := range Kernels() {
		if k.Suite == suite {
			return k, nil
		}
	}
	return Kernel{}, fmt.Errorf("unknown kernel %q (have bookworm, trixie, forky)", suite)
}

// Image is a fetched kernel, unpacked in the cache.
type Image struct {
	Kernel  Kernel `json:"-"`
	Version string `json:"version"` // Debian package version, e.g. "6.1.176-1"
	Release string `json:"release"` // uname -r, e.g. "6.1.0-50-cloud-amd64"
	// Packages are the .deb files unpacked into Root.
	Packages []string `json:"packages"`
	// Root is the directory the packages were unpacked into.
	Root string `json:"-"`
	// Vmlinuz and Modules are relative to Root.
	Vmlinuz string `json:"vmlinuz"`
	Modules string `json:"modules"`
}

// ErrNotFetched is returned by CachedImage for a kernel that is not in the cache.
var ErrNotFetched = errors.New("kernel not fetched")

// DefaultMirror is the Debian archive kernels are fetched from.
const DefaultMirror = "http://deb.debian.org/debian"

// hostKeyring is the Debian archive keyring that verifies the suites; a
// newer one is fetched into the cache when it does not.
const hostKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// FetchOptions tune Fetch; the zero value fetches into CacheDir() from
// DefaultMirror and reuses a cached kernel.
type FetchOptions struct {
	CacheDir string
	Mirror   string
	// Keyring replaces the host's Debian archive keyring.
	Keyring string
	// Refresh fetches the suite's current kernel even when one is cached.
	Refresh bool
	// Log receives apt's progress messages.
	Log io.Writer
}

func (o *FetchOptions) defaults() {
	if o.CacheDir == "" {
		o.CacheDir = CacheDir()
	}
	if o.Mirror == "" {
		o.Mirror = DefaultMirror
	}
	if o.Keyring == "" {
		o.Keyring = hostKeyring
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// CacheDir is where kernels are kept: $AGENT_LOCK_VMCACHE, or
// agent-lock/vmtest under the user's cache directory.
func CacheDir() string {
	if d := os.Getenv("AGENT_LOCK_VMCACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "agent-lock", "vmtest")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "agent-lock-vmtest")
	}
	return filepath.Join(home, ".cache", "agent-lock", "vmtest")
}

func kernelDir(cache string, k Kernel) string { return filepath.Join(cache, "kernels", k.Suite) }

// CachedImage returns the cached kernel of k, or an error wrapping
// ErrNotFetched.
func CachedImage(cacheDir string, k Kernel) (Image, error) {
	dir := kernelDir(cacheDir, k)
	b, err := os.ReadFile(filepath.Join(dir, "image.json"))
	if errors.Is(err, os.ErrNotExist) {
		return Image{}, fmt.Errorf("%s: %w", k, ErrNotFetched)
	}
	if err != nil {
		return Image{}, err
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return Image{}, fmt.Errorf("%s: read image.json: %w", k, err)
	}
	img.Kernel, img.Root = k, dir
	if _, err := os.Stat(filepath.Join(dir, img.Vmlinuz)); err != nil {
		return Image{}, fmt.Errorf("%s: %w: %w", k, ErrNotFetched, err)
	}
	return img, nil
}

// Fetch downloads the current cloud kernel of k's suite into the cache and
// unpacks it, unless the cache already holds a kernel for that suite.
func Fetch(ctx context.Context, k Kernel, opts FetchOptions) (Image, error) {
	opts.defaults()
	if !opts.Refresh {
		if img, err := CachedImage(opts.CacheDir, k); err == nil {
			return img, nil
		}
	}
	aptDir := filepath.Join(opts.CacheDir, "apt", k.Suite)
	if err := os.MkdirAll(aptDir, 0o755); err != nil {
		return Image{}, fmt.Errorf("fetch %s: %w", k, err)
	}
	// Two test runs sharing a cache must not unpack into each other.
	unlock, err := lockDir(aptDir)
	if err != nil {
		return Image{}, fmt.Errorf("fetch %s: %w", k, err)
	}
	defer unlock()
	if !opts.Refresh {
		if img, err := CachedImage(opts.CacheDir, k); err == nil {
			return img, nil
		}
	}
	img, err := fetch(ctx, k, aptDir, opts)
	if err != nil {
		return Image{}, fmt.Errorf("fetch %s: %w", k, err)
	}
	return img, nil
}

func fetch(ctx context.Context, k Kernel, aptDir string, opts FetchOptions) (Image, error) {
	apt := &aptRoot{dir: aptDir, suites: []string{k.Suite}, mirror: opts.Mirror, log: opts.Log}
	fetchedKeyring := filepath.Join(opts.CacheDir, "keyring", strings.TrimPrefix(hostKeyring, "/"))
	apt.keyrings = []string{opts.Keyring}
	if _, err := os.Stat(fetchedKeyring); err == nil {
		apt.keyrings = append(apt.keyrings, fetchedKeyring)
	}
	if err := apt.setup(); err != nil {
		return Image{}, err
	}
	// The package lists and apt's caches take ~150 MB a suite and are
	// only needed again for a refresh, which updates them anyway.
	defer os.RemoveAll(filepath.Join(aptDir, "lists"))
	defer os.RemoveAll(filepath.Join(aptDir, "cache"))
	if err := apt.update(ctx); err != nil {
		if len(apt.keyrings) > 1 {
			return Image{}, err
		}
		// A suite newer than the host's keyring is signed by keys the
		// host does not know yet; the keyring package of a suite the host
		// can verify carries them.
		fmt.Fprintf(opts.Log, "vmtest: %s does not verify with %s, fetching a newer keyring\n", k, opts.Keyring)
		if kerr := fetchKeyring(ctx, opts); kerr != nil {
			return Image{}, fmt.Errorf("%w (and fetching a newer keyring failed: %w)", err, kerr)
		}
		apt.keyrings = append(apt.keyrings, fetchedKeyring)
		if err := apt.setup(); err != nil {
			return Image{}, err
		}
		if err := apt.update(ctx); err != nil {
			return Image{}, err
		}
	}
	version, pkgs, err := apt.resolveKernel(ctx)
	if err != nil {
		return Image{}, err
	}
	if img, err := CachedImage(opts.CacheDir, k); err == nil && img.Version == version {
		fmt.Fprintf(opts.Log, "vmtest: %s: %s is current\n", k, version)
		return img, nil
	}
	fmt.Fprintf(opts.Log, "vmtest: %s: %s %s -> %s\n", k, metaPackage, version, strings.Join(pkgs, " "))

	kernels := filepath.Join(opts.CacheDir, "kernels")
	if err := os.MkdirAll(kernels, 0o755); err != nil {
		return Image{}, err
	}
	tmp, err := os.MkdirTemp(kernels, "."+k.Suite+"-")
	if err != nil {
		return Image{}, err
	}
	defer os.RemoveAll(tmp)
	debs := filepath.Join(tmp, "debs")
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(debs, 0o755); err != nil {
		return Image{}, err
	}
	if _, err := apt.run(ctx, debs, "apt-get", append([]string{"-q", "download"}, pkgs...)...); err != nil {
		return Image{}, err
	}
	files, err := filepath.Glob(filepath.Join(debs, "*.deb"))
	if err != nil || len(files) != len(pkgs) {
		return Image{}, fmt.Errorf("apt-get download: got %d of %d packages", len(files), len(pkgs))
	}
	img := Image{Kernel: k, Version: version}
	for _, f := range files {
		if _, err := apt.run(ctx, tmp, "dpkg", "-x", f, root); err != nil {
			return Image{}, err
		}
		img.Packages = append(img.Packages, filepath.Base(f))
	}
	if err := locateKernel(root, &img); err != nil {
		return Image{}, err
	}
	b, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return Image{}, err
	}
	if err := os.WriteFile(filepath.Join(root, "image.json"), append(b, '\n'), 0o644); err != nil {
		return Image{}, err
	}
	// Swap the new tree in with renames so a reader never sees half a
	// kernel; the .deb files are not needed once unpacked.
	final := kernelDir(opts.CacheDir, k)
	old := filepath.Join(tmp, "old")
	if err := os.Rename(final, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return Image{}, err
	}
	if err := os.Rename(root, final); err != nil {
		return Image{}, err
	}
	return CachedImage(opts.CacheDir, k)
}

// locateKernel finds the vmlinuz and module tree in an unpacked kernel:
// boot/vmlinuz-R with lib/modules/R or usr/lib/modules/R up to trixie, and
// usr/lib/modules/R/vmlinuz from forky on.
func locateKernel(root string, img *Image) error {
	var found []string
	for _, pat := range []string{"boot/vmlinuz-*", "usr/lib/modules/*/vmlinuz", "lib/modules/*/vmlinuz"} {
		m, _ := filepath.Glob(filepath.Join(root, pat))
		found = append(found, m...)
	}
	if len(found) != 1 {
		return fmt.Errorf("expected one vmlinuz in the kernel packages, found %d", len(found))
	}
	rel, _ := filepath.Rel(root, found[0])
	img.Vmlinuz = rel
	if strings.HasPrefix(rel, "boot/") {
		img.Release = strings.TrimPrefix(rel, "boot/vmlinuz-")
	} else {
		img.Release = filepath.Base(filepath.Dir(rel))
	}
	for _, d := range []string{"usr/lib/modules/", "lib/modules/"} {
		if fi, err := os.Stat(filepath.Join(root, d, img.Release, "kernel")); err == nil && fi.IsDir() {
			img.Modules = d + img.Release
			return nil
		}
	}
	return fmt.Errorf("no module tree for %s", img.Release)
}

// fetchKeyring unpacks the newest debian-archive-keyring package that any
// matrix suite offers into the cache.
func fetchKeyring(ctx context.Context, opts FetchOptions) error {
	dir := filepath.Join(opts.CacheDir, "apt", "keyring")
	var suites []string
	for _, k := range Kernels() {
		suites = append(suites, k.Suite)
	}
	apt := &aptRoot{dir: dir, suites: suites, mirror: opts.Mirror, keyrings: []string{opts.Keyring}, log: opts.Log}
	if err := apt.setup(); err != nil {
		return err
	}
	// Some suites are expected to fail here: those are why we came.
	apt.run(ctx, dir, "apt-get", "-q", "update")
	tmp, err := os.MkdirTemp(dir, "download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := apt.run(ctx, tmp, "apt-get", "-q", "download", "debian-archive-keyring"); err != nil {
		return err
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download debian-archive-keyring: got %d packages", len(debs))
	}
	unpacked := filepath.Join(tmp, "root")
	if _, err := apt.run(ctx, tmp, "dpkg", "-x", debs[0], unpacked); err != nil {
		return err
	}
	final := filepath.Join(opts.CacheDir, "keyring")
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	return os.Rename(unpacked, final)
}

// lockDir holds an exclusive flock on dir/lock until the returned function
// is called.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
