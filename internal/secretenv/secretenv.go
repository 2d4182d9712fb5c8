// Package secretenv decides which environment variables are kept from the
// agent: those that look like credentials (tokens, keys, passwords, cloud
// settings), except the agent's own API key and those the user passes on
// purpose. A jailed agent cannot read ~/.aws/credentials; it must not find
// the same secret in its environment instead.
package secretenv

import (
	"slices"
	"strings"
)

// exact are names that hold secrets without saying so in a suffix.
var exact = []string{
	"DATABASE_URL", "REDIS_URL", "MONGODB_URI", "SENTRY_DSN",
	"GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN", "HF_TOKEN",
	"KUBECONFIG", "DOCKER_AUTH_CONFIG", "NETRC",
}

// prefixes are whole families of credentials and cloud settings.
var prefixes = []string{"AWS_", "AZURE_", "GOOGLE_APPLICATION_CREDENTIALS", "VAULT_", "OP_SERVICE_ACCOUNT"}

// suffixes mark a credential by its name.
var suffixes = []string{
	"_TOKEN", "_SECRET", "_KEY", "_PASSWORD", "_PASSWD", "_PASS", "_PAT",
	"_CREDENTIALS", "_API_KEY", "_ACCESS_KEY", "_PRIVATE_KEY", "_AUTH",
}

// infixes mark one inside a longer name (MY_SECRET_VALUE).
var infixes = []string{"_SECRET_", "_PASSWORD_", "_TOKEN_", "_API_KEY_", "SECRET_"}

// Secret reports whether an environment variable's name looks like a
// credential.
func Secret(name string) bool {
	n := strings.ToUpper(name)
	if slices.Contains(exact, n) {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	for _, s := range suffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	for _, s := range infixes {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// Filter splits env (KEY=VALUE entries) into what the agent gets and the
// names of the secrets withheld. keep names variables to pass even though
// they look secret (the agent's own key, --env).
func Filter(env, keep []string) (kept, withheld []string) {
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if Secret(name) && !slices.Contains(keep, name) {
			withheld = append(withheld, name)
			continue
		}
		kept = append(kept, kv)
	}
	slices.Sort(withheld)
	return kept, slices.Compact(withheld)
}
