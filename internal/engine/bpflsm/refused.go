package bpflsm

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/agent-lock/agent-lock/internal/jail"
)

// refusedMark remembers, for one boot, that the kernel refused these
// programs: auto then goes to Landlock at once instead of trying a load
// that fails the same way every session (a second or so on a kernel that
// lists bpf as an active LSM but cannot attach LSM programs). It is
// keyed by the boot and by the programs, so a reboot, another kernel or
// another build of the programs tries again; an explicit --engine bpf-lsm
// always tries, and doctor's self-test sets or clears the mark. Under
// /run/agent-lock, which is root's: no user can plant a refusal that would
// move sessions to the weaker engine, nor a link for root to write through
// (and none is followed).
var refusedMark = "/run/agent-lock/bpf-lsm-refused"

// refusalKey is what the mark holds: the boot and the programs.
var refusalKey = sync.OnceValue(func() []byte {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return nil
	}
	return fmt.Appendf(nil, "boot %s programs %x\n", bytes.TrimSpace(boot), sha256.Sum256(jail.Object()))
})

// RefusedThisBoot says whether the kernel refused the programs earlier in
// this boot (RememberRefusal).
func RefusedThisBoot() bool {
	key := refusalKey()
	b, err := os.ReadFile(refusedMark)
	return err == nil && key != nil && bytes.Equal(b, key)
}

// RememberRefusal records that the kernel refused the programs, for auto's
// next sessions in this boot; best effort (without it, auto tries again).
func RememberRefusal() {
	key := refusalKey()
	if key == nil || os.MkdirAll(filepath.Dir(refusedMark), 0o755) != nil {
		return
	}
	tmp := refusedMark + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return
	}
	_, err = f.Write(key)
	if f.Close() == nil && err == nil {
		os.Rename(tmp, refusedMark)
	}
}

// ForgetRefusal removes the mark: the programs loaded (doctor's self-test).
func ForgetRefusal() { os.Remove(refusedMark) }
