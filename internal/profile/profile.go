// Package profile says what each common agent needs beyond its project to
// start, log in and work: its config and state, where it is installed, its
// caches, and the API key it reads from the environment. The lists follow
// each agent's documented file layout; nothing else of the home is granted,
// and the home's secrets stay refused inside every grant (policy.HomeSecrets).
package profile

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Profile is what one agent (or toolchain) is granted.
type Profile struct {
	Name string
	// Agent is what it is for, for people.
	Agent string
	// Commands select the profile when the agent's command has one of
	// these names (its base name, or that of the file a symlink names).
	Commands []string
	// Write and Read are home-relative paths granted read-write and
	// read-only. Those that do not exist are not granted (the kernel
	// grants by identity).
	Write, Read []string
	// Files are home-relative files granted read-write by name, with
	// their siblings (cell.Named): files the agent saves by writing a
	// temporary file next to them and renaming it over them, under a lock
	// next to them, and makes on first use. Granted whether or not they
	// exist, where their folder does.
	Files []string
	// Make are the folders of Write (or Read) the agent creates, or
	// needs, on its first run. Where one is missing agent-lock makes it
	// (as the user) before the cell opens: the kernel grants by identity,
	// and a name that does not exist yet cannot be granted, so the agent
	// could never make it.
	Make []string
	// Seed is what a file of Files holds when agent-lock makes it, before
	// the cell opens, where it is missing: the Landlock engine grants by
	// identity, so the agent could not make it there (under the BPF LSM,
	// which grants it by name, it could).
	Seed map[string]string
	// Env are the variables it reads its credentials from: passed to it
	// although they look like secrets.
	Env []string
	// Uses are the toolchain profiles it runs on, granted with it.
	Uses []string
	// Args are added after the command's name when the profile is the
	// command's own: settings the agent needs to work in the cell.
	// Overrides are the agent's flags that undo them (the command line
	// wins), and Why says what happens then, and what to do.
	Args, Overrides []string
	Why             string
	// Hosts are the service hosts it talks to, as --allow-net rules: its
	// API and the hosts its login uses, from its documentation. The
	// cell's network grants them by default (netpolicy); telemetry and
	// error reporting are left out (a shared service such as sentry.io
	// would take anyone's data).
	Hosts []string
}

var node = Profile{
	Name: "node", Agent: "Node.js toolchain (npm, npx, pnpm, yarn, bun)",
	Commands: []string{"node", "nodejs", "npm", "npx", "pnpm", "yarn", "bun", "bunx"},
	Write:    []string{".npm", ".cache/node-gyp", ".cache/yarn", ".yarn", ".cache/pnpm", ".local/share/pnpm", ".bun/install/cache"},
	Make:     []string{".npm"},
	Read:     []string{".nvm", ".volta", ".fnm", ".local/share/fnm", ".npm-global", ".local/lib/node_modules", ".bun/bin", ".config/yarn"},
}

var python = Profile{
	Name: "python", Agent: "Python toolchain (pip, uv, pipx, poetry)",
	Commands: []string{"python", "python3", "pip", "pip3", "uv", "uvx", "pipx", "poetry"},
	Write:    []string{".cache/pip", ".cache/uv", ".cache/pypoetry"},
	Make:     []string{".cache/pip"},
	Read:     []string{".local/bin", ".local/lib", ".local/share/uv", ".local/pipx", ".local/share/pipx", ".pyenv", ".config/pip"},
}

