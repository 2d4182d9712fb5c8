package report

import (
	"path"
	"strings"
)

// Sensitive reports whether path names keys, credentials, tokens, shell
// history or a browser profile: the files whose reading is worth a red flag
// even among escapes.
//
// Matching is by whole path components, never substrings: /home/a/.ssh/x is
// sensitive, /home/a/my.sshfoo is not. Sensitive does not know the user's
// home directory, so the home-relative names (~/.ssh, ~/.aws, ~/.netrc, ...)
// match at any depth. Key-file extensions (.pem, .key, .p12, .pfx) match in
// any case. .env templates (.env.example, .env.sample, .env.template,
// .env.dist) are deliberately not sensitive: they are committed to
// repositories precisely because they hold no secrets.
func Sensitive(p string) bool {
	if p == "" {
		return false
	}
	p = path.Clean(p)
	switch p {
	case "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
		"/etc/sudoers", "/etc/sudoers.d":
		return true
	}
	if strings.HasPrefix(p, "/etc/sudoers.d/") {
		return true
	}
	var prev string
	for rest := p; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		if c == "" {
			continue
		}
		if sensitiveDir(prev, c) {
			return true
		}
		if rest == "" {
			return sensitiveFile(c)
		}
		prev = c
	}
	return false
}

// sensitiveDir reports whether component c, under prev, is a directory
// everything in (and the directory itself) is sensitive, or a file known by
// its directory.
func sensitiveDir(prev, c string) bool {
	switch c {
	case ".ssh", ".aws", ".gnupg", ".password-store", ".azure", ".mozilla":
		return true
	}
	switch prev {
	case ".config":
		switch c {
		case "gh", "gcloud", "google-chrome", "chromium":
			return true
		}
	case ".kube":
		return c == "config"
	case ".docker":
		return c == "config.json"
	}
	return false
}

// sensitiveFile reports whether base names a secret wherever it lives.
func sensitiveFile(base string) bool {
	switch base {
	case "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk",
		".netrc", ".git-credentials", ".npmrc", ".pypirc", "credentials.json",
		".env", ".histfile":
		return true
	}
	if rest, ok := strings.CutPrefix(base, ".env."); ok {
		switch rest {
		case "example", "sample", "template", "dist":
			return false
		}
		return rest != ""
	}
	if len(base) > len("_history") && strings.HasSuffix(base, "_history") {
		return true
	}
	for _, ext := range [...]string{".pem", ".key", ".p12", ".pfx"} {
		if len(base) > len(ext) && strings.EqualFold(base[len(base)-len(ext):], ext) {
			return true
		}
	}
	return false
}
