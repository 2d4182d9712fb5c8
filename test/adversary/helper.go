package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// The technique helpers: this binary, copied into DIR and run inside the
// jail as `advhelper -technique-helper NAME ARGS...`, makes the system
// calls shell tools do not offer. The same binary, copied outside as
// adv-victim, plays the outside processes. Helpers print what they got on
// stdout; an error exits 1, and "SKIP: reason" exits 77 when the kernel
// rules the attack out regardless of any jail.

var helpers = map[string]func(args []string) error{
	"victim":      victim,
	"serve-unix":  serveUnix,
	"serve-dgram": serveDgram,
	"fifo-reader": fifoReader,
	"connect":     connectUnix,
	"sendto":      sendtoDgram,
	"ptrace-peek": ptracePeek,
	"vm-readv":    vmReadv,
	"pidfd-getfd": pidfdGetfd,
	"pidfd-kill":  pidfdKill,
	"openat2":     openat2,
	"handle-open": handleOpen,
	"pivot-root":  pivotRoot,
	"bpf-map":     bpfMap,
	"ipc-owner":   ipcOwner,
	"shm-read":    shmRead,
	"msg-read":    msgRead,
	"key-read":    keyRead,
}

// errSkip carries a reason the attack cannot work on this kernel at all.
type errSkip struct{ reason string }

func (e errSkip) Error() string { return "SKIP: " + e.reason }

func runHelper(name string, args []string) int {
	h, ok := helpers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown technique helper %q\n", name)
		return 2
	}
	err := h(args)
	var skip errSkip
	switch {
	case err == nil:
		return 0
	case errors.As(err, &skip):
		fmt.Println(skip.Error())
		return exitSkip
	default:
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
}

func argc(args []string, n int, usage string) error {
	if len(args) != n {
		return fmt.Errorf("usage: %s", usage)
	}
	return nil
}

func atoiArgs(args []string) ([]int, error) {
	out := make([]int, len(args))
	for i, a := range args {
		n, err := strconv.ParseInt(a, 0, 64)
		if err != nil {
			return nil, err
		}
		out[i] = int(n)
	}
	return out, nil
}

// Outside processes.

var (
	victimMemory []byte   // the secret the memory attacks look for
	victimFile   *os.File // held open, so no finalizer closes it
)

// victim keeps a secret in memory (and, from its parent, in its
// environment), holds the key open, and waits to be attacked.
func victim(args []string) error {
	if err := argc(args, 1, "victim KEYFILE"); err != nil {
		return err
	}
	victimMemory = []byte("mem-" + os.Getenv("VICTIM_SECRET"))
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	victimFile = f
	fmt.Printf("ready pid=%d addr=%#x len=%d fd=%d\n",
		os.Getpid(), uintptr(unsafe.Pointer(&victimMemory[0])), len(victimMemory), f.Fd())
	for {
		time.Sleep(time.Hour)
	}
}

// serveUnix is an agent socket: it hands the secret to whoever connects.
// An address starting with @ is abstract.
func serveUnix(args []string) error {
	if err := argc(args, 1, "serve-unix PATH|@NAME"); err != nil {
		return err
	}
	l, err := net.Listen("unix", args[0])
	if err != nil {
		return err
	}
	fmt.Println("ready")
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		fmt.Fprintf(c, "agent-%s\n", os.Getenv("VICTIM_SECRET"))
		c.Close()
		fmt.Println("served a client")
	}
}

func serveDgram(args []string) error {
	if err := argc(args, 1, "serve-dgram PATH"); err != nil {
		return err
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: args[0], Net: "unixgram"})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	buf := make([]byte, 4096)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		fmt.Printf("got %s\n", buf[:n])
	}
}

func fifoReader(args []string) error {
	if err := argc(args, 1, "fifo-reader PATH"); err != nil {
		return err
	}
	// Read-write, so the FIFO never reports end of file between writers.
	f, err := os.OpenFile(args[0], os.O_RDWR, 0)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fmt.Printf("got %s\n", sc.Text())
	}
	return sc.Err()
}

// Attacks.

func connectUnix(args []string) error {
	if err := argc(args, 1, "connect PATH|@NAME"); err != nil {
		return err
	}
	c, err := net.Dial("unix", args[0])
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = io.Copy(os.Stdout, c)
	return err
}

