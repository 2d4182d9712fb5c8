package vmtest

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// busyboxPath is busybox-static's binary; it must be static because the
// initramfs has no libc.
var busyboxPath = "/bin/busybox"

// Test user created in every guest, for tests that need an unprivileged
// account that exists in /etc/passwd.
const (
	TestUser = "jailtest"
	TestUID  = 4242
	TestGID  = 4242
)

// guestPath is PATH for the command: the host's, plus the Go toolchain.
const guestPath = "/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// stageDir is a tmpfs folder of the new root that carries busybox and the
// second stage across switch_root, which empties the initramfs.
const stageDir = "/run/vmtest"

// guestTmpfs are the host folders the guest replaces with empty tmpfs: the
// host's temporary and per-user state must neither leak into tests nor be
// needed by them, and tests need somewhere writable.
var guestTmpfs = []struct{ Path, Options string }{
	{"/tmp", "mode=1777,nosuid,nodev"},
	{"/var/tmp", "mode=1777,nosuid,nodev"},
	{"/home", "mode=755"},
	{"/root", "mode=700"},
	{"/run", "mode=755,nosuid,nodev"},
}

// maskedBy returns the guestTmpfs folder that hides dir, or "".
func maskedBy(dir string) string {
	for _, t := range guestTmpfs {
		if dir == t.Path || strings.HasPrefix(dir, t.Path+"/") {
			return t.Path
		}
	}
	return ""
}

// guestSpec is everything the guest init scripts are generated from.
type guestSpec struct {
	Suite   string
	Nonce   string
	Dir     string
	Env     []string // K=V, after the defaults so they override them
	Command []string
	Modules []string // module file names in /lib/modules, in load order
}

// stage1 is /init: it loads the modules, mounts the host's root and the
// guest's own pseudo file systems under /mnt, prepares /etc, and switches
// root. It does not mount anything on the initramfs itself: switch_root
// leaves such mounts behind, unreachable.
func stage1(s guestSpec) string {
	var b strings.Builder
	b.WriteString(`#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
die() { echo "vmtest init: $*"; poweroff -f; }
m() { mount "$@" || die "mount $*"; }
`)
	for _, mod := range s.Modules {
		fmt.Fprintf(&b, "insmod /lib/modules/%s || die 'insmod %s'\n", mod, mod)
	}
	b.WriteString("m -t virtiofs -o ro hostroot /mnt\n")
	// A working directory under a masked folder (a CI checkout in /home or
	// /tmp) is held by a bind mount while the tmpfs goes on, then moved
	// back to its own path on top of it.
	masked := maskedBy(s.Dir) != ""
	if masked {
		fmt.Fprintf(&b, "mkdir /workdir\nm --bind %s /workdir\n", shellQuote("/mnt"+s.Dir))
	}
	for _, t := range guestTmpfs {
		fmt.Fprintf(&b, "m -t tmpfs -o %s tmpfs /mnt%s\n", t.Options, t.Path)
	}
	if masked {
		fmt.Fprintf(&b, "mkdir -p %[1]s\nm --move /workdir %[1]s\n", shellQuote("/mnt"+s.Dir))
	}
	// /etc is a copy on tmpfs, not an overlay: from 6.6 on, the kernel
	// shows LSMs the layer a file of an overlay comes from, which in the
	// guest is a directory no path reaches (see the README's limits).
	fmt.Fprintf(&b, `m -t proc proc /mnt/proc
m -t sysfs sysfs /mnt/sys
m -t devtmpfs devtmpfs /mnt/dev
mkdir -p /mnt/dev/pts /mnt/dev/shm
m -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /mnt/dev/pts
m -t tmpfs -o mode=1777,nosuid,nodev tmpfs /mnt/dev/shm
ln -sf /proc/self/fd /mnt/dev/fd
ln -sf /proc/self/fd/0 /mnt/dev/stdin
ln -sf /proc/self/fd/1 /mnt/dev/stdout
ln -sf /proc/self/fd/2 /mnt/dev/stderr
m -t securityfs securityfs /mnt/sys/kernel/security
m -t bpf -o mode=700 bpf /mnt/sys/fs/bpf
m -t cgroup2 cgroup2 /mnt/sys/fs/cgroup
mount -t tracefs tracefs /mnt/sys/kernel/tracing 2>/dev/null
mkdir -p /mnt%[1]s && cp -a /mnt/etc /mnt%[1]s/etc || die 'copy /etc'
m --bind /mnt%[1]s/etc /mnt/etc
if ! grep -q '^%[2]s:' /mnt/etc/passwd; then
	echo '%[2]s:x:%[3]d:%[4]d:agent-lock test user:/home/%[2]s:/bin/bash' >>/mnt/etc/passwd
	echo '%[2]s:x:%[4]d:' >>/mnt/etc/group
	echo '%[2]s:!:19000:0:99999:7:::' >>/mnt/etc/shadow
fi
mkdir -p /mnt/home/%[2]s
chown %[3]d:%[4]d /mnt/home/%[2]s
cp /bin/busybox /stage2 /mnt%[1]s/ || die 'copy stage 2'
hostname vmtest-%[5]s
ip link set lo up
exec switch_root /mnt %[1]s/busybox sh %[1]s/stage2
`, stageDir, TestUser, TestUID, TestGID, s.Suite)
	return b.String()
}

