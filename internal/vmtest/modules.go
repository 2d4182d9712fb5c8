package vmtest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// guestModules are what the guest init needs before it can reach the host's
// root: virtio PCI transport, virtiofs, overlay and loop for the tests
// that build an overlay or a disk file system (the guest cannot load modules
// later: its /lib/modules is the host's), veth for the network tests'
// namespaces (test/nettest), and btrfs, whose subvolumes share one
// superblock (internal/jail's TestSubvolumes). Dependencies are found from each module's
// modinfo.
var guestModules = []string{"virtio_pci", "virtiofs", "overlay", "loop", "veth", "btrfs"}

// kmod is a loadable module the initramfs has to carry.
type kmod struct {
	Name string
	Path string // absolute path in the unpacked kernel, possibly compressed
}

// moduleName normalises a module file or dependency name the way modprobe
// does: no directory, no .ko suffix, dashes as underscores.
func moduleName(s string) string {
	s = filepath.Base(s)
	if i := strings.Index(s, ".ko"); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(s, "-", "_")
}

// scanModules indexes the kernel's module tree: the loadable modules by name,
// and the names listed in modules.builtin.
func scanModules(modDir string) (loadable map[string]string, builtin map[string]bool, err error) {
	loadable = map[string]string{}
	builtin = map[string]bool{}
	err = filepath.WalkDir(filepath.Join(modDir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(d.Name(), ".ko") {
			loadable[moduleName(d.Name())] = p
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("scan modules: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin"))
	if err != nil {
		return nil, nil, fmt.Errorf("scan modules: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			builtin[moduleName(l)] = true
		}
	}
	return loadable, builtin, nil
}

// resolveModules orders the modules that want needs so that each comes after
// its dependencies; built-in ones are left out.
func resolveModules(want []string, loadable map[string]string, builtin map[string]bool, depends func(path string) ([]string, error)) ([]kmod, error) {
	var order []kmod
	state := map[string]int{} // 1: visiting, 2: done
	var visit func(name, from string) error
	visit = func(name, from string) error {
		name = moduleName(name)
		switch {
		case state[name] == 2 || builtin[name]:
			return nil
		case state[name] == 1:
			return fmt.Errorf("module dependency cycle at %s", name)
		}
		p, ok := loadable[name]
		if !ok {
			if from != "" {
				return fmt.Errorf("module %s (needed by %s) is neither built in nor in the module tree", name, from)
			}
			return fmt.Errorf("module %s is neither built in nor in the module tree", name)
		}
		state[name] = 1
		deps, err := depends(p)
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		for _, d := range deps {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, kmod{Name: name, Path: p})
		return nil
	}
	for _, w := range want {
		if err := visit(w, ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// readModule returns a module's object code, decompressed.
func readModule(path string) ([]byte, error) {
	switch {
	case strings.HasSuffix(path, ".ko"):
		return os.ReadFile(path)
	case strings.HasSuffix(path, ".ko.xz"):
		// busybox is a dependency anyway, and xz is not in the standard
		// library; decompressing here keeps the guest's insmod simple.
		out, err := exec.Command(busyboxPath, "xz", "-dc", path).Output()
		if err != nil {
			return nil, fmt.Errorf("decompress %s: %w", path, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: unsupported module compression", path)
}

// moduleDepends reads the depends= entry of a module's .modinfo section.
func moduleDepends(path string) ([]string, error) {
	b, err := readModule(path)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("%s: no .modinfo section", path)
	}
	info, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return parseModinfoDepends(info), nil
}

// parseModinfoDepends extracts the dependency list from the NUL-separated
// key=value strings of a .modinfo section.
func parseModinfoDepends(info []byte) []string {
	for _, kv := range bytes.Split(info, []byte{0}) {
		v, ok := bytes.CutPrefix(kv, []byte("depends="))
		if !ok {
			continue
		}
		var out []string
		for _, d := range strings.Split(string(v), ",") {
			if d = strings.TrimSpace(d); d != "" {
				out = append(out, d)
			}
		}
		return out
	}
	return nil
}