// sendtoDgram sends one datagram with sendto(2), never connecting.
func sendtoDgram(args []string) error {
	if err := argc(args, 2, "sendto PATH MESSAGE"); err != nil {
		return err
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Sendto(fd, []byte(args[1]), 0, &syscall.SockaddrUnix{Name: args[0]}); err != nil {
		return err
	}
	fmt.Println("sent")
	return nil
}

func ptracePeek(args []string) error {
	if err := argc(args, 3, "ptrace-peek PID ADDR LEN"); err != nil {
		return err
	}
	n, err := atoiArgs(args)
	if err != nil {
		return err
	}
	pid, addr, size := n[0], uintptr(n[1]), n[2]
	// ptrace requests must come from the thread that attached.
	runtime.LockOSThread()
	if err := syscall.PtraceAttach(pid); err != nil {
		return fmt.Errorf("PTRACE_ATTACH: %w", err)
	}
	defer syscall.PtraceDetach(pid)
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, syscall.WALL, nil); err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	buf := make([]byte, size)
	if _, err := syscall.PtracePeekData(pid, addr, buf); err != nil {
		return fmt.Errorf("PTRACE_PEEKDATA: %w", err)
	}
	fmt.Printf("%s\n", buf)
	return nil
}

func vmReadv(args []string) error {
	if err := argc(args, 3, "vm-readv PID ADDR LEN"); err != nil {
		return err
	}
	n, err := atoiArgs(args)
	if err != nil {
		return err
	}
	buf := make([]byte, n[2])
	local := syscall.Iovec{Base: &buf[0]}
	local.SetLen(len(buf))
	remote := struct {
		base uintptr
		len  uint64
	}{uintptr(n[1]), uint64(n[2])}
	r, _, e := syscall.Syscall6(sysProcessVMReadv, uintptr(n[0]),
		uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
	if e != 0 {
		return fmt.Errorf("process_vm_readv: %w", e)
	}
	fmt.Printf("%s\n", buf[:r])
	return nil
}

func pidfdOpen(pid int) (int, error) {
	fd, _, e := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if e != 0 {
		return -1, fmt.Errorf("pidfd_open: %w", e)
	}
	return int(fd), nil
}

func pidfdGetfd(args []string) error {
	if err := argc(args, 2, "pidfd-getfd PID FD"); err != nil {
		return err
	}
	n, err := atoiArgs(args)
	if err != nil {
		return err
	}
	pidfd, err := pidfdOpen(n[0])
	if err != nil {
		return err
	}
	fd, _, e := syscall.Syscall(sysPidfdGetfd, uintptr(pidfd), uintptr(n[1]), 0)
	if e != 0 {
		return fmt.Errorf("pidfd_getfd: %w", e)
	}
	buf := make([]byte, 4096)
	// pread: the descriptor's offset is shared with the victim.
	m, err := syscall.Pread(int(fd), buf, 0)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	fmt.Printf("%s\n", buf[:m])
	return nil
}

func pidfdKill(args []string) error {
	if err := argc(args, 1, "pidfd-kill PID"); err != nil {
		return err
	}
	n, err := atoiArgs(args)
	if err != nil {
		return err
	}
	pidfd, err := pidfdOpen(n[0])
	if err != nil {
		return err
	}
	if _, _, e := syscall.Syscall6(sysPidfdSendSignal, uintptr(pidfd), uintptr(syscall.SIGTERM), 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("pidfd_send_signal: %w", e)
	}
	fmt.Println("signalled")
	return nil
}

func openat2(args []string) error {
	if err := argc(args, 1, "openat2 PATH"); err != nil {
		return err
	}
	const resolveNoMagiclinks = 0x02
	how := struct{ flags, mode, resolve uint64 }{syscall.O_RDONLY | syscall.O_CLOEXEC, 0, resolveNoMagiclinks}
	p, err := syscall.BytePtrFromString(args[0])
	if err != nil {
		return err
	}
	dirfd := atFDCWD
	fd, _, e := syscall.Syscall6(sysOpenat2, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
	if e == syscall.ENOSYS {
		return errSkip{"openat2 needs Linux 5.6"}
	}
	if e != 0 {
		return fmt.Errorf("openat2: %w", e)
	}
	return printFD(int(fd))
}

func printFD(fd int) error {
	f := os.NewFile(uintptr(fd), "fd")
	defer f.Close()
	_, err := io.Copy(os.Stdout, f)
	return err
}

// handleOpen decodes a file handle of HOME/.ssh against a descriptor of
// HOME, then opens the key below it. Without CAP_DAC_READ_SEARCH this works only in a user
// namespace that owns the mount namespace, on Linux 6.9 and later, and
// only for directories: run it under unshare -Urm.
func handleOpen(args []string) error {
	if err := argc(args, 1, "handle-open HOME"); err != nil {
		return err
	}
	home := args[0]
	var fh struct {
		bytes uint32
		typ   int32
		h     [128]byte
	}
	fh.bytes = uint32(len(fh.h))
	var mountID int32
	p, _ := syscall.BytePtrFromString(filepath.Join(home, ".ssh"))
	dirfd := atFDCWD
	if _, _, e := syscall.Syscall6(sysNameToHandleAt, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&fh)), uintptr(unsafe.Pointer(&mountID)), 0, 0); e != 0 {
		return fmt.Errorf("name_to_handle_at: %w", e)
	}
	// The handle decodes only below the mount descriptor's directory, and
	// open_by_handle_at takes no O_PATH descriptor for it.
	mfd, err := syscall.Open(home, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", home, err)
	}
	dfd, _, e := syscall.Syscall(sysOpenByHandleAt, uintptr(mfd), uintptr(unsafe.Pointer(&fh)),
		syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC)
	if e == syscall.EPERM {
		maj, min := kernelVersion()
		return errSkip{fmt.Sprintf("open_by_handle_at: %v on Linux %d.%d (unprivileged handles in a user namespace need 6.9)", e, maj, min)}
	}
	if e != 0 {
		return fmt.Errorf("open_by_handle_at: %w", e)
	}
	fd, err := syscall.Openat(int(dfd), "id_rsa", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("openat id_rsa: %w", err)
	}
	return printFD(fd)
}