var all = []Profile{
	{
		Name: "claude", Agent: "Claude Code", Commands: []string{"claude"}, Uses: []string{"node"},
		// ~/.claude: settings, credentials, sessions, todos; ~/.claude.json:
		// the login and per-project state, saved through
		// ~/.claude.json.tmp.PID.N renamed over it, under the lock
		// ~/.claude.json.lock, backed up as ~/.claude.json.backup; the
		// native installer keeps its versions under ~/.local/share/claude
		// and links ~/.local/bin/claude.
		Write: []string{".claude", ".cache/claude", ".local/share/claude", ".local/state/claude"},
		Files: []string{".claude.json"},
		// An empty JSON object: Claude Code's first run fills it in.
		Seed: map[string]string{".claude.json": "{}\n"},
		Make: []string{".claude"},
		Read: []string{".local/bin"},
		Env:  []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"},
		// The Messages API; the Claude.ai and Console logins (OAuth token
		// exchange at platform.claude.com, formerly console.anthropic.com).
		Hosts: []string{"api.anthropic.com:443", "claude.ai:443", "platform.claude.com:443", "console.anthropic.com:443"},
	},
	{
		Name: "codex", Agent: "OpenAI Codex CLI", Commands: []string{"codex"}, Uses: []string{"node"},
		// ~/.codex: config.toml, auth.json, sessions, logs. Skills it
		// reads from ~/.agents/skills too, and watches for new ones there
		// (inotify): where the folder is missing it watches the home
		// itself, which the cell refuses, so agent-lock makes it (empty)
		// and grants it read-only (a skill is instructions for later
		// sessions, not the agent's to write).
		Write: []string{".codex"},
		Read:  []string{".agents/skills"},
		Make:  []string{".codex", ".agents/skills"},
		Env:   []string{"OPENAI_API_KEY", "CODEX_API_KEY"},
		// Codex runs its commands in a sandbox of its own (bubblewrap),
		// which needs user namespaces and mounts: the cell refuses both,
		// so it would fail every command. The cell is its sandbox; its
		// documented setting for that is sandbox_mode, which -c sets over
		// ~/.codex/config.toml.
		Args:      []string{"-c", `sandbox_mode="danger-full-access"`},
		Overrides: []string{"--sandbox", "-s", "--full-auto"},
		Why: "Codex's own sandbox (bubblewrap) cannot start inside agent-lock's cell, which refuses the user namespaces and mounts it needs: " +
			"every command would fail with \"error building bubblewrap command: Permission denied\". agent-lock is its sandbox: " +
			"leave out %s, and agent-lock runs codex with -c sandbox_mode=\"danger-full-access\"",
		// The API (API-key login); the ChatGPT login and its backend.
		Hosts: []string{"api.openai.com:443", "auth.openai.com:443", "chatgpt.com:443"},
	},
	{
		Name: "gemini", Agent: "Gemini CLI", Commands: []string{"gemini"}, Uses: []string{"node"},
		// ~/.gemini: settings.json, oauth_creds.json, tmp, history.
		Write: []string{".gemini"},
		Make:  []string{".gemini"},
		Env:   []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"},
		// The Gemini API (API key); Code Assist (the Google login) and
		// its OAuth token exchange.
		Hosts: []string{"generativelanguage.googleapis.com:443", "cloudcode-pa.googleapis.com:443", "oauth2.googleapis.com:443", "accounts.google.com:443"},
	},
	{
		Name: "aider", Agent: "aider", Commands: []string{"aider"}, Uses: []string{"python"},
		// ~/.aider: caches and analytics; its settings files in the home
		// are read only (the project's own .aider* files are in DIR).
		Write: []string{".aider", ".cache/aider"},
		Make:  []string{".aider"},
		Read:  []string{".aider.conf.yml", ".aider.model.settings.yml", ".aider.model.metadata.json"},
		Env:   []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "DEEPSEEK_API_KEY", "OPENROUTER_API_KEY"},
		// The APIs of the providers whose keys it takes.
		Hosts: []string{"api.openai.com:443", "api.anthropic.com:443", "generativelanguage.googleapis.com:443", "api.deepseek.com:443", "openrouter.ai:443"},
	},
	{
		Name: "opencode", Agent: "opencode", Commands: []string{"opencode"}, Uses: []string{"node"},
		// XDG layout: config, data (auth.json, sessions), state, cache (the
		// provider packages it installs); the installer puts it in ~/.opencode.
		Write: []string{".config/opencode", ".local/share/opencode", ".local/state/opencode", ".cache/opencode"},
		Make:  []string{".config/opencode", ".local/share/opencode", ".local/state/opencode", ".cache/opencode"},
		Read:  []string{".opencode"},
		Env:   []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"},
		Hosts: []string{"api.openai.com:443", "api.anthropic.com:443", "generativelanguage.googleapis.com:443", "openrouter.ai:443"},
	},
	{
		Name: "omp", Agent: "oh-my-pi (omp)", Commands: []string{"omp"}, Uses: []string{"node"},
		// ~/.omp: its config root (PI_CONFIG_DIR), agent state and sessions;
		// it runs on Bun.
		Write: []string{".omp"},
		Make:  []string{".omp"},
		Read:  []string{".bun"},
		Env:   []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"},
		Hosts: []string{"api.openai.com:443", "api.anthropic.com:443", "generativelanguage.googleapis.com:443", "openrouter.ai:443"},
	},
	node,
	python,
}

// All returns every profile, agents first.
func All() []Profile { return slices.Clone(all) }

// Names lists the profiles' names.
func Names() []string {
	var n []string
	for _, p := range all {
		n = append(n, p.Name)
	}
	return n
}

