package vmtest

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// readCPIO parses a newc archive back into entries.
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	field := func(i int) uint32 {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("header field %d at %d: %v", i, off, err)
		}
		return uint32(v)
	}
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if string(b[off:off+6]) != "070701" {
			t.Fatalf("bad magic at %d: %q", off, b[off:off+6])
		}
		mode, size, major, minor, namesize := field(1), field(6), field(9), field(10), field(11)
		name := string(b[off+110 : off+110+int(namesize)-1])
		off = align(off + 110 + int(namesize))
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, cpioEntry{Name: name, Mode: mode, Data: b[off : off+int(size)], DevMajor: major, DevMinor: minor})
		off = align(off + int(size))
	}
}

func TestWriteCPIO(t *testing.T) {
	in := []cpioEntry{
		{Name: "bin", Mode: modeDir | 0o755},
		{Name: "/bin/x", Mode: modeReg | 0o755, Data: []byte("12345")},
		{Name: "dev/console", Mode: modeChr | 0o600, DevMajor: 5, DevMinor: 1},
		{Name: "bin/sh", Mode: modeLink | 0o777, Data: []byte("x")},
		{Name: "empty", Mode: modeReg | 0o644},
	}
	var buf bytes.Buffer
	if err := writeCPIO(&buf, in); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d is not 4-aligned", buf.Len())
	}
	got := readCPIO(t, buf.Bytes())
	if len(got) != len(in) {
		t.Fatalf("read back %d entries, want %d", len(got), len(in))
	}
	for i := range in {
		want := in[i]
		want.Name = strings.TrimPrefix(want.Name, "/")
		if got[i].Name != want.Name || got[i].Mode != want.Mode || !bytes.Equal(got[i].Data, want.Data) ||
			got[i].DevMajor != want.DevMajor || got[i].DevMinor != want.DevMinor {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want)
		}
	}

	// GNU cpio, where present, must agree that this is a valid archive.
	if _, err := exec.LookPath("cpio"); err == nil {
		cmd := exec.Command("cpio", "-it", "--quiet")
		cmd.Stdin = bytes.NewReader(buf.Bytes())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("cpio -it: %v", err)
		}
		if want := "bin\nbin/x\ndev/console\nbin/sh\nempty\n"; string(out) != want {
			t.Errorf("cpio -it listed %q, want %q", out, want)
		}
	}
}

func testSpec() guestSpec {
	return guestSpec{
		Suite:   "bookworm",
		Nonce:   "feedface",
		Dir:     "/work/it's here",
		Env:     []string{"GOFLAGS=-count=1", "TERM=xterm"},
		Command: []string{"bash", "-c", `echo "$0" 'q'`, "a b"},
	}
}

func TestInitramfsEntries(t *testing.T) {
	mods := []kmodData{{File: "virtio.ko", Data: []byte("v")}, {File: "virtio_pci.ko", Data: []byte("p")}}
	entries := initramfsEntries([]byte("BB"), mods, testSpec())
	byName := map[string]cpioEntry{}
	var names []string
	for _, e := range entries {
		byName[e.Name] = e
		names = append(names, e.Name)
	}
	for _, want := range []string{"bin", "dev", "mnt", "proc", "sys", "lib/modules", "bin/busybox", "init", "stage2"} {
		if _, ok := byName[want]; !ok {
			t.Errorf("initramfs lacks %s (has %q)", want, names)
		}
	}
	if c := byName["dev/console"]; c.Mode != modeChr|0o600 || c.DevMajor != 5 || c.DevMinor != 1 {
		t.Errorf("dev/console = %+v, want char device 5:1", c)
	}
	if i := byName["init"]; i.Mode != modeReg|0o755 || !strings.HasPrefix(string(i.Data), "#!/bin/busybox sh\n") {
		t.Errorf("init is not an executable busybox script: mode %o", i.Mode)
	}
	// Each directory precedes what it contains, as the kernel unpacks in order.
	for i, n := range names {
		if j := strings.LastIndex(n, "/"); j > 0 && slices.Index(names, n[:j]) > i {
			t.Errorf("%s comes before its directory", n)
		}
	}
	// Modules are loaded in the order given, after being placed in the archive.
	stage1 := string(byName["init"].Data)
	first, second := strings.Index(stage1, "insmod /lib/modules/virtio.ko "), strings.Index(stage1, "insmod /lib/modules/virtio_pci.ko ")
	if first < 0 || second < first {
		t.Errorf("modules not loaded in order:\n%s", stage1)
	}
	if string(byName["lib/modules/virtio_pci.ko"].Data) != "p" {
		t.Error("module content not carried")
	}
}