// stage2 runs as PID 1 in the host's root: it runs the command with a clean
// environment and reports its exit status in a marker line.
func stage2(s guestSpec) string {
	env := []string{
		"PATH=" + guestPath,
		"HOME=/root",
		"USER=root",
		"LOGNAME=root",
		"TERM=dumb",
		"AGENT_LOCK_VM=1",
		"AGENT_LOCK_KERNEL=" + s.Suite,
	}
	env = append(env, s.Env...)
	var b strings.Builder
	fmt.Fprintf(&b, "bb=%s/busybox\n", stageDir)
	fmt.Fprintf(&b, "cd %s || { echo %s; $bb poweroff -f; }\n", shellQuote(s.Dir), shellQuote("vmtest init: cannot cd to "+s.Dir))
	fmt.Fprintf(&b, "echo %s\n", shellQuote(startMarker(s.Nonce)))
	b.WriteString("$bb env -i")
	for _, kv := range env {
		b.WriteString(" " + shellQuote(kv))
	}
	// busybox env takes no "--"; a first word with "=" would be read as
	// one more variable, which no sensible command has.
	for _, a := range s.Command {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString(" </dev/null\n")
	fmt.Fprintf(&b, "echo \"%s$?\"\n", exitMarkerPrefix(s.Nonce))
	// Setting the console's modes again waits for its output to drain
	// (TCSADRAIN), so the marker is not lost to poweroff.
	b.WriteString("$bb stty -F /dev/console \"$($bb stty -F /dev/console -g)\"\n")
	b.WriteString("$bb poweroff -f\n")
	return b.String()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// initramfsEntries lists the initramfs: busybox, the modules in load order,
// both init stages, and /dev/console so that init has a console before
// anything is mounted.
func initramfsEntries(busybox []byte, mods []kmodData, s guestSpec) []cpioEntry {
	entries := []cpioEntry{
		{Name: "bin", Mode: modeDir | 0o755},
		{Name: "dev", Mode: modeDir | 0o755},
		{Name: "dev/console", Mode: modeChr | 0o600, DevMajor: 5, DevMinor: 1},
		{Name: "lib", Mode: modeDir | 0o755},
		{Name: "lib/modules", Mode: modeDir | 0o755},
		{Name: "mnt", Mode: modeDir | 0o755},
		{Name: "proc", Mode: modeDir | 0o755},
		{Name: "sys", Mode: modeDir | 0o755},
		{Name: "bin/busybox", Mode: modeReg | 0o755, Data: busybox},
	}
	for _, m := range mods {
		entries = append(entries, cpioEntry{Name: "lib/modules/" + m.File, Mode: modeReg | 0o644, Data: m.Data})
		s.Modules = append(s.Modules, m.File)
	}
	return append(entries,
		cpioEntry{Name: "init", Mode: modeReg | 0o755, Data: []byte(stage1(s))},
		cpioEntry{Name: "stage2", Mode: modeReg | 0o755, Data: []byte(stage2(s))},
	)
}

// kmodData is a module ready for the initramfs: decompressed, named for insmod.
type kmodData struct {
	File string
	Data []byte
}

// guestModuleData resolves and reads the modules the guest init loads.
func guestModuleData(img Image) ([]kmodData, error) {
	loadable, builtin, err := scanModules(filepath.Join(img.Root, img.Modules))
	if err != nil {
		return nil, err
	}
	mods, err := resolveModules(guestModules, loadable, builtin, moduleDepends)
	if err != nil {
		return nil, err
	}
	var out []kmodData
	for _, m := range mods {
		b, err := readModule(m.Path)
		if err != nil {
			return nil, err
		}
		out = append(out, kmodData{File: m.Name + ".ko", Data: b})
	}
	return out, nil
}

// buildInitramfs writes the guest's initramfs (gzip-compressed newc cpio).
func buildInitramfs(path string, img Image, s guestSpec) error {
	busybox, err := os.ReadFile(busyboxPath)
	if err != nil {
		return fmt.Errorf("busybox (install busybox-static): %w", err)
	}
	if err := checkStatic(busybox); err != nil {
		return err
	}
	mods, err := guestModuleData(img)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err := writeCPIO(zw, initramfsEntries(busybox, mods, s)); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func checkStatic(bin []byte) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("%s: %w", busyboxPath, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; install busybox-static", busyboxPath)
		}
	}
	return nil
}
