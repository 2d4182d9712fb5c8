package gitcheck

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// fixture is a project directory with repositories in it, some of whose
// files count as made by the jail (by inode, as the kernel's marks are).
type fixture struct {
	t    *testing.T
	root string
	made map[uint64]bool
}

func newFixture(t *testing.T) *fixture {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, root: root, made: map[uint64]bool{}}
}

// write writes rel (and its folders), made by the jail or not.
func (f *fixture) write(rel, content string, made bool) string {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if made {
		var st syscall.Stat_t
		syscall.Lstat(p, &st)
		f.made[st.Ino] = true
	}
	return p
}

func (f *fixture) checker(git string) *Checker {
	return &Checker{
		Made: func(file *os.File) (bool, error) {
			var st syscall.Stat_t
			if err := syscall.Fstat(int(file.Fd()), &st); err != nil {
				return false, err
			}
			return f.made[st.Ino], nil
		},
		Git: git, UID: uint32(os.Getuid()), GID: uint32(os.Getgid()),
	}
}

func gitBin(t *testing.T) string {
	g, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	return g
}

func (f *fixture) read(rel string) string {
	b, _ := os.ReadFile(filepath.Join(f.root, rel))
	return string(b)
}

func find(fs []Finding, rel string, root string) *Finding {
	for i := range fs {
		if fs[i].Path == filepath.Join(root, rel) {
			return &fs[i]
		}
	}
	return nil
}

const initConfig = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"

func TestConfigs(t *testing.T) {
	git := gitBin(t)
	f := newFixture(t)
	// The agent's own repository, as git init and git config left it,
	// with a command key among its keys.
	f.write("mine/.git/config", initConfig+`[user]
	name = "The \"Agent\" \\ x"
[remote "origin"]
	url = https://example.com/r.git
	fetch = +refs/heads/*:refs/remotes/origin/*
[core]
	fsmonitor = touch /tmp/pwned
[alias]
	st = !sh -c evil
[include]
	path = ../../evil.cfg
[submodule "a"]
	update = !sh evil
[submodule "b"]
	update = rebase
`, true)
	f.write("mine/.git/HEAD", "ref: refs/heads/main\n", true)
	// A clean one: untouched.
	f.write("clean/.git/config", initConfig, true)
	// The user's own, whatever it holds: never touched.
	f.write("users/.git/config", initConfig+"[core]\n\tpager = delta\n", false)
	// core.worktree, as git submodule writes it, and one leading out.
	f.write("mine/.git/modules/sub/config", initConfig+"[core]\n\tworktree = ../../../sub\n", true)
	f.write("mine/.git/modules/sub/HEAD", "x\n", true)
	f.write("mine/.git/modules/out/config", initConfig+"[core]\n\tworktree = /home\n", true)
	f.write("mine/.git/modules/out/HEAD", "x\n", true)

	c := f.checker(git)
	got := c.Check([]string{f.root}, nil)
	if len(got) != 2 {
		t.Errorf("%d findings, want 2: %+v", len(got), got)
	}
	m := find(got, "mine/.git/config", f.root)
	if m == nil || m.Err != nil || m.Moved == "" {
		t.Fatalf("mine/.git/config: %+v", m)
	}
	for _, k := range []string{"core.fsmonitor", "alias.st", "include.path", "submodule.a.update"} {
		if !strings.Contains(m.Why, k) {
			t.Errorf("why %q does not name %s", m.Why, k)
		}
	}
	if strings.Contains(m.Why, "submodule.b.update") || strings.Contains(m.Why, "user.name") {
		t.Errorf("why %q names an inert key", m.Why)
	}
	if !strings.Contains(f.read("mine/.git/config"+Suffix), "fsmonitor") {
		t.Error("the original was not kept aside")
	}
	// Written again, the kept keys read back as they were.
	out, err := exec.Command(git, "config", "--file", filepath.Join(f.root, "mine/.git/config"), "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"core.repositoryformatversion=0", "core.filemode=true", "core.bare=false",
		"core.logallrefupdates=true", `user.name=The "Agent" \ x`, "remote.origin.url=https://example.com/r.git",
		"remote.origin.fetch=+refs/heads/*:refs/remotes/origin/*", "submodule.b.update=rebase"}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); !slices.Equal(lines, want) {
		t.Errorf("rewritten config lists\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if o := find(got, "mine/.git/modules/out/config", f.root); o == nil || !strings.Contains(o.Why, "core.worktree") {
		t.Errorf("a work tree outside the project: %+v", o)
	}
	for _, rel := range []string{"clean/.git/config", "users/.git/config", "mine/.git/modules/sub/config"} {
		if _, err := os.Stat(filepath.Join(f.root, rel+Suffix)); err == nil {
			t.Errorf("%s moved aside", rel)
		}
	}
}