func TestStage1(t *testing.T) {
	s := stage1(testSpec())
	for _, want := range []string{
		"m -t virtiofs -o ro hostroot /mnt\n",
		"m -t tmpfs -o mode=1777,nosuid,nodev tmpfs /mnt/tmp\n",
		"m -t tmpfs -o mode=700 tmpfs /mnt/root\n",
		"m -t securityfs securityfs /mnt/sys/kernel/security\n",
		"m -t bpf -o mode=700 bpf /mnt/sys/fs/bpf\n",
		"m -t cgroup2 cgroup2 /mnt/sys/fs/cgroup\n",
		"ln -sf /proc/self/fd /mnt/dev/fd\n",
		"cp -a /mnt/etc /mnt/run/vmtest/etc ",
		fmt.Sprintf("%s:x:%d:%d:", TestUser, TestUID, TestGID),
		"chown 4242:4242 /mnt/home/jailtest\n",
		"exec switch_root /mnt /run/vmtest/busybox sh /run/vmtest/stage2\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("stage 1 lacks %q", want)
		}
	}
	// The virtiofs mount comes first: everything else mounts on top of it.
	if strings.Index(s, "hostroot /mnt") > strings.Index(s, "/mnt/tmp") {
		t.Error("tmpfs mounted before the host root")
	}
	shellSyntax(t, s)
	if strings.Contains(s, "/workdir") {
		t.Error("a working directory outside the masked folders was bind-mounted")
	}

	spec := testSpec()
	spec.Dir = "/home/runner/work/it's"
	s = stage1(spec)
	bind := strings.Index(s, `m --bind '/mnt/home/runner/work/it'\''s' /workdir`)
	home := strings.Index(s, "tmpfs /mnt/home\n")
	move := strings.Index(s, `m --move /workdir '/mnt/home/runner/work/it'\''s'`)
	if bind < 0 || home < bind || move < home {
		t.Errorf("working directory under /home not carried over the tmpfs:\n%s", s)
	}
	shellSyntax(t, s)
}

func TestStage2(t *testing.T) {
	spec := testSpec()
	s := stage2(spec)
	for _, want := range []string{
		`cd '/work/it'\''s here' ||`,
		"echo '" + startMarker(spec.Nonce) + "'\n",
		`'AGENT_LOCK_KERNEL=bookworm'`,
		`'AGENT_LOCK_VM=1'`,
		`'PATH=/usr/local/go/bin:`,
		// Options.Env comes after the defaults, so it wins.
		`'TERM=dumb' 'AGENT_LOCK_VM=1' 'AGENT_LOCK_KERNEL=bookworm' 'GOFLAGS=-count=1' 'TERM=xterm' 'bash'`,
		" </dev/null\n",
		`echo "` + exitMarkerPrefix(spec.Nonce) + `$?"`,
		"poweroff -f\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("stage 2 lacks %q:\n%s", want, s)
		}
	}
	shellSyntax(t, s)
}

func shellSyntax(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("sh", "-n")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v: %s\n%s", err, out, script)
	}
}

func TestShellQuote(t *testing.T) {
	args := []string{"plain", "two words", "it's", `"dq"`, "$HOME", "`id`", "back\\slash", "new\nline", ""}
	var quoted []string
	for _, a := range args {
		quoted = append(quoted, shellQuote(a))
	}
	// Evaluate the quoted words as the argument list of a function.
	script := `f() { for a; do printf '%s\0' "$a"; done; }; f ` + strings.Join(quoted, " ")
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !slices.Equal(got, args) {
		t.Errorf("round trip through sh = %q, want %q", got, args)
	}
}
