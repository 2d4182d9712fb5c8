package jail_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// newObserved is a cell with only the observers loaded: nothing is refused
// by the jail, so refusals come from file permissions here, as they would
// from Landlock under that engine. Tracepoints load on every kernel we
// support, the development machines' included.
func newObserved(t *testing.T, protect ...spec.Protected) *cell {
	return newObservedPolicy(t, func(p *policy.Policy) { p.Protect = protect })
}

// newObservedPolicy is newObserved with the cell's policy set by edit
// (DIR and the outside folder are made already).
func newObservedPolicy(t *testing.T, edit func(*policy.Policy)) *cell {
	t.Helper()
	return newObservedSampled(t, edit, false)
}

// newObservedSampled is newObservedPolicy whose cell streams every
// in-bounds open (the tests follow each one), or, sampled, a sample.
func newObservedSampled(t *testing.T, edit func(*policy.Policy), sampled bool) *cell {
	t.Helper()
	return newObservedHeld(t, edit, sampled, false)
}

// needObservers is this kernel's facts where the observers can be tested:
// as root, with cgroup2 (always so in the VMs).
func needObservers(t *testing.T) kernel.Facts {
	t.Helper()
	f, err := kernel.Probe()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 || f.Cgroup2 == "" {
		if os.Getenv("AGENT_LOCK_VM") == "1" {
			t.Fatal("the VM tests run as root with cgroup2")
		}
		t.Skip("needs root and cgroup2")
	}
	return f
}

// newObservedHeld is newObservedSampled whose events, held, wait for
// c.release (startCellHeld).
func newObservedHeld(t *testing.T, edit func(*policy.Policy), sampled, held bool) *cell {
	t.Helper()
	cg := newCgroup(t, needObservers(t))
	root := t.TempDir()
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(root, 0o755)
	dir := filepath.Join(root, "project")
	out := filepath.Join(root, "project2")
	for _, d := range []string{dir, out} {
		os.Mkdir(d, 0o755)
		os.Chown(d, testUID, testUID)
	}
	os.WriteFile(filepath.Join(dir, "inside.txt"), []byte("inside\n"), 0o644)
	os.WriteFile(filepath.Join(out, "readable"), []byte("x\n"), 0o644)
	os.WriteFile(filepath.Join(out, "private"), []byte("x\n"), 0o600) // root's: EACCES

	// The Landlock engine grants no shared scratch place, and this test's
	// files lie in one (/tmp): leave those rules out, as the observers
	// count a file there as the jail's own.
	var rules []spec.Rule
	pol := policy.Policy{Dir: dir}
	edit(&pol)
	for _, r := range pol.Rules() {
		if r.Access&spec.Scratch == 0 {
			rules = append(rules, r)
		}
	}
	j, err := jail.Load(jail.Config{CgroupID: cg.id, Observe: true, StreamInBounds: true, EveryInBounds: !sampled, Rules: rules,
		Protect: pol.Protect, Patterns: pol.Patterns()})
	if err != nil {
		t.Fatal(err)
	}
	return startCellHeld(t, cg, j, dir, out, held)
}

