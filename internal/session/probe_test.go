package session

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-lock/agent-lock/internal/engine"
	"github.com/agent-lock/agent-lock/internal/verdict"
)

// fakeProbeCell runs, for the self-test's `cat TARGET`, what run says
// instead, and reports nothing.
type fakeProbeCell struct {
	engine.Cell // the self-test calls no other method
	run         func(argv []string) *exec.Cmd
	events      chan verdict.Event
}

func (f *fakeProbeCell) Command(_ string, argv, env []string, _ *syscall.SysProcAttr) (*exec.Cmd, error) {
	// The refusal's words are read in C's locale: the only locale
	// setting is LC_ALL=C, whichever of duplicates a program reads.
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if (k == "LANG" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_")) && kv != "LC_ALL=C" {
			return nil, fmt.Errorf("the self-test's cat has %s in its environment", kv)
		}
	}
	return f.run(argv), nil
}

func (f *fakeProbeCell) Events() <-chan verdict.Event { return f.events }

// TestProbeSaysWhatFailed: the self-test's one process tells a cell that
// does not enforce from one whose processes cannot run at all, and both
// from a refusal.
func TestProbeSaysWhatFailed(t *testing.T) {
	if _, err := exec.LookPath("cat"); err != nil {
		t.Skip("no cat")
	}
	// agent-lock's own locale, which the self-test must not pass on.
	t.Setenv("LC_ALL", "de_DE.UTF-8")
	t.Setenv("LANGUAGE", "de")
	for _, tt := range []struct {
		name string
		run  func(argv []string) *exec.Cmd
		want string
	}{
		{"unconfined", func(argv []string) *exec.Cmd { return exec.Command("cat", argv[1:]...) }, "do not enforce"},
		{"no such program", func([]string) *exec.Cmd { return exec.Command("/nonexistent/cat") }, "could not run `cat`"},
		{"a loader's failure", func([]string) *exec.Cmd {
			return exec.Command("sh", "-c", "echo 'cat: error while loading shared libraries: libc.so.6: Permission denied' >&2; exit 127")
		}, "could not run `cat`"},
		{"refused, never reported", func(argv []string) *exec.Cmd {
			return exec.Command("sh", "-c", `echo "cat: $1: Permission denied" >&2; exit 1`, "sh", argv[1])
		}, "not reported"},
		{"refused by BusyBox, never reported", func(argv []string) *exec.Cmd {
			return exec.Command("sh", "-c", `echo "cat: can't open '$1': Permission denied" >&2; exit 1`, "sh", argv[1])
		}, "not reported"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &cell{cg: &cgroup{Path: t.TempDir()}, eng: &fakeProbeCell{run: tt.run, events: make(chan verdict.Event)}}
			err := c.probe(context.Background(), false)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("self-test: %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
