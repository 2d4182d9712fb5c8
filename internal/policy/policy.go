// Package policy says what a cell contains: the project directory, the
// read-only system set programs need, the shared scratch places, and the
// sockets the user let through. It produces rule roots; the kernel decides.
package policy

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/agent-lock/agent-lock/internal/spec"
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

// Protected are the entries the agent may read but not create, change,
// replace or remove, because the user's own tools run them outside the
// jail, often without being asked. Git's (Git: true) are protected in every
// repository, at any depth, below DIR and every writable grant: git runs
// hooks and reads config (core.fsmonitor, core.hooksPath, ...) on `git
// status`, follows a .git file, a commondir or a linked worktree's gitdir
// to another git directory, and runs a submodule's or a nested repository's
// when the index registers it; in a repository the agent makes, it may make
// them (hooks: only samples), and agent-lock checks them when the session
// ends (session's gitcheck). The others are DIR's: direnv runs .envrc on
// cd; editors run workspace tasks; agents load their instructions,
// commands, hooks and MCP servers from the project; pre-commit and husky
// run what their files say on commit. agent-lock's own policy file is here
// too: an agent that could write it would widen its next cell.
var Protected = []spec.Protected{
	{Path: ".git", Git: true},
	{Path: ".git/hooks", Git: true},
	{Path: ".git/config", Git: true},
	{Path: ".git/config.worktree", Git: true},
	{Path: ".git/commondir", Git: true},
	{Path: ".git/gitdir", Git: true},
	{Path: ".gitmodules", Git: true},
	{Path: ".envrc"},
	{Path: ".vscode"},
	{Path: ".idea"},
	{Path: ".devcontainer"},
	{Path: ".husky"},
	{Path: ".pre-commit-config.yaml"},
	{Path: ".claude/commands"},
	{Path: ".claude/agents"},
	{Path: ".claude/hooks"},
	{Path: ".claude/settings.json"},
	{Path: ".claude/settings.local.json"},
	{Path: ".mcp.json"},
	{Path: ".codex"},
	{Path: ".gemini"},
	{Path: PolicyFile},
}

// PolicyFile is the name of agent-lock's policy file in a project.
const PolicyFile = ".agent-lock.toml"

// Unprotect returns Protected without the entries at or below each of
// paths (relative to the project directory, or absolute inside it). A path
// that names no protected entry is an error that lists them, as is one
// inside a protected entry (unprotecting part of .git/hooks is not a
// thing: unprotect .git/hooks).
func Unprotect(dir string, paths []string) ([]spec.Protected, error) {
	out := slices.Clone(Protected)
	for _, p := range paths {
		rel := p
		if filepath.IsAbs(p) {
			r, err := filepath.Rel(dir, p)
			if err != nil || r == ".." || strings.HasPrefix(r, "../") {
				return nil, fmt.Errorf("--unprotect %s: not inside the project directory %s", p, dir)
			}
			rel = r
		}
		rel = filepath.Clean(strings.TrimPrefix(rel, "./"))
		n := len(out)
		out = slices.DeleteFunc(out, func(e spec.Protected) bool { return under(e.Path, rel) })
		if len(out) < n {
			continue
		}
		for _, e := range Protected {
			if under(rel, e.Path) && e.Path != ".git" {
				return nil, fmt.Errorf("--unprotect %s: it lies inside the protected %s; unprotect %s as a whole", p, e.Path, e.Path)
			}
		}
		var names []string
		for _, e := range Protected {
			names = append(names, e.Path)
		}
		return nil, fmt.Errorf("--unprotect %s: not a protected path (or given twice); the protected paths are %s", p, strings.Join(names, " "))
	}
	return out, nil
}

