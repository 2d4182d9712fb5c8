package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// The recap after the table is what CI's tail shows of a failed guest:
// it must hold the guest's own recap lines, and only those.
func TestPrefixWriterKeepsTheRecap(t *testing.T) {
	var buf bytes.Buffer
	p := &prefixWriter{prefix: "[forky] ", w: &buf, mu: &sync.Mutex{}}
	p.Write([]byte("guest-suite: RUN  lifecycle\nok\n"))
	p.Write([]byte(recapMarker + "\n"))
	p.Write([]byte("  --- lifecycle (exit 1):\n  x_test.go:3: boom\nguest-suite: FAILED on 7.2: lifecycle\n"))
	want := []string{"  --- lifecycle (exit 1):", "  x_test.go:3: boom", "guest-suite: FAILED on 7.2: lifecycle"}
	if strings.Join(p.recap, "|") != strings.Join(want, "|") {
		t.Fatalf("recap = %q, want %q", p.recap, want)
	}
	if !strings.Contains(buf.String(), "[forky] ok\n") {
		t.Fatalf("lines not passed through with their prefix: %q", buf.String())
	}
}
