package session

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/profile"
)

// TestPlanKeepsAgentLockStateFromTheAgent: DIR holding the home needs
// --allow-home; agent-lock's own state within the agent's reach is denied,
// made first when missing (an agent could otherwise make it: a policy
// file trusting its project, a forged recording); state out of its reach
// that is missing is left alone.
func TestPlanKeepsAgentLockStateFromTheAgent(t *testing.T) {
	home, _ := filepath.EvalSymlinks(t.TempDir())
	other, _ := filepath.EvalSymlinks(t.TempDir())
	agent := Agent{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Home: home, Shell: "/bin/sh"}
	state := filepath.Join(home, ".local/state/agent-lock")
	config := filepath.Join(home, ".config/agent-lock")
	elsewhere := filepath.Join(other, "missing")
	o := Options{Dir: home, Command: []string{"true"}, Private: []string{state, config, elsewhere}, Profiles: []string{"none"}}

	_, err := makePlan(o, agent, nil, os.Environ())
	if err == nil || !strings.Contains(err.Error(), "--allow-home") {
		t.Fatalf("DIR = the home without --allow-home: %v", err)
	}
	if _, err := makePlan(Options{Dir: filepath.Dir(home), Command: []string{"true"}}, agent, nil, os.Environ()); err == nil {
		t.Error("DIR holding the home was accepted")
	}

	o.AllowHome = true
	var made []string
	plan, err := makePlan(o, agent, &profile.Maker{Dir: func(p string) error { made = append(made, p); return os.MkdirAll(p, 0o700) }}, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(made, []string{state, config}) {
		t.Errorf("made %v, want the two in the home", made)
	}
	if !slices.Equal(plan.Policy.Private, []string{state, config}) {
		t.Errorf("private %v", plan.Policy.Private)
	}
	var denied []string
	for _, d := range plan.Policy.Denied() {
		denied = append(denied, d.Name)
	}
	for _, p := range []string{state, config} {
		if !slices.Contains(denied, "agent-lock's own "+p) {
			t.Errorf("%s not denied: %v", p, denied)
		}
	}
	notes := strings.Join(plan.Notes, "\n")
	for _, want := range []string{"--allow-home: the agent may read and change all of " + home, "agent-lock's own " + config + " lies where the agent may write"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if _, err := os.Stat(elsewhere); !os.IsNotExist(err) {
		t.Errorf("state out of the agent's reach was made: %v", err)
	}

	// A project beside the home's state: nothing to make, nothing to say.
	proj := filepath.Join(home, "proj")
	os.Mkdir(proj, 0o755)
	made = nil
	plan, err = makePlan(Options{Dir: proj, Command: []string{"true"}, Private: []string{filepath.Join(home, ".cache/x")}, Profiles: []string{"none"}},
		agent, &profile.Maker{Dir: func(p string) error { made = append(made, p); return nil }}, os.Environ())
	if err != nil || len(made) > 0 || len(plan.Notes) > 0 {
		t.Errorf("a project beside the state: made %v, notes %v, %v", made, plan.Notes, err)
	}
}

// TestPlanFollowsADanglingLink: agent-lock's own folder, a symlink to
// where nothing is yet (here into DIR, by a relative link in a folder
// that is itself reached through a link, whose ".." is the real folder's),
// is kept from the agent where the link points, made first there; left
// out, the agent could make it and write a policy file a later session
// trusts. A link loop is refused.
func TestPlanFollowsADanglingLink(t *testing.T) {
	home, _ := filepath.EvalSymlinks(t.TempDir())
	dir := filepath.Join(home, "project")
	os.Mkdir(dir, 0o755)
	// ~/.config -> dotfiles/config; ~/dotfiles/config/agent-lock ->
	// ../../project/cfg, which the kernel reads from ~/dotfiles/config:
	// ~/project/cfg (spelled from ~/.config it would be outside home).
	os.MkdirAll(filepath.Join(home, "dotfiles/config"), 0o755)
	if err := os.Symlink("dotfiles/config", filepath.Join(home, ".config")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../project/cfg", filepath.Join(home, "dotfiles/config/agent-lock")); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(home, ".config/agent-lock")
	agent := Agent{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Home: home, Shell: "/bin/sh"}
	o := Options{Dir: dir, Command: []string{"true"}, Private: []string{config}, Profiles: []string{"none"}}
	var made []string
	mk := &profile.Maker{Dir: func(p string) error { made = append(made, p); return os.MkdirAll(p, 0o700) }}
	plan, err := makePlan(o, agent, mk, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "cfg")
	if !slices.Equal(plan.Policy.Private, []string{target}) || !slices.Equal(made, []string{target}) {
		t.Errorf("private %v, made %v: want %s, where the link points", plan.Policy.Private, made, target)
	}
	if real, err := filepath.EvalSymlinks(config); err != nil || real != target {
		t.Errorf("the kernel finds %s at %s (%v), not at %s", config, real, err, target)
	}

	loop := filepath.Join(home, "loop")
	os.Symlink("loop", loop)
	o.Private = []string{loop}
	if _, err := makePlan(o, agent, mk, os.Environ()); err == nil || !strings.Contains(err.Error(), "fix or remove it") {
		t.Errorf("a link loop as agent-lock's own folder: %v", err)
	}
}