// SecretPatterns are names refused inside the user's grants (--allow,
// --allow-write, a policy file's), whatever folder they are in: keys,
// certificates with their keys, keystores, dotenv files. Not inside DIR,
// where the user chooses (--deny '.env*'), nor inside a profile's grants
// (install trees carry CA bundles named *.pem that TLS needs), nor in the
// system set (/etc/ssl/certs is public).
var SecretPatterns = []string{"*.pem", "*.key", "*.p12", "*.pfx", "*.kdbx", "id_*", ".env*", ".netrc", ".pgpass"}

// Policy is the input of one cell.
type Policy struct {
	Dir       string   // read-write, resolved
	TmpDir    string   // the agent's private TMPDIR, read-write
	AllowUnix []string // unix sockets the agent may connect to
	// Allow and AllowWrite are grants beyond DIR: read-only and
	// read-write trees (--allow, --allow-write).
	Allow, AllowWrite []string
	// Files are files granted read-write by name, with their siblings
	// (spec.Named), whether or not they exist yet: a profile's
	// (~/.claude.json). A file in AllowWrite is granted the same way.
	Files []string
	// Deny are trees refused even inside a grant (or DIR): the user's
	// secrets (Home + HomeSecrets), --deny, agent-lock's recordings.
	Deny []string
	// Home is the agent's home, whose HomeSecrets are denied.
	Home string
	// Protect are the protected entries of Dir (Protected, less
	// --unprotect).
	Protect []spec.Protected
	// Profiled are the grants a profile made, by path, with its name
	// ("profile claude"); SecretPatterns do not apply below them.
	Profiled map[string]string
	// DenyPatterns are names refused in DIR and in grants (--deny
	// '*.pem'), on top of SecretPatterns.
	DenyPatterns []string
	// Private are agent-lock's own state, denied like Deny wherever they
	// are: the recordings (what watch shows), the user's policy folder
	// (what trusts a project), a report staged out of the agent's reach.
	Private []string
}

// Writable reports whether the agent could change path, or make it: it
// lies in DIR, the private TMPDIR or a read-write grant, or is a file
// granted by name or one of its siblings (NAME.*). Denials are not
// subtracted: the answer errs towards "writable". Paths are compared as
// given; resolve them first.
func (p Policy) Writable(path string) bool {
	for _, root := range append([]string{p.Dir, p.TmpDir}, p.AllowWrite...) {
		if root != "" && under(path, root) {
			return true
		}
	}
	for _, f := range p.Files {
		if under(path, f) || (filepath.Dir(path) == filepath.Dir(f) && strings.HasPrefix(filepath.Base(path), filepath.Base(f)+".")) {
			return true
		}
	}
	return false
}

// Patterns are the name patterns the kernel refuses, and where.
func (p Policy) Patterns() []spec.Pattern {
	var out []spec.Pattern
	for _, g := range SecretPatterns {
		out = append(out, spec.Pattern{Glob: g, Scope: spec.InGrants})
	}
	for _, g := range p.DenyPatterns {
		out = append(out, spec.Pattern{Glob: g, Scope: spec.InGrants | spec.InProject})
	}
	return out
}

