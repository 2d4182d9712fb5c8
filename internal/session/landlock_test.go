package session_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/dirscan"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/landlock"
	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestLandlockEngine: with --engine landlock the agent works in DIR (files,
// git) and is refused outside it, and the refusal is reported by the
// observers, with the engine and its ABI in the start record. Runs in the
// test VMs and natively (make native), on any kernel with Landlock.
func TestLandlockEngine(t *testing.T) {
	testenv.NeedVM(t)
	abi := landlock.ABI()
	if abi == 0 {
		t.Fatal("Landlock is not available: every kernel of the matrix, and the development machines', has it")
	}
	bin := testenv.AgentLockBin(t)
	root, dir := testenv.ProjectDir(t, 4242)
	out := filepath.Join(root, "outside")
	os.Mkdir(out, 0o755)
	os.Chown(out, 4242, 4242)
	secret := filepath.Join(out, "secret")
	os.WriteFile(secret, []byte("LANDLOCK-SECRET\n"), 0o644)

	run := func(engine string) (string, []report.Record) {
		t.Helper()
		rep := testenv.ReportPath(t, 4242)
		os.RemoveAll(filepath.Join(dir, "g"))
		args := []string{"--headless", "--report", rep}
		if engine != "" {
			args = append(args, "--engine", engine)
		}
		script := `cat "$1" 2>&1; echo in > inside.txt && cat inside.txt
			git init -q g && cd g && echo x > f && git add f &&
			git -c user.name=a -c user.email=a@b commit -q -m x && git log --oneline | grep -q x && echo git-ok`
		cmd := exec.Command(bin, append(args, dir, "--", "sh", "-c", script, "sh", secret)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("agent-lock --engine %q: %v\n%s", engine, err, b)
		}
		f, err := os.Open(rep)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var recs []report.Record
		report.Read(f, func(r report.Record) error { recs = append(recs, r); return nil })
		return string(b), recs
	}

	output, recs := run("landlock")
	if strings.Contains(output, "LANDLOCK-SECRET") {
		t.Errorf("the jailed agent read the outside file:\n%s", output)
	}
	for _, want := range []string{"Permission denied", "in\n", "git-ok"} {
		if !strings.Contains(output, want) {
			t.Errorf("output lacks %q:\n%s", want, output)
		}
	}
	var engine string
	var blocked bool
	var sum *report.Summary
	for _, r := range recs {
		switch {
		case r.Start != nil:
			engine = r.Start.Engine
			checkSteps(t, r.Start, recs)
		case r.Event != nil:
			if r.Event.Path == secret && r.Event.Op == "read" && r.Event.Verdict == report.Blocked {
				blocked = true
			} else {
				t.Errorf("unexpected escape record: %+v", *r.Event)
			}
		case r.Summary != nil:
			sum = r.Summary
		}
	}
	t.Logf("engine %s (kernel's Landlock ABI %d)", engine, abi)
	if want := "landlock (ABI "; !strings.HasPrefix(engine, want) {
		t.Errorf("start record says engine %q, want %q...", engine, want)
	}
	if !blocked {
		t.Errorf("no blocked read of %s in the report: %+v", secret, recs)
	}
	if sum == nil || sum.InBounds == 0 || sum.Escapes != 1 {
		t.Errorf("summary %+v: want in-bounds opens and exactly one escape", sum)
	}

	// auto: the BPF LSM where it runs (every VM kernel), else Landlock.
	_, recs = run("")
	for _, r := range recs {
		if r.Start == nil {
			continue
		}
		checkSteps(t, r.Start, recs)
		inVM := os.Getenv("AGENT_LOCK_VM") == "1" && os.Getenv("AGENT_LOCK_NATIVE") != "1"
		if inVM && r.Start.Engine != "bpf-lsm" {
			t.Errorf("auto picked %q in a VM that runs the BPF LSM", r.Start.Engine)
		}
		t.Logf("auto picked %s", r.Start.Engine)
	}
}

// checkSteps: the start record says where the start went, every step in
// order (report.Step), the load taking time (both engines load programs:
// the Landlock engine its observers), and all of them within the session.
func checkSteps(t *testing.T, start *report.Start, recs []report.Record) {
	t.Helper()
	want := []string{"plan", "cgroup", "network_load", "network", "load", "attach", "register", "engine", "self_test", "reaper", "exec"}
	var names []string
	var sum time.Duration
	for _, s := range start.Steps {
		names = append(names, s.Name)
		if s.Time < 0 || (s.Name == "load" || s.Name == "network_load") && s.Time == 0 {
			t.Errorf("start step %s took %v", s.Name, s.Time)
		}
		sum += s.Time
	}
	if len(names) > 1 && names[1] == "bpf_lsm_refused" {
		// auto, where the kernel refused the BPF LSM's programs.
		names = slices.Delete(names, 1, 2)
	}
	if !slices.Equal(names, want) {
		t.Errorf("start steps %q, want %q", names, want)
	}
	end := recs[len(recs)-1]
	if end.Summary == nil || sum > end.Summary.Time.Sub(start.Time) {
		t.Errorf("start steps %+v: %v in all, more than the session from its start to its summary (%+v)", start.Steps, sum, end.Summary)
	}
	t.Logf("start steps: %+v", start.Steps)
}

// TestLandlockTripwire: under the Landlock engine the agent may change the
// protected entries (Landlock grants DIR whole), but each change is
// reported as undone and, when the session ends, the entries are as they
// were: the user's git status runs no planted fsmonitor, no hook is left,
// a removed editor setting is back. The agent's own work in the same
// repository (a commit) stays.
func TestLandlockTripwire(t *testing.T) {
	testenv.NeedVM(t)
	if landlock.ABI() == 0 {
		t.Fatal("Landlock is not available: every kernel of the matrix, and the development machines', has it")
	}
	bin := testenv.AgentLockBin(t)
	root, dir := testenv.ProjectDir(t, 4242)
	home := testHome(t, root)
	asUser := func(script string) string { t.Helper(); return asTestUser(t, dir, home, script) }
	asUser(`git init -q . && mkdir .vscode && echo '{}' > .vscode/settings.json && echo a > a &&
		git add a && git -c user.name=u -c user.email=u@h commit -qm first`)
	config, _ := os.ReadFile(filepath.Join(dir, ".git/config"))

	rep := testenv.ReportPath(t, 4242)
	pwned := filepath.Join(home, "pwned")
	script := `git config core.fsmonitor "touch ` + pwned + `"
		printf '#!/bin/sh\ntouch ` + pwned + `\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit
		rm .vscode/settings.json
		echo b > b && git add b && git -c user.name=a -c user.email=a@b commit --no-verify -qm agent-work && echo committed`
	out := landlockSession(t, bin, dir, rep, script)
	live := !strings.Contains(out, "cannot watch the protected entries live") &&
		!strings.Contains(out, "protected entries with inotify")
	if !live {
		t.Logf("no live watch here: %s", out)
	}
	// The agent's own git may have run what it planted (before it was
	// undone), in the cell, where it could not touch the home.
	os.Remove(pwned)

	if b, _ := os.ReadFile(filepath.Join(dir, ".git/config")); string(b) != string(config) {
		t.Errorf(".git/config after the session:\n%s\nwant:\n%s", b, config)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git/hooks/pre-commit")); err == nil {
		t.Error("the planted pre-commit hook is still there")
	}
	if b, err := os.ReadFile(filepath.Join(dir, ".vscode/settings.json")); err != nil || string(b) != "{}\n" {
		t.Errorf(".vscode/settings.json after the session: %q, %v", b, err)
	}
	asUser(`git status --short >/dev/null`)
	if _, err := os.Stat(pwned); err == nil {
		t.Error("the user's git status ran what the agent planted")
	}
	if log := asUser(`git log --format=%s`); !strings.Contains(log, "agent-work") {
		t.Errorf("the agent's commit is gone (git log: %q); output:\n%s", log, out)
	}

	f, err := os.Open(rep)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	undone := map[string]string{}
	var sum *report.Summary
	report.Read(f, func(r report.Record) error {
		if r.Event != nil && r.Event.Verdict == report.Undone {
			rel, _ := filepath.Rel(dir, r.Event.Path)
			undone[rel] = r.Event.Op
			// Where fanotify cannot watch this file system (tmpfs
			// before Linux 6.6 has no file system id) agent-lock says
			// so and watches with inotify, or only checks at the end:
			// there is no process to name.
			if (r.Event.PID == 0 && live) || !strings.HasPrefix(r.Event.Rule, "protected ") {
				t.Errorf("undone record without a process or rule: %+v", *r.Event)
			}
		}
		if r.Summary != nil {
			sum = r.Summary
		}
		return nil
	})
	for rel, op := range map[string]string{".git/config": "rename", ".git/hooks/pre-commit": "create", ".vscode/settings.json": "unlink"} {
		if undone[rel] != op {
			t.Errorf("report: %s undone by %q, want %q (undone: %v)", rel, undone[rel], op, undone)
		}
	}
	if sum == nil || len(sum.Undone) != 3 || len(sum.LeftChanged) != 0 || sum.Escapes < 3 {
		t.Errorf("summary %+v: want the three entries undone, none left changed, counted as escapes", sum)
	}
}

// TestLandlockWithholdsSockets: below Landlock ABI 9, where connecting to
// a pathname unix socket cannot be refused, the agent is not told where
// the user's ssh-agent listens: ssh-add finds no agent, unless the socket
// is granted with --allow-unix. The same ssh-agent answers unjailed, so
// the test is real.
func TestLandlockWithholdsSockets(t *testing.T) {
	testenv.NeedVM(t)
	abi := landlock.ABI()
	if abi >= 9 {
		t.Skipf("Landlock ABI %d refuses connecting to sockets by path: the variables pass", abi)
	}
	if _, err := exec.LookPath("ssh-agent"); err != nil {
		t.Fatal("ssh-agent is not installed (openssh-client)")
	}
	bin := testenv.AgentLockBin(t)
	root, dir := testenv.ProjectDir(t, 4242)
	sockDir := filepath.Join(root, "ssh")
	os.Mkdir(sockDir, 0o700)
	os.Chown(sockDir, 4242, 4242)
	sock := filepath.Join(sockDir, "agent.sock")
	agent := exec.Command("setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", "ssh-agent", "-D", "-a", sock)
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer agent.Process.Kill()
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	sshAdd := func(jailed bool, flags ...string) string {
		t.Helper()
		argv := []string{"setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", "sh", "-c", "ssh-add -l; echo rc=$?"}
		if jailed {
			argv = append(append([]string{bin, "--headless", "--engine", "landlock"}, flags...), dir, "--", "sh", "-c", "ssh-add -l; echo rc=$?")
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		cmd.Env = []string{"SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin", "SSH_AUTH_SOCK=" + sock}
		b, _ := cmd.CombinedOutput()
		return string(b)
	}
	// The agent holds no keys: ssh-add -l says so with 1, and 2 when it
	// finds no agent.
	if out := sshAdd(false); !strings.Contains(out, "rc=1") {
		t.Fatalf("unjailed, ssh-add -l did not reach the agent:\n%s", out)
	}
	out := sshAdd(true)
	if !strings.Contains(out, "rc=2") || !strings.Contains(out, "SSH_AUTH_SOCK") {
		t.Errorf("jailed, ssh-add -l found the agent, or the limit was not said:\n%s", out)
	}
	if out := sshAdd(true, "--allow-unix", sock); !strings.Contains(out, "rc=1") {
		t.Errorf("jailed with --allow-unix %s, ssh-add -l did not reach the agent:\n%s", sock, out)
	}
}

// TestLandlockTerminals: under the Landlock engine the agent opens
// terminals of its own (script, a pty pair) and writes to its terminal by
// name, in a devpts instance of the cell's own; another terminal of the
// user stays out of reach, by name and by number.
func TestLandlockTerminals(t *testing.T) {
	testenv.NeedVM(t)
	if landlock.ABI() == 0 {
		t.Fatal("Landlock is not available: every kernel of the matrix, and the development machines', has it")
	}
	bin := testenv.AgentLockBin(t)
	_, dir := testenv.ProjectDir(t, 4242)
	// Another terminal of the user's, outside the cell.
	other, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	n, err := unix.IoctlGetInt(int(other.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	unix.IoctlSetPointerInt(int(other.Fd()), unix.TIOCSPTLCK, 0)
	otherName := fmt.Sprintf("/dev/pts/%d", n)
	os.Chown(otherName, 4242, 4242)
	script := `script -qc true /dev/null && echo script-ok
		python3 -c 'import os, pty; m, s = pty.openpty(); os.write(s, b"x"); print("pty-ok", os.ttyname(s))'
		echo own > "$(tty)" && echo own-tty-ok
		echo inject > ` + otherName + ` 2>/dev/null && echo "other-by-name-$((6*7))"
		true`
	// The agent gets a terminal of its own (script as root, chowned to
	// the user as sudo's would be).
	inner := fmt.Sprintf(`chown 4242 "$(tty)"; SUDO_UID=4242 SUDO_GID=4242 PATH=/usr/bin:/bin %s --headless --engine landlock %s -- sh -c %s`,
		bin, dir, testenv.ShellJoin([]string{script}))
	cmd := exec.Command("script", "-qec", inner, "/dev/null")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"script-ok", "pty-ok /dev/pts/", "own-tty-ok"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q: the agent's own terminals do not work:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "other-by-name-42") {
		t.Errorf("the agent wrote to another terminal of the user:\n%s", out)
	}
	// What reached the other terminal is on its master, without waiting.
	// (Fd makes the file blocking again: once.)
	fd := int(other.Fd())
	unix.SetNonblock(fd, true)
	b := make([]byte, 256)
	if k, _ := unix.Read(fd, b); k > 0 && strings.Contains(string(b[:k]), "inject") {
		t.Errorf("the other terminal received %q", b[:k])
	}
}

// TestAutoLandlockRemembersARefusal: where the kernel lists bpf as an active LSM
// but refuses the BPF LSM's programs (this build machine's kernel), auto's
// first session of a boot tries them, falls back to Landlock and remembers
// the refusal; the next goes to Landlock at once; a mark of another boot
// is not believed. Natively only: every kernel of the matrix runs the
// programs.
func TestAutoLandlockRemembersARefusal(t *testing.T) {
	testenv.NeedVM(t)
	facts, err := kernel.Probe()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("AGENT_LOCK_NATIVE") != "1" || !facts.BPFInLSM || facts.LandlockABI == 0 {
		t.Skip("needs a kernel that lists bpf as an active LSM and has Landlock, natively (make native)")
	}
	const mark = "/run/agent-lock/bpf-lsm-refused"
	if kept, err := os.ReadFile(mark); err == nil {
		t.Cleanup(func() { os.WriteFile(mark, kept, 0o644) })
	} else {
		t.Cleanup(func() { os.Remove(mark) })
	}
	bin := testenv.AgentLockBin(t)
	_, dir := testenv.ProjectDir(t, 4242)
	// session runs one session with auto and returns its start record.
	session := func() *report.Start {
		t.Helper()
		rep := testenv.ReportPath(t, 4242)
		cmd := exec.Command(bin, "--headless", "--report", rep, dir, "--", "true")
		cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("agent-lock: %v\n%s", err, b)
		}
		return startRecord(t, rep)
	}
	tried := func(s *report.Start) bool {
		return slices.ContainsFunc(s.Steps, func(st report.Step) bool { return st.Name == "bpf_lsm_refused" })
	}

	os.Remove(mark)
	first := session()
	if first.Engine == "bpf-lsm" {
		t.Skip("this kernel runs the BPF LSM's programs: nothing to remember")
	}
	if !tried(first) {
		t.Errorf("with no mark, auto did not try the BPF LSM: steps %+v", first.Steps)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the refusal was not remembered: %v", err)
	}
	second := session()
	if tried(second) || !strings.HasPrefix(second.Engine, "landlock") {
		t.Errorf("after a refusal in this boot, auto tried the BPF LSM again (engine %s, steps %+v)", second.Engine, second.Steps)
	}
	os.WriteFile(mark, []byte("boot 00000000-0000-0000-0000-000000000000 programs 00\n"), 0o644)
	if third := session(); !tried(third) {
		t.Errorf("a mark of another boot was believed: steps %+v", third.Steps)
	}
}

// TestLandlockTripwireRemembers: the walk for git's files takes the
// folders unchanged since the last session's walk from its memory
// (dirscan.Memory); a repository made since in a remembered folder is
// still found and kept: the hook the agent plants there is undone.
func TestLandlockTripwireRemembers(t *testing.T) {
	testenv.NeedVM(t)
	if landlock.ABI() == 0 {
		t.Fatal("Landlock is not available: every kernel of the matrix, and the development machines', has it")
	}
	bin := testenv.AgentLockBin(t)
	_, dir := testenv.ProjectDir(t, 4242)
	asUser := func(script string) { t.Helper(); asTestUser(t, dir, dir, script) }
	session := func(script string) (string, map[string]string, *report.GitWalk) {
		t.Helper()
		rep := testenv.ReportPath(t, 4242)
		out := landlockSession(t, bin, dir, rep, script)
		undone := map[string]string{}
		var walk *report.GitWalk
		f, err := os.Open(rep)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		report.Read(f, func(r report.Record) error {
			if r.Event != nil && r.Event.Verdict == report.Undone {
				rel, _ := filepath.Rel(dir, r.Event.Path)
				undone[rel] = r.Event.Op
			}
			if r.Start != nil {
				walk = r.Start.GitWalk
			}
			return nil
		})
		return out, undone, walk
	}
	asUser(`mkdir -p a/b/c a/b/d e/f && git init -q e/f`)
	// Older than the file system clock's margin (dirscan.Settle): the
	// first session's walk remembers them.
	time.Sleep(dirscan.Settle + 200*time.Millisecond)
	session("true")
	// git init in a/b/c: a/b/c's ctime moves; the rest is as it was.
	asUser(`git init -q a/b/c`)
	hook := "a/b/c/.git/hooks/pre-commit"
	// Not chmod: the tripwire may have removed it by then.
	out, undone, walk := session(`printf '#!/bin/sh\nexit 0\n' > ` + hook + ` && echo planted`)
	if !strings.Contains(out, "planted") {
		t.Fatalf("the agent did not plant the hook: the test would prove nothing\n%s", out)
	}
	// The project, a, a/b, a/b/c, a/b/d, e, e/f: all but a/b/c from the
	// memory (the test is real: the walk took the rest from it).
	if walk == nil || walk.Folders != 7 || walk.Remembered != 6 {
		t.Errorf("the second session's walk: %+v, want 7 folders, 6 of them from the first's memory", walk)
	}
	if _, err := os.Lstat(filepath.Join(dir, hook)); err == nil {
		t.Error("the hook planted in the repository made between the sessions is still there")
	}
	if undone[hook] != "create" {
		t.Errorf("the hook planted in the repository made between the sessions: undone %v, want %s by create\n%s", undone, hook, out)
	}
}

// asTestUser runs script with sh in dir as the test user (4242, no
// groups), HOME home, and fails t if it fails; it returns the output.
func asTestUser(t *testing.T, dir, home, script string) string {
	t.Helper()
	cmd := exec.Command("setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", "sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home}
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, b)
	}
	return string(b)
}

// testHome makes root/home, the test user's, for a script run as the user.
func testHome(t *testing.T, root string) string {
	t.Helper()
	home := filepath.Join(root, "home")
	os.Mkdir(home, 0o755)
	os.Chown(home, 4242, 4242)
	return home
}

// landlockSession runs script under agent-lock's Landlock engine, for the
// test user as sudo would, in dir, reporting to rep, and fails t if
// agent-lock fails; it returns the output.
func landlockSession(t *testing.T, bin, dir, rep, script string) string {
	t.Helper()
	cmd := exec.Command(bin, "--headless", "--engine", "landlock", "--report", rep, dir, "--", "sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4242", "PATH=/usr/bin:/bin")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agent-lock: %v\n%s", err, out)
	}
	return string(out)
}

