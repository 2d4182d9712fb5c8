package kernel

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// mount is one line of /proc/self/mountinfo, reduced to what we use.
type mount struct {
	point  string
	fstype string
}

// parseMountinfo parses /proc/PID/mountinfo (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)
//
// The optional fields (7) end at the "-" separator, so the filesystem type is
// the field after it, not a fixed column.
func parseMountinfo(data []byte) ([]mount, error) {
	var mounts []mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.Fields(line)
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 7 || sep < 0 || sep+1 >= len(fields) {
			return nil, fmt.Errorf("mountinfo line %d: malformed: %q", n, line)
		}
		mounts = append(mounts, mount{point: UnescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return mounts, sc.Err()
}

// UnescapeMount undoes the kernel's escaping of space, tab, newline and
// backslash in mountinfo's paths (\040, \011, \012, \134).
func UnescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// visible returns the mounts that are not hidden by a later mount on the
// same point: mountinfo lists mounts in the order they were made, and only
// the last one at a path is what a lookup of that path reaches.
func visible(mounts []mount) []mount {
	last := make(map[string]int, len(mounts))
	for i, m := range mounts {
		last[m.point] = i
	}
	var vis []mount
	for i, m := range mounts {
		if last[m.point] == i {
			vis = append(vis, m)
		}
	}
	return vis
}

// cgroup2Mount picks the cgroup2 mount point: /sys/fs/cgroup when it is
// cgroup2 (the unified layout), otherwise the first cgroup2 mount (the hybrid
// layout puts it at /sys/fs/cgroup/unified); "" when there is none.
func cgroup2Mount(mounts []mount) string {
	first := ""
	for _, m := range visible(mounts) {
		if m.fstype != "cgroup2" {
			continue
		}
		if m.point == "/sys/fs/cgroup" {
			return m.point
		}
		if first == "" {
			first = m.point
		}
	}
	return first
}

// fsMount returns where fstype is mounted, "" if nowhere.
func fsMount(mounts []mount, fstype string) string {
	for _, m := range visible(mounts) {
		if m.fstype == fstype {
			return m.point
		}
	}
	return ""
}

// parseLSMList parses /sys/kernel/security/lsm ("capability,landlock,bpf",
// no trailing newline) or an lsm= value.
func parseLSMList(s string) []string {
	var lsms []string
	for l := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		if l = strings.TrimSpace(l); l != "" {
			lsms = append(lsms, l)
		}
	}
	return lsms
}

// parseLockdown returns the bracketed (active) mode of
// /sys/kernel/security/lockdown ("none [integrity] confidentiality"), or
// LockdownUnknown.
func parseLockdown(s string) string {
	for f := range strings.FieldsSeq(s) {
		if len(f) > 2 && f[0] == '[' && f[len(f)-1] == ']' {
			switch mode := f[1 : len(f)-1]; mode {
			case LockdownNone, LockdownIntegrity, LockdownConfidentiality:
				return mode
			}
		}
	}
	return LockdownUnknown
}

// cmdlineParam returns the value of the last name= parameter on a kernel
// command line, as the kernel's parser would see it: double quotes group
// words and are removed, and "--" ends the kernel's parameters (what follows
// belongs to init).
func cmdlineParam(cmdline, name string) (string, bool) {
	var value string
	found := false
	for _, arg := range splitCmdline(cmdline) {
		if arg == "--" {
			break
		}
		if v, ok := strings.CutPrefix(arg, name+"="); ok {
			value, found = v, true
		}
	}
	return value, found
}

func splitCmdline(s string) []string {
	var args []string
	var cur strings.Builder
	inArg, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			quoted = !quoted
			inArg = true
		case !quoted && (c == ' ' || c == '\t' || c == '\n'):
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args
}

// kconfigString returns the value of a string option (CONFIG_LSM="a,b") in a
// kernel .config.
func kconfigString(config []byte, option string) (string, bool) {
	prefix := option + "="
	sc := bufio.NewScanner(bytes.NewReader(config))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		if u, err := strconv.Unquote(v); err == nil {
			return u, true
		}
		return v, true
	}
	return "", false
}

// parseRelease returns the major and minor version of a uname release
// ("6.1.0-18-amd64", "5.15.0-1053-azure", "6.18.44-fc-v1045").
func parseRelease(release string) (major, minor int, ok bool) {
	ma, rest, found := strings.Cut(release, ".")
	if !found {
		return 0, 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	major, err1 := strconv.Atoi(ma)
	minor, err2 := strconv.Atoi(rest[:end])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return major, minor, true
}