// ByName finds a profile.
func ByName(name string) (Profile, bool) {
	for _, p := range all {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// Detect returns the profile for the agent's command (its base name, or
// the base name of what a symlink at path names: ~/.local/bin/claude
// pointing into the installer's versions), or false.
func Detect(path string) (Profile, bool) {
	names := []string{filepath.Base(path)}
	if t, err := filepath.EvalSymlinks(path); err == nil {
		names = append(names, filepath.Base(t))
		// An npm-installed CLI is a link to its package's entry script:
		// node_modules/@openai/codex/bin/codex.js.
		names = append(names, strings.TrimSuffix(filepath.Base(t), filepath.Ext(t)))
	}
	for _, p := range all {
		for _, n := range names {
			if slices.Contains(p.Commands, n) {
				return p, true
			}
		}
	}
	return Profile{}, false
}

// CommandLine is argv with the profile's Args added after the command's
// name, and a warning when argv overrides them (an Overrides flag).
func (p Profile) CommandLine(argv []string) ([]string, string) {
	if len(p.Args) == 0 || len(argv) == 0 {
		return argv, ""
	}
	for _, a := range argv[1:] {
		if a == "--" {
			break
		}
		for _, o := range p.Overrides {
			if a == o || strings.HasPrefix(a, o+"=") {
				return argv, fmt.Sprintf(p.Why, a)
			}
		}
	}
	out := append([]string{argv[0]}, p.Args...)
	return append(out, argv[1:]...), ""
}

// Grants are a set of profiles resolved against a home.
type Grants struct {
	Profiles []string // the names, including the toolchains they use
	// Write and Read are the existing absolute paths granted; Missing
	// the ones left out because they do not exist.
	Write, Read, Missing []string
	// Files are the absolute Profile.Files whose folder exists.
	Files []string
	// Unmade are the missing folders (Profile.Make) and files
	// (Profile.Seed) a run makes, when Resolve is given no Maker.
	Unmade []string
	Env    []string
	// Hosts are the profiles' service hosts (Profile.Hosts), each
	// named in From with the profile that grants it.
	Hosts []string
	// From names the profile that granted each path of Write, Read and
	// Files.
	From map[string]string
}

// Maker makes what a first run lacks, in the user's home, as the user.
type Maker struct {
	Dir  func(path string) error
	File func(path, content string) error
}

// Resolve expands names (with the toolchains they use) against home.
// An unknown name is an error that lists the known ones. With mk, the
// profiles' missing Make folders and Seed files are made first (and
// granted); without, they are listed Missing (and Unmade).
func Resolve(names []string, home string, mk *Maker) (Grants, error) {
	g := Grants{From: map[string]string{}}
	seen := map[string]bool{}
	var add func(name string) error
	add = func(name string) error {
		if seen[name] {
			return nil
		}
		p, ok := ByName(name)
		if !ok {
			return fmt.Errorf("no profile %q: the profiles are %s (agent-lock profiles lists what each grants)", name, strings.Join(Names(), ", "))
		}
		seen[name] = true
		for _, rel := range p.Make {
			abs := filepath.Join(home, rel)
			if _, err := os.Lstat(abs); err == nil {
				continue
			}
			if mk == nil {
				g.Unmade = append(g.Unmade, abs)
				continue
			}
			if err := mk.Dir(abs); err != nil {
				return fmt.Errorf("make %s for the %s profile: %w", abs, name, err)
			}
		}
		for rel, content := range p.Seed {
			abs := filepath.Join(home, rel)
			if _, err := os.Lstat(abs); err == nil {
				continue
			}
			if fi, err := os.Stat(filepath.Dir(abs)); err != nil || !fi.IsDir() {
				continue // no home to make it in: left Missing below
			}
			if mk == nil {
				g.Unmade = append(g.Unmade, abs)
				continue
			}
			if err := mk.File(abs, content); err != nil {
				return fmt.Errorf("make %s for the %s profile: %w", abs, name, err)
			}
		}
		g.Profiles = append(g.Profiles, name)
		for _, u := range p.Uses {
			if err := add(u); err != nil {
				return err
			}
		}
		for _, set := range []struct {
			rel []string
			dst *[]string
		}{{p.Write, &g.Write}, {p.Read, &g.Read}} {
			for _, rel := range set.rel {
				abs := filepath.Join(home, rel)
				if _, err := os.Lstat(abs); err != nil {
					g.Missing = append(g.Missing, abs)
					continue
				}
				*set.dst = append(*set.dst, abs)
				if _, ok := g.From[abs]; !ok {
					g.From[abs] = name
				}
			}
		}
		for _, rel := range p.Files {
			abs := filepath.Join(home, rel)
			if fi, err := os.Stat(filepath.Dir(abs)); err != nil || !fi.IsDir() {
				g.Missing = append(g.Missing, abs)
				continue
			}
			g.Files = append(g.Files, abs)
			if _, ok := g.From[abs]; !ok {
				g.From[abs] = name
			}
		}
		g.Env = append(g.Env, p.Env...)
		for _, h := range p.Hosts {
			g.Hosts = append(g.Hosts, h)
			if _, ok := g.From[h]; !ok {
				g.From[h] = name
			}
		}
		return nil
	}
	for _, n := range names {
		if err := add(n); err != nil {
			return Grants{}, err
		}
	}
	for _, s := range []*[]string{&g.Write, &g.Read, &g.Files, &g.Missing, &g.Unmade, &g.Env, &g.Hosts} {
		sort.Strings(*s)
		*s = slices.Compact(*s)
	}
	return g, nil
}