// TestLandlockTripwireUnlisted: in a repository of the user's below DIR's
// top whose hooks folder the user may search but not list (0311), the
// agent can still make a hook, which git runs: the tripwire lists the
// folder with root's listing to keep it, and the hook is undone. Unjailed
// the same hook is written and runs on commit: the test is real.
// Natively and in every guest, with the Landlock engine.
func TestLandlockTripwireUnlisted(t *testing.T) {
	testenv.NeedVM(t)
	bin := testenv.AgentLockBin(t)
	root, dir := testenv.ProjectDir(t, 4242)
	home := testHome(t, root)
	pwned := filepath.Join(home, "pwned")
	plant := `printf '#!/bin/sh\ntouch ` + pwned + `\n' > sub/.git/hooks/pre-commit && chmod +x sub/.git/hooks/pre-commit && echo planted`
	commit := `cd sub && git -c user.name=u -c user.email=u@h commit -q --allow-empty -m x`
	asTestUser(t, dir, home, `git init -q sub && chmod 311 sub/.git/hooks && `+plant)
	asTestUser(t, dir, home, commit)
	if _, err := os.Stat(pwned); err != nil {
		t.Fatal("unjailed, the hook in the unlistable hooks folder did not run: the test would prove nothing")
	}
	os.Remove(pwned)
	os.Remove(filepath.Join(dir, "sub/.git/hooks/pre-commit"))

	out := landlockSession(t, bin, dir, testenv.ReportPath(t, 4242), plant)
	if !strings.Contains(out, "planted") {
		t.Fatalf("the agent could not write the hook (Landlock grants DIR whole):\n%s", out)
	}
	os.Remove(pwned) // the agent's own git may have run it, in the cell
	if _, err := os.Lstat(filepath.Join(dir, "sub/.git/hooks/pre-commit")); err == nil {
		t.Error("the hook planted in the unlistable hooks folder is still there")
	}
	asTestUser(t, dir, home, commit)
	if _, err := os.Stat(pwned); err == nil {
		t.Error("the user's commit ran the agent's hook")
	}
}
