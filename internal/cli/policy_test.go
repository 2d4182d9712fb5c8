package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/dashboard"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/session"
)

func TestApplyPolicyFiles(t *testing.T) {
	id := caller()
	home, dir := t.TempDir(), t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	for _, d := range []string{"ref", "cache", ".config/agent-lock"} {
		os.MkdirAll(filepath.Join(home, d), 0o755)
	}
	os.Mkdir(filepath.Join(dir, "data"), 0o755)
	userFile := filepath.Join(home, policy.HomeFile)
	projFile := filepath.Join(dir, policy.PolicyFile)
	os.WriteFile(userFile, []byte("engine = \"landlock\"\nallow = [\"~/ref\"]\nprofiles = [\"codex\"]\n"), 0o644)

	// A project's file that only denies is taken; flags win over files.
	os.WriteFile(projFile, []byte("deny = [\"data\"]\n"), 0o644)
	o := options{engine: "bpf-lsm", allow: []string{"/flag"}}
	used, err := applyPolicyFiles(&o, id, home, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(used, []string{userFile, projFile}) {
		t.Errorf("used %v", used)
	}
	if o.engine != "bpf-lsm" || !slices.Equal(o.allow, []string{filepath.Join(home, "ref"), "/flag"}) ||
		!slices.Equal(o.deny, []string{filepath.Join(dir, "data")}) || !slices.Equal(o.profiles, []string{"codex"}) {
		t.Errorf("merged %+v", o)
	}
	o = options{}
	applyPolicyFiles(&o, id, home, dir)
	if o.engine != "landlock" {
		t.Errorf("engine %q, want the user's file's", o.engine)
	}

	// A project's file that widens is refused, naming its line and key...
	os.WriteFile(projFile, []byte("deny = [\"data\"]\n\nallow-write = [\"~/cache\"]\n"), 0o644)
	_, err = applyPolicyFiles(&options{}, id, home, dir)
	if err == nil || !strings.HasPrefix(err.Error(), projFile+":3: allow-write: a project's policy file may only deny") {
		t.Fatalf("widening project file: %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), "agent-lock trust "+dir) {
		t.Errorf("the refusal does not say how to trust: %v", err)
	}
	// ...unless the user trusted the file as it is (agent-lock trust)...
	os.WriteFile(userFile, []byte("# mine\n"), 0o644)
	agent := session.Agent{UID: id.UID, GID: id.GID, Groups: id.Groups, Home: home}
	var out strings.Builder
	if err := trustFile(agent, dir, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "it widens the cell (first: allow-write, line 3)") {
		t.Errorf("trust says %q", out.String())
	}
	if b, _ := os.ReadFile(userFile); !strings.HasPrefix(string(b), "# mine\n") || !strings.Contains(string(b), "[[trusted]]") {
		t.Errorf("the user's file after trust:\n%s", b)
	}
	o = options{}
	if _, err := applyPolicyFiles(&o, id, home, dir); err != nil || !slices.Equal(o.allowWrite, []string{filepath.Join(home, "cache")}) {
		t.Errorf("trusted project: %v %+v", err, o)
	}
	// ...and not once it changed (an agent of an earlier session could
	// have written it): refused, saying what changed.
	os.WriteFile(projFile, []byte("deny = [\"data\"]\n\nallow-write = [\"~/cache\", \"~/ref\"]\n"), 0o644)
	_, err = applyPolicyFiles(&options{}, id, home, dir)
	if err == nil || !strings.Contains(err.Error(), "changed since you trusted it") ||
		!strings.Contains(err.Error(), `allow-write: ["`+filepath.Join(home, "cache")+`"] -> ["`+filepath.Join(home, "cache")+`" "`+filepath.Join(home, "ref")+`"]`) {
		t.Errorf("a changed trusted file: %v", err)
	}
	// Trusting it again takes the new content.
	if err := trustFile(agent, dir, &out); err != nil {
		t.Fatal(err)
	}
	if _, err := applyPolicyFiles(&options{}, id, home, dir); err != nil {
		t.Errorf("trusted again: %v", err)
	}
}

// TestPolicyLandlock: agent-lock policy --engine landlock prints what the
// Landlock engine does, not the BPF-LSM engine's semantics: no "own files
// only" scratch, no file granted with its siblings by name, the name
// patterns not refused, the requests it refuses at start, the tripwire.
func TestPolicyLandlock(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "data"), 0o755)
	os.MkdirAll(filepath.Join(dir, "lib/nest/.git/hooks"), 0o755)
	run := func(args ...string) string {
		var out, errs strings.Builder
		if code := policyCmd(append(args, dir, "--", "true"), &out, &errs); code != 0 {
			t.Fatalf("policy %v: exit %d: %s", args, code, errs.String())
		}
		return out.String()
	}
	ll := run("--engine", "landlock", "--profile", "claude", "--deny", "*.db", "--deny", filepath.Join(dir, "data"))
	for _, want := range []string{
		"engine    landlock (ABI ",
		"scratch /tmp (Landlock cannot say",
		"~/.claude.json                           profile claude (", // granted as it is, or missing: not its siblings
		"read-write, tripwire",
		"refused by name: nothing (Landlock grants by path)",
		"asked, and refused at start",
		`--deny "*.db": Landlock grants by path`,
		"--deny " + filepath.Join(dir, "data") + " lies inside the project directory",
		"protected (the tripwire", "git's files in the repositories below those tops, as found when a session starts (now 1):\n    " + filepath.Join(dir, "lib/nest") + "\n",
		"left open on this kernel",
	} {
		if !strings.Contains(ll, want) {
			t.Errorf("--engine landlock: no %q in:\n%s", want, ll)
		}
	}
	for _, never := range []string{"own files only", "{,.*}", "read-only to the agent"} {
		if strings.Contains(ll, never) {
			t.Errorf("--engine landlock prints the BPF-LSM engine's %q:\n%s", never, ll)
		}
	}
	if be := run("--engine", "landlock", "--best-effort", "--deny", "*.db"); !strings.Contains(be, `--deny "*.db" is not enforced`) {
		t.Errorf("--best-effort: not said what is done instead:\n%s", be)
	}
	if bpf := run("--engine", "bpf-lsm", "--profile", "claude"); !strings.Contains(bpf, "own files only") || !strings.Contains(bpf, "{,.*}") {
		t.Errorf("--engine bpf-lsm lost its semantics:\n%s", bpf)
	}
}

