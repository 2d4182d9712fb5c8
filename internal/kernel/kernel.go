package kernel

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Lockdown modes, as /sys/kernel/security/lockdown names them.
const (
	LockdownNone            = "none"
	LockdownIntegrity       = "integrity"
	LockdownConfidentiality = "confidentiality"
	LockdownUnknown         = "unknown"
)

// Where Facts.LSMs came from. Only FromSecurityFS is the running kernel's
// word; the others are what it was asked to enable, which may differ (an LSM
// named there but not built in is silently skipped).
const (
	FromSecurityFS = "securityfs" // /sys/kernel/security/lsm: the active list
	FromCmdline    = "cmdline"    // lsm= in /proc/cmdline: a guess
	FromKconfig    = "kconfig"    // CONFIG_LSM in the kernel's config: a guess
)

// SecurityFSPath is where securityfs is conventionally mounted.
const SecurityFSPath = "/sys/kernel/security"

// Facts is what the running kernel offers agent-lock.
type Facts struct {
	Release string // uname -r
	// LSMs are the Linux security modules in initialisation order, from
	// LSMSource; LSMSource is "" when no source could be read, and then the
	// list is unknown rather than empty.
	LSMs        []string
	LSMSource   string
	BPFInLSM    bool   // "bpf" is among LSMs
	BTF         bool   // /sys/kernel/btf/vmlinux exists
	Lockdown    string // LockdownNone, LockdownIntegrity, LockdownConfidentiality or LockdownUnknown
	LandlockABI int    // 0: no Landlock
	Cgroup2     string // mount point of the cgroup2 hierarchy, "" if none
	SecurityFS  bool   // securityfs is mounted (perhaps by Probe)
	// Notes say what Probe did or could not do that a reader of the facts
	// should know: that it mounted securityfs, or guessed the LSM list.
	Notes []string
}

// Probe gathers the facts of the running kernel. When securityfs is not
// mounted and the process is root, Probe mounts it at /sys/kernel/security
// (and notes it), because the active LSM list is published nowhere else.
//
// A missing feature is a fact, not an error. Probe returns an error only
// when a source it needs failed unexpectedly; the Facts it returns alongside
// are complete as far as the other sources allowed.
func Probe() (Facts, error) {
	return probe(host())
}

// system is the kernel's interface as Probe uses it, so tests can fake a
// whole host.
type system struct {
	uname           func() (string, error)
	readFile        func(name string) ([]byte, error)
	exists          func(name string) bool
	euid            int
	mountSecurityFS func() error
	landlockABI     func() (int, error)
}

