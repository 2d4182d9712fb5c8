package vmtest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLocateKernel(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		want  Image
	}{
		{
			name:  "bookworm",
			files: []string{"boot/vmlinuz-6.1.0-50-cloud-amd64", "lib/modules/6.1.0-50-cloud-amd64/kernel/fs/fuse/fuse.ko"},
			want:  Image{Release: "6.1.0-50-cloud-amd64", Vmlinuz: "boot/vmlinuz-6.1.0-50-cloud-amd64", Modules: "lib/modules/6.1.0-50-cloud-amd64"},
		},
		{
			name:  "trixie",
			files: []string{"boot/vmlinuz-6.12.117+deb13-cloud-amd64", "usr/lib/modules/6.12.117+deb13-cloud-amd64/kernel/fs/overlayfs/overlay.ko.xz"},
			want:  Image{Release: "6.12.117+deb13-cloud-amd64", Vmlinuz: "boot/vmlinuz-6.12.117+deb13-cloud-amd64", Modules: "usr/lib/modules/6.12.117+deb13-cloud-amd64"},
		},
		{
			name:  "forky",
			files: []string{"usr/lib/modules/7.2.12+deb14-cloud-amd64/vmlinuz", "usr/lib/modules/7.2.12+deb14-cloud-amd64/kernel/fs/overlayfs/overlay.ko.xz"},
			want:  Image{Release: "7.2.12+deb14-cloud-amd64", Vmlinuz: "usr/lib/modules/7.2.12+deb14-cloud-amd64/vmlinuz", Modules: "usr/lib/modules/7.2.12+deb14-cloud-amd64"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tt.files {
				touch(t, filepath.Join(root, f))
			}
			var img Image
			if err := locateKernel(root, &img); err != nil {
				t.Fatal(err)
			}
			if img.Release != tt.want.Release || img.Vmlinuz != tt.want.Vmlinuz || img.Modules != tt.want.Modules {
				t.Errorf("got %+v, want %+v", img, tt.want)
			}
		})
	}
	t.Run("no modules", func(t *testing.T) {
		root := t.TempDir()
		touch(t, filepath.Join(root, "boot/vmlinuz-1"))
		if err := locateKernel(root, &Image{}); err == nil {
			t.Error("a kernel without modules was accepted")
		}
	})
	t.Run("two kernels", func(t *testing.T) {
		root := t.TempDir()
		touch(t, filepath.Join(root, "boot/vmlinuz-1"))
		touch(t, filepath.Join(root, "boot/vmlinuz-2"))
		if err := locateKernel(root, &Image{}); err == nil {
			t.Error("an ambiguous kernel was accepted")
		}
	})
}

func touch(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCachedImage(t *testing.T) {
	cache := t.TempDir()
	k := Kernels()[0]
	if _, err := CachedImage(cache, k); !errors.Is(err, ErrNotFetched) {
		t.Fatalf("empty cache: err = %v, want ErrNotFetched", err)
	}
	dir := kernelDir(cache, k)
	touch(t, filepath.Join(dir, "boot/vmlinuz-6.1.0-1-cloud-amd64"))
	json := `{"version":"6.1.1-1","release":"6.1.0-1-cloud-amd64","vmlinuz":"boot/vmlinuz-6.1.0-1-cloud-amd64","modules":"lib/modules/6.1.0-1-cloud-amd64"}`
	if err := os.WriteFile(filepath.Join(dir, "image.json"), []byte(json), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := CachedImage(cache, k)
	if err != nil {
		t.Fatal(err)
	}
	if img.Root != dir || img.Kernel != k || img.Release != "6.1.0-1-cloud-amd64" {
		t.Errorf("image = %+v", img)
	}
	os.Remove(filepath.Join(dir, img.Vmlinuz))
	if _, err := CachedImage(cache, k); !errors.Is(err, ErrNotFetched) {
		t.Errorf("cache without vmlinuz: err = %v, want ErrNotFetched", err)
	}
}

func TestCacheDir(t *testing.T) {
	t.Setenv("AGENT_LOCK_VMCACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if got := CacheDir(); got != "/xdg/agent-lock/vmtest" {
		t.Errorf("CacheDir() = %q with XDG_CACHE_HOME", got)
	}
	t.Setenv("AGENT_LOCK_VMCACHE", "/override")
	if got := CacheDir(); got != "/override" {
		t.Errorf("CacheDir() = %q with AGENT_LOCK_VMCACHE", got)
	}
}

func TestLookupKernel(t *testing.T) {
	for _, k := range Kernels() {
		got, err := LookupKernel(k.Suite)
		if err != nil || got != k {
			t.Errorf("LookupKernel(%q) = %v, %v", k.Suite, got, err)
		}
	}
	if _, err := LookupKernel("sid"); err == nil {
		t.Error("LookupKernel accepted a suite outside the matrix")
	}
}
