package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/agent-lock/agent-lock/internal/jail"
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
//	trusted-projects = ["~/src/app"] # the user's file only: see Trusted
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
	// TrustedProjects are project directories whose own policy file may
	// widen the cell. Without it a project's file (which came with the
	// repository, from whoever wrote it) may only narrow: deny.
	TrustedProjects []string `toml:"trusted-projects"`

	text string
}

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

// LoadFile reads a policy file; a file that does not exist is nil, nil.
// Paths in it are expanded: ~/ against home, relative ones against base
// (the project directory for a project's file; the user's file must name
// absolute or ~/ paths). Every grant and denial must exist.
func LoadFile(path, home, base string) (*File, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &FileError{Path: path, Msg: err.Error()}
	}
	f := &File{Path: path, text: string(b)}
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
			Msg: "unknown key; the keys are engine, profiles, allow, allow-write, deny, unprotect, allow-unix, env, trusted-projects"}
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
		if err := jail.CheckPattern(d); err != nil {
			return nil, &FileError{Path: path, Line: f.valueLine("deny", d), Key: "deny", Msg: err.Error()}
		}
		f.DenyPatterns = append(f.DenyPatterns, d)
	}
	f.Deny = paths
	for _, l := range []struct {
		key  string
		list []string
	}{{"allow", f.Allow}, {"allow-write", f.AllowWrite}, {"deny", f.Deny}, {"allow-unix", f.AllowUnix}, {"trusted-projects", f.TrustedProjects}} {
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
		{"engine", f.Engine == "landlock"}, {"trusted-projects", len(f.TrustedProjects) > 0}} {
		if w.set {
			return w.key, f.keyLine(w.key)
		}
	}
	return "", 0
}

// Trusts reports whether the user's file f trusts the project dir.
func (f *File) Trusts(dir string) bool {
	for _, t := range f.TrustedProjects {
		if r, err := filepath.EvalSymlinks(t); err == nil && r == dir {
			return true
		}
	}
	return false
}

// keyLine finds the line where key (a top-level key, possibly dotted)
// is set, or 0.
func (f *File) keyLine(key string) int {
	last := key[strings.LastIndexByte(key, '.')+1:]
	re := regexp.MustCompile(`^\s*["']?` + regexp.QuoteMeta(last) + `["']?\s*=`)
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