func TestObserveOpens(t *testing.T) {
	c := newObserved(t)
	before, err := c.j.Counters()
	if err != nil {
		t.Fatal(err)
	}
	// In-bounds opens are sampled, one per CPU every 100 ms: the first
	// after a pause is streamed.
	out, _ := c.run(`sleep 0.2; cat inside.txt >/dev/null; cat /etc/hostname >/dev/null
		cat "$OUT/readable" >/dev/null
		cat "$OUT/private" 2>/dev/null
		cat ../project2/private 2>/dev/null
		(cd "$OUT" && exec 3<private) 2>/dev/null
		(echo x >"$OUT/private") 2>/dev/null
		echo done`)
	if out != "done\n" {
		t.Fatalf("script: %q", out)
	}
	evs := c.events()
	find := func(what string, ok func(jail.Event) bool) jail.Event {
		t.Helper()
		for _, e := range evs {
			if ok(e) {
				return e
			}
		}
		t.Fatalf("no event for %s in %+v", what, evs)
		return jail.Event{}
	}
	in := filepath.Join(c.dir, "inside.txt")
	find("the in-bounds read", func(e jail.Event) bool { return e.InBounds && e.Op == "read" && e.Path == in })
	reached := find("the outside read that got through", func(e jail.Event) bool {
		return e.Path == filepath.Join(c.out, "readable")
	})
	if !reached.Audit || reached.Denied || reached.Op != "read" || reached.Comm != "cat" {
		t.Errorf("an outside open that succeeded must be reported reached: %+v", reached)
	}
	private := filepath.Join(c.out, "private")
	var refusedReads, refusedWrites int
	for _, e := range evs {
		if e.Path == private && e.Denied {
			switch e.Op {
			case "read":
				refusedReads++
			case "write":
				refusedWrites++
			}
		}
	}
	// Absolute, relative to the working directory, and relative after cd.
	if refusedReads != 3 || refusedWrites != 1 {
		t.Errorf("refused opens of %s: %d reads (want 3), %d writes (want 1); events %+v", private, refusedReads, refusedWrites, evs)
	}
	after, err := c.j.Counters()
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if d.InBounds < 1 || d.System < 1 || d.Escapes < 5 {
		t.Errorf("counters %+v: want in-bounds, system and 5 escapes", d)
	}
}

// TestObserveProcLinks: a refused name that climbs out through one of the
// process's own magic links in /proc names the file it reached, even when
// the events are read after every process involved is gone (so no link is
// left to read back from user space: the kernel must have named it).
func TestObserveProcLinks(t *testing.T) {
	c := newObservedHeld(t, func(*policy.Policy) {}, false, true)
	forms := map[string]string{
		"fd":          `exec 3<. && cat /proc/self/fd/3/../project2/%s`,
		"fd-reopen":   `: %s && exec 4<"$OUT/readable" && (echo x >/proc/self/fd/4)`,
		"cwd":         `cat /proc/self/cwd/../project2/%s`,
		"root":        `cat "/proc/self/root$OUT/%s"`,
		"thread-self": `exec 3<. && cat /proc/thread-self/fd/3/../project2/%s`,
		"pid":         `exec 3<. && sh -c 'exec cat /proc/$$/fd/3/../project2/%s'`,
	}
	var script strings.Builder
	for name, form := range forms {
		if name != "fd-reopen" {
			// Root's, mode 0600: the test user is refused (EACCES).
			os.WriteFile(filepath.Join(c.out, "private-"+name), []byte("x\n"), 0o600)
		}
		fmt.Fprintf(&script, "(%s) 2>/dev/null\n", fmt.Sprintf(form, "private-"+name))
	}
	script.WriteString("echo done\n")
	os.Chmod(filepath.Join(c.out, "readable"), 0o644) // root's: the test user may not write it
	if out, _ := c.run(script.String()); out != "done\n" {
		t.Fatalf("script: %q", out)
	}
	c.release()
	evs := c.events()
	for name := range forms {
		want, op := filepath.Join(c.out, "private-"+name), "read"
		if name == "fd-reopen" {
			want, op = filepath.Join(c.out, "readable"), "write"
		}
		found := false
		for _, e := range evs {
			found = found || (e.Denied && e.Op == op && e.Path == want)
		}
		if !found {
			t.Errorf("%s: no refused %s of %s in %+v", name, op, want, evs)
		}
	}
}

