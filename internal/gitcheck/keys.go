package gitcheck

import (
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Inert are the config keys that run nothing and lead git nowhere outside
// the repository: what git init, git clone, git remote, git branch, git
// submodule and git config user.* write, and settings of format and
// presentation. Each is section.key, section.*.key (any subsection) or with
// * as the key (any key of that section). A key not listed counts as one
// that runs a command: core.fsmonitor, core.hooksPath, core.sshCommand,
// core.pager, core.editor, core.askPass, diff and merge drivers, filters,
// aliases, include and includeIf, credential helpers, gpg programs,
// remote.*.uploadpack, protocol.*.allow, http.* (a cookie file or proxy for
// the user's fetches), and whatever git adds next.
var Inert = []string{
	"core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
	"core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol",
	"core.safecrlf", "core.checkstat", "core.trustctime", "core.quotepath", "core.compression",
	"core.loosecompression", "core.bigfilethreshold", "core.sparsecheckout", "core.sparsecheckoutcone",
	"core.splitindex", "core.untrackedcache", "core.commitgraph", "core.multipackindex", "core.abbrev",
	"core.preloadindex", "core.warnambiguousrefs", "core.whitespace", "core.fsync", "core.fsyncmethod",
	"extensions.*",
	"user.name", "user.email", "user.signingkey", "user.useconfigonly",
	"author.name", "author.email", "committer.name", "committer.email",
	"init.defaultbranch",
	"remote.*.url", "remote.*.pushurl", "remote.*.fetch", "remote.*.push", "remote.*.tagopt",
	"remote.*.mirror", "remote.*.prune", "remote.*.prunetags", "remote.*.promisor",
	"remote.*.partialclonefilter", "remote.*.skipdefaultupdate", "remote.*.skipfetchall",
	"branch.*.remote", "branch.*.merge", "branch.*.rebase", "branch.*.pushremote", "branch.*.description",
	"branch.*.vscode-merge-base", "branch.*.gh-merge-base",
	"submodule.*.url", "submodule.*.active", "submodule.*.branch", "submodule.*.fetchrecursesubmodules",
	"submodule.*.ignore", "submodule.*.shallow", "submodule.active", "submodule.recurse",
	"pull.rebase", "pull.ff", "push.default", "push.autosetupremote", "push.followtags",
	"fetch.prune", "fetch.prunetags", "fetch.recursesubmodules", "fetch.writecommitgraph",
	"color.*", "color.*.*", "status.*", "log.*", "advice.*", "index.*", "pack.*", "feature.*",
	"diff.algorithm", "diff.renames", "diff.renamelimit", "diff.mnemonicprefix", "diff.noprefix",
	"diff.context", "diff.indentheuristic", "diff.colormoved", "diff.submodule", "diff.ignoresubmodules",
	"merge.conflictstyle", "merge.ff", "merge.renames", "merge.log",
	"rebase.autosquash", "rebase.autostash", "rebase.updaterefs",
	"commit.gpgsign", "commit.verbose", "commit.cleanup", "commit.status", "tag.gpgsign", "tag.sort",
	"gc.auto", "gc.autodetach", "gc.autopacklimit", "gc.pruneexpire", "gc.writecommitgraph",
	"transfer.fsckobjects", "fetch.fsckobjects", "receive.fsckobjects",
	"receive.denycurrentbranch", "receive.denynonfastforwards",
}

// inert says whether e, in git directory g, runs nothing for the user.
func (c *Checker) inert(e entry, g string) bool {
	switch e.name() {
	case "core.worktree":
		// git submodule writes it (../../../sub): a work tree that
		// stays where the repository is. Elsewhere, the user's git
		// checkout or clean there would write or remove the user's
		// files.
		w := e.value
		if !filepath.IsAbs(w) {
			w = filepath.Join(g, w)
		}
		w = filepath.Clean(w)
		for _, r := range c.roots {
			if w == r || strings.HasPrefix(w, r+"/") {
				return true
			}
		}
		return false
	}
	if e.section == "submodule" && e.key == "update" {
		// "!command" runs a command; the others are ways to update.
		switch e.value {
		case "checkout", "rebase", "merge", "none":
			return true
		}
		return false
	}
	for _, pat := range Inert {
		if match(pat, e) {
			return true
		}
	}
	return false
}

// match says whether entry e is one pattern of Inert names.
func match(pat string, e entry) bool {
	parts := strings.Split(pat, ".")
	switch len(parts) {
	case 2:
		return e.sub == "" && parts[0] == e.section && (parts[1] == "*" || parts[1] == e.key)
	case 3:
		return e.sub != "" && parts[0] == e.section && (parts[1] == "*" || parts[1] == e.sub) &&
			(parts[2] == "*" || parts[2] == e.key)
	}
	return false
}

// Opening flags: an entry itself, never what a symlink names.
const (
	pathFlags    = unix.O_PATH | unix.O_NOFOLLOW
	pathNoFollow = unix.O_NOFOLLOW
)

// credential runs a program as uid and gid, with no other group.
func credential(uid, gid uint32) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
}