// TestPolicyFilesNetwork: allow-net and net in the policy files. A
// project's file may narrow the network (net = "off") but not widen it
// (allow-net, net = "open") unless trusted; the flags' --net wins over the
// files'; a mode that grants nothing with rules that grant something is an
// error that names both.
func TestPolicyFilesNetwork(t *testing.T) {
	id, home, dir, userFile, projFile := policyDirs(t)

	os.WriteFile(userFile, []byte("allow-net = [\"github.com\", \"localhost:5432\"]\n"), 0o644)
	o, err := parse([]string{"--allow-net", "*.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := applyPolicyFiles(&o, id, home, dir); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range o.netRules {
		got = append(got, r.String()+" ("+r.From+")")
	}
	want := []string{"github.com (policy file " + userFile + ")", "localhost:5432 (policy file " + userFile + ")",
		"localhost:5432 (policy file " + userFile + ")", "*.example.com (--allow-net)"}
	if !slices.Equal(got, want) {
		t.Errorf("rules %q, want %q", got, want)
	}

	for _, widen := range []string{"allow-net = [\"evil.example\"]\n", "net = \"open\"\n"} {
		os.WriteFile(projFile, []byte(widen), 0o644)
		if _, err := applyPolicyFiles(&options{}, id, home, dir); err == nil || !strings.Contains(err.Error(), "may only deny") {
			t.Errorf("project file %q widened the network: %v", widen, err)
		}
	}

	os.WriteFile(userFile, []byte("# mine\n"), 0o644)
	os.WriteFile(projFile, []byte("net = \"off\"\n"), 0o644)
	o = options{}
	if _, err := applyPolicyFiles(&o, id, home, dir); err != nil || o.net != "off" || o.netFrom != projFile {
		t.Errorf("a project's net = off: %v, net %q from %q", err, o.net, o.netFrom)
	}
	o, _ = parse([]string{"--net", "open"})
	if _, err := applyPolicyFiles(&o, id, home, dir); err != nil || o.net != "open" || o.netFrom != "--net" {
		t.Errorf("--net open over a file's off: %v, net %q from %q", err, o.net, o.netFrom)
	}
	o, _ = parse([]string{"--allow-net", "github.com"})
	if _, err := applyPolicyFiles(&o, id, home, dir); err == nil || !strings.Contains(err.Error(), projFile) || !strings.Contains(err.Error(), "github.com") {
		t.Errorf("net = off from a file with --allow-net: %v", err)
	}
	if _, err := parse([]string{"--net", "off", "--allow-net", "a.example"}); err == nil {
		t.Error("--net off with --allow-net was taken")
	}
	if _, err := parse([]string{"--allow-net", "10.0.0.1"}); err == nil || !strings.Contains(err.Error(), "with a port") {
		t.Errorf("a private address without a port: %v", err)
	}
}

// TestPolicyPrintsTheNetwork: agent-lock policy lists the hosts a session
// gets and where each comes from, or says the network is off or open. The
// network's lines are the same under either engine: it names the Landlock
// engine, whose line costs nothing, where auto would load the BPF LSM's
// programs for a self-test (doctor's tests prove that): about ten seconds
// a case under emulation, in every guest.
func TestPolicyPrintsTheNetwork(t *testing.T) {
	t.Setenv("SUDO_UID", "")
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--profile", "claude", "--allow-net", "localhost:5432", "--allow-net", "*.example.com"},
			[]string{"api.anthropic.com:443", "profile claude", "localhost:5432", "*.example.com", "--allow-net", "refused"}},
		{[]string{"--profile", "claude", "--net", "off"}, []string{"network: off (--net): no connection, no name resolved"}},
		{[]string{"--net", "open"}, []string{"network: open (--net): every connection allowed, and reported"}},
	} {
		var out, errb strings.Builder
		args := append(append(slices.Clone(tc.args), "--engine", "landlock", dir, "--"), "true")
		if code := policyCmd(args, &out, &errb); code != 0 {
			t.Fatalf("policy %v: exit %d: %s", tc.args, code, errb.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("policy %v does not say %q:\n%s", tc.args, w, out.String())
			}
		}
		if slices.Contains(tc.args, "off") && strings.Contains(out.String(), "api.anthropic.com") {
			t.Errorf("--net off still lists the profile's hosts:\n%s", out.String())
		}
	}
}

