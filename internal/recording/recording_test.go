package recording

import (
	"context"
	"errors"
	"github.com/agent-lock/agent-lock/internal/asuser"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agent-lock/agent-lock/internal/report"
)

const nobody = 65534

// userHome makes a home folder owned by nobody that nobody can reach.
func userHome(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: recordings are created by root acting as the user (make test runs as root)")
	}
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return home
}

func TestCreateActsAsTheUser(t *testing.T) {
	home := userHome(t)
	dir := Dir(home, "")
	f, err := Create(dir, "s1.jsonl", asuser.ID{UID: nobody, GID: nobody})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, p := range []string{filepath.Join(home, ".local"), dir, f.Name()} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if sys.Uid != nobody || sys.Gid != nobody {
			t.Errorf("%s is owned by %d:%d, want the user's", p, sys.Uid, sys.Gid)
		}
	}
	if st, _ := os.Stat(f.Name()); st.Mode().Perm() != 0o600 {
		t.Errorf("recording mode %v, want 0600: other users must not read it", st.Mode().Perm())
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %v, want 0700", st.Mode().Perm())
	}
	// An existing file is never reused or truncated.
	if _, err := Create(dir, "s1.jsonl", asuser.ID{UID: nobody, GID: nobody}); !errors.Is(err, os.ErrExist) {
		t.Errorf("second Create of the same name: %v, want EEXIST", err)
	}
}

// A user who plants a symlink in their state folder must not get root to
// create files where only root may.
func TestCreateFollowsNoPlantedLink(t *testing.T) {
	home := userHome(t)
	rootOnly := t.TempDir() // root's, 0700
	state := filepath.Join(home, ".local", "state")
	os.MkdirAll(state, 0o755)
	os.Chown(filepath.Join(home, ".local"), nobody, nobody)
	os.Chown(state, nobody, nobody)
	if err := os.Symlink(rootOnly, filepath.Join(state, "agent-lock")); err != nil {
		t.Fatal(err)
	}
	if f, err := Create(Dir(home, ""), "s.jsonl", asuser.ID{UID: nobody, GID: nobody}); err == nil {
		f.Close()
		t.Fatalf("created %s through a planted link into a root-only folder", f.Name())
	}
	if entries, _ := os.ReadDir(rootOnly); len(entries) != 0 {
		t.Errorf("something was created in the root-only folder: %v", entries)
	}
	// A link as the file itself is refused too.
	os.Remove(filepath.Join(state, "agent-lock"))
	os.Mkdir(filepath.Join(state, "agent-lock"), 0o700)
	os.Chown(filepath.Join(state, "agent-lock"), nobody, nobody)
	os.Symlink(filepath.Join(rootOnly, "x"), filepath.Join(state, "agent-lock", "s.jsonl"))
	if f, err := Create(Dir(home, ""), "s.jsonl", asuser.ID{UID: nobody, GID: nobody}); err == nil {
		f.Close()
		t.Fatal("created the recording through a planted file link")
	}
}

func TestForFallsBackOutsideTheProject(t *testing.T) {
	home := userHome(t)
	runBase = t.TempDir()
	t.Cleanup(func() { runBase = "/run/agent-lock" })
	owner := asuser.ID{UID: nobody, GID: nobody}
	d, err := For(filepath.Join(home, "proj"), home, "", owner)
	if err != nil || d != Dir(home, "") {
		t.Errorf("project beside the state folder: %s, %v", d, err)
	}
	// Jailing the whole home would let the agent rewrite its recording.
	d, err = For(home, home, "", owner)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(d, home) || d != filepath.Join(runBase, "65534") {
		t.Errorf("project containing the state folder records in %s", d)
	}
	st, err := os.Stat(d)
	if err != nil || st.Sys().(*syscall.Stat_t).Uid != nobody || st.Mode().Perm() != 0o700 {
		t.Errorf("fallback folder %s: %v %v", d, st, err)
	}
}

func TestDirHonoursAbsoluteXDG(t *testing.T) {
	if got := Dir("/home/a", "/x/state"); got != "/x/state/agent-lock" {
		t.Error(got)
	}
	if got := Dir("/home/a", "relative"); got != "/home/a/.local/state/agent-lock" {
		t.Error(got)
	}
}

func writeRecording(t *testing.T, path string, pid int, ended bool) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := report.NewJSON(f)
	w.Start(report.Start{Time: time.Now(), Mode: report.Enforce, Dir: "/p", Agent: []string{"claude"}, PID: pid})
	w.Escape(report.Event{Time: time.Now(), Op: "read", Path: "/home/a/.ssh/id_rsa", Verdict: report.Blocked})
	if ended {
		w.Summary(report.Summary{Time: time.Now()})
	}
}

