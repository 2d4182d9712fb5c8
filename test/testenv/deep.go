package testenv

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Deep makes a chain of folders below root, named with 200 bytes and the
// last with what is left, until the chain's path is exactly length bytes
// long, and returns it. Paths past the kernel's PATH_MAX cannot be made by
// name: each folder is made and entered by descriptor (mkdirat, openat).
func Deep(t testing.TB, root string, length int) string {
	t.Helper()
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Clean(root)
	if length < len(p)+2 {
		t.Fatalf("Deep: %d bytes is no longer than %s", length, p)
	}
	for len(p) < length {
		n := length - len(p) - 1 // a name of at most 255 bytes ends it
		if n > 255 {
			n = 200 // leaves more than 54
		}
		name := strings.Repeat("d", n)
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatalf("mkdir below %d bytes: %v", len(p), err)
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd, p = next, p+"/"+name
	}
	unix.Close(fd)
	return p
}

// AtDeep runs fn with a descriptor of the folder at path (made by Deep),
// opened one step at a time from root.
func AtDeep(t testing.TB, root, path string, fn func(dirfd int)) {
	t.Helper()
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := strings.CutPrefix(path, filepath.Clean(root)+"/")
	for _, name := range strings.Split(rel, "/") {
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	defer unix.Close(fd)
	fn(fd)
}