// The pane's key comes from the flag, else the user's policy file, else
// the default; a project's file may not choose it, and a bad one is named
// with its file and line.
func TestPolicyFilePaneKey(t *testing.T) {
	id, home, dir, userFile, projFile := policyDirs(t)

	o := options{}
	if _, err := applyPolicyFiles(&o, id, home, dir); err != nil || o.paneKey != dashboard.DefaultFlipKey {
		t.Errorf("no file, no flag: %q %v", o.paneKey, err)
	}
	os.WriteFile(userFile, []byte("pane-key = \"f12\"\n"), 0o644)
	o = options{}
	if _, err := applyPolicyFiles(&o, id, home, dir); err != nil || o.paneKey != "f12" {
		t.Errorf("the user's file: %q %v", o.paneKey, err)
	}
	o = options{paneKey: "alt+a"}
	if _, err := applyPolicyFiles(&o, id, home, dir); err != nil || o.paneKey != "alt+a" {
		t.Errorf("the flag wins: %q %v", o.paneKey, err)
	}
	os.WriteFile(userFile, []byte("\npane-key = \"ctrl+c\"\n"), 0o644)
	if _, err := applyPolicyFiles(&options{}, id, home, dir); err == nil || !strings.HasPrefix(err.Error(), userFile+":2: pane-key:") {
		t.Errorf("a key the agent needs: %v", err)
	}
	os.Remove(userFile)
	os.WriteFile(projFile, []byte("pane-key = \"f12\"\n"), 0o644)
	if _, err := applyPolicyFiles(&options{}, id, home, dir); err == nil || !strings.HasPrefix(err.Error(), projFile+":1: pane-key: ") {
		t.Errorf("a project's pane-key: %v", err)
	}
}

// policyDirs are a home with its policy folder and a project, for the
// policy files' tests: the caller's id, the folders, and the user's and
// the project's policy file paths (not written).
func policyDirs(t *testing.T) (id asuser.ID, home, dir, userFile, projFile string) {
	t.Helper()
	home, dir = t.TempDir(), t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	os.MkdirAll(filepath.Join(home, ".config/agent-lock"), 0o755)
	return caller(), home, dir, filepath.Join(home, policy.HomeFile), filepath.Join(dir, policy.PolicyFile)
}
