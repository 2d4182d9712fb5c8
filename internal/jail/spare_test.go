package jail_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// TestSpareHandedOn: a load the Keeper made ahead is handed to another
// process as descriptors (as the daemon hands it to a session's
// agent-lock), which attaches it to a cell it makes only then: the load is
// the spare (its step says so), the cell enforces and reports, nothing
// the process starts holds the descriptors, and the keeper has the next
// load ready. Natively the spare is the Landlock engine's observers (this
// kernel refuses the hooks), in the VMs the BPF LSM's hooks.
func TestSpareHandedOn(t *testing.T) {
	if desc := os.Getenv("AGENT_LOCK_SPARE_CHILD"); desc != "" {
		spareChild(t, desc)
		return
	}
	needObservers(t)
	k := jail.NewKeeper(func() bool { return false }, t.Logf)
	defer k.Close()
	k.Wait()
	// Attached with no cell, the spare jails nobody.
	outside := exec.Command("/bin/sh", "-c", `cat /etc/passwd >/dev/null && echo x >"$T/made" && echo ok`)
	outside.Env = []string{"PATH=/usr/bin:/bin", "T=" + t.TempDir()}
	if got, err := outside.CombinedOutput(); err != nil || string(got) != "ok\n" {
		t.Fatalf("a process with the spare attached: %v: %s", err, got)
	}
	sp := k.Take(nil)
	if sp == nil {
		t.Fatal("no spare load")
	}
	h, files, err := sp.Hand()
	sp.Close() // the descriptors handed keep the objects
	if err != nil {
		t.Fatal(err)
	}
	desc, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSpareHandedOn$", "-test.v")
	cmd.Env = append(os.Environ(), "AGENT_LOCK_SPARE_CHILD="+string(desc))
	cmd.ExtraFiles = files
	out, err := cmd.CombinedOutput()
	for _, f := range files {
		f.Close()
	}
	if err != nil || !strings.Contains(string(out), "SPARE-TAKEN") {
		t.Fatalf("the process handed the spare: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	k.Wait()
	next := k.Take(nil)
	if next == nil {
		t.Fatal("the keeper loaded no next spare")
	}
	next.Close()
}

func spareChild(t *testing.T, desc string) {
	var h struct{ Key struct{ Observe bool } }
	if err := json.Unmarshal([]byte(desc), &h); err != nil {
		t.Fatal(err)
	}
	if err := jail.Adopt([]byte(desc), 3); err != nil {
		t.Fatal(err)
	}
	held, err := exec.Command("/bin/sh", "-c", `for f in /proc/$$/fd/*; do readlink "$f"; done; true`).Output()
	if err != nil || strings.Contains(string(held), "bpf") {
		t.Fatalf("a process started after the spare was taken holds: %v\n%s", err, held)
	}
	cg := newCgroup(t, needObservers(t))
	root := t.TempDir()
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(root, 0o755)
	dir, out := filepath.Join(root, "project"), filepath.Join(root, "project2")
	for _, d := range []string{dir, out} {
		os.Mkdir(d, 0o755)
		os.Chown(d, testUID, testUID)
	}
	os.WriteFile(filepath.Join(out, "secret"), []byte("SECRET-MARKER\n"), 0o644)
	var rules []spec.Rule
	for _, r := range (policy.Policy{Dir: dir}).Rules() {
		if !h.Key.Observe || r.Access&spec.Scratch == 0 {
			rules = append(rules, r)
		}
	}
	if h.Key.Observe {
		// The daemon loaded the observers because this kernel refuses
		// the hooks: auto tries the hooks first, and then the Landlock
		// engine must still find the observers.
		if _, err := jail.Begin(jail.Config{CgroupID: cg.id, Rules: rules}).Attach(""); err == nil {
			t.Fatal("the hooks loaded where the daemon's did not")
		}
	}
	j, err := jail.Begin(jail.Config{CgroupID: cg.id, Observe: h.Key.Observe, Rules: rules}).Attach("")
	if err != nil {
		t.Fatal(err)
	}
	if steps := j.Steps(); steps[0].Name != "load_ahead" || steps[1].Name != "attach_ahead" {
		t.Fatalf("the cell loaded or attached its own programs: %+v", steps)
	}
	if _, err := j.LinkFiles(); err != nil {
		t.Fatalf("the spare's attachments: %v", err)
	}
	c := startCell(t, cg, j, dir, out)
	got, _ := c.run(`cat "$OUT/secret"; echo done`)
	if strings.Contains(got, "SECRET-MARKER") != h.Key.Observe || !strings.HasSuffix(got, "done\n") {
		t.Fatalf("the cell's script printed %q", got)
	}
	secret := filepath.Join(out, "secret")
	for _, e := range c.events() {
		if e.Path == secret && e.Op == "read" {
			t.Logf("SPARE-TAKEN: %+v", e)
			return
		}
	}
	t.Fatal("the cell reported no read of the secret")
}
