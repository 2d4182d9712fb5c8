package landlock

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A seccomp filter closes, for the Landlock engine, what Landlock has no
// right for and the BPF LSM refuses: typing into the terminal the agent
// inherited (TIOCSTI and friends run commands in the user's shell after the
// agent exits; Landlock's ioctl right covers only devices opened inside the
// sandbox), the user's keyrings, and bpf(2) (on kernels that let
// unprivileged users load socket filters and make maps; the BPF-LSM engine
// refuses every bpf() call of the cell). Like the ruleset it is inherited by
// every process the agent starts and holds without agent-lock. x/sys has
// the constants, not a filter builder, and the filter is ten instructions.

// refusedIoctls are the terminal requests that inject input or redirect
// console output.
var refusedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX, unix.TIOCCONS}

// refusedSyscalls reach the keyrings of the user, shared with every
// process of the user outside the cell, or the kernel's BPF subsystem.
var refusedSyscalls = []uint32{unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_BPF}

func auditArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
}

// filter builds the program. seccomp_data is {nr u32, arch u32, ip u64,
// args [6]u64}; an ioctl request is an unsigned int, the low half of
// args[1] on these little-endian machines.
func filter() ([]unix.SockFilter, error) {
	arch, err := auditArch()
	if err != nil {
		return nil, err
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	allow := unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW}
	deny := unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)}
	var p []unix.SockFilter
	// Another architecture's system call numbers (i386 on x86-64) would
	// slip past the checks below: refuse them all.
	p = append(p, unix.SockFilter{Code: ld, K: 4},
		unix.SockFilter{Code: jeq, K: arch, Jt: 1},
		deny,
		unix.SockFilter{Code: ld, K: 0})
	// nr == ioctl: jump to the ioctl checks at the end.
	nSys := len(refusedSyscalls)
	p = append(p, unix.SockFilter{Code: jeq, K: unix.SYS_IOCTL, Jt: uint8(nSys + 2)})
	for i, nr := range refusedSyscalls {
		// true: jump to the deny after the allow that ends this part.
		p = append(p, unix.SockFilter{Code: jeq, K: nr, Jt: uint8(nSys - i)})
	}
	p = append(p, allow, deny)
	p = append(p, unix.SockFilter{Code: ld, K: 24})
	n := len(refusedIoctls)
	for i, req := range refusedIoctls {
		p = append(p, unix.SockFilter{Code: jeq, K: req, Jt: uint8(n - i)})
	}
	p = append(p, allow, deny)
	return p, nil
}

// installFilter applies the filter to the calling thread, which must have
// no_new_privs set and must be the one that execs.
func installFilter() error {
	p, err := filter()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	runtime.KeepAlive(p)
	return nil
}