func host() system {
	return system{
		uname: func() (string, error) {
			var u unix.Utsname
			if err := unix.Uname(&u); err != nil {
				return "", err
			}
			return unix.ByteSliceToString(u.Release[:]), nil
		},
		readFile: os.ReadFile,
		exists: func(name string) bool {
			_, err := os.Stat(name)
			return err == nil
		},
		euid: os.Geteuid(),
		mountSecurityFS: func() error {
			return unix.Mount("securityfs", SecurityFSPath, "securityfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		},
		landlockABI: landlockABI,
	}
}

// landlockABI asks the kernel for its Landlock ABI version
// (landlock_create_ruleset(2) with LANDLOCK_CREATE_RULESET_VERSION).
func landlockABI() (int, error) {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch errno {
	case 0:
		return int(abi), nil
	case unix.ENOSYS, unix.EOPNOTSUPP: // not built in; built in but not enabled at boot
		return 0, nil
	}
	return 0, errno
}

func probe(sys system) (Facts, error) {
	f := Facts{Lockdown: LockdownUnknown}
	var errs []error
	fail := func(what string, err error) { errs = append(errs, fmt.Errorf("%s: %w", what, err)) }

	release, err := sys.uname()
	if err != nil {
		fail("uname", err)
	}
	f.Release = release

	var mounts []mount
	if data, err := sys.readFile("/proc/self/mountinfo"); err != nil {
		fail("read mountinfo", err)
	} else if mounts, err = parseMountinfo(data); err != nil {
		fail("parse mountinfo", err)
	}
	f.Cgroup2 = cgroup2Mount(mounts)

	secfs := fsMount(mounts, "securityfs")
	if secfs == "" && mounts != nil && sys.euid == 0 {
		if err := sys.mountSecurityFS(); err != nil {
			f.Notes = append(f.Notes, fmt.Sprintf("could not mount securityfs at %s: %v", SecurityFSPath, err))
		} else {
			secfs = SecurityFSPath
			f.Notes = append(f.Notes, "mounted securityfs at "+SecurityFSPath)
		}
	}
	f.SecurityFS = secfs != ""

	if f.SecurityFS {
		switch data, err := sys.readFile(filepath.Join(secfs, "lsm")); {
		case err == nil:
			f.LSMs, f.LSMSource = parseLSMList(string(data)), FromSecurityFS
		case !errors.Is(err, fs.ErrNotExist):
			fail("read LSM list", err)
		}
		switch data, err := sys.readFile(filepath.Join(secfs, "lockdown")); {
		case err == nil:
			f.Lockdown = parseLockdown(string(data))
		case errors.Is(err, fs.ErrNotExist):
			f.Lockdown = LockdownNone // the lockdown LSM is not running
		default:
			fail("read lockdown", err)
		}
	}
	if f.LSMSource == "" {
		why := "securityfs is not mounted"
		if f.SecurityFS {
			why = "securityfs has no lsm file"
		}
		if data, err := sys.readFile("/proc/cmdline"); err == nil {
			if v, ok := cmdlineParam(string(data), "lsm"); ok {
				f.LSMs, f.LSMSource = parseLSMList(v), FromCmdline
				f.Notes = append(f.Notes, "LSM list guessed from lsm= on the kernel command line: "+why)
			}
		}
	}
	if f.LSMSource == "" {
		if v, where, ok := kconfigLSM(sys, release); ok {
			f.LSMs, f.LSMSource = parseLSMList(v), FromKconfig
			f.Notes = append(f.Notes, "LSM list guessed from CONFIG_LSM in "+where+": "+
				"securityfs is unreadable and the kernel command line has no lsm=")
		}
	}
	f.BPFInLSM = slices.Contains(f.LSMs, "bpf")

	f.BTF = sys.exists("/sys/kernel/btf/vmlinux")

	switch abi, err := sys.landlockABI(); {
	case errors.Is(err, unix.EPERM):
		// A seccomp filter (a container runtime's) refused the question.
		f.Notes = append(f.Notes, "landlock_create_ruleset refused with EPERM (seccomp?): Landlock ABI unknown")
	case err != nil:
		fail("landlock_create_ruleset", err)
	default:
		f.LandlockABI = abi
	}

	return f, errors.Join(errs...)
}

// kconfigLSM finds CONFIG_LSM in /proc/config.gz or /boot/config-RELEASE.
func kconfigLSM(sys system, release string) (value, where string, ok bool) {
	if gz, err := sys.readFile("/proc/config.gz"); err == nil {
		if zr, err := gzip.NewReader(bytes.NewReader(gz)); err == nil {
			if config, err := io.ReadAll(zr); err == nil {
				if v, ok := kconfigString(config, "CONFIG_LSM"); ok {
					return v, "/proc/config.gz", true
				}
			}
		}
	}
	if release != "" {
		name := "/boot/config-" + release
		if config, err := sys.readFile(name); err == nil {
			if v, ok := kconfigString(config, "CONFIG_LSM"); ok {
				return v, name, true
			}
		}
	}
	return "", "", false
}

// ErrNotSupported means the running kernel cannot run an engine's
// programs: the BPF LSM's, or Landlock.
var ErrNotSupported = errors.New("BPF LSM programs cannot run on this kernel")
