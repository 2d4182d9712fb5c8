package kernel

import (
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// fakeHost is a host made of fixture files, for following Probe through its
// fallbacks.
type fakeHost struct {
	files    map[string]string
	root     bool
	mountErr error
	mounted  map[string]string // securityfs files that appear once it is mounted
	landlock int
	llErr    error
}

func (h *fakeHost) system() system {
	return system{
		uname: func() (string, error) { return "6.1.0-18-amd64", nil },
		readFile: func(name string) ([]byte, error) {
			if s, ok := h.files[name]; ok {
				return []byte(s), nil
			}
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		},
		exists: func(name string) bool { _, ok := h.files[name]; return ok },
		euid:   map[bool]int{true: 0, false: 1000}[h.root],
		mountSecurityFS: func() error {
			if h.mountErr != nil {
				return h.mountErr
			}
			for k, v := range h.mounted {
				h.files[k] = v
			}
			return nil
		},
		landlockABI: func() (int, error) { return h.landlock, h.llErr },
	}
}

func TestProbe(t *testing.T) {
	ubuntuLSM := fixture(t, "lsm/ubuntu-bpf.txt")
	secfsFiles := map[string]string{
		"/sys/kernel/security/lsm":      ubuntuLSM,
		"/sys/kernel/security/lockdown": fixture(t, "lockdown/integrity.txt"),
	}
	merge := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	ubuntuList := []string{"lockdown", "capability", "landlock", "yama", "apparmor", "bpf"}
	tests := []struct {
		name    string
		host    fakeHost
		want    Facts
		wantErr []string
	}{
		{
			name: "securityfs mounted",
			host: fakeHost{landlock: 3, files: merge(secfsFiles, map[string]string{
				"/proc/self/mountinfo":    fixture(t, "mountinfo/unified.txt"),
				"/sys/kernel/btf/vmlinux": "",
			})},
			want: Facts{Release: "6.1.0-18-amd64", LSMs: ubuntuList, LSMSource: FromSecurityFS, BPFInLSM: true, BTF: true,
				Lockdown: LockdownIntegrity, LandlockABI: 3, Cgroup2: "/sys/fs/cgroup", SecurityFS: true},
		},
		{
			name: "root mounts securityfs",
			host: fakeHost{root: true, mounted: secfsFiles, files: map[string]string{
				"/proc/self/mountinfo": fixture(t, "mountinfo/hybrid.txt"),
			}},
			want: Facts{Release: "6.1.0-18-amd64", LSMs: ubuntuList, LSMSource: FromSecurityFS, BPFInLSM: true,
				Lockdown: LockdownIntegrity, Cgroup2: "/sys/fs/cgroup/unified", SecurityFS: true,
				Notes: []string{"mounted securityfs at /sys/kernel/security"}},
		},
		{
			name: "mount refused, guess from cmdline",
			host: fakeHost{root: true, mountErr: syscall.EPERM, files: map[string]string{
				"/proc/self/mountinfo": fixture(t, "mountinfo/v1-only.txt"),
				"/proc/cmdline":        fixture(t, "cmdline/repeated.txt"),
			}},
			want: Facts{Release: "6.1.0-18-amd64", LSMs: []string{"lockdown", "yama", "bpf"}, LSMSource: FromCmdline, BPFInLSM: true,
				Lockdown: LockdownUnknown, Notes: []string{
					"could not mount securityfs at /sys/kernel/security: operation not permitted",
					"LSM list guessed from lsm= on the kernel command line: securityfs is not mounted",
				}},
		},
		{
			name: "not root, guess from kconfig",
			host: fakeHost{files: map[string]string{
				"/proc/self/mountinfo":        fixture(t, "mountinfo/hybrid.txt"),
				"/proc/cmdline":               fixture(t, "cmdline/init-args.txt"),
				"/boot/config-6.1.0-18-amd64": fixture(t, "kconfig/config.txt"),
			}},
			want: Facts{Release: "6.1.0-18-amd64",
				LSMs:      []string{"landlock", "lockdown", "yama", "loadpin", "safesetid", "integrity", "apparmor", "selinux", "smack", "tomoyo", "bpf"},
				LSMSource: FromKconfig, BPFInLSM: true, Lockdown: LockdownUnknown, Cgroup2: "/sys/fs/cgroup/unified",
				Notes: []string{"LSM list guessed from CONFIG_LSM in /boot/config-6.1.0-18-amd64: securityfs is unreadable and the kernel command line has no lsm="}},
		},
		{
			name: "securityfs without lockdown LSM",
			host: fakeHost{files: map[string]string{
				"/proc/self/mountinfo":     fixture(t, "mountinfo/unified.txt"),
				"/sys/kernel/security/lsm": fixture(t, "lsm/debian-no-bpf.txt"),
			}},
			want: Facts{Release: "6.1.0-18-amd64", LSMs: []string{"capability", "landlock", "lockdown", "yama", "apparmor", "tomoyo"},
				LSMSource: FromSecurityFS, Lockdown: LockdownNone, Cgroup2: "/sys/fs/cgroup", SecurityFS: true},
		},
		{
			name: "nothing readable",
			host: fakeHost{files: map[string]string{}, llErr: syscall.EPERM},
			want: Facts{Release: "6.1.0-18-amd64", Lockdown: LockdownUnknown,
				Notes: []string{"landlock_create_ruleset refused with EPERM (seccomp?): Landlock ABI unknown"}},
			wantErr: []string{"read mountinfo"},
		},
		{
			name: "unexpected landlock error",
			host: fakeHost{llErr: syscall.EINVAL, files: map[string]string{
				"/proc/self/mountinfo": fixture(t, "mountinfo/malformed.txt"),
			}},
			want:    Facts{Release: "6.1.0-18-amd64", Lockdown: LockdownUnknown},
			wantErr: []string{"parse mountinfo: mountinfo line 2: malformed", "landlock_create_ruleset: invalid argument"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := probe(tt.host.system())
			if (err != nil) != (tt.wantErr != nil) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to contain %q", err, w)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestAdvice(t *testing.T) {
	good := Facts{Release: "6.1.0", LSMs: []string{"lockdown", "capability", "bpf"}, LSMSource: FromSecurityFS, BPFInLSM: true,
		BTF: true, Lockdown: LockdownNone, LandlockABI: 3, Cgroup2: "/sys/fs/cgroup", SecurityFS: true}
	with := func(change func(*Facts)) Facts {
		f := good
		change(&f)
		return f
	}
	tests := []struct {
		name  string
		facts Facts
		want  []string // substrings, one per advice line, in order
	}{
		{"all good", good, nil},
		{"no bpf in lsm", with(func(f *Facts) { f.LSMs, f.BPFInLSM = []string{"lockdown", "capability", "apparmor"}, false }),
			[]string{"add bpf to the lsm= kernel parameter, e.g. lsm=lockdown,capability,apparmor,bpf (edit GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub, reboot;"}},
		{"no bpf, guessed list", with(func(f *Facts) { f.LSMs, f.BPFInLSM, f.LSMSource = []string{"yama"}, false, FromCmdline }),
			[]string{"lsm=yama,bpf (the current list is a guess from cmdline)"}},
		{"bpf guessed", with(func(f *Facts) { f.LSMSource, f.SecurityFS = FromKconfig, false }),
			[]string{"bpf is listed in kconfig but the active LSM list could not be read"}},
		{"lsm unknown", with(func(f *Facts) { f.LSMs, f.LSMSource, f.BPFInLSM = nil, "", false }),
			[]string{"mount -t securityfs securityfs /sys/kernel/security"}},
		{"no btf", with(func(f *Facts) { f.BTF = false }), []string{"kernel built without CONFIG_DEBUG_INFO_BTF"}},
		{"no cgroup2", with(func(f *Facts) { f.Cgroup2 = "" }), []string{"mount -t cgroup2 cgroup2 /sys/fs/cgroup"}},
		{"confidentiality", with(func(f *Facts) { f.Lockdown = LockdownConfidentiality }), []string{"lockdown=integrity"}},
		{"old kernel", with(func(f *Facts) { f.Release = "5.4.0-150-generic" }), []string{"kernel 5.4.0-150-generic predates the BPF LSM (Linux 5.7)"}},
		{"5.7 is enough", with(func(f *Facts) { f.Release = "5.7.0" }), nil},
		{"everything wrong", Facts{Release: "4.19.0", Lockdown: LockdownConfidentiality},
			[]string{"predates", "LSM list is unreadable", "CONFIG_DEBUG_INFO_BTF", "cgroup2", "confidentiality"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.facts.Advice()
			if len(got) != len(tt.want) {
				t.Fatalf("got %d lines, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("line %d:\n%s\nwant it to contain\n%s", i, got[i], w)
				}
			}
		})
	}
}

// TestProbeLive probes the machine the tests run on. As root on a host where
// securityfs is not mounted, it mounts it, as Probe does for agent-lock.
func TestProbeLive(t *testing.T) {
	f, err := Probe()
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if f.Release == "" {
		t.Error("no release")
	}
	t.Logf("facts: %+v", f)
	for _, a := range f.Advice() {
		t.Logf("advice: %s", a)
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err == nil != f.BTF {
		t.Errorf("BTF = %v, but stat says %v", f.BTF, err)
	}
	if os.Geteuid() == 0 && !f.SecurityFS && !slices.ContainsFunc(f.Notes, func(n string) bool {
		return strings.HasPrefix(n, "could not mount securityfs")
	}) {
		t.Errorf("root, securityfs not mounted, and no note says why: %q", f.Notes)
	}
	if f.SecurityFS && f.LSMSource != FromSecurityFS {
		t.Errorf("securityfs mounted but LSMs from %q", f.LSMSource)
	}
}
