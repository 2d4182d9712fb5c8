package report

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
	"unicode/utf8"
)

// The JSON shapes of the records. They are separate from the model so
// the model stays plain Go and the wire format (docs/report-schema.md) is
// spelled out in one place: field order here is key order on the wire.

type jsonStart struct {
	Type      RecordType `json:"type"`
	Time      string     `json:"time"`
	Mode      Mode       `json:"mode"`
	Dir       string     `json:"dir"`
	DirB64    string     `json:"dir_b64,omitempty"`
	Agent     []string   `json:"agent"`
	AgentB64  []string   `json:"agent_b64,omitempty"`
	PID       int        `json:"pid"`
	User      string     `json:"user"`
	UID       int        `json:"uid"`
	Version   string     `json:"version,omitempty"`
	Kernel    string     `json:"kernel,omitempty"`
	Engine    string     `json:"engine"`
	TmpDir    string     `json:"tmpdir,omitempty"`
	TmpDirB64 string     `json:"tmpdir_b64,omitempty"`
	Withheld  []string   `json:"withheld_env,omitempty"`
	Limits    []string   `json:"limits,omitempty"`
	Profiles  []string   `json:"profiles,omitempty"`
	LoadNS    int64      `json:"load_ns,omitempty"`
	Steps     []jsonStep `json:"start_steps,omitempty"`
	ALPID     int        `json:"agent_lock_pid,omitempty"`
	ALStart   uint64     `json:"agent_lock_start,omitempty"`
	GitWalk   *jsonWalk  `json:"git_walk,omitempty"`
}

type jsonWalk struct {
	Folders    int `json:"folders"`
	Remembered int `json:"remembered"`
	Unlooked   int `json:"unlooked"`
}

type jsonStep struct {
	Step string `json:"step"`
	NS   int64  `json:"ns"`
}

func jsonSteps(steps []Step) []jsonStep {
	var js []jsonStep
	for _, s := range steps {
		js = append(js, jsonStep{Step: s.Name, NS: s.Time.Nanoseconds()})
	}
	return js
}

type jsonEvent struct {
	Type      RecordType `json:"type"`
	Time      string     `json:"time"`
	PID       uint32     `json:"pid"`
	TID       uint32     `json:"tid"`
	Comm      string     `json:"comm"`
	CommB64   string     `json:"comm_b64,omitempty"`
	Op        string     `json:"op"`
	Path      string     `json:"path,omitempty"`
	PathB64   string     `json:"path_b64,omitempty"`
	Path2     string     `json:"path2,omitempty"`
	Path2B64  string     `json:"path2_b64,omitempty"`
	TargetPID uint32     `json:"target_pid,omitempty"`
	Verdict   Verdict    `json:"verdict"`
	Sensitive bool       `json:"sensitive,omitempty"`
	Rule      string     `json:"rule,omitempty"`
	Repeats   uint32     `json:"repeats,omitempty"`
	Host      string     `json:"host,omitempty"`
	Addr      string     `json:"addr,omitempty"`
	Port      uint16     `json:"port,omitempty"`
}

type jsonSummary struct {
	Type       RecordType `json:"type"`
	Time       string     `json:"time"`
	ExitCode   int        `json:"exit_code"`
	InBounds   uint64     `json:"in_bounds"`
	System     uint64     `json:"system"`
	Escapes    uint64     `json:"escapes"`
	Lost       uint64     `json:"lost"`
	Repeats    uint64     `json:"repeats,omitempty"`
	DurationMS int64      `json:"duration_ms"`
	Hooks      []jsonHook `json:"hooks,omitempty"`
	Undone     []jsonUndo `json:"undone,omitempty"`
	Left       []jsonUndo `json:"left_changed,omitempty"`
}

type jsonUndo struct {
	Path    string `json:"path"`
	PathB64 string `json:"path_b64,omitempty"`
	Rule    string `json:"rule"`
	Op      string `json:"op"`
	Count   int    `json:"count"`
	Action  string `json:"action,omitempty"`
	Why     string `json:"why,omitempty"`
}

func undos(us []Undo) []jsonUndo {
	var out []jsonUndo
	for _, u := range us {
		out = append(out, jsonUndo{Path: u.Path, PathB64: b64(u.Path), Rule: u.Rule, Op: u.Op, Count: u.Count, Action: u.Action, Why: u.Why})
	}
	return out
}

