package report

import (
	"path"
	"testing"
)

func TestSensitive(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		// ~/.ssh, anything in it, at any depth.
		{"/home/alice/.ssh/id_rsa", true},
		{"/home/alice/.ssh/known_hosts", true},
		{"/home/alice/.ssh/config", true},
		{"/home/alice/.ssh", true},
		{"/home/alice/.ssh/", true},
		{"/root/.ssh/authorized_keys", true},
		{"/home/alice//.ssh/./x", true},
		{"/home/alice/proj/../.ssh/id_ed25519", true},
		{"/home/alice/.ssh/../proj/x", false}, // cleaned first
		{"/home/alice/", false},
		{"/", false},
		{"relative/.ssh/id", true},
		// Private key names and key-file extensions anywhere.
		{"/tmp/id_rsa", true},
		{"/srv/backup/id_ed25519", true},
		{"/x/id_ecdsa", true},
		{"/x/id_dsa", true},
		{"/x/id_ed25519_sk", true},
		{"/etc/ssl/private/server.key", true},
		{"/proj/certs/tls.pem", true},
		{"/proj/certs/TLS.PEM", true},
		{"/proj/client.p12", true},
		{"/proj/client.pfx", true},
		// Home dotfiles and directories.
		{"/home/a/.aws/credentials", true},
		{"/home/a/.aws", true},
		{"/home/a/.gnupg/private-keys-v1.d/x.key", true},
		{"/home/a/.gnupg/pubring.kbx", true},
		{"/home/a/.kube/config", true},
		{"/home/a/.docker/config.json", true},
		{"/home/a/.netrc", true},
		{"/home/a/.git-credentials", true},
		{"/home/a/.config/gh/hosts.yml", true},
		{"/home/a/.config/gh", true},
		{"/home/a/.password-store/work/db.gpg", true},
		{"/home/a/.npmrc", true},
		{"/home/a/.pypirc", true},
		{"/home/a/.config/gcloud/application_default_credentials.json", true},
		{"/home/a/.azure/msal_token_cache.json", true},
		{"/home/a/.mozilla/firefox/x.default/logins.json", true},
		{"/home/a/.config/google-chrome/Default/Cookies", true},
		{"/home/a/.config/chromium/Default/Login Data", true},
		// Anywhere.
		{"/proj/.env", true},
		{"/proj/.env.local", true},
		{"/proj/.env.production", true},
		{"/proj/secrets/credentials.json", true},
		// History.
		{"/home/a/.bash_history", true},
		{"/home/a/.zsh_history", true},
		{"/home/a/.python_history", true},
		{"/home/a/.node_repl_history", true},
		{"/home/a/.psql_history", true},
		{"/home/a/.local/share/fish/fish_history", true},
		{"/home/a/.histfile", true},
		// System.
		{"/etc/shadow", true},
		{"/etc/shadow-", true},
		{"/etc/gshadow", true},
		{"/etc/sudoers", true},
		{"/etc/sudoers.d/90-cloud-init-users", true},
		{"/etc/sudoers.d", true},

		// Tricky negatives: substrings, neighbours and look-alikes.
		{"", false},
		{"/", false},
		{".", false},
		{"/home/a/my.sshfoo", false},
		{"/home/a/.sshd/x", false},
		{"/home/a/ssh/id_rsa.pub", false},
		{"/home/a/.ssh-backup.txt", false},
		{"/home/a/.SSH/x", false},
		{"/home/a/id_rsa.pub", false},
		{"/home/a/id_rsa_notes.md", false},
		{"/proj/src/key.go", false},
		{"/proj/keyboard", false},
		{"/proj/monkey", false},
		{"/proj/.key", false},
		{"/proj/pem", false},
		{"/proj/x.pem.txt", false},
		{"/home/a/.awsome/x", false},
		{"/home/a/aws/credentials", false},
		{"/home/a/.kube/cache/discovery", false},
		{"/home/a/kube/config", false},
		{"/home/a/.docker/buildx/instances", false},
		{"/home/a/docker/config.json", false},
		{"/home/a/.config/ghostty/config", false},
		{"/home/a/.config/gcloudx", false},
		{"/home/a/gh/hosts.yml", false},
		{"/home/a/.netrc.d", false},
		{"/home/a/.npmrc-old/x", false},
		{"/proj/.envrc", false},
		{"/proj/.environment", false},
		{"/proj/env", false},
		{"/proj/.env.", false},
		{"/proj/.env.example", false},
		{"/proj/.env.sample", false},
		{"/proj/.env.template", false},
		{"/proj/.env/x", false},
		{"/proj/credentials.json.md", false},
		{"/proj/history", false},
		{"/proj/_history", false},
		{"/proj/src/history.js", false},
		{"/proj/bash_history_parser/main.go", false},
		{"/etc/shadowsocks/config.yaml", false},
		{"/etc/passwd", false},
		{"/etc/sudo.conf", false},
		{"/home/a/etc/shadow", false},
		{"/usr/share/doc/mozilla/readme", false},
		{"/home/a/.config/chromium-extra/x", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			if got := Sensitive(tt.path); got != tt.want {
				t.Errorf("Sensitive(%q) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
}

// isClean may call a clean path unclean (path.Clean then returns it as it
// is), never the other way round.
func TestIsClean(t *testing.T) {
	for _, p := range []string{"/", "/a", "/a/b", "a/b", "/.ssh/x", "/a/..b/c", "/a/.../c", "/a/b.", "/.x."} {
		if !isClean(p) {
			t.Errorf("isClean(%q) = false", p)
		}
	}
	for _, p := range []string{"//a", "/a//b", "/a/./b", "/a/../b", "/a/", "/a/.", "/a/..", "./a", "a/", "/.."} {
		if isClean(p) || path.Clean(p) == p {
			t.Errorf("isClean(%q) = %v, path.Clean gives %q", p, isClean(p), path.Clean(p))
		}
	}
}
