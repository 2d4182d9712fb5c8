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
print("moved-deep")
'`

// TestGitTooDeep: a repository the agent leaves past PATH_MAX cannot be
// looked into by name, by agent-lock or by git; when the session ends
// agent-lock names it (a plant record, "not checked", and a warning)
// rather than leaving it out as it leaves out what the user may not read.
// Unjailed, the same repository, once the user moves it higher, makes the
// user's git status run its fsmonitor: the test is real. Both engines, in
// the test VMs; the Landlock engine natively.
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
		cmd.Env = append([]string{"HOME=/nonexistent", "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}, env...)
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

	dir := fresh("unjailed")
	mark := filepath.Join(marks, "unjailed")
	if out, err := asUser(dir, deepRepoScript, "MARK="+mark, "TOP="+dir); err != nil || !strings.Contains(out, "moved-deep") {
		t.Fatalf("unjailed, the repository was not moved deep (%v), so the test would prove nothing:\n%s", err, out)
	}
	// The user moves it higher, from its folder, and runs git status.
	up := `python3 -c '
import os
for i in range(18):
    os.chdir("0" * 240)
os.rename("r", os.environ["TOP"] + "/up")
' && cd up && git status --short`
	if out, err := asUser(dir, up, "TOP="+dir); err != nil {
		t.Fatalf("unjailed, moving it higher: %v\n%s", err, out)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatal("unjailed, the user's git status in the repository moved higher ran nothing: the test would prove nothing")
	}

	engines := []string{"bpf-lsm", "landlock"}
	if err := exec.Command(bin, "doctor", "--engine", "bpf-lsm").Run(); err != nil {
		engines = []string{"landlock"}
	}
	for _, engine := range engines {
		dir := fresh(engine)
		rep := testenv.ReportPath(t, 4242)
		cmd := exec.Command(bin, "--engine", engine, "--headless", "--report", rep, dir, "--", "/bin/bash", "-c", deepRepoScript)
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin", "MARK="+filepath.Join(marks, engine), "TOP="+dir)
		b, err := cmd.CombinedOutput()
		out := string(b)
		if err != nil || !strings.Contains(out, "moved-deep") {
			t.Fatalf("%s: agent-lock: %v\n%s", engine, err, out)
		}
		var named []report.Event
		f, _ := os.Open(rep)
		report.Read(f, func(r report.Record) error {
			if e := r.Event; e != nil {
				if e.Op == "plant" && strings.Contains(e.Rule, "not checked") && len(e.Path) >= 4096 &&
					strings.HasPrefix(e.Path, dir+"/") && len(filepath.Dir(e.Path)) < 4096 {
					named = append(named, *e)
				} else {
					t.Errorf("%s: a report other than the deep tree's (a refusal of ordinary work): %+v", engine, e)
				}
			}
			return nil
		})
		f.Close()
		if len(named) != 1 {
			t.Errorf("%s: the deep tree named %d times in the report, want once:\n%s", engine, len(named), out)
		}
		if !strings.Contains(out, "could not look for git files the agent may have made below "+dir+"/") {
			t.Errorf("%s: agent-lock did not warn of the deep tree:\n%s", engine, out)
		}
	}
}