func (js jsonUndo) model() (Undo, error) {
	p, err := raw("path", js.Path, js.PathB64)
	return Undo{Path: p, Rule: js.Rule, Op: js.Op, Count: js.Count, Action: js.Action, Why: js.Why}, err
}

type jsonHook struct {
	Name string `json:"name"`
	Runs uint64 `json:"runs"`
	NS   int64  `json:"ns"`
}

type jsonProgress struct {
	Type     RecordType `json:"type"`
	Time     string     `json:"time"`
	InBounds uint64     `json:"in_bounds"`
	System   uint64     `json:"system"`
	Escapes  uint64     `json:"escapes"`
	Lost     uint64     `json:"lost"`
}

// now is replaced in tests.
var now = time.Now

// stamp formats t for the wire; a zero time is stamped with the time of
// writing, because a record without a time is useless to a reader.
func stamp(t time.Time) string {
	if t.IsZero() {
		t = now()
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// b64 returns the base64 twin of s: empty when s is valid UTF-8 (JSON carries
// it exactly), the raw bytes otherwise (encoding/json would replace the
// invalid bytes with U+FFFD).
func b64(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}

func agentB64(args []string) []string {
	for _, a := range args {
		if !utf8.ValidString(a) {
			enc := make([]string, len(args))
			for i, a := range args {
				enc[i] = base64.StdEncoding.EncodeToString([]byte(a))
			}
			return enc
		}
	}
	return nil
}

type jsonWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf bytes.Buffer
	enc *json.Encoder
}

// NewJSON returns a Writer of JSON lines, the schema in
// docs/report-schema.md: one object per line, "type" first, times in
// RFC 3339 UTC. Each record reaches w in a single Write, followed by Flush
// when w has one.
func NewJSON(w io.Writer) Writer {
	j := &jsonWriter{w: w}
	j.enc = json.NewEncoder(&j.buf)
	// Paths are full of nothing HTML cares about; \u003c in a log helps no one.
	j.enc.SetEscapeHTML(false)
	return j
}

func (j *jsonWriter) Start(s Start) error {
	agent := s.Agent
	if agent == nil {
		agent = []string{}
	}
	return j.write(TypeStart, jsonStart{
		Type:      TypeStart,
		Time:      stamp(s.Time),
		Mode:      s.Mode,
		Dir:       s.Dir,
		DirB64:    b64(s.Dir),
		Agent:     agent,
		AgentB64:  agentB64(s.Agent),
		PID:       s.PID,
		User:      s.User,
		UID:       s.UID,
		Version:   s.Version,
		Kernel:    s.Kernel,
		Engine:    s.Engine,
		TmpDir:    s.TmpDir,
		TmpDirB64: b64(s.TmpDir),
		Withheld:  s.WithheldEnv,
		Limits:    s.Limits,
		Profiles:  s.Profiles,
		LoadNS:    s.LoadTime.Nanoseconds(),
		Steps:     jsonSteps(s.Steps),
		ALPID:     s.AgentLockPID,
		ALStart:   s.AgentLockStart,
		GitWalk:   jsonGitWalk(s.GitWalk),
	})
}

func jsonGitWalk(w *GitWalk) *jsonWalk {
	if w == nil {
		return nil
	}
	return &jsonWalk{Folders: w.Folders, Remembered: w.Remembered, Unlooked: w.Unlooked}
}

func (j *jsonWriter) Escape(e Event) error { return j.event(TypeEscape, e) }

func (j *jsonWriter) Open(e Event) error { return j.event(TypeOpen, e) }

func (j *jsonWriter) event(t RecordType, e Event) error {
	return j.write(t, jsonEvent{
		Type:      t,
		Time:      stamp(e.Time),
		PID:       e.PID,
		TID:       e.TID,
		Comm:      e.Comm,
		CommB64:   b64(e.Comm),
		Op:        e.Op,
		Path:      e.Path,
		PathB64:   b64(e.Path),
		Path2:     e.Path2,
		Path2B64:  b64(e.Path2),
		TargetPID: e.TargetPID,
		Verdict:   e.Verdict,
		Sensitive: e.Sensitive,
		Rule:      e.Rule,
		Repeats:   e.Repeats,
		Host:      e.Host,
		Addr:      e.Addr,
		Port:      e.Port,
	})
}

func (j *jsonWriter) Summary(s Summary) error {
	var hooks []jsonHook
	for _, h := range s.Hooks {
		hooks = append(hooks, jsonHook{Name: h.Name, Runs: h.Runs, NS: h.Time.Nanoseconds()})
	}
	return j.write(TypeSummary, jsonSummary{
		Hooks:      hooks,
		Type:       TypeSummary,
		Time:       stamp(s.Time),
		ExitCode:   s.ExitCode,
		InBounds:   s.InBounds,
		System:     s.System,
		Escapes:    s.Escapes,
		Lost:       s.Lost,
		Repeats:    s.Repeats,
		DurationMS: s.Duration.Milliseconds(),
		Undone:     undos(s.Undone),
		Left:       undos(s.LeftChanged),
	})
}

func (j *jsonWriter) Progress(p Progress) error {
	return j.write(TypeProgress, jsonProgress{
		Type: TypeProgress, Time: stamp(p.Time), InBounds: p.InBounds, System: p.System,
		Escapes: p.Escapes, Lost: p.Lost,
	})
}

func (j *jsonWriter) write(t RecordType, v any) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf.Reset()
	if err := j.enc.Encode(v); err != nil { // Encode ends the line with '\n'
		return fmt.Errorf("encode %s record: %w", t, err)
	}
	if _, err := j.w.Write(j.buf.Bytes()); err != nil {
		return fmt.Errorf("write %s record: %w", t, err)
	}
	return flush(j.w, t)
}

