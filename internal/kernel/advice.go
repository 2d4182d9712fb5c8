package kernel

import (
	"fmt"
	"strings"
)

// BPF LSM arrived in Linux 5.7.
const bpfLSMMajor, bpfLSMMinor = 5, 7

// Advice returns what to change, exactly, for agent-lock's BPF LSM jail to
// work on this kernel; none when nothing is known to be missing.
func (f Facts) Advice() []string {
	var advice []string
	if major, minor, ok := parseRelease(f.Release); ok &&
		(major < bpfLSMMajor || major == bpfLSMMajor && minor < bpfLSMMinor) {
		advice = append(advice, fmt.Sprintf(
			"kernel %s predates the BPF LSM (Linux %d.%d): boot a %d.%d or newer kernel built with CONFIG_BPF_LSM=y",
			f.Release, bpfLSMMajor, bpfLSMMinor, bpfLSMMajor, bpfLSMMinor))
	}

	mountSecFS := "mount -t securityfs securityfs " + SecurityFSPath
	switch {
	case f.LSMSource == "":
		advice = append(advice, "cannot tell whether the BPF LSM is active: the LSM list is unreadable; "+
			"as root, mount securityfs ("+mountSecFS+") and check that bpf is listed in "+SecurityFSPath+"/lsm")
	case !f.BPFInLSM:
		list := "bpf"
		if len(f.LSMs) > 0 {
			list = strings.Join(f.LSMs, ",") + ",bpf"
		}
		from := ""
		if f.LSMSource != FromSecurityFS {
			from = " (the current list is a guess from " + f.LSMSource + ")"
		}
		advice = append(advice, "the BPF LSM is not active: add bpf to the lsm= kernel parameter, e.g. lsm="+list+from+
			" (edit GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub, reboot; "+
			"on Fedora/RHEL: grubby --update-kernel=ALL --args=lsm="+list+"); "+
			"the kernel must also be built with CONFIG_BPF_LSM=y")
	case f.LSMSource != FromSecurityFS:
		advice = append(advice, "bpf is listed in "+f.LSMSource+" but the active LSM list could not be read to confirm it; "+
			"as root, mount securityfs ("+mountSecFS+") and check "+SecurityFSPath+"/lsm")
	}

	if !f.BTF {
		advice = append(advice, "kernel built without CONFIG_DEBUG_INFO_BTF: /sys/kernel/btf/vmlinux is missing, "+
			"and BPF LSM programs need the kernel's BTF to load; boot a kernel built with CONFIG_DEBUG_INFO_BTF=y "+
			"(most distribution kernels since 2020 are)")
	}

	if f.Cgroup2 == "" {
		advice = append(advice, "no cgroup2 hierarchy is mounted: mount one with "+
			"mount -t cgroup2 cgroup2 /sys/fs/cgroup "+
			"(if /sys/fs/cgroup holds cgroup v1 controllers: mkdir -p /sys/fs/cgroup/unified && "+
			"mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified), "+
			"or on systemd hosts boot with systemd.unified_cgroup_hierarchy=1")
	}

	if f.Lockdown == LockdownConfidentiality {
		advice = append(advice, "kernel lockdown is in confidentiality mode: the kernel refuses BPF programs that "+
			"read kernel memory through bpf_probe_read_kernel and its kin; if the jail fails to load, boot with "+
			"lockdown=integrity instead of lockdown=confidentiality (lockdown can only be raised at runtime, and a "+
			"kernel built with CONFIG_LOCK_DOWN_KERNEL_FORCE_CONFIDENTIALITY=y cannot be relaxed at all)")
	}
	return advice
}
