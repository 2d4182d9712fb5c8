// Package policy says what a cell contains: the project directory, the
// read-only system set programs need, the shared scratch places, and the
// sockets the user let through. It produces rule roots; the kernel decides.
package policy

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agent-lock/agent-lock/internal/jail"
)

// SystemRoots are read-only to the agent: what programs need to run.
var SystemRoots = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/dev"}

// ScratchRoots are shared with everyone: the agent may create files there and
// use the ones it created, nothing else.
var ScratchRoots = []string{"/tmp", "/var/tmp", "/dev/shm"}

// Policy is the input of one cell.
type Policy struct {
	Dir       string   // read-write, resolved
	TmpDir    string   // the agent's private TMPDIR, read-write
	AllowUnix []string // unix sockets the agent may connect to
}

// Rules returns the rule roots in registration order. Paths that do not exist
// on this machine are left out; the resolved targets of symlinks are used, so
// /bin on a merged-/usr system is /usr/bin.
func (p Policy) Rules() []jail.Rule {
	var rules []jail.Rule
	seen := map[string]jail.RuleFlags{}
	add := func(path string, f jail.RuleFlags) {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return
		}
		if seen[real]&f == f {
			return
		}
		seen[real] |= f
		rules = append(rules, jail.Rule{Path: real, Flags: f})
	}
	for _, r := range SystemRoots {
		add(r, jail.Read)
	}
	// A filesystem mounted below a system root (a separate /usr/local, a
	// bind-mounted /etc/resolv.conf) has its own root dentry: the walk from
	// a file in it ends there, so its root needs a rule of its own.
	for _, m := range mountsUnder(SystemRoots) {
		add(m, jail.Read)
	}
	// Symlinks in /etc that lead elsewhere (/etc/resolv.conf into /run) are
	// part of the system configuration programs read.
	for _, t := range etcLinkTargets() {
		add(t, jail.Read)
	}
	for _, r := range ScratchRoots {
		add(r, jail.Scratch)
	}
	add(p.Dir, jail.Read|jail.Write)
	if p.TmpDir != "" {
		add(p.TmpDir, jail.Read|jail.Write)
	}
	for _, s := range p.AllowUnix {
		add(s, jail.Socket)
	}
	return rules
}

func under(p, root string) bool {
	return p == root || strings.HasPrefix(p, root+"/")
}

// mountsUnder lists mount points strictly below any of roots.
func mountsUnder(roots []string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		point := strings.ReplaceAll(fields[4], `\040`, " ")
		for _, r := range roots {
			if point != r && under(point, r) {
				out = append(out, point)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

func etcLinkTargets() []string {
	ents, err := os.ReadDir("/etc")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		t, err := filepath.EvalSymlinks(filepath.Join("/etc", e.Name()))
		if err != nil || under(t, "/etc") || strings.HasPrefix(t, "/proc/") {
			continue
		}
		out = append(out, t)
	}
	return out
}
