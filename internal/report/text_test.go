package report

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestText(t *testing.T) {
	ts := time.Date(2025, 6, 1, 19, 4, 5, 123456789, time.Local)
	clock := ts.Format("15:04:05.000")
	tests := []struct {
		name  string
		write func(Writer) error
		want  string
	}{
		{
			name: "start",
			write: func(w Writer) error {
				return w.Start(Start{Time: ts, Mode: Enforce, Dir: "/home/alice/proj", Agent: []string{"bash", "-c", "echo hi"},
					PID: 1200, User: "alice", UID: 1000, Version: "v0.1.0", Kernel: "6.1.0", Engine: "bpf-lsm", TmpDir: "/tmp/al"})
			},
			want: ts.Format("2006-01-02 15:04:05.000 -0700") + ` START enforce /home/alice/proj: bash -c "echo hi"  (pid 1200, user alice uid 1000, agent-lock v0.1.0, kernel 6.1.0, bpf-lsm, tmpdir /tmp/al)`,
		},
		{
			name: "blocked sensitive",
			write: func(w Writer) error {
				return w.Escape(Event{Time: ts, PID: 1234, TID: 1234, Comm: "cat", Op: "read", Path: "/home/alice/.ssh/id_rsa", Verdict: Blocked, Sensitive: true, Rule: "home secret ~/.ssh"})
			},
			want: clock + " BLOCKED read /home/alice/.ssh/id_rsa  (cat pid 1234) [home secret ~/.ssh] 🔥sensitive",
		},
		{
			name: "allowed rename from a thread",
			write: func(w Writer) error {
				return w.Escape(Event{Time: ts, PID: 10, TID: 11, Comm: "node", Op: "rename", Path: "/a/x", Path2: "/b/ü", Verdict: Allowed})
			},
			want: clock + " ALLOWED rename /a/x -> /b/ü  (node pid 10 tid 11)",
		},
		{
			name: "signal",
			write: func(w Writer) error {
				return w.Escape(Event{Time: ts, PID: 10, TID: 10, Comm: "kill", Op: "signal", TargetPID: 1, Verdict: Blocked})
			},
			want: clock + " BLOCKED signal -> pid 1  (kill pid 10)",
		},
		{
			name: "no process recorded",
			write: func(w Writer) error {
				return w.Escape(Event{Time: ts, Op: "mkdir", Path: "/home/alice/other", Verdict: Blocked, Rule: "Landlock's audit record"})
			},
			want: clock + " BLOCKED mkdir /home/alice/other  (process not recorded) [Landlock's audit record]",
		},
		{
			name: "hostile names",
			write: func(w Writer) error {
				return w.Escape(Event{Time: ts, PID: 1, TID: 1, Comm: "a b", Op: "create",
					Path: "/x\n19:04:05.000 ALLOWED read /fake  (sh pid 1)", Path2: "/\x1b[2J\u202egpj.exe\xff", Verdict: Blocked})
			},
			want: clock + ` BLOCKED create "/x\n19:04:05.000 ALLOWED read /fake  (sh pid 1)" -> "/\x1b[2J\u202egpj.exe\xff"  ("a b" pid 1)`,
		},
		{
			name: "summary",
			write: func(w Writer) error {
				return w.Summary(Summary{Time: ts, ExitCode: 0, InBounds: 120, System: 800, Escapes: 1, Duration: 7500*time.Millisecond + 300*time.Microsecond})
			},
			want: clock + " SUMMARY exit 0 after 7.5s: 1 escape, 120 in bounds, 800 system, 0 lost",
		},
		{
			name: "summary lost",
			write: func(w Writer) error {
				return w.Summary(Summary{Time: ts, ExitCode: 1, Escapes: 5, Lost: 3, Duration: time.Second})
			},
			want: clock + " SUMMARY exit 1 after 1s: 5 escapes, 0 in bounds, 0 system, 3 lost (incomplete: the kernel's ring buffer overflowed)",
		},
		{
			name: "summary undone",
			write: func(w Writer) error {
				return w.Summary(Summary{Time: ts, Escapes: 3, Duration: time.Second,
					Undone: []Undo{{Path: "/p/.git/config", Op: "rename", Count: 2, Action: "put back as it was"},
						{Path: "/p/.env rc", Op: "create", Count: 1, Action: "removed"}},
					LeftChanged: []Undo{{Path: "/p/.git/modules/x", Op: "write", Count: 1, Why: "no copy was kept\n(big)"}}})
			},
			want: clock + " SUMMARY exit 0 after 1s: 3 escapes, 0 in bounds, 0 system, 0 lost" +
				"\n  undone (put back as they were): /p/.git/config (rename 2 times, put back as it was); \"/p/.env rc\" (create, removed)" +
				"\n  LEFT CHANGED (could not be put back): /p/.git/modules/x (write, no copy was kept\\n(big))",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.write(NewText(&buf)); err != nil {
				t.Fatal(err)
			}
			got := buf.String()
			if got != tt.want+"\n" {
				t.Errorf("got\n%q\nwant\n%q", got, tt.want+"\n")
			}
		})
	}
}

func TestAppendQuoted(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"/plain/path.txt", "/plain/path.txt"},
		{"/ünïcödé/日本", "/ünïcödé/日本"},
		{"/with space", `"/with space"`},
		{`/q"uote`, `"/q\"uote"`},
		{`/back\slash`, `"/back\\slash"`},
		{"/tab\t", `"/tab\t"`},
		{"/nl\n", `"/nl\n"`},
		{"/cr\r", `"/cr\r"`},
		{"/esc\x1b[31m", `"/esc\x1b[31m"`},
		{"/del\x7f", `"/del\x7f"`},
		{"/csi\u009b", `"/csi\u009b"`},
		{"/bidi\u202e", `"/bidi\u202e"`},
		{"/zwsp\u200b", `"/zwsp\u200b"`},
		{"/nbsp\u00a0", `"/nbsp\u00a0"`},
		{"/ls\u2028", `"/ls\u2028"`},
		{"/bad\xff", `"/bad\xff"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := string(appendQuoted(nil, tt.in)); got != tt.want {
				t.Errorf("appendQuoted(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// No byte sequence in a name reaches the output as a control character.
func TestTextNoControls(t *testing.T) {
	var buf bytes.Buffer
	w := NewText(&buf)
	for c := range 0x100 {
		name := "/" + string(rune(c)) + string([]byte{byte(c)})
		if err := w.Escape(Event{Time: time.Now(), Comm: name, Op: "read", Path: name, Path2: name, Verdict: Blocked}); err != nil {
			t.Fatal(err)
		}
	}
	out := strings.TrimSuffix(buf.String(), "\n")
	if n := strings.Count(out, "\n"); n != 0xff {
		t.Errorf("%d lines, want 256", n+1)
	}
	for _, c := range strings.ReplaceAll(out, "\n", "") {
		if c < 0x20 || c >= 0x7f && c < 0xa0 || c == '\u2028' || c == '\u2029' {
			t.Fatalf("control %U in output", c)
		}
	}
}

func TestTextConcurrent(t *testing.T) {
	var buf bytes.Buffer
	w := NewText(&buf)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if err := w.Escape(Event{Time: time.Now(), Comm: "cat", Op: "read", Path: "/x", Verdict: Blocked}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for line := range strings.Lines(buf.String()) {
		if !strings.HasSuffix(line, "BLOCKED read /x  (cat pid 0)\n") {
			t.Fatalf("torn line %q", line)
		}
	}
}
