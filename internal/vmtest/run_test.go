package vmtest

import (
	"slices"
	"strings"
	"testing"
)

func TestKernelCmdline(t *testing.T) {
	fields := strings.Fields(kernelCmdline())
	for _, want := range []string{"console=ttyS0", "panic=-1"} {
		if !slices.Contains(fields, want) {
			t.Errorf("cmdline %q lacks %s", fields, want)
		}
	}
	var lsm []string
	for _, f := range fields {
		if v, ok := strings.CutPrefix(f, "lsm="); ok {
			lsm = strings.Split(v, ",")
		}
	}
	if !slices.Contains(lsm, "bpf") {
		t.Errorf("lsm= list %q does not enable the BPF LSM", lsm)
	}
}

func TestQemuArgs(t *testing.T) {
	args := qemuArgs("/k/vmlinuz", "/t/initrd.gz", "/t/vfs.sock", 1024, 3)
	joined := strings.Join(args, " ")
	for _, want := range []string{
		// Multi-threaded TCG crashes guests that patch their code (qemuArgs).
		"-accel tcg,thread=single",
		"-m 1024 ",
		"-smp 3 ",
		"-no-reboot",
		"-kernel /k/vmlinuz",
		"-initrd /t/initrd.gz",
		// virtiofs needs all guest RAM shared, so the backend's size must
		// be the machine's.
		"memory-backend-memfd,id=mem,size=1024M,share=on",
		"-numa node,memdev=mem",
		"socket,id=vfs,path=/t/vfs.sock",
		"vhost-user-fs-pci,chardev=vfs,tag=hostroot",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("qemu args lack %q: %s", want, joined)
		}
	}
	if i := slices.Index(args, "-append"); i < 0 || args[i+1] != kernelCmdline() {
		t.Error("kernel command line not passed as one argument")
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{Command: []string{"true"}, Dir: "/"}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if o.Timeout != DefaultTimeout || o.MemoryMB != 2048 || o.CPUs != 2 {
		t.Errorf("defaults = %+v", o)
	}
	// Folders under a masked one are carried into the guest.
	tmp := t.TempDir()
	o = Options{Command: []string{"true"}, Dir: tmp}
	if err := o.defaults(); err != nil {
		t.Errorf("Dir %s: %v", tmp, err)
	}
	for _, bad := range []Options{
		{},
		{Command: []string{"true"}, Dir: "/tmp"},
		{Command: []string{"true"}, Dir: "/var/tmp"},
		{Command: []string{"true"}, Dir: "/proc/self"},
		{Command: []string{"true"}, Dir: "/nonexistent"},
		{Command: []string{"true"}, Dir: "/", Env: []string{"NOEQUALS"}},
		{Command: []string{"true"}, Dir: "/", Env: []string{"=v"}},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("Options %+v accepted", bad)
		}
	}
}
