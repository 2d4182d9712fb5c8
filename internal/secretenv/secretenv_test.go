package secretenv

import (
	"slices"
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
