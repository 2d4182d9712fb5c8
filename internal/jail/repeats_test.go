package jail_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepeatsCoalesced: one process refused the same open 500 times in a
// row is reported a few times, each report saying how many repeats it
// stands for; the counters still count every one (escapes = reports +
// repeats + lost). Another file, and the same file from another process,
// are reported on their own: a repeat is the same process, operation and
// target. So is each of a series of refused creates of new names in one
// folder.
func TestRepeatsCoalesced(t *testing.T) {
	c := newCell(t, false)
	if err := os.WriteFile(filepath.Join(c.out, "other"), []byte("other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	repeatsCoalesced(t, c)
}

// TestObserveRepeatsCoalesced: the observers' refusals, which name what
// was refused as the process gave it, are coalesced the same way, by the
// name itself. Here the kernel's permission check refuses (root's files
// and folder; no Landlock in these tests): the observers do not tell
// whose refusal it was.
func TestObserveRepeatsCoalesced(t *testing.T) {
	c := newObserved(t)
	for _, f := range []string{"secret", "other"} {
		if err := os.WriteFile(filepath.Join(c.out, f), []byte(f+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(c.out, 0, 0); err != nil {
		t.Fatal(err)
	}
	repeatsCoalesced(t, c)
}

// repeatsCoalesced runs the storm in c, whose $OUT/secret and $OUT/other
// the cell may not read nor $OUT write.
func repeatsCoalesced(t *testing.T, c *cell) {
	secret := filepath.Join(c.out, "secret")
	other := filepath.Join(c.out, "other")
	before, err := c.j.Counters()
	if err != nil {
		t.Fatal(err)
	}
	// `true < FILE` opens FILE in the shell itself: one process
	// throughout (not `:`, a special builtin: its failed redirection
	// would end the shell).
	if out, err := c.run(`i=0; while [ $i -lt 500 ]; do true 2>/dev/null < "$OUT/secret"; i=$((i+1)); done
		true 2>/dev/null < "$OUT/other"; cat "$OUT/secret" 2>/dev/null
		for n in 1 2 3 4 5 6 7 8; do true 2>/dev/null > "$OUT/new-$n"; done; echo done`); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	evs := c.events()
	after, err := c.j.Counters()
	if err != nil {
		t.Fatal(err)
	}
	n := after.Sub(before)
	var shell, shellRepeats, cat, others int
	created := map[string]bool{}
	for _, ev := range evs {
		switch {
		case strings.HasPrefix(filepath.Base(ev.Path), "new-"): // a create (the hooks), a write (the observers)
			created[filepath.Base(ev.Path)] = true
		case ev.Path == other:
			others++
		case ev.Path == secret && ev.Comm == "cat":
			cat++
		case ev.Path == secret:
			shell++
			shellRepeats += int(ev.Repeats)
		}
	}
	t.Logf("500 refused opens of one file by one process: %d reports carrying %d repeats; counters: %d escapes, %d repeats, %d lost",
		shell, shellRepeats, n.Escapes, n.Repeats, n.Lost)
	if n.Lost != 0 {
		t.Fatalf("%d reports lost: the test cannot tell", n.Lost)
	}
	if n.Escapes != 500+1+1+8 {
		t.Errorf("the counters count %d escapes, want 510: every refusal is counted", n.Escapes)
	}
	// Eight creates of new names in one folder in a row: each is named,
	// none a repeat of another. (A freed negative dentry whose address
	// the next one takes is why the key holds the name's hash: that
	// reuse did not happen here in any kernel, with or without the
	// hash, so this does not test it.)
	for i := 1; i <= 8; i++ {
		if name := fmt.Sprintf("new-%d", i); !created[name] {
			t.Errorf("the refused create of %s was not reported (reported: %v)", name, created)
		}
	}
	if shell == 0 || shell >= 500 || n.Repeats == 0 {
		t.Errorf("%d reports of 500 refusals and %d repeats counted: repeats are not coalesced", shell, n.Repeats)
	}
	if uint64(shell)+n.Repeats != 500 {
		t.Errorf("%d reports + %d repeats != 500 refusals", shell, n.Repeats)
	}
	if uint64(shellRepeats) > n.Repeats {
		t.Errorf("the reports carry %d repeats, more than the %d counted", shellRepeats, n.Repeats)
	}
	if others != 1 || cat != 1 {
		t.Errorf("the other file reported %d times and the same file from another process %d times, want 1 and 1", others, cat)
	}
}
