// Package tmuxterm drives a real terminal for the tests: a private tmux
// server (its own socket) whose windows run the commands under test, read
// back as the user would see them.
package tmuxterm

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Term is one private tmux server.
type Term struct {
	Socket string
}

// Start starts a server on socket with one session s and window w of
// cols x rows running shell (sh -c), with no user configuration.
func Start(socket string, cols, rows int, shell string) (*Term, error) {
	t := &Term{Socket: socket}
	_, err := t.Run("-f", "/dev/null", "new-session", "-d", "-s", "s", "-n", "w",
		"-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), "sh", "-c", shell)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Run runs a tmux command against the server.
func (t *Term) Run(args ...string) (string, error) {
	out, err := exec.Command("tmux", append([]string{"-S", t.Socket}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Screen is what window target shows, wrapped lines joined.
func (t *Term) Screen(target string) (string, error) {
	return t.Run("capture-pane", "-p", "-J", "-t", target)
}

// Keys types keys into target, as tmux send-keys names them.
func (t *Term) Keys(target string, keys ...string) error {
	_, err := t.Run(append([]string{"send-keys", "-t", target}, keys...)...)
	return err
}

// WaitFor polls target's screen until it matches re, and returns it; an
// error with the last screen when it never does within the bound. The
// bound only keeps a broken build from hanging a suite: it is not a speed
// target.
func (t *Term) WaitFor(target, re string, within time.Duration) (string, error) {
	r := regexp.MustCompile(re)
	deadline := time.Now().Add(within)
	for {
		s, err := t.Screen(target)
		if err == nil && r.MatchString(s) {
			return s, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return s, err
			}
			return s, fmt.Errorf("%s never showed %q:\n%s", target, re, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill stops the server and everything in its windows.
func (t *Term) Kill() {
	exec.Command("tmux", "-S", t.Socket, "kill-server").Run()
}

// T is a Term for a test: a failed tmux command fails the test, and the
// server is killed when the test ends.
type T struct {
	tb testing.TB
	*Term
}

// New starts a Term for tb (see Start).
func New(tb testing.TB, socket string, cols, rows int, shell string) *T {
	tb.Helper()
	term, err := Start(socket, cols, rows, shell)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(term.Kill)
	return &T{tb: tb, Term: term}
}

// Do runs a tmux command.
func (t *T) Do(args ...string) string {
	t.tb.Helper()
	out, err := t.Run(args...)
	if err != nil {
		t.tb.Fatal(err)
	}
	return out
}

// Shows is target's screen.
func (t *T) Shows(target string) string {
	t.tb.Helper()
	s, err := t.Screen(target)
	if err != nil {
		t.tb.Fatal(err)
	}
	return s
}

// Type types keys into target.
func (t *T) Type(target string, keys ...string) {
	t.tb.Helper()
	if err := t.Keys(target, keys...); err != nil {
		t.tb.Fatal(err)
	}
}

// Await waits until target's screen matches re, and returns it.
func (t *T) Await(target, re string, within time.Duration) string {
	t.tb.Helper()
	s, err := t.WaitFor(target, re, within)
	if err != nil {
		t.tb.Fatal(err)
	}
	return s
}
