package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 6, 1, 17, 4, 5, 123456789, time.UTC)

func roundTrip(t *testing.T, write func(Writer) error) ([]Record, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := write(NewJSON(&buf)); err != nil {
		t.Fatal(err)
	}
	var recs []Record
	if err := Read(bytes.NewReader(buf.Bytes()), func(r Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		t.Fatalf("Read: %v\n%s", err, buf.String())
	}
	return recs, buf.String()
}

func TestJSONGolden(t *testing.T) {
	tests := []struct {
		name  string
		write func(Writer) error
		want  string
	}{
		{
			name: "start",
			write: func(w Writer) error {
				return w.Start(Start{Time: t0, Mode: Enforce, Dir: "/home/alice/proj", Agent: []string{"bash", "-c", "cat <x> & y"},
					PID: 123, User: "alice", UID: 1000, Version: "v0.1.0", Kernel: "6.1.0-18-amd64", Engine: "bpf-lsm", TmpDir: "/tmp/agent-lock-1"})
			},
			want: `{"type":"start","time":"2025-06-01T17:04:05.123456789Z","mode":"enforce","dir":"/home/alice/proj","agent":["bash","-c","cat <x> & y"],"pid":123,"user":"alice","uid":1000,"version":"v0.1.0","kernel":"6.1.0-18-amd64","engine":"bpf-lsm","tmpdir":"/tmp/agent-lock-1"}`,
		},
		{
			name: "start root optional fields omitted",
			write: func(w Writer) error {
				return w.Start(Start{Time: t0, Mode: Audit, Dir: "/src", PID: 1, User: "root", UID: 0, Engine: "bpf-lsm"})
			},
			want: `{"type":"start","time":"2025-06-01T17:04:05.123456789Z","mode":"audit","dir":"/src","agent":[],"pid":1,"user":"root","uid":0,"engine":"bpf-lsm"}`,
		},
		{
			name: "escape",
			write: func(w Writer) error {
				return w.Escape(Event{Time: t0, PID: 1234, TID: 1234, Comm: "cat", Op: "read", Path: "/home/alice/.ssh/id_rsa", Verdict: Blocked, Sensitive: true})
			},
			want: `{"type":"escape","time":"2025-06-01T17:04:05.123456789Z","pid":1234,"tid":1234,"comm":"cat","op":"read","path":"/home/alice/.ssh/id_rsa","verdict":"blocked","sensitive":true}`,
		},
		{
			name: "escape rename and signal",
			write: func(w Writer) error {
				if err := w.Escape(Event{Time: t0, PID: 7, TID: 8, Comm: "mv", Op: "rename", Path: "/a", Path2: "/b", Verdict: Allowed}); err != nil {
					return err
				}
				return w.Escape(Event{Time: t0, PID: 7, TID: 7, Comm: "kill", Op: "signal", TargetPID: 1, Verdict: Blocked})
			},
			want: `{"type":"escape","time":"2025-06-01T17:04:05.123456789Z","pid":7,"tid":8,"comm":"mv","op":"rename","path":"/a","path2":"/b","verdict":"allowed"}` + "\n" +
				`{"type":"escape","time":"2025-06-01T17:04:05.123456789Z","pid":7,"tid":7,"comm":"kill","op":"signal","target_pid":1,"verdict":"blocked"}`,
		},
		{
			name: "escape invalid utf-8",
			write: func(w Writer) error {
				return w.Escape(Event{Time: t0, PID: 1, TID: 1, Comm: "sh", Op: "read", Path: "/x/\xff\xfe\n", Verdict: Blocked})
			},
			want: `{"type":"escape","time":"2025-06-01T17:04:05.123456789Z","pid":1,"tid":1,"comm":"sh","op":"read","path":"/x/\ufffd\ufffd\n","path_b64":"L3gv//4K","verdict":"blocked"}`,
		},
		{
			name: "summary",
			write: func(w Writer) error {
				return w.Summary(Summary{Time: t0.In(time.FixedZone("CEST", 2*3600)), ExitCode: 2, InBounds: 120, System: 800, Escapes: 3, Lost: 0, Duration: 7500*time.Millisecond + 999*time.Microsecond})
			},
			want: `{"type":"summary","time":"2025-06-01T17:04:05.123456789Z","exit_code":2,"in_bounds":120,"system":800,"escapes":3,"lost":0,"duration_ms":7500}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.write(NewJSON(&buf)); err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSuffix(buf.String(), "\n"); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestJSONRoundTrip(t *testing.T) {
	start := Start{Time: t0, Mode: Enforce, Dir: "/home/a/pröj \"x\"", Agent: []string{"claude", "--prompt", "line1\nline2"},
		PID: 4242, User: "a", UID: 1001, Version: "dev", Kernel: "6.12.0", Engine: "bpf-lsm", TmpDir: "/tmp/t",
		LoadTime: 2345678901, AgentLockPID: 4240, AgentLockStart: 123456789,
		Steps:   []Step{{Name: "plan", Time: 12345}, {Name: "load", Time: 2345678901}, {Name: "exec", Time: 1}},
		GitWalk: &GitWalk{Folders: 20053, Remembered: 20000, Unlooked: 19999}}
	events := []Event{
		{Time: t0, PID: 1, TID: 2, Comm: "cat", Op: "read", Path: "/etc/shadow", Verdict: Blocked, Sensitive: true},
		{Time: t0.Add(time.Nanosecond), PID: 3, TID: 3, Comm: "mv", Op: "rename", Path: "/a\x1b[31m", Path2: "/b\u202e", Verdict: Allowed},
		{Time: t0, PID: 5, TID: 5, Comm: "kill", Op: "signal", TargetPID: 1, Verdict: Blocked},
		{Time: t0, PID: 6, TID: 6, Comm: "bpftool", Op: "bpf", Verdict: Blocked},
		{Time: t0, PID: 7, TID: 7, Comm: "\xc3", Op: "write", Path: "/x/\xff\x00y", Path2: "\x80", Verdict: Blocked},
		{Time: t0, PID: 8, TID: 8, Comm: "sh", Op: "create", Path: "/日本語/🔥", Verdict: Blocked},
		{Time: t0, PID: 9, TID: 9, Comm: "sh", Op: "create", Path: "/p/.git/hooks/pre-commit", Verdict: Blocked, Rule: "protected .git/hooks"},
		{Time: t0, PID: 10, TID: 10, Comm: "git", Op: "rename", Path: "/p/.git/config", Verdict: Undone, Rule: "protected .git/config"},
		{Time: t0, PID: 11, TID: 11, Comm: "storm", Op: "read", Path: "/home/a/.ssh/id_rsa", Verdict: Blocked, Repeats: 16000},
	}
	summary := Summary{Time: t0.Add(time.Minute), ExitCode: 137, InBounds: 1 << 40, System: 9, Escapes: 16009, Lost: 2, Repeats: 16000, Duration: time.Minute,
		Hooks: []HookStat{{Name: "file_open", Runs: 200000, Time: 1500 * time.Millisecond}, {Name: "inode_permission", Runs: 3, Time: 1200}},
		Undone: []Undo{{Path: "/p/.git/config", Rule: "protected .git/config", Op: "rename", Count: 2, Action: "put back as it was"},
			{Path: "/p/.envrc\xff", Rule: "protected .envrc", Op: "create", Count: 1, Action: "removed"}},
		LeftChanged: []Undo{{Path: "/p/.git/modules/m/objects/pack/big.pack", Rule: "protected .git/modules", Op: "write", Count: 1,
			Why: "no copy was kept (9000000 bytes)"}}}

	recs, out := roundTrip(t, func(w Writer) error {
		if err := w.Start(start); err != nil {
			return err
		}
		for _, e := range events {
			if err := w.Escape(e); err != nil {
				return err
			}
		}
		return w.Summary(summary)
	})
	if n := strings.Count(out, "\n"); n != len(events)+2 {
		t.Fatalf("%d lines, want %d:\n%s", n, len(events)+2, out)
	}
	if len(recs) != len(events)+2 {
		t.Fatalf("read %d records, want %d", len(recs), len(events)+2)
	}
	if recs[0].Type != TypeStart || !reflect.DeepEqual(*recs[0].Start, start) {
		t.Errorf("start: got %+v, want %+v", recs[0].Start, start)
	}
	for i, e := range events {
		r := recs[i+1]
		if r.Type != TypeEscape || r.Event == nil || r.Start != nil || r.Summary != nil {
			t.Fatalf("record %d: %+v", i+1, r)
		}
		if !r.Event.Time.Equal(e.Time) {
			t.Errorf("event %d time %v, want %v", i, r.Event.Time, e.Time)
		}
		r.Event.Time = e.Time
		if !reflect.DeepEqual(*r.Event, e) {
			t.Errorf("event %d: got %+v, want %+v", i, *r.Event, e)
		}
	}
	last := recs[len(recs)-1]
	if last.Type != TypeSummary || !reflect.DeepEqual(*last.Summary, summary) {
		t.Errorf("summary: got %+v, want %+v", last.Summary, summary)
	}
}

func TestJSONInvalidUTF8Agent(t *testing.T) {
	start := Start{Time: t0, Mode: Enforce, Dir: "/d\xfe", Agent: []string{"ok", "bad\xff"}, Engine: "bpf-lsm", TmpDir: "/t\xfd"}
	recs, out := roundTrip(t, func(w Writer) error { return w.Start(start) })
	for _, k := range []string{`"dir_b64":`, `"agent_b64":["b2s=","YmFk/w=="]`, `"tmpdir_b64":`} {
		if !strings.Contains(out, k) {
			t.Errorf("missing %s in %s", k, out)
		}
	}
	if !reflect.DeepEqual(*recs[0].Start, start) {
		t.Errorf("got %+v, want %+v", *recs[0].Start, start)
	}
}

func TestJSONStampsZeroTime(t *testing.T) {
	defer func(f func() time.Time) { now = f }(now)
	now = func() time.Time { return t0 }
	recs, _ := roundTrip(t, func(w Writer) error { return w.Escape(Event{Op: "read", Verdict: Blocked}) })
	if !recs[0].Event.Time.Equal(t0) {
		t.Errorf("time %v, want %v", recs[0].Event.Time, t0)
	}
}

func TestJSONFlushes(t *testing.T) {
	var buf bytes.Buffer
	bw := bufio.NewWriterSize(&buf, 1<<16)
	w := NewJSON(bw)
	if err := w.Escape(Event{Time: t0, Op: "read", Path: "/x", Verdict: Blocked}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() == 0 || bw.Buffered() != 0 {
		t.Errorf("record still buffered: %d bytes out, %d buffered", buf.Len(), bw.Buffered())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestJSONWriteError(t *testing.T) {
	err := NewJSON(failWriter{}).Escape(Event{Op: "read"})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("err = %v", err)
	}
}

// Concurrent writers must never interleave inside a line.
func TestJSONConcurrent(t *testing.T) {
	var buf bytes.Buffer
	w := NewJSON(&buf)
	const writers, each = 8, 200
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				path := fmt.Sprintf("/g%d/%d/%s", g, i, strings.Repeat("x", i))
				if err := w.Escape(Event{Time: t0, PID: uint32(g), Op: "read", Path: path, Verdict: Blocked}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	n := 0
	if err := Read(&buf, func(r Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != writers*each {
		t.Errorf("read %d records, want %d", n, writers*each)
	}
}

func TestRead(t *testing.T) {
	errStop := errors.New("stop")
	tests := []struct {
		name    string
		in      string
		fnErr   error
		want    []RecordType
		wantErr string
	}{
		{name: "empty", in: ""},
		{name: "blank lines", in: "\n  \n" + `{"type":"summary","exit_code":1}` + "\n\n", want: []RecordType{TypeSummary}},
		{name: "no trailing newline", in: `{"type":"escape","op":"read"}`, want: []RecordType{TypeEscape}},
		{name: "CRLF", in: `{"type":"escape","op":"read"}` + "\r\n", want: []RecordType{TypeEscape}},
		{name: "unknown type and keys", in: `{"type":"heartbeat","x":1}` + "\n" + `{"type":"escape","op":"read","future":true}`, want: []RecordType{"heartbeat", TypeEscape}},
		{name: "malformed", in: `{"type":"escape"}` + "\n" + `{"type":` + "\n" + `{"type":"escape"}`, want: []RecordType{TypeEscape}, wantErr: "report line 2:"},
		{name: "truncated last line", in: `{"type":"escape"}` + "\n" + `{"type":"escape","pa`, want: []RecordType{TypeEscape}, wantErr: "report line 2: truncated record"},
		{name: "no type", in: `{"op":"read"}`, wantErr: `no "type"`},
		{name: "bad time", in: `{"type":"escape","time":"yesterday"}`, wantErr: "time:"},
		{name: "bad b64", in: `{"type":"escape","path_b64":"!!"}`, wantErr: "path_b64"},
		{name: "negative pid", in: `{"type":"escape","pid":-1}`, wantErr: "report line 1"},
		{name: "not an object", in: `[1]`, wantErr: "report line 1"},
		{name: "fn error", in: `{"type":"escape"}` + "\n" + `{"type":"escape"}`, fnErr: errStop, want: []RecordType{TypeEscape}, wantErr: "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []RecordType
			err := Read(strings.NewReader(tt.in), func(r Record) error {
				got = append(got, r.Type)
				return tt.fnErr
			})
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
			if tt.fnErr != nil && !errors.Is(err, tt.fnErr) {
				t.Errorf("err = %v, want fn's error", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("records %v, want %v", got, tt.want)
			}
		})
	}
}

// A start record with a huge argv spans many reads of the buffered reader.
func TestReadLongLine(t *testing.T) {
	arg := strings.Repeat("a\x01", 300<<10)
	recs, _ := roundTrip(t, func(w Writer) error {
		return w.Start(Start{Time: t0, Agent: []string{"sh", "-c", arg}})
	})
	if len(recs) != 1 || recs[0].Start.Agent[2] != arg {
		t.Fatalf("long argv did not survive")
	}
}

func TestReadTooLong(t *testing.T) {
	r := io.MultiReader(strings.NewReader(`{"type":"start","agent":["`), strings.NewReader(strings.Repeat("a", MaxLine)))
	err := Read(r, func(Record) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("err = %v", err)
	}
}

// Every record is one JSON object on one line, whatever the path holds.
func TestJSONOneLine(t *testing.T) {
	var buf bytes.Buffer
	w := NewJSON(&buf)
	for _, p := range []string{"/a\nb", "/a\rb", "/a\u2028b\u2029", "/a\x00b", "/\x1b]0;pwned\x07", "/\xff\n\xfe"} {
		if err := w.Escape(Event{Time: t0, Op: "read", Path: p, Verdict: Blocked}); err != nil {
			t.Fatal(err)
		}
		line := buf.String()
		buf.Reset()
		if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
			t.Errorf("path %q: not one line: %q", p, line)
		}
		if !json.Valid([]byte(line)) {
			t.Errorf("path %q: invalid JSON %q", p, line)
		}
		for _, c := range line[:len(line)-1] {
			if c < 0x20 || c == '\u2028' || c == '\u2029' {
				t.Errorf("path %q: raw control %U in %q", p, c, line)
			}
		}
	}
}

// TestJSONOpenIsNoEscape: an in-bounds sample is written as an "open"
// record and read back as Record.Open with the in-bounds verdict, never as
// an escape (Record.Event), whatever verdict the line claims.
func TestJSONOpenIsNoEscape(t *testing.T) {
	var b bytes.Buffer
	w := NewJSON(&b)
	e := Event{Time: t0, PID: 7, TID: 7, Comm: "cc", Op: "read", Path: "/home/alice/proj/main.c", Verdict: InBounds, Rule: "project directory"}
	if err := w.Open(e); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), `{"type":"open",`) || !strings.Contains(b.String(), `"verdict":"in-bounds"`) {
		t.Errorf("open record: %s", b.String())
	}
	forged := strings.Replace(b.String(), `"in-bounds"`, `"blocked"`, 1)
	var recs []Record
	if err := Read(strings.NewReader(b.String()+forged), func(r Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Type != TypeOpen || r.Event != nil || r.Open == nil || r.Open.Path != e.Path || r.Open.Verdict != InBounds {
			t.Errorf("read back %+v (open %+v)", r, r.Open)
		}
	}
	if len(recs) != 2 {
		t.Errorf("%d records, want 2", len(recs))
	}
}
