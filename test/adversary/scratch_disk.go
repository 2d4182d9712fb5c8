package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// The scratch marks are confused only where a lookup makes a fresh dentry
// for a file that exists: a disk file system, like /var/tmp on most
// systems. tmpfs keeps a dentry for every file it holds, so on the test
// VMs, where /var/tmp is a tmpfs, the suite puts an ext4 file system there
// for the run (loop-mounted from a file in its scratch directory).

const tmpfsMagic = 0x01021994

// onTmpfs says whether dir is on a tmpfs.
func onTmpfs(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Type == tmpfsMagic
}

// vartmpOnDisk makes /var/tmp a disk file system for the run when it is a
// tmpfs and the suite runs in the test VM, and returns what undoes it.
func vartmpOnDisk(work string) (undo func(), err error) {
	if !onTmpfs("/var/tmp") || os.Getenv("AGENT_LOCK_VM") != "1" {
		return func() {}, nil
	}
	img := filepath.Join(work, "vartmp.ext4")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return nil, err
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		return nil, err
	}
	for _, argv := range [][]string{
		{"mkfs.ext4", "-q", "-F", img},
		{"mount", "-o", "loop,nosuid,nodev", img, "/var/tmp"},
		{"chmod", "1777", "/var/tmp"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			exec.Command("umount", "/var/tmp").Run()
			return nil, fmt.Errorf("ext4 on /var/tmp: %s: %v: %s", strings.Join(argv, " "), err, out)
		}
	}
	fmt.Println("adversary: /var/tmp is an ext4 file system for this run (the VM's is a tmpfs)")
	return func() { exec.Command("umount", "-l", "/var/tmp").Run() }, nil
}

// tmpfsVarTmp skips where /var/tmp is a tmpfs (and the suite did not put a
// disk file system there).
func tmpfsVarTmp(*Fixture) string {
	if onTmpfs("/var/tmp") {
		return "/var/tmp is a tmpfs here, which keeps every file's dentry cached: no lookup makes one to confuse"
	}
	return ""
}

// makeForeignScratch writes the user's files into /var/tmp and drops them
// from the dentry cache, as files another program made a while ago are.
func (f *Fixture) makeForeignScratch() error {
	for i, p := range foreignScratchFiles() {
		if err := f.U.WriteFile(p, fmt.Sprintf("foreign-%02d-%s\n", i, f.Marker), 0o600); err != nil {
			return err
		}
	}
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0)
}