// flush pushes a record through a buffering writer (bufio.Writer and the
// like) so that a report tailed live is never a record behind.
func flush(w io.Writer, t RecordType) error {
	f, ok := w.(interface{ Flush() error })
	if !ok {
		return nil
	}
	if err := f.Flush(); err != nil {
		return fmt.Errorf("flush %s record: %w", t, err)
	}
	return nil
}

// MaxLine is the longest line Read accepts. A start record carries the
// agent's whole argv, which Linux bounds at a few MiB; 16 MiB leaves room for
// JSON escaping without letting a corrupt file exhaust memory.
const MaxLine = 16 << 20

// Read parses a JSON-lines report and calls fn for each record, in order.
// Blank lines are skipped; a record of an unknown type is passed to fn with
// only Type set, so a newer writer does not break an older reader. Unknown
// keys are ignored for the same reason. Where a *_b64 twin is present, the
// raw bytes it carries replace the U+FFFD-substituted text.
//
// Read stops at the first error: a malformed line (reported with its line
// number) or whatever fn returns, which Read returns unwrapped.
func Read(r io.Reader, fn func(Record) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for n := 1; ; n++ {
		line = line[:0]
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			line = append(line, chunk...)
			if len(line) > MaxLine {
				return fmt.Errorf("report line %d: longer than %d bytes", n, MaxLine)
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read report: %w", err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			rec, perr := parseRecord(line)
			if perr != nil {
				if err == io.EOF {
					// The writer may be mid-record: a live file's last line
					// can be cut short.
					return fmt.Errorf("report line %d: truncated record: %w", n, perr)
				}
				return fmt.Errorf("report line %d: %w", n, perr)
			}
			if ferr := fn(rec); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

func parseRecord(line []byte) (Record, error) {
	var probe struct {
		Type RecordType `json:"type"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return Record{}, err
	}
	rec := Record{Type: probe.Type}
	switch probe.Type {
	case TypeStart:
		var js jsonStart
		if err := json.Unmarshal(line, &js); err != nil {
			return Record{}, err
		}
		s, err := js.model()
		if err != nil {
			return Record{}, err
		}
		rec.Start = &s
	case TypeEscape, TypeOpen:
		var je jsonEvent
		if err := json.Unmarshal(line, &je); err != nil {
			return Record{}, err
		}
		e, err := je.model()
		if err != nil {
			return Record{}, err
		}
		if probe.Type == TypeOpen {
			e.Verdict = InBounds
			rec.Open = &e
		} else {
			rec.Event = &e
		}
	case TypeSummary:
		var js jsonSummary
		if err := json.Unmarshal(line, &js); err != nil {
			return Record{}, err
		}
		s, err := js.model()
		if err != nil {
			return Record{}, err
		}
		rec.Summary = &s
	case TypeProgress:
		var jp jsonProgress
		if err := json.Unmarshal(line, &jp); err != nil {
			return Record{}, err
		}
		t, err := parseTime(jp.Time)
		if err != nil {
			return Record{}, err
		}
		rec.Progress = &Progress{Time: t, InBounds: jp.InBounds, System: jp.System, Escapes: jp.Escapes, Lost: jp.Lost}
	case "":
		return Record{}, errors.New(`record has no "type"`)
	}
	return rec, nil
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time: %w", err)
	}
	return t, nil
}

// raw returns text, or the bytes in its twin when there is one.
func raw(key, text, twin string) (string, error) {
	if twin == "" {
		return text, nil
	}
	b, err := base64.StdEncoding.DecodeString(twin)
	if err != nil {
		return "", fmt.Errorf("%s_b64: %w", key, err)
	}
	return string(b), nil
}

func (js jsonStart) model() (Start, error) {
	t, err := parseTime(js.Time)
	if err != nil {
		return Start{}, err
	}
	s := Start{
		Time: t, Mode: js.Mode, Agent: js.Agent, PID: js.PID, User: js.User, UID: js.UID,
		Version: js.Version, Kernel: js.Kernel, Engine: js.Engine,
	}
	if s.Dir, err = raw("dir", js.Dir, js.DirB64); err != nil {
		return Start{}, err
	}
	s.WithheldEnv = js.Withheld
	s.Limits = js.Limits
	s.Profiles = js.Profiles
	s.LoadTime = time.Duration(js.LoadNS)
	for _, st := range js.Steps {
		s.Steps = append(s.Steps, Step{Name: st.Step, Time: time.Duration(st.NS)})
	}
	s.AgentLockPID, s.AgentLockStart = js.ALPID, js.ALStart
	if js.GitWalk != nil {
		s.GitWalk = &GitWalk{Folders: js.GitWalk.Folders, Remembered: js.GitWalk.Remembered, Unlooked: js.GitWalk.Unlooked}
	}
	if s.TmpDir, err = raw("tmpdir", js.TmpDir, js.TmpDirB64); err != nil {
		return Start{}, err
	}
	if js.AgentB64 != nil {
		s.Agent = make([]string, len(js.AgentB64))
		for i, a := range js.AgentB64 {
			if s.Agent[i], err = raw("agent", "", a); err != nil {
				return Start{}, err
			}
		}
	}
	return s, nil
}

func (je jsonEvent) model() (Event, error) {
	t, err := parseTime(je.Time)
	if err != nil {
		return Event{}, err
	}
	e := Event{
		Time: t, PID: je.PID, TID: je.TID, Op: je.Op,
		TargetPID: je.TargetPID, Verdict: je.Verdict, Sensitive: je.Sensitive,
		Rule: je.Rule, Repeats: je.Repeats, Host: je.Host, Addr: je.Addr, Port: je.Port,
	}
	if e.Comm, err = raw("comm", je.Comm, je.CommB64); err != nil {
		return Event{}, err
	}
	if e.Path, err = raw("path", je.Path, je.PathB64); err != nil {
		return Event{}, err
	}
	if e.Path2, err = raw("path2", je.Path2, je.Path2B64); err != nil {
		return Event{}, err
	}
	return e, nil
}

func (js jsonSummary) model() (Summary, error) {
	t, err := parseTime(js.Time)
	if err != nil {
		return Summary{}, err
	}
	var hooks []HookStat
	for _, h := range js.Hooks {
		hooks = append(hooks, HookStat{Name: h.Name, Runs: h.Runs, Time: time.Duration(h.NS)})
	}
	s := Summary{
		Time: t, ExitCode: js.ExitCode, InBounds: js.InBounds, System: js.System,
		Escapes: js.Escapes, Lost: js.Lost, Repeats: js.Repeats, Duration: time.Duration(js.DurationMS) * time.Millisecond,
		Hooks: hooks,
	}
	for _, u := range js.Undone {
		m, err := u.model()
		if err != nil {
			return Summary{}, err
		}
		s.Undone = append(s.Undone, m)
	}
	for _, u := range js.Left {
		m, err := u.model()
		if err != nil {
			return Summary{}, err
		}
		s.LeftChanged = append(s.LeftChanged, m)
	}
	return s, nil
}

// ParseLine parses one JSON-lines record, as Read does for each line; it is
// for readers that split lines themselves, such as one following a live
// report.
func ParseLine(line []byte) (Record, error) { return parseRecord(line) }
