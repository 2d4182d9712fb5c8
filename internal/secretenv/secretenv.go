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

// SocketVars are the variables that point a program at unix sockets
// outside its folder: the user's ssh-agent, session bus and docker daemon,
// and the folder where the user's sessions keep theirs.
var SocketVars = []string{"SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "DOCKER_HOST", "XDG_RUNTIME_DIR"}

// Sockets splits env into what the agent gets and the names of the
// SocketVars withheld: those that point at a unix socket (or, for
// XDG_RUNTIME_DIR, a folder) that granted does not hold. granted are
// socket paths the user let through (--allow-unix); resolve compares two
// paths as the file system would (symlinks resolved). A DOCKER_HOST that
// is not unix:// (tcp://, ssh://) names no socket here and is kept.
func Sockets(env, granted []string, resolve func(string) string) (kept, withheld []string) {
	isGranted := func(p string) bool {
		r := resolve(p)
		for _, g := range granted {
			if resolve(g) == r {
				return true
			}
		}
		return false
	}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		var paths []string
		dir := false
		switch name {
		case "SSH_AUTH_SOCK":
			paths = []string{value}
		case "DOCKER_HOST":
			if p, ok := strings.CutPrefix(value, "unix://"); ok {
				paths = []string{p}
			}
		case "DBUS_SESSION_BUS_ADDRESS":
			// unix:path=/run/user/1000/bus,guid=...;unix:abstract=...
			for _, addr := range strings.Split(value, ";") {
				for _, kv := range strings.Split(strings.TrimPrefix(addr, "unix:"), ",") {
					if p, ok := strings.CutPrefix(kv, "path="); ok {
						paths = append(paths, p)
					} else if strings.HasPrefix(kv, "abstract=") || strings.HasPrefix(kv, "runtime=") || strings.HasPrefix(kv, "dir=") {
						paths = append(paths, "") // no path the user could grant
					}
				}
			}
		case "XDG_RUNTIME_DIR":
			paths, dir = []string{value}, true
		default:
			kept = append(kept, kv)
			continue
		}
		keep := len(paths) > 0 || name == "DOCKER_HOST" // DOCKER_HOST=tcp://...
		for _, p := range paths {
			if p == "" {
				keep = false
				continue
			}
			if dir {
				// The folder is passed when a socket granted lies in it.
				in := false
				for _, g := range granted {
					if r := resolve(g); strings.HasPrefix(r, resolve(p)+"/") {
						in = true
					}
				}
				keep = keep && in
				continue
			}
			keep = keep && isGranted(p)
		}
		if keep {
			kept = append(kept, kv)
		} else {
			withheld = append(withheld, name)
		}
	}
	slices.Sort(withheld)
	return kept, slices.Compact(withheld)
}