// pivotRoot makes /home (the parent of HOME) the root of a user+mount
// namespace and reads the key under the new root. The new root must be a
// mount the namespace owns, so it is bind-mounted onto itself first.
func pivotRoot(args []string) error {
	if err := argc(args, 1, "pivot-root HOME"); err != nil {
		return err
	}
	home := args[0]
	newRoot := filepath.Dir(home)
	putOld := filepath.Join(home, "project", ".old")
	if err := syscall.Mount(newRoot, newRoot, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mount %s: %w", newRoot, err)
	}
	if err := syscall.Mount("", newRoot, "", syscall.MS_PRIVATE|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s private: %w", newRoot, err)
	}
	if err := syscall.Chdir(newRoot); err != nil {
		return err
	}
	rel, _ := filepath.Rel(newRoot, putOld)
	if err := syscall.PivotRoot(".", rel); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := syscall.Chdir("/"); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join("/", filepath.Base(home), ".ssh/id_rsa"))
	if err != nil {
		return err
	}
	os.Stdout.Write(b)
	return nil
}

func bpfMap(args []string) error {
	attr := struct{ mapType, keySize, valueSize, maxEntries, flags uint32 }{2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1, 0}
	fd, _, e := syscall.Syscall(sysBPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if e != 0 {
		return fmt.Errorf("bpf(BPF_MAP_CREATE): %w", e)
	}
	syscall.Close(int(fd))
	fmt.Println("bpf-map-created")
	return nil
}

// atFDCWD is AT_FDCWD, which the syscall package does not export on every
// architecture; a variable so it converts to uintptr.
var atFDCWD = -100

// SysV IPC and keys.

const (
	ipcCreat      = 0o1000
	ipcNowait     = 0o4000
	shmRdonly     = 0o10000
	keySpecUser   = -4 // KEY_SPEC_USER_KEYRING
	keyctlSetperm = 5
	keyctlSearch  = 10
	keyctlRead    = 11
)

// ipcOwner is an outside process that keeps a secret in a SysV shared
// memory segment and a message queue under KEY, and in a key DESC of the
// user keyring (readable by the user, as a credential cache's would be).
func ipcOwner(args []string) error {
	if err := argc(args, 2, "ipc-owner KEY DESC"); err != nil {
		return err
	}
	key, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	secret := os.Getenv("VICTIM_SECRET")

	id, _, e := syscall.Syscall(syscall.SYS_SHMGET, uintptr(key), 4096, ipcCreat|0o600)
	if e != 0 {
		return fmt.Errorf("shmget: %w", e)
	}
	addr, _, e := syscall.Syscall(syscall.SYS_SHMAT, id, 0, 0)
	if e != 0 {
		return fmt.Errorf("shmat: %w", e)
	}
	copy(unsafe.Slice((*byte)(attached(addr)), 4096), "shm-"+secret+"\x00")

	q, _, e := syscall.Syscall(syscall.SYS_MSGGET, uintptr(key), ipcCreat|0o600, 0)
	if e != 0 {
		return fmt.Errorf("msgget: %w", e)
	}
	msg := append([]byte{1, 0, 0, 0, 0, 0, 0, 0}, "msg-"+secret...) // long mtype = 1, then the text
	if _, _, e := syscall.Syscall6(syscall.SYS_MSGSND, q, uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)-8), ipcNowait, 0, 0); e != 0 {
		return fmt.Errorf("msgsnd: %w", e)
	}

	typ, _ := syscall.BytePtrFromString("user")
	desc, _ := syscall.BytePtrFromString(args[1])
	payload := []byte("key-" + secret)
	ring := keySpecUser
	k, _, e := syscall.Syscall6(syscall.SYS_ADD_KEY, uintptr(unsafe.Pointer(typ)), uintptr(unsafe.Pointer(desc)),
		uintptr(unsafe.Pointer(&payload[0])), uintptr(len(payload)), uintptr(ring), 0)
	if e != 0 {
		return fmt.Errorf("add_key: %w", e)
	}
	// Possessor and user: view, read, write, search, link, setattr.
	if _, _, e := syscall.Syscall(syscall.SYS_KEYCTL, keyctlSetperm, k, 0x3f3f0000); e != 0 {
		return fmt.Errorf("keyctl setperm: %w", e)
	}
	fmt.Printf("ready shm=%d msq=%d key=%d\n", id, q, k)
	for {
		time.Sleep(time.Hour)
	}
}

