package report

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

type failing struct{}

func (failing) Start(Start) error       { return errors.New("disk full") }
func (failing) Escape(Event) error      { return errors.New("disk full") }
func (failing) Summary(Summary) error   { return errors.New("disk full") }
func (failing) Progress(Progress) error { return errors.New("disk full") }
func (failing) Open(Event) error        { return errors.New("disk full") }

func TestTeeWritesAllAndJoinsErrors(t *testing.T) {
	var a, b bytes.Buffer
	w := Tee(NewJSON(&a), failing{}, NewJSON(&b))
	if err := w.Start(Start{Time: time.Unix(1, 0), Dir: "/p"}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Start error %v", err)
	}
	w.Escape(Event{Time: time.Unix(2, 0), Op: "read", Path: "/x"})
	w.Summary(Summary{Time: time.Unix(3, 0)})
	if a.String() != b.String() || strings.Count(a.String(), "\n") != 3 {
		t.Errorf("writers after a failing one missed records:\n%s\n%s", a.String(), b.String())
	}
}

func TestProgressRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	want := Progress{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), InBounds: 80, System: 610, Escapes: 2, Lost: 1}
	if err := NewJSON(&buf).Progress(want); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), `{"type":"progress","time":"2026-01-02T03:04:05Z","in_bounds":80`) {
		t.Errorf("wire form %s", buf.String())
	}
	var got []Record
	if err := Read(&buf, func(r Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Progress == nil || *got[0].Progress != want {
		t.Errorf("read back %+v", got)
	}
	var text bytes.Buffer
	NewText(&text).Progress(want)
	if text.Len() != 0 {
		t.Errorf("the text report prints progress: %q", text.String())
	}
}

func TestWithheldEnvRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	NewJSON(&buf).Start(Start{Time: time.Unix(1, 0), Dir: "/p", WithheldEnv: []string{"A_TOKEN", "AWS_X"}})
	if !strings.Contains(buf.String(), `"withheld_env":["A_TOKEN","AWS_X"]`) {
		t.Errorf("wire form %s", buf.String())
	}
	var got *Start
	Read(&buf, func(r Record) error { got = r.Start; return nil })
	if got == nil || strings.Join(got.WithheldEnv, ",") != "A_TOKEN,AWS_X" {
		t.Errorf("read back %+v", got)
	}
}

func TestLimitsRoundTripAndText(t *testing.T) {
	var buf, text bytes.Buffer
	s := Start{Time: time.Unix(1, 0), Dir: "/p", Engine: "landlock (ABI 7)", Limits: []string{"inotify watches outside", "x"}}
	NewJSON(&buf).Start(s)
	NewText(&text).Start(s)
	var got *Start
	Read(&buf, func(r Record) error { got = r.Start; return nil })
	if got == nil || strings.Join(got.Limits, ",") != "inotify watches outside,x" || got.Engine != s.Engine {
		t.Errorf("read back %+v", got)
	}
	if !strings.Contains(text.String(), "this engine leaves open: \"inotify watches outside\"; x") {
		t.Errorf("text report: %q", text.String())
	}
}
