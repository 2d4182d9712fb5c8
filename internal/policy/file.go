package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/agent-lock/agent-lock/internal/netpolicy"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// File is a policy file: the command line's settings, written down. The
// user's own is HomeFile; a project's is PolicyFile in DIR.
//
//	engine = "auto"                 # auto, bpf-lsm, landlock
//	profiles = ["claude"]           # or ["none"]
//	allow = ["~/reference"]         # read-only grants
//	allow-write = ["~/.cache/tool"] # read-write grants
//	deny = ["~/work/secrets"]       # refused even inside grants and DIR
//	unprotect = [".vscode"]         # protected entries of DIR to lift
//	allow-unix = ["/run/user/1000/ssh.sock"]
//	env = ["GITHUB_TOKEN"]          # secret-looking variables to pass
//	allow-net = ["github.com", "localhost:5432"] # hosts the agent may reach
//	net = "off"                     # off, open, or grants (the default)
//	pane-key = "ctrl+g"             # the user's file only: see --pane-key
//
//	[[trusted]]                     # the user's file only: see Trust
//	project = "/home/me/src/app"
//	sha256 = "9f86d0…"              # of that project's .agent-lock.toml
type File struct {
	Path       string   `toml:"-"`
	Engine     string   `toml:"engine"`
	Profiles   []string `toml:"profiles"`
	Allow      []string `toml:"allow"`
	AllowWrite []string `toml:"allow-write"`
	Deny       []string `toml:"deny"`
	// DenyPatterns are the deny entries that are name patterns ("*.pem").
	DenyPatterns []string `toml:"-"`
	Unprotect    []string `toml:"unprotect"`
	AllowUnix    []string `toml:"allow-unix"`
	Env          []string `toml:"env"`
	// Net is the network's mode (netpolicy.ParseMode); AllowNet the
	// hosts granted, read into NetRules.
	Net string `toml:"net"`
	// PaneKey is the key that flips between the agent's pane and the
	// dashboard (--pane-key): the user's file only.
	PaneKey  string           `toml:"pane-key"`
	AllowNet []string         `toml:"allow-net"`
	NetRules []netpolicy.Rule `toml:"-"`
	// Trusted are projects whose own policy file may widen the cell, as
	// it was when the user trusted it (agent-lock trust). Without it a
	// project's file (which came with the repository, from whoever wrote
	// it, and which an agent in an earlier session may have changed) may
	// only narrow: deny.
	Trusted []Trust `toml:"trusted"`
	// TrustedProjects is the old form, trust by path: an error now.
	TrustedProjects []string `toml:"trusted-projects"`

	text string
	// Sum is the SHA-256 of the file's bytes, hex: what trust is given to.
	Sum string `toml:"-"`
}

// Trust is the user's trust in one project's policy file: its content, by
// hash, not its path (a path trusted once would trust whatever is written
// there later).
type Trust struct {
	Project string `toml:"project"`
	SHA256  string `toml:"sha256"`
}

// TrustedDir is where agent-lock trust keeps a copy of each file it
// trusts, below the home, named by hash: to say what changed since.
const TrustedDir = ".config/agent-lock/trusted"

// HomeFile is the user's policy file, below their home.
const HomeFile = ".config/agent-lock/policy.toml"

// FileError points at what is wrong in a policy file.
type FileError struct {
	Path string
	Line int // 0 when unknown
	Key  string
	Msg  string
}

func (e *FileError) Error() string {
	where := e.Path
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.Path, e.Line)
	}
	if e.Key != "" {
		return fmt.Sprintf("%s: %s: %s", where, e.Key, e.Msg)
	}
	return fmt.Sprintf("%s: %s", where, e.Msg)
}

// MaxFileSize bounds a policy file: settings, not data.
const MaxFileSize = 1 << 20

// LoadFile reads a policy file; a file that does not exist is nil, nil.
// See Parse.
func LoadFile(path, home, base string) (*File, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &FileError{Path: path, Msg: err.Error()}
	}
	return Parse(path, b, home, base)
}

