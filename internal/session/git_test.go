package session_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// gitInitScript starts a repository at DIR's top and works in it, tries a
// hook, then makes a nested repository with core.fsmonitor set and
// registers it in DIR's index: the user's next git status in DIR would run
// that command.
const gitInitScript = `export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b GIT_CONFIG_NOSYSTEM=1
git init -q -b main && echo x > f && git add f && git commit -qm one && echo init-ok
git config user.name agent && git checkout -qb topic && git checkout -q main && git log --oneline | grep -q one && echo work-ok
(echo 'exit 0' > .git/hooks/pre-commit) 2>/dev/null && echo hook-written
git init -q sub && git -C sub commit -q --allow-empty -m s && git -C sub config core.fsmonitor "touch $MARK" &&
git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub && git commit -qm sub && echo registered
true`

// TestGitInit: under the BPF LSM an agent starts a repository at DIR's top
// (git init, commits, its own config, a branch) with no refusal, and a
// hook it plants there is refused and reported; the nested repository it
// registers keeps its core.fsmonitor only until the session ends, when
// agent-lock moves that config aside (a plant record), so the user's git
// status in DIR, run as the user after the session, runs nothing.
// Unjailed, the same script makes git status run it: the test is real.
// Under the Landlock engine git init works, and the hook is written; both
// repositories are the agent's (there were none at the start), so when the
// session ends the hook and the nested config are moved aside (plant
// records) and the user's git status runs nothing there either. Runs in
// the test VMs with both engines, and natively with the Landlock engine.
func TestGitInit(t *testing.T) {
	testenv.NeedVM(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("the test machines have git")
	}
	bin := testenv.AgentLockBin(t)
	root, _ := testenv.ProjectDir(t, 4242)
	marks := filepath.Join(root, "marks")
	os.Mkdir(marks, 0o777)
	os.Chmod(marks, 0o777)
	fresh := func(name string) (dir, mark string) {
		t.Helper()
		dir = filepath.Join(root, name)
		os.Mkdir(dir, 0o755)
		os.Chown(dir, 4242, 4242)
		return dir, filepath.Join(marks, name)
	}
	// userStatus runs git status in dir as the user, outside any jail.
	userStatus := func(dir string) {
		t.Helper()
		cmd := exec.Command("git", "status", "--short")
		cmd.Dir = dir
		cmd.Env = []string{"HOME=/nonexistent", "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the user's git status: %v\n%s", err, out)
		}
	}
	ran := func(mark string) bool { _, err := os.Stat(mark); return err == nil }

	dir, mark := fresh("unjailed")
	cmd := exec.Command("/bin/sh", "-c", gitInitScript)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=/nonexistent", "PATH=/usr/bin:/bin", "MARK=" + mark}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	out, err := cmd.CombinedOutput()
	for _, w := range []string{"init-ok", "work-ok", "hook-written", "registered"} {
		if err != nil || !strings.Contains(string(out), w) {
			t.Fatalf("unjailed, %s is missing (%v), so the test would prove nothing:\n%s", w, err, out)
		}
	}
	userStatus(dir)
	if !ran(mark) {
		t.Fatal("unjailed, the user's git status did not run the nested repository's fsmonitor: the test would prove nothing")
	}

	engines := []string{"bpf-lsm", "landlock"}
	if err := exec.Command(bin, "doctor", "--engine", "bpf-lsm").Run(); err != nil {
		engines = []string{"landlock"}
	}
	for _, engine := range engines {
		dir, mark := fresh(engine)
		rep := testenv.ReportPath(t, 4242)
		cmd := exec.Command(bin, "--engine", engine, "--headless", "--report", rep, dir, "--", "/bin/sh", "-c", gitInitScript)
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin", "MARK="+mark)
		b, err := cmd.CombinedOutput()
		out := string(b)
		if err != nil {
			t.Fatalf("%s: agent-lock: %v\n%s", engine, err, out)
		}
		for _, w := range []string{"init-ok", "work-ok", "registered"} {
			if !strings.Contains(out, w) {
				t.Errorf("%s: %s missing: git's ordinary work failed:\n%s", engine, w, out)
			}
		}
		var escapes []report.Event
		f, _ := os.Open(rep)
		report.Read(f, func(r report.Record) error {
			if r.Event != nil {
				escapes = append(escapes, *r.Event)
			}
			return nil
		})
		f.Close()
		userStatus(dir)
		hook := filepath.Join(dir, ".git/hooks/pre-commit")
		config := filepath.Join(dir, "sub/.git/config")
		if engine == "landlock" {
			// Both repositories are the agent's (there were none at the
			// start): the tripwire leaves their files to it, and what
			// would run a command is moved aside when the session ends.
			if !strings.Contains(out, "hook-written") {
				t.Errorf("landlock: the hook was not written (Landlock grants DIR whole):\n%s", out)
			}
			if ran(mark) {
				t.Errorf("landlock: the user's git status ran the nested repository's fsmonitor")
			}
			planted := map[string]bool{}
			for _, e := range escapes {
				if (e.Path == hook || e.Path == config) && e.Op == "plant" && e.Path2 == e.Path+".agent-lock" {
					planted[e.Path] = true
				} else {
					t.Errorf("landlock: a report other than the hook's and the config's plant (a refusal of ordinary work): %+v", e)
				}
			}
			if _, err := os.Lstat(hook); !planted[hook] || err == nil {
				t.Errorf("landlock: the hook at DIR's top, planted %v, still there %v: %+v", planted[hook], err == nil, escapes)
			}
			if b, err := os.ReadFile(config); !planted[config] || err != nil || strings.Contains(string(b), "fsmonitor") {
				t.Errorf("landlock: the nested config, planted %v, written again: %v\n%s", planted[config], err, b)
			}
			continue
		}
		if strings.Contains(out, "hook-written") {
			t.Errorf("bpf-lsm: the hook was written:\n%s", out)
		}
		if ran(mark) {
			t.Error("bpf-lsm: the user's git status ran the fsmonitor the agent set")
		}
		var hookRefused, planted bool
		for _, e := range escapes {
			switch {
			case e.Path == hook && e.Verdict == report.Blocked && e.Rule == "protected .git/hooks":
				hookRefused = true
			case e.Path == config && e.Op == "plant" && e.Verdict == report.Blocked &&
				strings.Contains(e.Rule, "core.fsmonitor") && e.Path2 == config+".agent-lock":
				planted = true
			default:
				t.Errorf("bpf-lsm: a report beyond the hook and the plant (a refusal of ordinary work): %+v", e)
			}
		}
		if !hookRefused || !planted {
			t.Errorf("bpf-lsm: hook refused %v, fsmonitor reported %v: %+v", hookRefused, planted, escapes)
		}
		if b, err := os.ReadFile(config); err != nil || strings.Contains(string(b), "fsmonitor") || !strings.Contains(string(b), "repositoryformatversion") {
			t.Errorf("bpf-lsm: the nested config, written again: %v\n%s", err, b)
		}
		if !strings.Contains(out, "moved to "+config+".agent-lock") {
			t.Errorf("bpf-lsm: agent-lock did not say what it moved:\n%s", out)
		}
	}
}