func ipcKeyArg(args []string, usage string) (uintptr, error) {
	if err := argc(args, 1, usage); err != nil {
		return 0, err
	}
	key, err := strconv.Atoi(args[0])
	return uintptr(key), err
}

func shmRead(args []string) error {
	key, err := ipcKeyArg(args, "shm-read KEY")
	if err != nil {
		return err
	}
	id, _, e := syscall.Syscall(syscall.SYS_SHMGET, key, 0, 0)
	if e != 0 {
		return fmt.Errorf("shmget: %w", e)
	}
	addr, _, e := syscall.Syscall(syscall.SYS_SHMAT, id, 0, shmRdonly)
	if e != 0 {
		return fmt.Errorf("shmat: %w", e)
	}
	b := unsafe.Slice((*byte)(attached(addr)), 4096)
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	fmt.Printf("%s\n", b)
	return nil
}

func msgRead(args []string) error {
	key, err := ipcKeyArg(args, "msg-read KEY")
	if err != nil {
		return err
	}
	q, _, e := syscall.Syscall(syscall.SYS_MSGGET, key, 0, 0)
	if e != 0 {
		return fmt.Errorf("msgget: %w", e)
	}
	buf := make([]byte, 8+4096)
	n, _, e := syscall.Syscall6(syscall.SYS_MSGRCV, q, uintptr(unsafe.Pointer(&buf[0])), 4096, 0, ipcNowait, 0)
	if e != 0 {
		return fmt.Errorf("msgrcv: %w", e)
	}
	fmt.Printf("%s\n", buf[8:8+n])
	return nil
}

func keyRead(args []string) error {
	if err := argc(args, 1, "key-read DESC"); err != nil {
		return err
	}
	typ, _ := syscall.BytePtrFromString("user")
	desc, _ := syscall.BytePtrFromString(args[0])
	ring := keySpecUser
	k, _, e := syscall.Syscall6(syscall.SYS_KEYCTL, keyctlSearch, uintptr(ring),
		uintptr(unsafe.Pointer(typ)), uintptr(unsafe.Pointer(desc)), 0, 0)
	if e != 0 {
		return fmt.Errorf("keyctl search @u: %w", e)
	}
	buf := make([]byte, 4096)
	n, _, e := syscall.Syscall6(syscall.SYS_KEYCTL, keyctlRead, k, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		return fmt.Errorf("keyctl read: %w", e)
	}
	fmt.Printf("%s\n", buf[:min(int(n), len(buf))])
	return nil
}

// attached turns the address shmat returned into a pointer. The segment is
// outside the Go heap, so the collector never moves or frees it.
func attached(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }
