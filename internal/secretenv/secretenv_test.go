package secretenv

import (
	"slices"
	"strings"
	"testing"
)

func TestSecret(t *testing.T) {
	for _, n := range []string{
		"GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"AWS_PROFILE", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "STRIPE_SECRET", "MY_SECRET_VALUE",
		"DB_PASSWORD", "DATABASE_URL", "AZURE_CLIENT_SECRET", "GOOGLE_APPLICATION_CREDENTIALS",
		"SSH_PRIVATE_KEY", "VAULT_TOKEN", "CI_JOB_TOKEN", "github_token", "HF_TOKEN", "GITLAB_PAT",
	} {
		if !Secret(n) {
			t.Errorf("%s is not treated as a secret", n)
		}
	}
	for _, n := range []string{
		"PATH", "HOME", "TERM", "LANG", "EDITOR", "GOPATH", "KEYBOARD", "TOKENIZERS_PARALLELISM",
		"SSH_AUTH_SOCK", "PASSAGE", "KEYMAP", "MONKEY", "NODE_OPTIONS", "TMPDIR",
	} {
		if Secret(n) {
			t.Errorf("%s is treated as a secret", n)
		}
	}
}

func TestFilter(t *testing.T) {
	env := []string{"PATH=/usr/bin", "GITHUB_TOKEN=ghp_x", "ANTHROPIC_API_KEY=sk-ant", "AWS_PROFILE=prod",
		"HOME=/home/a", "AWS_PROFILE=dup", "NPM_TOKEN=npm_x"}
	kept, withheld := Filter(env, []string{"ANTHROPIC_API_KEY", "NPM_TOKEN"})
	want := []string{"PATH=/usr/bin", "ANTHROPIC_API_KEY=sk-ant", "HOME=/home/a", "NPM_TOKEN=npm_x"}
	if !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
	if !slices.Equal(withheld, []string{"AWS_PROFILE", "GITHUB_TOKEN"}) {
		t.Errorf("withheld %v", withheld)
	}
}

// TestSockets: the variables pointing at the user's unix sockets are
// withheld unless the socket is granted; other variables, and a
// DOCKER_HOST over TCP, pass.
func TestSockets(t *testing.T) {
	env := []string{
		"PATH=/usr/bin",
		"SSH_AUTH_SOCK=/tmp/ssh-x/agent.1",
		"DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus,guid=abc",
		"DOCKER_HOST=unix:///var/run/docker.sock",
		"XDG_RUNTIME_DIR=/run/user/1000",
	}
	same := func(p string) string { return p }
	kept, withheld := Sockets(env, nil, same)
	if !slices.Equal(kept, []string{"PATH=/usr/bin"}) ||
		!slices.Equal(withheld, []string{"DBUS_SESSION_BUS_ADDRESS", "DOCKER_HOST", "SSH_AUTH_SOCK", "XDG_RUNTIME_DIR"}) {
		t.Errorf("nothing granted: kept %q, withheld %q", kept, withheld)
	}
	// Granted: the variable naming the socket, and the folder holding it.
	kept, withheld = Sockets(env, []string{"/run/user/1000/bus", "/tmp/ssh-x/agent.1"}, same)
	if !slices.Equal(withheld, []string{"DOCKER_HOST"}) || len(kept) != 4 {
		t.Errorf("bus and agent granted: kept %q, withheld %q", kept, withheld)
	}
	// Compared as the file system sees them.
	link := func(p string) string { return strings.Replace(p, "/var/run/", "/run/", 1) }
	if _, withheld = Sockets(env[3:4], []string{"/run/docker.sock"}, link); len(withheld) != 0 {
		t.Errorf("docker.sock granted through /run: withheld %q", withheld)
	}
	for _, v := range []string{"DOCKER_HOST=tcp://127.0.0.1:2375", "DOCKER_HOST=ssh://me@host"} {
		if kept, _ := Sockets([]string{v}, nil, same); len(kept) != 1 {
			t.Errorf("%s withheld", v)
		}
	}
	if _, withheld = Sockets([]string{"DBUS_SESSION_BUS_ADDRESS=unix:abstract=/tmp/dbus-x"}, []string{"/tmp/dbus-x"}, same); len(withheld) != 1 {
		t.Error("an abstract bus address is no path to grant: withheld")
	}
}