func TestPointersAndHooks(t *testing.T) {
	git := gitBin(t)
	f := newFixture(t)
	// A .git file the agent made, pointing at a folder it filled as a
	// git directory, outside any .git: the kernel kept no hooks there.
	f.write("a/.git", "gitdir: ../evil\n", true)
	f.write("evil/config", initConfig, true)
	f.write("evil/hooks/pre-commit", "#!/bin/sh\n", true)
	// A submodule's, into the superproject's .git: followed, and its
	// config checked.
	f.write("sup/.git/config", initConfig, true)
	f.write("sup/sub/.git", "gitdir: ../.git/modules/sub\n", true)
	f.write("sup/.git/modules/sub/config", initConfig+"[core]\n\thooksPath = /tmp\n", true)
	f.write("sup/.git/modules/sub/HEAD", "x\n", true)
	// A linked worktree's, whose commondir leads out.
	f.write("sup/.git/worktrees/w/commondir", "../../../../evil\n", true)
	f.write("sup/.git/worktrees/w/gitdir", "/somewhere/w/.git\n", true)
	f.write("sup/.git/worktrees/v/gitdir", "/somewhere/else\n", true)
	// Hooks the jail made: a sample stays, a hook goes.
	f.write("sup/.git/hooks/pre-commit.sample", "#!/bin/sh\n", true)
	f.write("sup/.git/hooks/post-checkout", "#!/bin/sh\n", true)
	// The user's own pointer and hook: left.
	f.write("users/.git/hooks/pre-commit", "#!/bin/sh\n", false)
	f.write("users/sub/.git", "gitdir: /elsewhere\n", false)
	// A submodule's git directory the jail made a symlink, to a folder
	// with a hook: moved aside.
	if err := os.Symlink("../../../evil", filepath.Join(f.root, "sup/.git/modules/x")); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	syscall.Lstat(filepath.Join(f.root, "sup/.git/modules/x"), &st)
	f.made[st.Ino] = true
	// The user's symlink: left.
	os.Symlink("HEAD", filepath.Join(f.root, "users/.git/LINK"))

	got := f.checker(git).Check([]string{f.root}, nil)
	want := map[string]string{
		"a/.git":                         "leads out of git directories",
		"sup/.git/modules/sub/config":    "core.hookspath",
		"sup/.git/worktrees/w/commondir": "leads out of git directories",
		"sup/.git/worktrees/v/gitdir":    "names no .git file",
		"sup/.git/hooks/post-checkout":   "a hook git would run",
		"sup/.git/modules/x":             "a symlink in a git directory",
	}
	for rel, why := range want {
		fd := find(got, rel, f.root)
		if fd == nil || !strings.Contains(fd.Why, why) || fd.Moved != filepath.Join(f.root, rel)+Suffix {
			t.Errorf("%s: %+v, want moved aside for %q", rel, fd, why)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d findings, want %d: %+v", len(got), len(want), got)
	}
	for _, rel := range []string{"sup/.git/hooks/pre-commit.sample", "users/.git/hooks/pre-commit", "users/sub/.git", "sup/.git/worktrees/w/gitdir", "users/.git/LINK"} {
		if _, err := os.Lstat(filepath.Join(f.root, rel)); err != nil {
			t.Errorf("%s: %v", rel, err)
		}
	}
}

func TestReportOnlyAndNoGit(t *testing.T) {
	f := newFixture(t)
	f.write("r/.git/config", initConfig+"[core]\n\tsshCommand = evil\n", true)
	f.write("r/.git/hooks/pre-push", "#!/bin/sh\n", true)
	c := f.checker(gitBin(t))
	c.ReportOnly = true
	got := c.Check([]string{f.root}, nil)
	if len(got) != 2 {
		t.Fatalf("report only: %+v", got)
	}
	for _, fd := range got {
		if fd.Moved != "" {
			t.Errorf("report only moved %+v", fd)
		}
		if _, err := os.Stat(fd.Path); err != nil {
			t.Errorf("report only: %v", err)
		}
	}
	// With no git to read it, a config the jail made goes whole.
	got = f.checker("").Check([]string{f.root}, nil)
	if fd := find(got, "r/.git/config", f.root); fd == nil || fd.Moved == "" || !strings.Contains(fd.Why, "no git") {
		t.Errorf("no git: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(f.root, "r/.git/config")); err == nil {
		t.Error("no git: a config is left where git reads it")
	}
}

// TestTooLong: a repository whose path is too long to open by name, and a
// submodule's git directory whose is, are named (Unchecked), not left out
// as what the user cannot read is: git cannot work there, but would once
// the tree is moved higher.
func TestTooLong(t *testing.T) {
	git := gitBin(t)
	f := newFixture(t)
	f.write("sup/.git/config", initConfig, true)
	deep := testenv.Deep(t, filepath.Join(f.root, "sup"), unix.PathMax+100)
	testenv.AtDeep(t, f.root, deep, func(fd int) {
		unix.Mkdirat(fd, ".git", 0o755)
	})
	os.Mkdir(filepath.Join(f.root, "sup/.git/modules"), 0o755)
	os.Mkdir(filepath.Join(f.root, "near"), 0o755)
	mods := testenv.Deep(t, filepath.Join(f.root, "sup/.git/modules"), unix.PathMax+100)

	// A repository near the limit, whose files open: checked as any.
	near, _ := filepath.Rel(f.root, testenv.Deep(t, filepath.Join(f.root, "near"), unix.PathMax-400))
	f.write(near+"/.git/config", initConfig+"[core]\n\tfsmonitor = touch /tmp/x\n", true)
	f.write(near+"/.git/hooks/pre-commit", "#!/bin/sh\n", true)

	got := f.checker(git).Check([]string{f.root}, nil)
	var long []string
	for _, fd := range got {
		if strings.HasPrefix(fd.Path, filepath.Join(f.root, near)+"/") {
			if fd.Unchecked || fd.Moved != fd.Path+Suffix {
				t.Errorf("%s: %+v, want it moved aside (its path opens)", fd.Path[len(f.root)+len(near)+1:], fd)
			}
			continue
		}
		if !fd.Unchecked || fd.Moved != "" || !strings.Contains(fd.Why, "not checked") {
			t.Errorf("%.60s…: %+v, want it named as not checked", fd.Path, fd)
			continue
		}
		long = append(long, fd.Path)
	}
	for _, want := range []string{deep, mods} {
		n := 0
		for _, p := range long {
			if strings.HasPrefix(want, p) && len(p) >= unix.PathMax && len(filepath.Dir(p)) < unix.PathMax {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%.60s…: named %d times, want once, as its first folder past %d bytes", want[len(f.root):], n, unix.PathMax)
		}
	}
	if len(long) != 2 || len(got) != 4 {
		t.Errorf("%d named, %d found, want the deep tree and the deep module named, the near repository's config and hook moved", len(long), len(got))
	}
}

// TestTooLongInAUsableRepository: git works in a repository whose work
// tree's path is up to about 4,080 bytes, opening its files by relative
// paths past PATH_MAX, where agent-lock cannot check them. A git
// directory the jail made that holds such a file (a config.worktree
// setting core.fsmonitor, a hook) is moved aside whole; the user's holding
// one the jail made is named, and left.
func TestTooLongInAUsableRepository(t *testing.T) {
	git := gitBin(t)
	f := newFixture(t)
	os.Mkdir(filepath.Join(f.root, "agents"), 0o755)
	os.Mkdir(filepath.Join(f.root, "users"), 0o755)
	mk := func(work string, gitMade bool) {
		testenv.AtDeep(t, f.root, work, func(fd int) {
			if err := unix.Mkdirat(fd, ".git", 0o755); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			unix.Fstatat(fd, ".git", &st, unix.AT_SYMLINK_NOFOLLOW)
			f.made[st.Ino] = gitMade
			g, err := unix.Openat(fd, ".git", unix.O_PATH|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(g)
			w, err := unix.Openat(g, "config.worktree", unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			unix.Write(w, []byte("[core]\n\tfsmonitor = touch /tmp/x\n"))
			unix.Fstat(w, &st)
			unix.Close(w)
			f.made[st.Ino] = true
		})
	}
	agents := testenv.Deep(t, filepath.Join(f.root, "agents"), unix.PathMax-16)
	users := testenv.Deep(t, filepath.Join(f.root, "users"), unix.PathMax-16)
	mk(agents, true)
	mk(users, false)
	// The agent's, with a hook past the limit and nothing else: moved
	// aside whole. The user's, with nothing past it (no config.worktree,
	// though its path would be): nothing said.
	os.Mkdir(filepath.Join(f.root, "hook"), 0o755)
	os.Mkdir(filepath.Join(f.root, "plain"), 0o755)
	hook := testenv.Deep(t, filepath.Join(f.root, "hook"), unix.PathMax-16)
	plain := testenv.Deep(t, filepath.Join(f.root, "plain"), unix.PathMax-16)
	testenv.AtDeep(t, f.root, hook, func(fd int) {
		unix.Mkdirat(fd, ".git", 0o755)
		var st unix.Stat_t
		unix.Fstatat(fd, ".git", &st, unix.AT_SYMLINK_NOFOLLOW)
		f.made[st.Ino] = true
		unix.Mkdirat(fd, ".git/hooks", 0o755)
		h, err := unix.Openat(fd, ".git/hooks/pre-commit", unix.O_CREAT|unix.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		unix.Fstat(h, &st)
		unix.Close(h)
		f.made[st.Ino] = true
	})
	testenv.AtDeep(t, f.root, plain, func(fd int) { unix.Mkdirat(fd, ".git", 0o755) })
	// The name it is moved to, taken (the agent can make it): the next.
	testenv.AtDeep(t, f.root, agents, func(fd int) {
		if fd, err := unix.Openat(fd, ".git"+Suffix, unix.O_CREAT|unix.O_WRONLY, 0o644); err == nil {
			unix.Close(fd)
		}
	})
	// A repository the agent made after those, with nothing to say: left.
	f.write("zz/.git/config", initConfig, true)
	var st unix.Stat_t
	unix.Lstat(filepath.Join(f.root, "zz/.git"), &st)
	f.made[st.Ino] = true

	audit := f.checker(git)
	audit.ReportOnly = true
	for _, fd := range audit.Check([]string{f.root}, nil) {
		if fd.Moved != "" {
			t.Errorf("audit: %.60s… moved to %s", fd.Path[len(f.root):], fd.Moved)
		}
	}
	got := f.checker(git).Check([]string{f.root}, nil)
	if len(got) != 3 {
		for _, fd := range got {
			t.Logf("…%s: %s", fd.Path[max(0, len(fd.Path)-60):], fd.Why)
		}
		t.Fatalf("%d findings, want 3", len(got))
	}
	for _, fd := range got {
		switch {
		case strings.HasPrefix(fd.Path, hook):
			if fd.Path != hook+"/.git" || fd.Moved != fd.Path+Suffix {
				t.Errorf("the agent's with a hook: %.60s…: %+v, want its .git moved aside whole", fd.Path[len(f.root):], fd)
			}
		case strings.HasPrefix(fd.Path, plain):
			t.Errorf("the user's with nothing past the limit: %.60s…: %+v", fd.Path[len(f.root):], fd)
		case strings.HasPrefix(fd.Path, agents):
			if fd.Path != agents+"/.git" || fd.Moved != fd.Path+Suffix+".1" || fd.Unchecked || fd.Err != nil {
				t.Errorf("the agent's: %.60s…: %+v, want its .git moved aside whole", fd.Path[len(f.root):], fd)
			}
		case strings.HasPrefix(fd.Path, users):
			if fd.Path != users+"/.git/config.worktree" || !fd.Unchecked || fd.Moved != "" {
				t.Errorf("the user's: %.60s…: %+v, want its config.worktree named, left", fd.Path[len(f.root):], fd)
			}
		}
	}
	testenv.AtDeep(t, f.root, agents, func(fd int) {
		var st unix.Stat_t
		if unix.Fstatat(fd, ".git", &st, unix.AT_SYMLINK_NOFOLLOW) != unix.ENOENT ||
			unix.Fstatat(fd, ".git"+Suffix+".1", &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			t.Error("the agent's .git is not where it was moved")
		}
	})
}

// TestTooLongCapped: past 16 paths named, the rest are counted in one
// finding, named by the first of them.
func TestTooLongCapped(t *testing.T) {
	f := newFixture(t)
	os.Mkdir(filepath.Join(f.root, "many"), 0o755)
	base := testenv.Deep(t, filepath.Join(f.root, "many"), unix.PathMax-100)
	testenv.AtDeep(t, f.root, base, func(fd int) {
		for i := range 20 {
			unix.Mkdirat(fd, fmt.Sprintf("%02d%s", i, strings.Repeat("x", 200)), 0o755)
		}
	})
	got := f.checker(gitBin(t)).Check([]string{f.root}, nil)
	if len(got) != 17 {
		t.Fatalf("%d findings, want 16 named and one count", len(got))
	}
	last := got[16]
	if !last.Unchecked || !strings.Contains(last.Why, "this and 3 more") || !strings.HasPrefix(last.Path, base+"/16") {
		t.Errorf("the count: %.40s…%s: %q", last.Path, last.Path[len(base):len(base)+4], last.Why)
	}
}

// TestTakenNamesAndSymlinks: a .git symlink the agent made is moved aside
// (git follows it as the folder), and where the user's leads is checked; ten taken names (the agent can make
// them) do not stop a config's move, which takes a random one; a hook
// named as agent-lock names what it moves aside is not one git runs.
func TestTakenNamesAndSymlinks(t *testing.T) {
	git := gitBin(t)
	f := newFixture(t)
	f.write("evil/config", initConfig+"[core]\n\tfsmonitor = touch /tmp/x\n", true)
	os.Mkdir(filepath.Join(f.root, "sub"), 0o755)
	os.Symlink("../evil", filepath.Join(f.root, "sub/.git"))
	var st syscall.Stat_t
	syscall.Lstat(filepath.Join(f.root, "sub/.git"), &st)
	f.made[st.Ino] = true
	cfg := f.write("r/.git/config", initConfig+"[core]\n\tfsmonitor = touch /tmp/x\n", true)
	f.write("r/.git/config"+Suffix, "", false)
	for i := 1; i <= 9; i++ {
		f.write(fmt.Sprintf("r/.git/config%s.%d", Suffix, i), "", false)
	}
	f.write("r/.git/hooks/pre-commit"+Suffix+".1", "#!/bin/sh\n", true)
	// The user's own .git symlink: left, and where it leads checked (the
	// agent set core.fsmonitor in the config there).
	f.write("usergit/config", initConfig+"[core]\n\tfsmonitor = touch /tmp/x\n", true)
	f.write("usergit/HEAD", "ref: refs/heads/main\n", false)
	os.Mkdir(filepath.Join(f.root, "mine"), 0o755)
	os.Symlink("../usergit", filepath.Join(f.root, "mine/.git"))
	// One leading out of the roots, where the agent could not write (a
	// change there is the user's): not followed.
	out := t.TempDir()
	os.WriteFile(filepath.Join(out, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.WriteFile(filepath.Join(out, "config"), []byte(initConfig+"[core]\n\tfsmonitor = true\n"), 0o644)
	syscall.Lstat(filepath.Join(out, "config"), &st)
	f.made[st.Ino] = true
	os.Mkdir(filepath.Join(f.root, "away"), 0o755)
	os.Symlink(out, filepath.Join(f.root, "away/.git"))

	got := f.checker(git).Check([]string{f.root}, nil)
	if len(got) != 3 {
		t.Fatalf("%d findings, want 3: %+v", len(got), got)
	}
	if fd := find(got, "usergit/config", f.root); fd == nil || fd.Moved == "" {
		t.Errorf("the config where the user's .git symlink leads: %+v, want it moved aside", fd)
	}
	if _, err := os.Lstat(filepath.Join(f.root, "mine/.git")); err != nil {
		t.Errorf("the user's .git symlink: %v, want it left", err)
	}
	if fd := find(got, "sub/.git", f.root); fd == nil || fd.Moved != filepath.Join(f.root, "sub/.git")+Suffix {
		t.Errorf("the .git symlink: %+v, want it moved aside", fd)
	}
	fd := find(got, "r/.git/config", f.root)
	if fd == nil || !regexp.MustCompile(`config\.agent-lock\.[0-9a-f]{16}$`).MatchString(fd.Moved) {
		t.Errorf("the config: %+v, want it moved to a random name past the ten taken", fd)
	}
	if b, _ := os.ReadFile(cfg); strings.Contains(string(b), "fsmonitor") {
		t.Errorf("the config still sets fsmonitor:\n%s", b)
	}
}