// deepRepoScript makes a repository with core.fsmonitor set, and moves it
// into a chain of folders whose path is past what the kernel opens by
// name (git init cannot run there), where no walk by name finds it. The
// chain is made by Python, which enters each folder by name and never asks
// for the path it is in: a shell's cd asks getcwd, whose fallback past
// PATH_MAX reads the folders above DIR (a real reach, refused).
const deepRepoScript = `export GIT_CONFIG_NOSYSTEM=1
git init -q r && git -C r config core.fsmonitor "touch $MARK" || exit 1
python3 -c '
import os
top = os.environ["TOP"]
for i in range(18):
    os.mkdir("0" * 240)
    os.chdir("0" * 240)
os.rename(top + "/r", "r")
print("moved")
'`

// edgeChain enters (or makes, with MAKE set) the folders whose path is
// 4,078 bytes, from TOP: a repository r there has a work tree of 4,080
// bytes, where git works, and a .git/config.worktree of 4,101, which git
// opens by a relative path and agent-lock cannot by its own.
const edgeChain = `
import os, subprocess
n = len(os.environ["TOP"])
while n < 4078:
    k = 200 if 4078 - n - 1 > 255 else 4078 - n - 1
    if os.environ.get("MAKE"):
        os.mkdir("0" * k)
    os.chdir("0" * k)
    n += k + 1
`

