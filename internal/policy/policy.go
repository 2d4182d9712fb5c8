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

// HomeSecrets are the places in a home that stay unreadable even inside a
// grant (--allow ~ to let an agent read its config does not hand it the
// SSH keys): keys, cloud and cluster credentials, tokens, password stores,
// browser profiles and shell histories.
var HomeSecrets = []string{
	".ssh", ".aws", ".gnupg", ".kube", ".docker/config.json", ".netrc",
	".git-credentials", ".config/gh", ".config/hub", ".password-store",
	".local/share/keyrings", ".pki", ".mozilla", ".config/google-chrome",
	".config/chromium", ".config/BraveSoftware", ".azure", ".config/gcloud",
	".terraform.d/credentials.tfrc.json", ".npmrc", ".pypirc", ".cargo/credentials.toml",
	".bash_history", ".zsh_history", ".histfile", ".python_history",
	".local/share/fish/fish_history", ".mysql_history", ".psql_history",
	".lesshst", ".node_repl_history",
}

// Policy is the input of one cell.
type Policy struct {
	Dir       string   // read-write, resolved
	TmpDir    string   // the agent's private TMPDIR, read-write
	AllowUnix []string // unix sockets the agent may connect to
	// Allow and AllowWrite are grants beyond DIR: read-only and
	// read-write trees (--allow, --allow-write).
	Allow, AllowWrite []string
	// Deny are trees refused even inside a grant (or DIR): the user's
	// secrets (Home + HomeSecrets), --deny, agent-lock's recordings.
	Deny []string
	// Home is the agent's home, whose HomeSecrets are denied.
	Home string
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
	for _, g := range p.Allow {
		add(g, jail.Read)
	}
	for _, g := range p.AllowWrite {
		add(g, jail.Read|jail.Write)
	}
	add(p.Dir, jail.Read|jail.Write)
	if p.TmpDir != "" {
		add(p.TmpDir, jail.Read|jail.Write)
	}
	for _, s := range p.AllowUnix {
		add(s, jail.Socket)
	}
	// Denials last, so a rule root that is also denied carries both flags;
	// the kernel refuses anything under a denied root, whatever grants it.
	for _, d := range p.Denied() {
		add(d, jail.Deny)
	}
	return rules
}

// Denied are the existing paths the cell refuses even inside grants:
// --deny, the home's secrets, except those DIR lies in (DIR must stay
// usable; a project inside ~/.ssh is its own business).
func (p Policy) Denied() []string {
	var out []string
	for _, d := range p.Deny {
		out = append(out, d)
	}
	if p.Home != "" {
		for _, s := range HomeSecrets {
			d := filepath.Join(p.Home, s)
			if real, err := filepath.EvalSymlinks(d); err == nil && !under(p.Dir, real) {
				out = append(out, d)
			}
		}
	}
	return out
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
