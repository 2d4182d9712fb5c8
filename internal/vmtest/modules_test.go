package vmtest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/fs/fuse/virtiofs.ko":              "virtiofs",
		"/x/kernel/fs/overlayfs/overlay.ko.xz":    "overlay",
		"virtio-pci":                              "virtio_pci",
		"kernel/drivers/virtio/virtio_pci.ko.zst": "virtio_pci",
	} {
		if got := moduleName(in); got != want {
			t.Errorf("moduleName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseModinfoDepends(t *testing.T) {
	tests := []struct {
		info string
		want []string
	}{
		{"license=GPL\x00depends=virtio,virtio_ring\x00vermagic=6.1.0\x00", []string{"virtio", "virtio_ring"}},
		{"license=GPL\x00depends=\x00", nil},
		{"license=GPL\x00", nil},
		// A key that merely ends in "depends" is not the list.
		{"softdepends=x\x00depends=fuse\x00", []string{"fuse"}},
	}
	for _, tt := range tests {
		if got := parseModinfoDepends([]byte(tt.info)); !slices.Equal(got, tt.want) {
			t.Errorf("parseModinfoDepends(%q) = %q, want %q", tt.info, got, tt.want)
		}
	}
}

// bookwormModules mirrors the dependency graph of the guest modules in
// Debian's 6.1 cloud kernel, where all of them are loadable.
var bookwormModules = map[string][]string{
	"virtio_pci":            {"virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio", "virtio_ring"},
	"virtio_pci_modern_dev": nil,
	"virtio_pci_legacy_dev": nil,
	"virtio":                nil,
	"virtio_ring":           nil,
	"virtiofs":              {"fuse", "virtio", "virtio_ring"},
	"fuse":                  nil,
	"overlay":               nil,
	"loop":                  nil,
	"veth":                  nil,
	"btrfs":                 {"zstd_compress", "raid6_pq", "xor", "libcrc32c"},
	"zstd_compress":         nil,
	"raid6_pq":              nil,
	"xor":                   nil,
	"libcrc32c":             nil,
}

func fakeTree(graph map[string][]string) (map[string]string, func(string) ([]string, error)) {
	loadable := map[string]string{}
	for name := range graph {
		loadable[name] = "/m/" + name + ".ko"
	}
	return loadable, func(p string) ([]string, error) {
		return graph[moduleName(p)], nil
	}
}

func TestResolveModules(t *testing.T) {
	t.Run("bookworm", func(t *testing.T) {
		loadable, deps := fakeTree(bookwormModules)
		mods, err := resolveModules(guestModules, loadable, nil, deps)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range mods {
			names = append(names, m.Name)
		}
		want := []string{"virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio", "virtio_ring", "virtio_pci", "fuse", "virtiofs", "overlay", "loop", "veth", "zstd_compress", "raid6_pq", "xor", "libcrc32c", "btrfs"}
		if !slices.Equal(names, want) {
			t.Errorf("load order = %q, want %q", names, want)
		}
	})
	t.Run("trixie builds virtio in", func(t *testing.T) {
		loadable, deps := fakeTree(map[string][]string{"overlay": nil, "loop": nil, "veth": nil, "btrfs": nil})
		builtin := map[string]bool{"virtio_pci": true, "virtiofs": true, "virtio": true, "fuse": true}
		mods, err := resolveModules(guestModules, loadable, builtin, deps)
		if err != nil {
			t.Fatal(err)
		}
		if len(mods) != 4 || mods[0].Name != "overlay" || mods[0].Path != "/m/overlay.ko" || mods[1].Name != "loop" || mods[2].Name != "veth" || mods[3].Name != "btrfs" {
			t.Errorf("modules = %+v, want only overlay, loop, veth and btrfs", mods)
		}
	})
	t.Run("missing dependency", func(t *testing.T) {
		loadable, deps := fakeTree(map[string][]string{"virtiofs": {"fuse"}})
		_, err := resolveModules([]string{"virtiofs"}, loadable, nil, deps)
		if err == nil || !strings.Contains(err.Error(), "fuse (needed by virtiofs)") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("cycle", func(t *testing.T) {
		loadable, deps := fakeTree(map[string][]string{"a": {"b"}, "b": {"a"}})
		if _, err := resolveModules([]string{"a"}, loadable, nil, deps); err == nil {
			t.Error("a dependency cycle resolved")
		}
	})
	t.Run("unreadable module", func(t *testing.T) {
		loadable, _ := fakeTree(map[string][]string{"a": nil})
		boom := errors.New("boom")
		_, err := resolveModules([]string{"a"}, loadable, nil, func(string) ([]string, error) { return nil, boom })
		if !errors.Is(err, boom) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestScanModules(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"kernel/fs/overlayfs/overlay.ko.xz", "kernel/drivers/virtio/virtio-mmio.ko"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	builtin := "kernel/fs/fuse/fuse.ko\nkernel/fs/fuse/virtiofs.ko\n"
	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte(builtin), 0o644); err != nil {
		t.Fatal(err)
	}
	loadable, bi, err := scanModules(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := loadable["overlay"]; got != filepath.Join(dir, "kernel/fs/overlayfs/overlay.ko.xz") {
		t.Errorf("overlay at %q", got)
	}
	if _, ok := loadable["virtio_mmio"]; !ok {
		t.Error("virtio-mmio.ko not indexed as virtio_mmio")
	}
	if !bi["virtiofs"] || !bi["fuse"] || bi["overlay"] {
		t.Errorf("builtin = %v", bi)
	}
}