// edgeRepoScript makes a repository whose config.worktree sets
// core.fsmonitor and moves it to the edge (edgeChain).
const edgeRepoScript = `export GIT_CONFIG_NOSYSTEM=1
git init -q r && git -C r config extensions.worktreeConfig true && git -C r config --worktree core.fsmonitor "touch $MARK" || exit 1
MAKE=1 python3 -c '` + edgeChain + `
os.rename(os.environ["TOP"] + "/r", "r")
print("moved")
'`

// unlistedRepoScript makes DIR a repository that registers a nested one,
// with core.fsmonitor set, as a submodule, and takes away the reading of
// the folder that holds it: git enters it by name, a walk cannot list it.
const unlistedRepoScript = `export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b
git init -q -b main && git commit -q --allow-empty -m top && mkdir a &&
git init -q a/b && git -C a/b commit -q --allow-empty -m b && git -C a/b config core.fsmonitor "touch $MARK" &&
git update-index --add --cacheinfo 160000,$(git -C a/b rev-parse HEAD),a/b && git commit -qm sub &&
chmod 311 a && echo moved`

// TestGitTooDeep: agent-lock checks git's files by their paths, which the
// kernel opens up to 4,095 bytes. A repository the agent leaves past that
// (deep) cannot be looked into by agent-lock or by git: when the session
// ends agent-lock names it (a plant record, "not checked", a warning)
// rather than leaving it out as it leaves out what the user may not read.
// One whose work tree is at 4,080 bytes (edge) git works in, reading a
// config.worktree past the limit: the session moves its .git aside whole.
// A folder the agent made and took the reading of, holding a repository
// registered in DIR's index (unlisted), is moved aside whole. Unjailed,
// the deep repository moved higher, and the others where they are, make
// the user's git status run their fsmonitor: the test is real.
// Both engines, in the test VMs; the Landlock engine natively.
func TestGitTooDeep(t *testing.T) {
	testenv.NeedVM(t)
	bin := testenv.AgentLockBin(t)
	root, _ := testenv.ProjectDir(t, 4242)
	marks := filepath.Join(root, "marks")
	os.Mkdir(marks, 0o777)
	os.Chmod(marks, 0o777)
	asUser := func(dir, script string, env ...string) (string, error) {
		cmd := exec.Command("/bin/bash", "-c", script)
		cmd.Dir = dir
		cmd.Env = append([]string{"HOME=/nonexistent", "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "TOP=" + dir}, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	fresh := func(name string) string {
		dir := filepath.Join(root, name)
		os.Mkdir(dir, 0o755)
		os.Chown(dir, 4242, 4242)
		return dir
	}
	ran := func(mark string) bool { _, err := os.Stat(mark); return err == nil }
	// The user's git status: in the edge repository where it is; the deep
	// one the user moves higher first.
	status := map[string]string{
		"deep": `python3 -c '
import os
for i in range(18):
    os.chdir("0" * 240)
os.rename("r", os.environ["TOP"] + "/up")
' && cd up && git status --short`,
		"edge": `python3 -c '` + edgeChain + `
os.chdir("r")
subprocess.run(["git", "status", "--short"])
'`,
		"unlisted": `git status --short`,
	}
	scripts := map[string]string{"deep": deepRepoScript, "edge": edgeRepoScript, "unlisted": unlistedRepoScript}
	engines := []string{"bpf-lsm", "landlock", "landlock-alone"}
	if err := exec.Command(bin, "doctor", "--engine", "bpf-lsm").Run(); err != nil {
		engines = engines[1:]
	}
	for _, c := range []string{"deep", "edge", "unlisted"} {
		dir := fresh(c + "-unjailed")
		mark := filepath.Join(marks, c+"-unjailed")
		if out, err := asUser(dir, scripts[c], "MARK="+mark); err != nil || !strings.Contains(out, "moved") {
			t.Fatalf("%s, unjailed: the repository was not made (%v), so the test would prove nothing:\n%s", c, err, out)
		}
		if out, err := asUser(dir, status[c]); err != nil || !ran(mark) {
			t.Fatalf("%s, unjailed: the user's git status ran nothing (%v), so the test would prove nothing:\n%s", c, err, out)
		}

		for _, engine := range engines {
			dir := fresh(c + "-" + engine)
			mark := filepath.Join(marks, c+"-"+engine)
			rep := testenv.ReportPath(t, 4242)
			cmd := exec.Command(bin, "--engine", engine, "--headless", "--report", rep, dir, "--", "/bin/bash", "-c", scripts[c])
			cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin", "MARK="+mark, "TOP="+dir)
			if engine == "landlock-alone" {
				// The user's own session: no root to list with.
				cmd = exec.Command("setpriv", append([]string{"--reuid=4242", "--regid=4242", "--clear-groups", bin, "--engine", "landlock"}, cmd.Args[3:]...)...)
				cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + root, "MARK=" + mark, "TOP=" + dir}
			}
			b, err := cmd.CombinedOutput()
			out := string(b)
			if err != nil || !strings.Contains(out, "moved") {
				t.Fatalf("%s, %s: agent-lock: %v\n%s", c, engine, err, out)
			}
			var found []report.Event
			f, _ := os.Open(rep)
			report.Read(f, func(r report.Record) error {
				if e := r.Event; e != nil {
					if e.Op == "plant" && strings.HasPrefix(e.Path, dir+"/") {
						found = append(found, *e)
					} else {
						t.Errorf("%s, %s: a report other than the repository's (a refusal of ordinary work): %+v", c, engine, e)
					}
				}
				return nil
			})
			f.Close()
			if len(found) != 1 {
				t.Fatalf("%s, %s: %d plant records, want one:\n%s", c, engine, len(found), out)
			}
			e := found[0]
			switch c {
			case "deep":
				if !strings.Contains(e.Rule, "not checked") || len(e.Path) < 4096 || len(filepath.Dir(e.Path)) >= 4096 || e.Path2 != "" {
					t.Errorf("deep, %s: %.80s… (%d bytes) %q, want the first folder past 4,095 bytes named as not checked", engine, e.Path, len(e.Path), e.Rule)
				}
				if !strings.Contains(out, "could not look for git files the agent may have made") {
					t.Errorf("deep, %s: agent-lock did not warn of the deep tree:\n%s", engine, out)
				}
			case "edge":
				if !strings.HasSuffix(e.Path, "/r/.git") || len(e.Path) != 4085 || e.Path2 != e.Path+".agent-lock" || e.Verdict != report.Blocked {
					t.Errorf("edge, %s: %.80s… (%d bytes) to %q, %s, want its .git moved aside whole", engine, e.Path, len(e.Path), e.Path2, e.Verdict)
				}
				if out, _ := asUser(dir, status[c]); ran(mark) {
					t.Errorf("edge, %s: the user's git status ran the agent's fsmonitor:\n%s", engine, out)
				}
			case "unlisted":
				// Root lists the folder, and the config in it is
				// judged; alone, the folder is moved aside whole.
				want := dir + "/a/b/.git/config"
				if engine == "landlock-alone" {
					want = dir + "/a"
				}
				if e.Path != want || e.Path2 != want+".agent-lock" || e.Verdict != report.Blocked {
					t.Errorf("unlisted, %s: %s to %q, %s, want %s moved aside", engine, e.Path, e.Path2, e.Verdict, want)
				}
				if out, _ := asUser(dir, status[c]); ran(mark) {
					t.Errorf("unlisted, %s: the user's git status ran the agent's fsmonitor:\n%s", engine, out)
				}
			}
		}
	}
}