// Rules returns the rule roots in registration order. Paths that do not exist
// on this machine are left out; the resolved targets of symlinks are used, so
// /bin on a merged-/usr system is /usr/bin.
func (p Policy) Rules() []spec.Rule {
	var rules []spec.Rule
	seen := map[string]spec.Access{}
	addRule := func(r spec.Rule) {
		real, err := RealPath(r.Path, r.Access&spec.Named != 0)
		if err != nil {
			return
		}
		// A writable root inside a git directory (--allow-write
		// ~/repo/.git/modules/x): git's names below it are git's.
		if r.Access&spec.Write != 0 && inGitDir(real) {
			r.Access |= spec.InGit
		}
		if seen[real]&r.Access == r.Access {
			return
		}
		seen[real] |= r.Access
		r.Path = real
		rules = append(rules, r)
	}
	add := func(path string, f spec.Access, name string) {
		addRule(spec.Rule{Path: path, Access: f, Name: name})
	}
	for _, r := range SystemRoots {
		add(r, spec.Read, "system "+r)
	}
	// A filesystem mounted below a system root (a separate /usr/local, a
	// bind-mounted /etc/resolv.conf) has its own root dentry: the walk from
	// a file in it ends there, so its root needs a rule of its own.
	for _, m := range mountsUnder(SystemRoots) {
		add(m, spec.Read, "system "+m)
	}
	// Symlinks in /etc that lead elsewhere (/etc/resolv.conf into /run) are
	// part of the system configuration programs read.
	for _, t := range etcLinkTargets() {
		add(t, spec.Read, "system "+t)
	}
	for _, r := range ScratchRoots {
		add(r, spec.Scratch, "scratch "+r)
	}
	grant := func(g string, f spec.Access, flag string) {
		if n, ok := p.Profiled[g]; ok {
			add(g, f, n)
		} else {
			add(g, f|spec.Grant, flag+" "+g)
		}
	}
	for _, g := range p.Allow {
		grant(g, spec.Read, "--allow")
	}
	for _, g := range p.AllowWrite {
		f := spec.Read | spec.Write
		if fi, err := os.Stat(g); err == nil && fi.Mode().IsRegular() {
			f |= spec.Named
		}
		grant(g, f, "--allow-write")
	}
	for _, g := range p.Files {
		grant(g, spec.Read|spec.Write|spec.Named, "--allow-write")
	}
	dirFlags := spec.Read | spec.Write | spec.Project
	if len(p.Protect) > 0 {
		dirFlags |= spec.Protect
	}
	add(p.Dir, dirFlags, "project directory")
	if w, ok := FindGitWorktree(p.Dir); ok {
		for _, r := range w.rules() {
			addRule(r)
		}
	}
	if p.TmpDir != "" {
		add(p.TmpDir, spec.Read|spec.Write, "private TMPDIR")
	}
	for _, s := range p.AllowUnix {
		add(s, spec.Socket, "--allow-unix "+s)
	}
	// Denials last, so a rule root that is also denied carries both flags;
	// the kernel refuses anything under a denied root, whatever grants it.
	for _, d := range p.Denied() {
		add(d.Path, spec.Deny, d.Name)
	}
	return rules
}

// RealPath resolves the symlinks of path. A file granted by name (named)
// need not exist: then its folder is resolved and its name kept.
func RealPath(path string, named bool) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil && named && errors.Is(err, fs.ErrNotExist) {
		if _, lerr := os.Lstat(path); lerr == nil {
			return "", err // a dangling symlink: its target's name is not the grant's
		}
		dir, derr := filepath.EvalSymlinks(filepath.Dir(path))
		if derr != nil {
			return "", derr
		}
		return filepath.Join(dir, filepath.Base(path)), nil
	}
	return real, err
}

// Denied are the existing paths the cell refuses even inside grants:
// --deny, the home's secrets, except those DIR lies in (DIR must stay
// usable; a project inside ~/.ssh is its own business).
func (p Policy) Denied() []Denial {
	var out []Denial
	for _, d := range p.Deny {
		out = append(out, Denial{d, "--deny " + d})
	}
	for _, d := range p.Private {
		out = append(out, Denial{d, "agent-lock's own " + d})
	}
	if p.Home != "" {
		for _, s := range HomeSecrets {
			d := filepath.Join(p.Home, s)
			if real, err := filepath.EvalSymlinks(d); err == nil && !under(p.Dir, real) {
				out = append(out, Denial{d, "home secret ~/" + s})
			}
		}
	}
	return out
}

// inGitDir says whether path lies at or below a folder named .git.
func inGitDir(path string) bool {
	return strings.HasSuffix(path, "/.git") || strings.Contains(path, "/.git/")
}

// Denial is a denied tree and the rule that denies it.
type Denial struct{ Path, Name string }

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
