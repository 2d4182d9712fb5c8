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
	switch p {
	case "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
		"/etc/sudoers", "/etc/sudoers.d":
		return true
	}
	if strings.HasPrefix(p, "/etc/sudoers.d/") {
		return true
	}
	// The kernel's paths are clean; path.Clean, which would copy one that
	// is not, is kept for those. Then one pass over the components, by
	// index: this runs for every escape of a storm.
	if !isClean(p) {
		p = path.Clean(p)
	}
	var prev string
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		c := p[start:i]
		start = i + 1
		if c == "" {
			continue // the leading slash, or "/" itself
		}
		if sensitiveDir(prev, c) {
			return true
		}
		if i == len(p) {
			return sensitiveFile(c)
		}
		prev = c
	}
	return false
}

// isClean reports whether path.Clean would leave p as it is: no empty,
// "." or ".." component, no trailing slash.
func isClean(p string) bool {
	if len(p) > 1 && p[len(p)-1] == '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if i > 0 && p[i-1] != '/' {
			continue
		}
		// p[i] begins a component.
		switch {
		case p[i] == '/' && i > 0:
			return false
		case p[i] == '.' && (i+1 == len(p) || p[i+1] == '/'):
			return false
		case p[i] == '.' && i+1 < len(p) && p[i+1] == '.' && (i+2 == len(p) || p[i+2] == '/'):
			return false
		}
	}
	return true
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