func TestRunningListsLiveUnendedSessions(t *testing.T) {
	dir := t.TempDir()
	writeRecording(t, filepath.Join(dir, "live.jsonl"), os.Getpid(), false)
	writeRecording(t, filepath.Join(dir, "ended.jsonl"), os.Getpid(), true)
	writeRecording(t, filepath.Join(dir, "dead.jsonl"), 1<<30, false)
	os.WriteFile(filepath.Join(dir, "junk.jsonl"), []byte("not json\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "live.log"), []byte("agent output\n"), 0o600)
	got, err := Running(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "live" || got[0].Start.Agent[0] != "claude" {
		t.Errorf("running = %+v, want only live", got)
	}
	if p, err := Find(dir, "live"); err != nil || p != filepath.Join(dir, "live.jsonl") {
		t.Errorf("Find live: %s %v", p, err)
	}
	if _, err := Find(dir, "nope"); err == nil {
		t.Error("Find of a missing session succeeded")
	}
	if got, err := Running(filepath.Join(dir, "missing")); err != nil || got != nil {
		t.Errorf("missing folder: %v %v", got, err)
	}
}

// Follow delivers records as they are written, never half a line, and
// stops at the summary.
func TestFollowTailsALiveRecording(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := report.NewJSON(f)
	w.Start(report.Start{Time: time.Now(), Mode: report.Enforce, Dir: "/p", PID: 1})

	var mu sync.Mutex
	var got []report.Record
	done := make(chan error, 1)
	rf, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	go func() {
		done <- Follow(context.Background(), rf, func(rs []report.Record) {
			mu.Lock()
			got = append(got, rs...)
			mu.Unlock()
		})
	}()
	seen := func(n int) bool {
		for range 200 {
			mu.Lock()
			l := len(got)
			mu.Unlock()
			if l >= n {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	if !seen(1) {
		t.Fatal("the start record never arrived")
	}
	// Half a record: nothing may be delivered (or fail) until the rest.
	f.WriteString(`{"type":"escape","time":"2026-01-01T00:00:00Z","pid":5,"tid":5,"comm":"cat","op":"read",`)
	time.Sleep(150 * time.Millisecond)
	f.WriteString(`"path":"/home/a/.aws/credentials","verdict":"blocked","sensitive":true}` + "\n")
	if !seen(2) {
		t.Fatal("the escape written in two parts never arrived")
	}
	w.Summary(report.Summary{Time: time.Now(), ExitCode: 3})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not stop at the summary")
	}
	if got[1].Event == nil || got[1].Event.Path != "/home/a/.aws/credentials" || got[2].Summary.ExitCode != 3 {
		t.Errorf("records %+v", got)
	}
}

func TestFollowStopsWithContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	writeRecording(t, path, 1, false)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Follow(ctx, f, func([]report.Record) {}); !errors.Is(err, context.Canceled) {
		t.Errorf("Follow after cancel: %v", err)
	}
}

// TestUnfinishedTellsDiedFromRunning: after `kill -9` of agent-lock the
// agent may live on (confined, until the next run kills it); the session
// is over all the same. Only the recording agent-lock itself, by pid and
// start time, says whether it runs.
func TestUnfinishedTellsDiedFromRunning(t *testing.T) {
	dir := t.TempDir()
	self, err := ProcessStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, alPID int, alStart uint64) {
		f, err := os.Create(filepath.Join(dir, name+Ext))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		// The agent (this process) is alive in every case.
		report.NewJSON(f).Start(report.Start{Time: time.Now(), Mode: report.Enforce, Dir: "/p", PID: os.Getpid(),
			AgentLockPID: alPID, AgentLockStart: alStart})
	}
	write("running", os.Getpid(), self)
	write("killed", 1<<30, 5)
	write("reused", os.Getpid(), self+1) // the pid now names another process
	got, err := Unfinished(dir)
	if err != nil {
		t.Fatal(err)
	}
	died := map[string]bool{}
	for _, s := range got {
		died[s.ID] = s.Died
	}
	if len(got) != 3 || died["running"] || !died["killed"] || !died["reused"] {
		t.Errorf("died = %v, want only running alive", died)
	}
	if r, _ := Running(dir); len(r) != 1 || r[0].ID != "running" {
		t.Errorf("Running = %+v", r)
	}
}
