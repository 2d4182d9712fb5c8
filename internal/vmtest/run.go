package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Paths of the host tools a guest needs (Debian packages qemu-system-x86,
// which pulls in qemu-system-common with virtiofsd).
var (
	qemuPath      = "qemu-system-x86_64"
	virtiofsdPath = "/usr/lib/qemu/virtiofsd"
)

// DefaultTimeout bounds one guest; TCG runs test binaries many times slower
// than the host does.
const DefaultTimeout = 20 * time.Minute

// Options describe one command run in a guest.
type Options struct {
	// Dir is the working directory of the command, a host path; the guest
	// sees the host's root read-only at the same paths, and this folder
	// even where it lies under one the guest masks (/home, /tmp, ...).
	// The default is the current directory.
	Dir string
	// Env adds K=V variables to the command's environment, overriding the
	// defaults (PATH, HOME=/root, TERM=dumb, AGENT_LOCK_VM=1,
	// AGENT_LOCK_KERNEL=suite).
	Env []string
	// Command is run as root, with stdin from /dev/null.
	Command []string
	// Timeout bounds the whole boot; DefaultTimeout if zero.
	Timeout time.Duration
	// Output receives the command's output (not the boot messages) line by
	// line as the guest prints it. On a failed boot it receives the boot
	// messages instead.
	Output io.Writer
	// MemoryMB and CPUs size the guest; 2048 and 2 if zero.
	MemoryMB int
	CPUs     int
}

// Result is the outcome of a guest run.
type Result struct {
	// ExitCode is the command's exit status, or -1 when the guest did not
	// report one (boot failure, panic, timeout).
	ExitCode int
	// Output is what the command printed (stdout and stderr interleaved,
	// with any kernel messages printed meanwhile).
	Output string
	// Console is the whole serial console, boot messages included.
	Console string
	// Boot is the time from starting QEMU until the command started, and
	// Duration until QEMU exited.
	Boot, Duration time.Duration
}

// kernelCmdline is the guest kernel's command line. The lsm= list turns on
// the BPF LSM, which Debian builds in but does not enable by default.
// panic=-1 makes a panic reboot, which -no-reboot turns into QEMU exiting,
// so a crashed guest ends the run instead of waiting for the timeout.
func kernelCmdline() string {
	return "console=ttyS0 lsm=lockdown,capability,landlock,bpf panic=-1 quiet"
}

// qemuArgs runs the guest on single-threaded TCG: its vCPUs take turns on
// one host thread instead of running on one each. The guest still has
// several CPUs (preemption, migration and per-CPU maps are exercised); they
// never execute at the same instant.
//
// Multi-threaded TCG crashed guests here: the kernel patching its own code
// (text_poke: BPF trampolines, ftrace nops, static keys) while another vCPU
// executed it ended in "Oops: int3" and a panic. forky 7.2 did within minutes
// of the adversary suite (in bpf_trampoline_* images and bpf_lsm_* nops),
// trixie 6.12 once at boot in sched_clock_tick, with no BPF program loaded,
// on a loaded host. Single-threaded, the same workloads never did. QEMU's
// handling of code modified under another vCPU is the suspect, not the jail.
func qemuArgs(vmlinuz, initrd, socket string, memMB, cpus int) []string {
	mem := strconv.Itoa(memMB)
	return []string{
		"-accel", "tcg,thread=single", "-cpu", "max",
		"-m", mem, "-smp", strconv.Itoa(cpus),
		"-nographic", "-no-reboot", "-no-user-config",
		"-serial", "stdio", "-monitor", "none", "-parallel", "none",
		"-nic", "none",
		"-kernel", vmlinuz, "-initrd", initrd,
		"-append", kernelCmdline(),
		// vhost-user needs guest RAM that virtiofsd can map.
		"-object", "memory-backend-memfd,id=mem,size=" + mem + "M,share=on",
		"-numa", "node,memdev=mem",
		"-chardev", "socket,id=vfs,path=" + socket,
		"-device", "vhost-user-fs-pci,chardev=vfs,tag=hostroot",
	}
}

// Run boots img and runs opts.Command in it. A command that ran and failed
// is not an error: its status is in Result.ExitCode. An error means the
// guest did not report a status, and Result.ExitCode is -1.
func Run(ctx context.Context, img Image, opts Options) (Result, error) {
	res := Result{ExitCode: -1}
	if err := opts.defaults(); err != nil {
		return res, err
	}
	if os.Geteuid() != 0 {
		return res, errors.New("booting a guest needs root (virtiofsd shares the host's root)")
	}
	tmp, err := os.MkdirTemp("", "agent-lock-vmtest-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)

	nonce := make([]byte, 8)
	rand.Read(nonce)
	spec := guestSpec{
		Suite:   img.Kernel.Suite,
		Nonce:   hex.EncodeToString(nonce),
		Dir:     opts.Dir,
		Env:     opts.Env,
		Command: opts.Command,
	}
	initrd := filepath.Join(tmp, "initrd.gz")
	if err := buildInitramfs(initrd, img, spec); err != nil {
		return res, fmt.Errorf("build initramfs for %s: %w", img.Kernel, err)
	}

	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	socket := filepath.Join(tmp, "virtiofs.sock")
	vfsd, vfsdErr, err := startVirtiofsd(socket)
	if err != nil {
		return res, err
	}
	// virtiofsd exits by itself when QEMU disconnects; killing it covers
	// the paths where QEMU never connected.
	stopVirtiofsd := sync.OnceFunc(func() {
		vfsd.Process.Kill()
		vfsd.Wait()
	})
	defer stopVirtiofsd()

	var qemuErr bytes.Buffer
	qemu := exec.CommandContext(ctx, qemuPath, qemuArgs(filepath.Join(img.Root, img.Vmlinuz), initrd, socket, opts.MemoryMB, opts.CPUs)...)
	qemu.Stderr = &qemuErr
	qemu.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	qemu.WaitDelay = 5 * time.Second
	stdout, err := qemu.StdoutPipe()
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := qemu.Start(); err != nil {
		return res, fmt.Errorf("start qemu (install qemu-system-x86): %w", err)
	}
	con := &console{nonce: spec.Nonce, stream: opts.Output}
	r := bufio.NewReader(stdout)
	for {
		l, err := r.ReadString('\n')
		if l != "" {
			con.line(strings.TrimSuffix(l, "\n"))
			if con.started && res.Boot == 0 {
				res.Boot = time.Since(start)
			}
		}
		if err != nil {
			break
		}
	}
	waitErr := qemu.Wait()
	res.Duration = time.Since(start)
	stopVirtiofsd() // before reading its stderr
	res.Output, res.Console = con.out.String(), con.all.String()
	if con.exited {
		res.ExitCode = con.code
		return res, nil
	}
	if !con.started && opts.Output != nil {
		io.WriteString(opts.Output, con.boot.String())
	}
	why := "the guest stopped"
	switch {
	case ctx.Err() != nil:
		why = fmt.Sprintf("%v after %v", ctx.Err(), res.Duration.Round(time.Second))
	case waitErr != nil:
		why = fmt.Sprintf("qemu: %v", waitErr)
	case con.panicked:
		why = "kernel panic"
	case !con.started:
		why = "the guest stopped during boot"
	}
	detail := indent("qemu", qemuErr.String())
	// virtiofsd complains on every disconnect; its messages only matter
	// when the guest could not get going.
	if !con.started {
		detail += indent("virtiofsd", vfsdErr.String())
	}
	return res, fmt.Errorf("%s: no exit status: %s%s", img.Kernel, why, detail)
}

func (o *Options) defaults() error {
	if len(o.Command) == 0 {
		return errors.New("no command")
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = 2048
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		o.Dir = wd
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	// The guest sees host paths as they are on disk, and a symlink in the
	// path could lead into a folder the guest masks.
	if o.Dir, err = filepath.EvalSymlinks(dir); err != nil {
		return err
	}
	for _, p := range []string{"/proc", "/sys", "/dev"} {
		if o.Dir == p || strings.HasPrefix(o.Dir, p+"/") {
			return fmt.Errorf("%s is not visible in the guest, which has its own %s", dir, p)
		}
	}
	for _, t := range guestTmpfs {
		if o.Dir == t.Path {
			return fmt.Errorf("%s cannot be the working directory: the guest has an empty tmpfs there", dir)
		}
	}
	for _, kv := range o.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("environment entry %q is not K=V", kv)
		}
	}
	return nil
}

// startVirtiofsd serves the host's root to the guest. It shares a recursive
// read-only clone of the mount tree, so that a guest root which remounts its
// view read-write still cannot write to the host, and it runs in a private
// mount namespace because its chroot sandbox changes mount propagation.
func startVirtiofsd(socket string) (*exec.Cmd, *bytes.Buffer, error) {
	tree, err := readOnlyRoot()
	if err != nil {
		return nil, nil, err
	}
	defer tree.Close()
	// Listening here rather than in virtiofsd means QEMU can connect as
	// soon as it starts, with no polling for the socket to appear.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("virtiofsd socket: %w", err)
	}
	l.SetUnlinkOnClose(false)
	defer l.Close()
	lf, err := l.File()
	if err != nil {
		return nil, nil, fmt.Errorf("virtiofsd socket: %w", err)
	}
	defer lf.Close()

	var stderr bytes.Buffer
	cmd := exec.Command(virtiofsdPath, "--fd=4",
		"-o", "source=/proc/self/fd/3/", "-o", "cache=always", "-o", "sandbox=chroot",
		"-o", "log_level=warn")
	cmd.ExtraFiles = []*os.File{tree, lf}
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig:    syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start virtiofsd (install qemu-system-x86): %w", err)
	}
	return cmd, &stderr, nil
}

// readOnlyRoot returns a detached, recursively read-only copy of the mount
// tree at /. Nothing on the host is remounted.
func readOnlyRoot() (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("clone mount tree: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("make mount tree read-only: %w", err)
	}
	return os.NewFile(uintptr(fd), "/"), nil
}

func indent(name, s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	return "\n" + name + ": " + strings.ReplaceAll(s, "\n", "\n"+name+": ")
}
