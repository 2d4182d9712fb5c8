package landlock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/spec"
)

func paths(rs []Rule) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Path)
	}
	slices.Sort(out)
	return out
}

func TestCarve(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a", "secret", "sub/c", "sub/.ssh"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "b"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "sub/.ssh/id_rsa"), nil, 0o600)
	// A rule on a symlink would grant its target: the link to the secret
	// must not become a rule.
	os.Symlink("secret", filepath.Join(root, "link"))

	got, err := Carve([]Rule{{root, ReadOnly}, {filepath.Join(root, "secret/inner"), ReadWrite}},
		[]string{filepath.Join(root, "secret"), filepath.Join(root, "sub/.ssh")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "sub/c")}
	if !slices.Equal(paths(got), want) {
		t.Errorf("carved rules %v, want %v (no rule above or at a denied path, none on links)", paths(got), want)
	}
	for _, r := range got {
		if r.Rights != ReadOnly {
			t.Errorf("%s lost its rights: %v", r.Path, r.Rights)
		}
	}

	// Nothing to carve: the rule stays as it is.
	got, err = Carve([]Rule{{root, ReadWrite}}, []string{"/elsewhere"})
	if err != nil || len(got) != 1 || got[0].Path != root {
		t.Errorf("Carve with an unrelated denial: %v, %v", got, err)
	}
}

func TestFromCell(t *testing.T) {
	dir := t.TempDir()
	rules := []spec.Rule{
		{Path: "/usr", Access: spec.Read},
		{Path: "/dev", Access: spec.Read},
		{Path: "/dev/pts", Access: spec.Read}, // a mount under a system root
		{Path: "/dev/shm", Access: spec.Scratch},
		{Path: "/tmp", Access: spec.Scratch},
		{Path: dir, Access: spec.Read | spec.Write},
		{Path: "/run/some.sock", Access: spec.Socket},
	}
	got, err := FromCell(rules, []string{"/dev/pts/7"})
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Rights{}
	for _, r := range got {
		byPath[r.Path] = r.Rights
	}
	for p, want := range map[string]Rights{"/usr": ReadOnly, "/dev": List, dir: ReadWrite,
		"/proc": ReadOnly, "/sys": ReadOnly, "/dev/null": Device, "/run/some.sock": Socket} {
		if byPath[p] != want {
			t.Errorf("%s: rights %v, want %v (all: %v)", p, byPath[p], want, got)
		}
	}
	for _, p := range []string{"/dev/pts", "/dev/shm", "/tmp"} {
		if _, ok := byPath[p]; ok {
			t.Errorf("%s is granted: the Landlock engine must not open it", p)
		}
	}
	// The terminal is named only if it exists; /dev/pts/7 may not here.
	if _, err := os.Stat("/dev/pts/7"); err != nil {
		if _, ok := byPath["/dev/pts/7"]; ok {
			t.Error("a terminal that does not exist became a rule")
		}
	}
}

// TestFilter runs the seccomp filter in a child (a filter cannot be
// removed) and checks what it refuses and what it lets through.
func TestFilter(t *testing.T) {
	if os.Getenv("AGENT_LOCK_FILTER_CHILD") == "1" {
		filterChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFilter$")
	cmd.Env = append(os.Environ(), "AGENT_LOCK_FILTER_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func filterChild() {
	fail := func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "FAIL: "+f+"\n", a...)
		os.Exit(1)
	}
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail("no_new_privs: %v", err)
	}
	null, err := os.Open("/dev/null")
	if err != nil {
		fail("%v", err)
	}
	// Before: /dev/null is no terminal, so TIOCSTI says ENOTTY; the key
	// syscalls reach the kernel.
	c := byte('x')
	if err := unix.IoctlSetPointerInt(int(null.Fd()), unix.TIOCSTI, int(c)); !errors.Is(err, unix.ENOTTY) {
		fail("TIOCSTI before the filter: %v, want ENOTTY", err)
	}
	// bpf(BPF_PROG_GET_NEXT_ID, NULL, 0) needs no object: as root the
	// kernel answers ENOENT or EFAULT, never EPERM, so EPERM after the
	// filter is the filter's.
	_, _, bpfBefore := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_GET_NEXT_ID, 0, 0)
	if err := installFilter(); err != nil {
		fail("%v", err)
	}
	for _, req := range []uint{unix.TIOCSTI, unix.TIOCLINUX, unix.TIOCCONS} {
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, null.Fd(), uintptr(req), 0); errno != unix.EPERM {
			fail("ioctl %#x: %v, want EPERM", req, errno)
		}
	}
	if _, err := unix.IoctlGetTermios(int(null.Fd()), unix.TCGETS); !errors.Is(err, unix.ENOTTY) {
		fail("TCGETS: %v, want ENOTTY (the filter must let other requests through)", err)
	}
	if _, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_USER_KEYRING, false); !errors.Is(err, unix.EPERM) {
		fail("keyctl: %v, want EPERM", err)
	}
	if _, err := unix.AddKey("user", "agent-lock-test", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING); !errors.Is(err, unix.EPERM) {
		fail("add_key: %v, want EPERM", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_GET_NEXT_ID, 0, 0); errno != unix.EPERM {
		fail("bpf: %v, want EPERM", errno)
	} else if bpfBefore == unix.EPERM {
		fmt.Fprintln(os.Stderr, "bpf() was refused before the filter too (not root?): its check proves nothing here")
	}
	if _, err := unix.Getcwd(make([]byte, 256)); err != nil {
		fail("getcwd: %v (an ordinary call must pass)", err)
	}
	os.Exit(0)
}

// TestEnvFileKeepsTheLast: a name given twice reaches the agent with its
// last value, as os/exec gives it under the BPF LSM (C's getenv would
// read the first).
func TestEnvFileKeepsTheLast(t *testing.T) {
	f, err := EnvFile([]string{"LC_ALL=de_DE.UTF-8", "PATH=/bin", "LC_ALL=C", "EMPTY=", "NOEQUALS"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	want := []string{"PATH=/bin", "LC_ALL=C", "EMPTY=", "NOEQUALS"}
	if !slices.Equal(got, want) {
		t.Errorf("environment %q, want %q", got, want)
	}
}

// TestArgvRoundTrip: the cell's first process reads back what Argv wrote,
// binds with any byte in their paths included (a wrong one would mount
// over another file, or fail the agent's start).
func TestArgvRoundTrip(t *testing.T) {
	want := Start{Flags: 1, TTYs: []string{"/dev/pts/3", "/dev/pts/7"}, Mode: AsInit, Binds: []Bind{
		{Src: "/tmp/rc/.bashrc", Target: "/home/u/.bashrc"},
		{Src: "/tmp/a \"b\"\\c", Target: "/home/u/x\xff\ny,z=1"},
	}}
	args := Argv(want, "/usr/bin/env", []string{"env", "-i"})
	if args[1] != ExecArg {
		t.Fatalf("argv %q", args)
	}
	got, path, argv, err := parseStart(args[2:])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || path != "/usr/bin/env" || !reflect.DeepEqual(argv, []string{"env", "-i"}) {
		t.Errorf("read back %+v %q %q, want %+v", got, path, argv, want)
	}
	none, _, _, err := parseStart(Argv(Start{Mode: Bare}, "/bin/true", []string{"true"})[2:])
	if err != nil || none.Binds != nil || none.TTYs != nil || none.Mode != Bare {
		t.Errorf("read back %+v (%v)", none, err)
	}
	if _, _, _, err := parseStart([]string{"0", "-", "init", `"unclosed`, "/bin/true", "true"}); err == nil {
		t.Error("a malformed bind was read")
	}
}
