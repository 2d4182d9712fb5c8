package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// agent is a real coding agent as `make agents` installs it, and how to
// run it non-interactively against the scripted model server.
type agent struct {
	name string
	// bin is its command, relative to the install directory
	// (.build/agents/NAME): agent-lock picks its profile by that name.
	bin string
	// state are its saved state in the home (login, settings, sessions),
	// removed for a first run.
	state []string
	// argv is the command line for prompt. jailed says it runs under
	// agent-lock (whose profile may add what the agent needs there).
	argv func(bin, prompt, url string, jailed bool) []string
	// env points the agent at the server, with a fake API key.
	env func(url string) []string
	// config are settings files (home-relative) the user wrote before
	// the first run, kept in every session: how they chose to log in.
	config map[string]string
}

var agents = []agent{
	{
		name: "claude", bin: "node_modules/@anthropic-ai/claude-code/bin/claude.exe",
		state: []string{".claude", ".claude.json", ".claude.json.backup"},
		argv: func(bin, prompt, _ string, _ bool) []string {
			return []string{bin, "-p", prompt, "--dangerously-skip-permissions"}
		},
		// Nonessential traffic (telemetry, error reports, the auto-updater)
		// would reach for the network, which the test machines do not have.
		env: func(url string) []string {
			return []string{"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=sk-ant-agentlock-fake",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
		},
	},
	{
		name: "codex", bin: "node_modules/.bin/codex",
		state: []string{".codex"},
		// A provider of its own (the documented model_providers table)
		// with the key from OPENAI_API_KEY and no login. Unjailed, the
		// sandbox setting agent-lock's codex profile adds is given by
		// hand: Codex's own sandbox is not what is tested.
		argv: func(bin, prompt, url string, jailed bool) []string {
			a := []string{bin, "exec", "--skip-git-repo-check",
				"-c", `model_provider="agentlock"`,
				"-c", fmt.Sprintf(`model_providers.agentlock={name="agentlock", base_url="%s/v1", env_key="OPENAI_API_KEY", wire_api="responses"}`, url),
				"-c", `check_for_update_on_startup=false`,
				// Its nonessential traffic, as Claude Code's is turned off:
				// the curated plugins' sync at start (git ls-remote to
				// github.com, api.github.com) and its metrics
				// (ab.chatgpt.com), which the cell's network refuses and
				// reports, as it would for any user who leaves them on.
				"-c", `features.plugins=false`,
				"-c", `analytics.enabled=false`,
			}
			if !jailed {
				a = append(a, "-c", `sandbox_mode="danger-full-access"`)
			}
			return append(a, prompt)
		},
		env: func(string) []string { return []string{"OPENAI_API_KEY=sk-agentlock-fake"} },
	},
	{
		name: "gemini", bin: "node_modules/.bin/gemini",
		state: []string{".gemini"},
		// --skip-trust: a folder Gemini CLI has not been told to trust
		// gets no --yolo (its tools would wait for approval).
		argv: func(bin, prompt, _ string, _ bool) []string {
			return []string{bin, "-p", prompt, "--yolo", "--skip-trust"}
		},
		env: func(url string) []string {
			return []string{"GOOGLE_GEMINI_BASE_URL=" + url, "GEMINI_API_KEY=agentlock-fake-key"}
		},
		// With a base URL in its environment Gemini CLI takes the
		// "gateway" login, which -p refuses ("Invalid auth method
		// selected"): the API-key login is chosen in its settings, as its
		// first interactive run would have saved it. Usage statistics and
		// updates would reach for the network.
		config: map[string]string{".gemini/settings.json": `{
  "security": {"auth": {"selectedType": "gemini-api-key"}},
  "privacy": {"usageStatisticsEnabled": false},
  "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false}
}
`},
	},
}

// installDir is where `make agents` put the agent: .build/agents/NAME of
// the repository, its real path.
func installDir(repo string, a agent) (string, error) {
	name := a.name
	if name == "claude" {
		name = "claude-code"
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(repo, ".build/agents", name))
	if err != nil {
		return "", fmt.Errorf("%s is not installed (make agents): %w", a.name, err)
	}
	if _, err := os.Stat(filepath.Join(dir, a.bin)); err != nil {
		return "", fmt.Errorf("%s is not installed (make agents): %w", a.name, err)
	}
	return dir, nil
}
