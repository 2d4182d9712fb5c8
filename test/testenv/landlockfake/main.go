// Command landlockfake stands in for agent-lock when developing the suites
// on a machine whose kernel cannot run the BPF-LSM jail. It is not a jail
// worth the name: it confines the agent with Landlock (DIR and a private
// TMPDIR read-write, the system directories read-only, abstract sockets and
// signals scoped) and writes a report with a start and a summary record but
// no escape records, because Landlock tells no one what it refused.
//
// Against it the adversary suite should say UNREPORTED for every technique
// Landlock stops, and LEAK only for the gaps of Landlock and of this rule
// set: metadata changes, reads under /dev (/dev/shm, other terminals),
// pathname and datagram unix sockets, SysV IPC, keyrings, inotify, TIOCSTI
// and processes left running. A LEAK anywhere else, or a VOID, is a bug in
// the suite. realwork should pass: its jobs need nothing outside DIR, the
// private TMPDIR and the read-only system directories.
//
//	go build -o /tmp/landlockfake ./test/testenv/landlockfake
//	.build/adversary -i-know-this-writes-to-home -user U -agent-lock /tmp/landlockfake
//
// It needs Landlock ABI 6 (Linux 6.12) and setpriv.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

const (
	sysLandlockCreateRuleset = 444
	sysLandlockAddRule       = 445
	sysLandlockRestrictSelf  = 446
	rulePathBeneath          = 1

	accessAll  = 1<<16 - 1          // every file system right of ABI 5
	accessRead = 1<<0 | 1<<2 | 1<<3 // execute, read file, read dir
	scopeAll   = 1<<0 | 1<<1        // abstract unix sockets, signals
)

func main() {
	if len(os.Args) > 4 && os.Args[1] == "-confine" {
		confine(os.Args[2], os.Args[3], os.Args[4:])
	}
	// agent-lock --headless --report FILE DIR -- CMD...
	if len(os.Args) < 7 || os.Args[1] != "--headless" || os.Args[2] != "--report" || os.Args[5] != "--" {
		fmt.Fprintln(os.Stderr, "usage: landlockfake --headless --report FILE DIR -- CMD...")
		os.Exit(125)
	}
	os.Exit(run(os.Args[3], os.Args[4], os.Args[6:]))
}

// run drops to the sudo user with setpriv (no_new_privs, which Landlock
// requires) and re-executes itself to confine and exec the agent.
func run(report, dir string, argv []string) int {
	u, err := user.LookupId(os.Getenv("SUDO_UID"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "landlockfake:", err)
		return 125
	}
	tmp, err := os.MkdirTemp("", "landlockfake-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "landlockfake:", err)
		return 125
	}
	defer os.RemoveAll(tmp)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	os.Chown(tmp, uid, gid)
	self, _ := os.Executable()
	if err := os.WriteFile(report, []byte(fmt.Sprintf("{\"type\":\"start\",\"dir\":%q,\"tmpdir\":%q}\n", dir, tmp)), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "landlockfake:", err)
		return 125
	}
	cmd := exec.Command("setpriv", append([]string{"--reuid", u.Uid, "--regid", u.Gid, "--init-groups", "--no-new-privs",
		"env", "HOME=" + u.HomeDir, "USER=" + u.Username, "LOGNAME=" + u.Username, "TMPDIR=" + tmp,
		self, "-confine", dir, tmp}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Dir = os.Stdin, os.Stdout, os.Stderr, dir
	cmd.Run()
	code := 125
	if ps := cmd.ProcessState; ps != nil {
		ws := ps.Sys().(syscall.WaitStatus)
		code = ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	}
	f, err := os.OpenFile(report, os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		fmt.Fprintf(f, "{\"type\":\"summary\",\"exit_code\":%d,\"in_bounds\":0,\"system\":0,\"escapes\":0,\"lost\":0}\n", code)
		f.Close()
	}
	return code
}

// confine restricts this thread with Landlock and becomes the agent.
// landlock_restrict_self binds the calling thread only, so the exec must
// come from the same thread: unlocked, the Go scheduler may exec from an
// unconfined one (it did, in about one run in thirty).
func confine(dir, tmp string, argv []string) {
	runtime.LockOSThread()
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "landlockfake: %s: %v\n", what, err)
		os.Exit(125)
	}
	attr := struct{ fs, net, scoped uint64 }{accessAll, 0, scopeAll}
	rs, _, e := syscall.Syscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		fail("landlock_create_ruleset", e)
	}
	allow := func(path string, access uint64) {
		fd, err := syscall.Open(path, 0x200000|syscall.O_CLOEXEC, 0) // O_PATH
		if err != nil {
			return // absent on this machine
		}
		defer syscall.Close(fd)
		var rule [12]byte // struct landlock_path_beneath_attr is packed
		*(*uint64)(unsafe.Pointer(&rule[0])) = access
		*(*int32)(unsafe.Pointer(&rule[8])) = int32(fd)
		if _, _, e := syscall.Syscall6(sysLandlockAddRule, rs, rulePathBeneath, uintptr(unsafe.Pointer(&rule[0])), 0, 0, 0); e != 0 {
			fail("landlock_add_rule "+path, e)
		}
	}
	for _, p := range []string{"/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/sys", "/proc"} {
		allow(p, accessRead)
	}
	allow("/dev", accessRead|1<<1|1<<15) // write and ioctl on devices
	allow(dir, accessAll)
	allow(tmp, accessAll)
	if _, _, e := syscall.Syscall(sysLandlockRestrictSelf, rs, 0, 0); e != 0 {
		fail("landlock_restrict_self", e)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "landlockfake:", err)
		os.Exit(127)
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintln(os.Stderr, "landlockfake:", err)
	os.Exit(126)
}
