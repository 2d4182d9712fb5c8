package session

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// TestScrubRC: assignments of secret-looking variables leave the copy (and
// the lines their quoted values run on to), named in a comment; PATH,
// aliases, functions and other variables stay as written.
func TestScrubRC(t *testing.T) {
	in := `# my setup
export PATH="$HOME/.local/bin:$PATH"
export GITHUB_TOKEN=ghp_secret1
OPENAI_API_KEY='sk-secret2'; export OPENAI_API_KEY
alias ll='ls -l'
greet() { echo hi; }
export AWS_SECRET_ACCESS_KEY="multi
line secret3"
declare -x DB_PASSWORD=secret4
EDITOR=vim
set -gx ANTHROPIC_API_KEY secret5
export THEME=dark TOKEN_LIMIT=10
alias gh='GH_TOKEN=secret6 gh'
eval "NPM_TOKEN=secret7 npm publish"
export HF_TOKEN=$(cat <<'END'
secret8
END
)
printf -v SLACK_TOKEN '%s' secret9
read -r STRIPE_SECRET_KEY <<< secret10
export AFTER=kept
`
	out, withheld := scrubRC(in)
	for _, s := range []string{"secret1", "secret2", "secret3", "secret4", "secret5", "secret6", "secret7", "secret8", "secret9", "secret10"} {
		if strings.Contains(out, s) {
			t.Errorf("%s left in the copy:\n%s", s, out)
		}
	}
	for _, keep := range []string{`export PATH="$HOME/.local/bin:$PATH"`, "alias ll='ls -l'", "greet() { echo hi; }", "EDITOR=vim", "export THEME=dark TOKEN_LIMIT=10", "# my setup", "export AFTER=kept"} {
		if !strings.Contains(out, keep+"\n") {
			t.Errorf("%q lost:\n%s", keep, out)
		}
	}
	want := []string{"GITHUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "ANTHROPIC_API_KEY", "GH_TOKEN", "NPM_TOKEN", "HF_TOKEN", "SLACK_TOKEN", "STRIPE_SECRET_KEY"}
	if !slices.Equal(withheld, want) {
		t.Errorf("withheld %v, want %v", withheld, want)
	}
	if n := strings.Count(out, "withheld from the agent"); n != len(want) {
		t.Errorf("%d comments for %d withheld:\n%s", n, len(want), out)
	}
	// The multi-line value (2 lines) and the here-document in $( ) (4) are
	// one comment each.
	if got := strings.Count(out, "\n"); got != strings.Count(in, "\n")-4 {
		t.Errorf("%d lines, want %d (each multi-line value is one comment):\n%s", got, strings.Count(in, "\n")-4, out)
	}
	if err := exec.Command("bash", "-n", "-c", out).Run(); err != nil {
		t.Errorf("the copy is not valid shell (%v):\n%s", err, out)
	}
}

// TestShellRCTrust: a shell file is copied for the agent only where
// nothing the agent may change leads to it, it is named like the shell
// file, and it is no secret: an agent of an earlier session could
// otherwise point a link at a key, and the next session's copy, the
// agent's to read, would hold it.
func TestShellRCTrust(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	home := filepath.Join(root, "home")
	proj, tmp := filepath.Join(home, "proj"), filepath.Join(root, "tmp")
	for _, d := range []string{".ssh", "dotfiles", "keys", "proj/dots", "plain", "vault/aws", "tmp"} {
		os.MkdirAll(filepath.Join(root, "home", d), 0o755)
	}
	os.MkdirAll(tmp, 0o755)
	for _, f := range []string{".ssh/id_test", "dotfiles/bashrc", "keys/id_bashrc", "proj/dots/bashrc", "plain/hm_.bashrc",
		"plain/rc.sh", "plain/.profile", "plain/bashrc.secrets", "plain/bashrc", "plain/granted", "plain/granted.bashrc",
		"vault/aws/bashrc"} {
		os.WriteFile(filepath.Join(home, f), []byte("x\n"), 0o644)
	}
	os.Symlink(filepath.Join(home, ".ssh/id_test"), filepath.Join(proj, "link"))
	os.Symlink("../proj/link", filepath.Join(home, "dotfiles/via-proj"))
	os.Symlink("proj/dots", filepath.Join(home, "dots-dir"))
	os.Symlink("vault/aws", filepath.Join(home, ".aws")) // a home secret behind a link
	os.Symlink(filepath.Join(home, "dotfiles/bashrc"), filepath.Join(tmp, "bashrc"))
	pol := policy.Policy{Dir: proj, Home: home, TmpDir: filepath.Join(root, "private-tmp")}
	// The cell's rules, less those over the test's own folder (t.TempDir
	// lies in /tmp, a scratch place), and tmp as a scratch place.
	trust := newRCTrust(pol)
	var rules []spec.Rule
	for _, r := range trust.rules {
		if !spec.Under(root, r.Path) {
			rules = append(rules, r)
		}
	}
	rules = append(rules, spec.Rule{Path: tmp, Access: spec.Scratch},
		spec.Rule{Path: filepath.Join(home, "plain/granted"), Access: spec.Write | spec.Named})
	trust.rules = rules
	for target, ok := range map[string]bool{
		"dotfiles/bashrc":      true, // a dotfiles folder outside DIR
		"plain/hm_.bashrc":     true,
		"plain/rc.sh":          false, // not named like a shell file
		"plain/.profile":       true,  // ~/.bashrc -> .profile, as ~/.bash_profile often does
		"plain/bashrc.secrets": false, // where secrets are kept out of a dotfiles repository
		"plain/bashrc/":        false, // a trailing slash past a file: ENOTDIR
		"plain/granted.bashrc": false, // a sibling of a file granted by name
		"proj/dots/bashrc":     false, // in DIR
		"dotfiles/via-proj":    false, // through a link in DIR, to a key
		"dots-dir/bashrc":      false, // through a folder link, into DIR
		".ssh/id_test":         false, // a home secret
		".aws/bashrc":          false, // one behind a link
		"keys/id_bashrc":       false, // a secret by name
		"../tmp/bashrc":        false, // through a scratch place
		"dotfiles/bashrc/../x": false, // past a file: ENOTDIR, as the kernel says
	} {
		rc := filepath.Join(home, ".bashrc")
		os.Remove(rc)
		os.Symlink(home+"/"+target, rc) // as written: a trailing slash kept
		real, links, err := resolve(rc)
		want, werr := filepath.EvalSymlinks(rc)
		if err != nil {
			if ok || werr == nil {
				t.Errorf("%s: %v (EvalSymlinks: %s, %v)", target, err, want, werr)
			}
			continue
		}
		if real != want {
			t.Errorf("%s: resolved to %s, EvalSymlinks to %s", target, real, want)
		}
		if why := trust.untrusted(real, links); (why == "") != ok {
			t.Errorf("~/.bashrc -> %s (links %v): untrusted %q, want copied %v", target, links, why, ok)
		}
	}
}

// TestScrubRCHereDocuments: a secret's statement leaves the copy with its
// here-documents and the $( ) they sit in, whatever their form, and the
// rest of the file stays, valid shell; a here-document of a line that
// assigns no secret is text, kept but for its lines that do.
func TestScrubRCHereDocuments(t *testing.T) {
	const after = "export AFTER=kept\n"
	for _, in := range []string{
		"export GITHUB_TOKEN=$(cat <<\\EOF\nsecret1\nEOF\n)\n",
		"export GITHUB_TOKEN=$(\ncat <<EOF\nsecret1\nEOF\n)\n",
		"read -r GITHUB_TOKEN <<EOF\n  EOF\nsecret1\nEOF\n",
		"read -r GITHUB_TOKEN <<EOF\n\tEOF\nsecret1\nEOF\n", // tabs end only a <<- document
		"export GITHUB_TOKEN=\"$(cat <<EOF\nsecret1\nEOF\n)\"\n",
		"export GITHUB_TOKEN=$(cat <<END-OF-TOKEN\nsecret1\nEND-OF-TOKEN\n)\n",
		"export GITHUB_TOKEN=$(cat <<-'EOF'\n\tsecret1\n\tEOF\n)\n",
		"export DB_PASSWORD='p<<ss secret1'\n",
		"export GITHUB_TOKEN=$(cat ~/.tok # (comment\n) # (another secret1\n",
		"read -r USER_NAME GITHUB_TOKEN <<< \"me secret1\"\n",
		"printf -v \"NPM_TOKEN\" '%s' secret1\n",
		"read -r -p \"tok: \" OPENAI_API_KEY\n",
	} {
		out, withheld := scrubRC(in + after)
		if strings.Contains(out, "secret1") || len(withheld) != 1 || !strings.HasSuffix(out, after) {
			t.Errorf("%q: copied as %q (withheld %v)", in, out, withheld)
		}
		if b, err := exec.Command("bash", "-n", "-c", out).CombinedOutput(); err != nil || len(b) > 0 {
			t.Errorf("%q: the copy %q is not valid shell: %v %s", in, out, err, b)
		}
	}
	in := "cat > ~/.npmrc <<EOF\nregistry=x\nNPM_TOKEN=don't\nEOF\n" + after
	out, withheld := scrubRC(in)
	if strings.Contains(out, "don't") || !strings.Contains(out, "registry=x\n") || !strings.HasSuffix(out, "EOF\n"+after) || len(withheld) != 1 {
		t.Errorf("a document of a line with no secret: %q (withheld %v)", out, withheld)
	}
}