// TestObserveProtected: the protect trie and git's names, through the
// observers (which share classify with the hooks and load here): writes to
// protected entries of DIR, and to git's files the user had in every
// repository at any depth (a nested one's config, a submodule's and a
// linked worktree's git directories, a .git file, .gitmodules, a sample
// hook), are reported with their rule, as is the write to a file under a
// protected folder; the same names outside a git directory, and git's
// other files, are not protected. The git files the agent makes (a linked
// worktree's links, a .git file, .gitmodules, sample hooks, by the
// observers' account of the files an open made) are its own, written again
// too, except a hook git would run.
func TestObserveProtected(t *testing.T) {
	c := newObserved(t, policy.Protected...)
	for _, rel := range []string{".git/config", ".git/hooks/pre-commit", ".git/hooks/pre-commit.sample", ".git/index",
		".claude/settings.json", "sub/.git/config", "sub/wt/.git", "sub/.git/modules/m/config", "sub/.git/modules/m/HEAD",
		"sub/.git/worktrees/w/commondir", "sub/.git/worktrees/w/gitdir", "sub/.git/refs/heads/main",
		"sub/.git/info/attributes", "sub/notgit/config", "deep/a/b/c/.gitmodules"} {
		p := filepath.Join(c.dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("x\n"), 0o644)
	}
	if out, err := exec.Command("chown", "-R", fmt.Sprint(testUID), c.dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	out, _ := c.run(`for f in .git/config .git/hooks/pre-commit .git/hooks/pre-commit.sample .git/index .claude/settings.json \
			sub/.git/config sub/wt/.git sub/.git/modules/m/config sub/.git/modules/m/HEAD sub/.git/worktrees/w/commondir \
			sub/.git/worktrees/w/gitdir sub/.git/refs/heads/main sub/.git/info/attributes sub/notgit/config \
			deep/a/b/c/.gitmodules; do echo y >> $f; done
		echo x > .envrc
		mkdir -p own/.git/hooks .git/worktrees/new wt2 deep2
		echo x > own/.git/hooks/pre-push.sample; echo x > own/.git/hooks/pre-commit
		echo x > .git/worktrees/new/commondir; echo x >> .git/worktrees/new/commondir; echo x > wt2/.git
		echo x > deep2/.gitmodules; echo x >> deep2/.gitmodules
		echo done`)
	if out != "done\n" {
		t.Fatalf("script: %q", out)
	}
	rules := map[string]string{}
	for _, e := range c.events() {
		if e.Op == "write" {
			if r, ok := rules[e.Path]; ok && r != e.Rule {
				t.Errorf("%s: written twice, with rules %q and %q", e.Path, r, e.Rule)
			}
			rules[e.Path] = e.Rule
			// Reached, as the observers report what the rules refuse
			// and Landlock let through; flagged protected.
			if e.Protected != strings.HasPrefix(e.Rule, "protected ") || e.Protected != e.Audit {
				t.Errorf("protected flag, rule and verdict disagree: %+v", e)
			}
		}
	}
	for rel, want := range map[string]string{
		".git/config":                    "protected .git/config",
		".git/hooks/pre-commit":          "protected .git/hooks",
		".git/hooks/pre-commit.sample":   "protected .git/hooks",
		".claude/settings.json":          "protected .claude/settings.json",
		".envrc":                         "protected .envrc",
		"sub/.git/config":                "protected .git/config",
		"sub/wt/.git":                    "protected .git",
		".git/index":                     "project directory",
		"sub/.git/modules/m/config":      "protected .git/config",
		"sub/.git/modules/m/HEAD":        "project directory",
		"sub/.git/worktrees/w/commondir": "protected .git/commondir",
		"sub/.git/worktrees/w/gitdir":    "protected .git/gitdir",
		"sub/.git/refs/heads/main":       "project directory",
		"sub/.git/info/attributes":       "project directory",
		"sub/notgit/config":              "project directory",
		"deep/a/b/c/.gitmodules":         "protected .gitmodules",
		"own/.git/hooks/pre-push.sample": "project directory",
		"own/.git/hooks/pre-commit":      "protected .git/hooks",
		".git/worktrees/new/commondir":   "project directory",
		"wt2/.git":                       "project directory",
		"deep2/.gitmodules":              "project directory",
	} {
		if got, ok := rules[filepath.Join(c.dir, rel)]; !ok || got != want {
			t.Errorf("write of %s: rule %q (reported: %v), want %q", rel, got, ok, want)
		}
	}
}

// TestObservePatterns: the secret-name patterns, through the observers:
// the built-in ones inside a grant the user made, the user's in DIR too;
// nothing else there is touched by them.
func TestObservePatterns(t *testing.T) {
	var out string
	c := newObservedPolicy(t, func(p *policy.Policy) {
		out = filepath.Join(filepath.Dir(p.Dir), "project2")
		p.AllowWrite = []string{out}
		p.DenyPatterns = []string{"*.secret"}
	})
	if c.out != out {
		t.Fatalf("outside folder %s, want %s", c.out, out)
	}
	got, _ := c.run(`for f in "$OUT/server.pem" "$OUT/id_ed25519" "$OUT/.env.local" "$OUT/notes.txt" "$OUT/x.secret" \
			key.pem .env.local y.secret; do echo x > "$f"; done; echo done`)
	if got != "done\n" {
		t.Fatalf("script: %q", got)
	}
	rules := map[string]string{}
	for _, e := range c.events() {
		if e.Op == "write" {
			rules[e.Path] = e.Rule
		}
	}
	for path, want := range map[string]string{
		filepath.Join(out, "server.pem"):   "deny pattern *.pem",
		filepath.Join(out, "id_ed25519"):   "deny pattern id_*",
		filepath.Join(out, ".env.local"):   "deny pattern .env*",
		filepath.Join(out, "x.secret"):     "deny pattern *.secret",
		filepath.Join(c.dir, "y.secret"):   "deny pattern *.secret",
		filepath.Join(out, "notes.txt"):    "--allow-write " + out,
		filepath.Join(c.dir, "key.pem"):    "project directory",
		filepath.Join(c.dir, ".env.local"): "project directory",
	} {
		if rules[path] != want {
			t.Errorf("write of %s: rule %q, want %q", path, rules[path], want)
		}
	}
}

// TestObserveOPathAndDenial: an O_PATH open reads nothing, and Landlock
// does not check it: it is not reported (Claude Code's runtime resolves
// paths with it, ~/.ssh among them, and each came out as a reached read).
// A refused read inside a denial root names that root as its rule, as the
// BPF LSM's refusal would.
func TestObserveOPathAndDenial(t *testing.T) {
	var secret string
	c := newObservedPolicy(t, func(p *policy.Policy) {
		secret = filepath.Join(filepath.Dir(p.Dir), "project2", "keys")
		os.MkdirAll(secret, 0o755)
		os.WriteFile(filepath.Join(secret, "id_test"), []byte("KEY\n"), 0o600) // root's: EACCES
		p.Deny = []string{secret}
	})
	got, _ := c.run(`python3 -c 'import os, sys; [os.close(os.open(p, os.O_PATH)) for p in sys.argv[1:]]' "$OUT/readable" "$OUT/keys/id_test"
		cat "$OUT/keys/id_test" 2>/dev/null; echo done`)
	if got != "done\n" {
		t.Fatalf("script: %q", got)
	}
	key := filepath.Join(secret, "id_test")
	var refused []jail.Event
	for _, e := range c.events() {
		if e.Path == filepath.Join(c.out, "readable") || (e.Path == key && e.Comm != "cat") {
			t.Errorf("an O_PATH open was reported: %+v", e)
		}
		if e.Path == key && e.Comm == "cat" {
			refused = append(refused, e)
		}
	}
	if len(refused) != 1 || !refused[0].Denied || refused[0].Rule != "--deny "+secret {
		t.Errorf("the refused read of %s: %+v, want one, denied, with rule %q", key, refused, "--deny "+secret)
	}
}

// TestObserveInBoundsSampled: in-bounds opens reach the stream as a sample,
// at most one per CPU every 100 ms (a build must not flood the ring buffer
// escapes need), while the counters count every one.
func TestObserveInBoundsSampled(t *testing.T) {
	c := newObservedSampled(t, func(*policy.Policy) {}, true)
	before, err := c.j.Counters()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	out, err := c.run(`i=0; while [ $i -lt 300 ]; do cat inside.txt; i=$((i+1)); done >/dev/null; echo done`)
	took := time.Since(began)
	if out != "done\n" {
		t.Fatalf("script: %q (%v)", out, err)
	}
	samples := 0
	for _, e := range c.events() {
		if e.InBounds {
			samples++
		}
	}
	after, err := c.j.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before); d.InBounds < 300 {
		t.Errorf("counted %d in-bounds opens, want at least 300", d.InBounds)
	}
	// Every CPU may send one sample per 100 ms it spent, plus its first.
	most := runtime.NumCPU() * (int(took/(100*time.Millisecond)) + 1)
	if samples == 0 || samples > most {
		t.Errorf("%d in-bounds samples for 300 opens in %v, want 1 to %d", samples, took, most)
	}
}

