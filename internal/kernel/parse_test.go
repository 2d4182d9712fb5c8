package kernel

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		file       string
		cgroup2    string
		securityfs string
		points     []string // mount points that must be parsed as written
		wantErr    string
	}{
		{file: "hybrid.txt", cgroup2: "/sys/fs/cgroup/unified"},
		{file: "unified.txt", cgroup2: "/sys/fs/cgroup", securityfs: "/sys/kernel/security"},
		{file: "v1-only.txt"},
		{file: "container.txt", cgroup2: "/sys/fs/cgroup", points: []string{"/data dir\tx", `/mnt/back\slash`}},
		{file: "overmounted.txt", securityfs: "/sys/kernel/security"},
		{file: "malformed.txt", wantErr: "mountinfo line 2: malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			mounts, err := parseMountinfo([]byte(fixture(t, "mountinfo/"+tt.file)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cgroup2Mount(mounts); got != tt.cgroup2 {
				t.Errorf("cgroup2 = %q, want %q", got, tt.cgroup2)
			}
			if got := fsMount(mounts, "securityfs"); got != tt.securityfs {
				t.Errorf("securityfs = %q, want %q", got, tt.securityfs)
			}
			for _, p := range tt.points {
				found := false
				for _, m := range mounts {
					found = found || m.point == p
				}
				if !found {
					t.Errorf("no mount point %q in %+v", p, mounts)
				}
			}
		})
	}
}

func TestUnescapeOctal(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/plain", "/plain"},
		{`/a\040b`, "/a b"},
		{`/a\011b\012c`, "/a\tb\nc"},
		{`/a\134b`, `/a\b`},
		{`/trailing\04`, `/trailing\04`},
		{`/notoctal\09x`, `/notoctal\09x`},
		{`/end\`, `/end\`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := UnescapeMount(tt.in); got != tt.want {
				t.Errorf("UnescapeMount(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseLSMList(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"ubuntu-bpf.txt", []string{"lockdown", "capability", "landlock", "yama", "apparmor", "bpf"}},
		{"debian-no-bpf.txt", []string{"capability", "landlock", "lockdown", "yama", "apparmor", "tomoyo"}},
		{"fedora-newline.txt", []string{"lockdown", "capability", "yama", "selinux", "bpf", "landlock", "ipe", "ima", "evm"}},
		{"capability-only.txt", []string{"capability"}},
		{"empty.txt", nil},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if got := parseLSMList(fixture(t, "lsm/"+tt.file)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if got := parseLSMList(" a,,b ,"); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("empty items not dropped: %q", got)
	}
}

func TestParseLockdown(t *testing.T) {
	tests := []struct{ file, want string }{
		{"none.txt", LockdownNone},
		{"integrity.txt", LockdownIntegrity},
		{"confidentiality.txt", LockdownConfidentiality},
		{"no-bracket.txt", LockdownUnknown},
		{"unexpected.txt", LockdownUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if got := parseLockdown(fixture(t, "lockdown/"+tt.file)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCmdlineLSM(t *testing.T) {
	tests := []struct {
		file  string
		want  string
		found bool
	}{
		{"debian-grub.txt", "landlock,lockdown,yama,integrity,apparmor,bpf", true},
		{"repeated.txt", "lockdown,yama,bpf", true}, // the last lsm= wins, as in the kernel
		{"quoted.txt", "lockdown,bpf", true},
		{"init-args.txt", "", false}, // lsm= after "--" belongs to init
		{"none.txt", "", false},      // nolsm=, xlsm= are other parameters
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, found := cmdlineParam(fixture(t, "cmdline/"+tt.file), "lsm")
			if got != tt.want || found != tt.found {
				t.Errorf("got %q %v, want %q %v", got, found, tt.want, tt.found)
			}
		})
	}
}

func TestSplitCmdline(t *testing.T) {
	got := splitCmdline(`  a=1  b="x y"  "c=3 4" d= e` + "\n")
	want := []string{"a=1", "b=x y", "c=3 4", "d=", "e"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestKconfigString(t *testing.T) {
	config := []byte(fixture(t, "kconfig/config.txt"))
	if v, ok := kconfigString(config, "CONFIG_LSM"); !ok || v != "landlock,lockdown,yama,loadpin,safesetid,integrity,apparmor,selinux,smack,tomoyo,bpf" {
		t.Errorf("CONFIG_LSM = %q %v", v, ok)
	}
	if v, ok := kconfigString(config, "CONFIG_BPF_LSM"); !ok || v != "y" {
		t.Errorf("CONFIG_BPF_LSM = %q %v", v, ok)
	}
	if _, ok := kconfigString(config, "CONFIG_DEFAULT_SECURITY_SELINUX"); ok {
		t.Error(`"is not set" comment parsed as a value`)
	}
}

func TestParseRelease(t *testing.T) {
	tests := []struct {
		in           string
		major, minor int
		ok           bool
	}{
		{"6.1.0-18-amd64", 6, 1, true},
		{"5.15.0-1053-azure", 5, 15, true},
		{"6.18.44-fc-v1045", 6, 18, true},
		{"5.4", 5, 4, true},
		{"4.19.0+", 4, 19, true},
		{"6.10-rc1", 6, 10, true},
		{"", 0, 0, false},
		{"six.one", 0, 0, false},
		{"6", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			major, minor, ok := parseRelease(tt.in)
			if major != tt.major || minor != tt.minor || ok != tt.ok {
				t.Errorf("got %d.%d %v, want %d.%d %v", major, minor, ok, tt.major, tt.minor, tt.ok)
			}
		})
	}
}