// Parse reads the policy file at path whose bytes are b (read by the
// caller, as whom it reads for). Paths in it are expanded: ~/ against
// home, relative ones against base (the project directory for a project's
// file; the user's file must name absolute or ~/ paths). Every grant and
// denial must exist.
func Parse(path string, b []byte, home, base string) (*File, error) {
	sum := sha256.Sum256(b)
	f := &File{Path: path, text: string(b), Sum: hex.EncodeToString(sum[:])}
	md, err := toml.Decode(f.text, f)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &FileError{Path: path, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
		}
		// Type mismatches say "toml: line N (last key "k"): ...".
		msg := err.Error()
		line := 0
		if m := regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`).FindStringSubmatch(msg); m != nil {
			fmt.Sscan(m[1], &line)
			return nil, &FileError{Path: path, Line: line, Key: m[2], Msg: m[3]}
		}
		return nil, &FileError{Path: path, Msg: strings.TrimPrefix(msg, "toml: ")}
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0].String()
		return nil, &FileError{Path: path, Line: f.keyLine(k), Key: k,
			Msg: "unknown key; the keys are engine, profiles, allow, allow-write, deny, unprotect, allow-unix, env, allow-net, net, pane-key, and [[trusted]] tables"}
	}
	if len(f.TrustedProjects) > 0 {
		return nil, &FileError{Path: path, Line: f.keyLine("trusted-projects"), Key: "trusted-projects",
			Msg: "trust is now given to a project's policy file as it is, not to its path (a path trusted once would trust " +
				"whatever is written there later, by an agent too): remove this key and run `agent-lock trust DIR` for each project"}
	}
	for i, t := range f.Trusted {
		if len(t.SHA256) != 64 || strings.Trim(t.SHA256, "0123456789abcdef") != "" {
			return nil, &FileError{Path: path, Line: f.valueLine("sha256", t.SHA256), Key: "trusted.sha256",
				Msg: fmt.Sprintf("%q: not a SHA-256 in hex; run `agent-lock trust DIR` to write the entry", t.SHA256)}
		}
		p, err := expand(t.Project, home, "")
		if err != nil {
			return nil, &FileError{Path: path, Line: f.valueLine("project", t.Project), Key: "trusted.project", Msg: fmt.Sprintf("%q: %v", t.Project, err)}
		}
		f.Trusted[i].Project = p
	}
	switch f.Engine {
	case "", "auto", "bpf-lsm", "landlock":
	default:
		return nil, &FileError{Path: path, Line: f.keyLine("engine"), Key: "engine", Msg: fmt.Sprintf("%q: use auto, bpf-lsm or landlock", f.Engine)}
	}
	var paths []string
	for _, d := range f.Deny {
		if !strings.ContainsAny(d, "*?[") {
			paths = append(paths, d)
			continue
		}
		if err := spec.CheckPattern(d); err != nil {
			return nil, &FileError{Path: path, Line: f.valueLine("deny", d), Key: "deny", Msg: err.Error()}
		}
		f.DenyPatterns = append(f.DenyPatterns, d)
	}
	f.Deny = paths
	for _, l := range []struct {
		key  string
		list []string
	}{{"allow", f.Allow}, {"allow-write", f.AllowWrite}, {"deny", f.Deny}, {"allow-unix", f.AllowUnix}} {
		for i, p := range l.list {
			if strings.ContainsAny(p, "*?[") {
				return nil, &FileError{Path: path, Line: f.valueLine(l.key, p), Key: l.key, Msg: fmt.Sprintf("%q: a pattern is for deny only; name an existing file or folder", p)}
			}
			abs, err := expand(p, home, base)
			if err == nil {
				_, err = os.Stat(abs)
			}
			if err != nil {
				return nil, &FileError{Path: path, Line: f.valueLine(l.key, p), Key: l.key, Msg: fmt.Sprintf("%q: %v", p, err)}
			}
			l.list[i] = abs
		}
	}
	if _, err := netpolicy.ParseMode(f.Net); err != nil {
		return nil, &FileError{Path: path, Line: f.keyLine("net"), Key: "net", Msg: err.Error()}
	}
	for _, a := range f.AllowNet {
		rs, err := netpolicy.Parse(a, "policy file "+path)
		if err != nil {
			return nil, &FileError{Path: path, Line: f.valueLine("allow-net", a), Key: "allow-net", Msg: err.Error()}
		}
		f.NetRules = append(f.NetRules, rs...)
	}
	for _, n := range f.Env {
		if n == "" || strings.ContainsAny(n, "= \x00") {
			return nil, &FileError{Path: path, Line: f.valueLine("env", n), Key: "env", Msg: fmt.Sprintf("%q: give a variable name", n)}
		}
	}
	return f, nil
}

func expand(p, home, base string) (string, error) {
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
	case filepath.IsAbs(p):
		return filepath.Clean(p), nil
	case base != "" && p != "":
		return filepath.Join(base, p), nil
	}
	return "", errors.New("give an absolute path or one starting with ~/")
}

// Widens names the first setting of f that widens the cell (a grant, a
// lifted protection, a profile, a passed variable, a weaker engine), as
// "key (line N)", or "".
func (f *File) Widens() (key string, line int) {
	for _, w := range []struct {
		key string
		set bool
	}{{"allow", len(f.Allow) > 0}, {"allow-write", len(f.AllowWrite) > 0}, {"unprotect", len(f.Unprotect) > 0},
		{"allow-unix", len(f.AllowUnix) > 0}, {"env", len(f.Env) > 0}, {"profiles", len(f.Profiles) > 0},
		{"allow-net", len(f.AllowNet) > 0}, {"net", f.Net == "open" || f.Net == "grants"},
		{"engine", f.Engine == "landlock"}, {"trusted", len(f.Trusted) > 0}} {
		if w.set {
			return w.key, f.keyLine(w.key)
		}
	}
	return "", 0
}

// TrustFor returns the user's file f's trust in the project dir: the last
// [[trusted]] entry for it (agent-lock trust appends, so a renewed trust
// is the last), or false.
func (f *File) TrustFor(dir string) (Trust, bool) {
	var found Trust
	ok := false
	for _, t := range f.Trusted {
		if r, err := filepath.EvalSymlinks(t.Project); err == nil && r == dir {
			found, ok = t, true
		}
	}
	return found, ok
}

// Changes lists the settings that differ between old and f, as
// "key: old -> new", in the keys' order.
func (f *File) Changes(old *File) []string {
	var out []string
	for _, k := range []struct {
		key      string
		was, now []string
	}{
		{"engine", []string{old.Engine}, []string{f.Engine}},
		{"profiles", old.Profiles, f.Profiles},
		{"allow", old.Allow, f.Allow},
		{"allow-write", old.AllowWrite, f.AllowWrite},
		{"deny", append(slices.Clone(old.Deny), old.DenyPatterns...), append(slices.Clone(f.Deny), f.DenyPatterns...)},
		{"unprotect", old.Unprotect, f.Unprotect},
		{"allow-unix", old.AllowUnix, f.AllowUnix},
		{"env", old.Env, f.Env},
		{"allow-net", old.AllowNet, f.AllowNet},
		{"net", []string{old.Net}, []string{f.Net}},
	} {
		if !slices.Equal(k.was, k.now) {
			out = append(out, fmt.Sprintf("%s: %q -> %q", k.key, k.was, k.now))
		}
	}
	return out
}

// keyLine finds the line where key (a top-level key, possibly dotted, or
// a [[table]]) is set, or 0.
func (f *File) keyLine(key string) int {
	last := key[strings.LastIndexByte(key, '.')+1:]
	re := regexp.MustCompile(`^\s*(\[\[\s*)?["']?` + regexp.QuoteMeta(last) + `["']?\s*(=|\]\])`)
	for i, l := range strings.Split(f.text, "\n") {
		if re.MatchString(l) {
			return i + 1
		}
	}
	return 0
}

// valueLine finds the line of value in key's list: the first line at or
// after the key that holds the value quoted (lists may span lines).
func (f *File) valueLine(key, value string) int {
	start := f.keyLine(key)
	lines := strings.Split(f.text, "\n")
	for i := max(start-1, 0); i < len(lines); i++ {
		if strings.Contains(lines[i], `"`+value+`"`) || strings.Contains(lines[i], `'`+value+`'`) {
			return i + 1
		}
	}
	return start
}

// KeyLine is the line where key is set in f, or 0: for errors that name
// a setting another package judges (pane-key).
func (f *File) KeyLine(key string) int { return f.keyLine(key) }