// TestRegistrationUnderMapCalls loads the observers again and again while
// other threads make bpf() map calls without pause. The kernel skips a
// tracepoint program on a CPU where such a call is under way, and on a
// preemptible kernel (forky's) a thread preempted inside one leaves its
// CPU so: registrations the observers miss are asked again, and every
// start must succeed. (CI saw a start fail there with one retry.)
func TestRegistrationUnderMapCalls(t *testing.T) {
	cg := newCgroup(t, needObservers(t))
	root := t.TempDir()
	rules := grantedFiles(t, root, 40)
	scratch, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 64, MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer scratch.Close()
	defer meanwhile(func() func() {
		v, n := make([]byte, 64), uint32(0)
		return func() {
			scratch.Put(n%64, v)
			scratch.Lookup(n%64, &v)
			n++
		}
	})()

	retries, misses := 0, uint64(0)
	for i := range 3 {
		j, err := jail.Load(jail.Config{CgroupID: cg.id, Observe: true, Rules: rules})
		if err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
		retries += j.Retries()
		misses += j.RecursionMisses()
		j.Close()
	}
	t.Logf("3 loads of %d rules under map calls: %d registrations asked again, %d programs' runs skipped by the kernel",
		len(rules), retries, misses)
}

// TestRegistrationIsThisThreads: the kernel records a rule from the open
// of the registering thread only. agent-lock's other threads open files
// meanwhile (its recording, its logs, the user's shell files), and such
// an open taken for a rule's registers that file under the rule: a grant
// of it, or a denial moved off what it denies (CI saw a seal fail so: the
// root's open was seen as an inode no rule named). Threads open a file of
// their own without pause while the rules are registered: every load
// must hold, and that file must be no rule.
func TestRegistrationIsThisThreads(t *testing.T) {
	cg := newCgroup(t, needObservers(t))
	root := t.TempDir()
	rules := grantedFiles(t, root, 40)
	other := filepath.Join(root, "other")
	if err := os.WriteFile(other, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer meanwhile(func() func() {
		return func() {
			if f, err := os.Open(other); err == nil {
				f.Close()
			}
		}
	})()
	for i := range 3 {
		j, err := jail.Load(jail.Config{CgroupID: cg.id, Observe: true, Rules: rules})
		if err != nil {
			t.Fatalf("load %d, another thread opening %s meanwhile: %v", i, other, err)
		}
		taken, err := j.RuleOf(other)
		j.Close()
		if err != nil {
			t.Fatal(err)
		}
		if taken {
			t.Fatalf("load %d: another thread's open of %s was registered as a rule", i, other)
		}
	}
}

// grantedFiles makes n files in root, each granted read by a rule of its
// own.
func grantedFiles(t *testing.T, root string, n int) []spec.Rule {
	t.Helper()
	var rules []spec.Rule
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("granted-%d", i))
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rules = append(rules, spec.Rule{Path: p, Access: spec.Read, Name: "--allow"})
	}
	return rules
}

// meanwhile runs a step that newStep makes, over and over, on two locked
// threads per CPU (each its own step), until the returned stop is called.
func meanwhile(newStep func() func()) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			step := newStep()
			for !done.Load() {
				step()
			}
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}
