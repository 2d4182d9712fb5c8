// Package vmtest boots stock Debian cloud kernels under QEMU and runs a command
// inside them, so that code needing BPF LSM can be tested on machines whose own
// kernel refuses trampoline programs.
//
// Kernels are fetched from the Debian archive with apt-get and dpkg, using a
// private apt configuration so the host's package state is never touched. A
// guest boots a busybox initramfs that mounts the host's root file system
// read-only over virtiofs and switches into it, so the guest runs the host's
// userland (bash, git, Go, binaries built before boot) on the guest's kernel.
// The command's exit status comes back as a marker line on the serial console.
//
// Running a guest needs root: virtiofsd must read the whole host file system.
package vmtest
