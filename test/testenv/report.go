package testenv

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Record is one line of agent-lock's JSON-lines report, all three types in
// one struct. The suites parse the wire format themselves, so they test
// what agent-lock writes rather than share its reader.
type Record struct {
	Type string `json:"type"`
	Time string `json:"time"`

	// escape
	PID       int    `json:"pid"`
	TID       int    `json:"tid"`
	Comm      string `json:"comm"`
	Op        string `json:"op"`
	Path      string `json:"path"`
	PathB64   string `json:"path_b64"`
	Path2     string `json:"path2"`
	Path2B64  string `json:"path2_b64"`
	TargetPID int    `json:"target_pid"`
	Verdict   string `json:"verdict"`
	Sensitive bool   `json:"sensitive"`
	Rule      string `json:"rule"`
	// Repeats: in an escape, the same escape's repeats since its last
	// report; in a summary, all the repeats the kernel coalesced.
	Repeats int64 `json:"repeats"`
	// A network reach's name, address and port.
	Host string `json:"host"`
	Addr string `json:"addr"`
	Port int    `json:"port"`

	// start
	Engine string `json:"engine"`
	Dir    string `json:"dir"`
	TmpDir string `json:"tmpdir"`
	LoadNS int64  `json:"load_ns"`
	Steps  []Step `json:"start_steps"`

	// summary
	ExitCode *int   `json:"exit_code"`
	InBounds int64  `json:"in_bounds"`
	System   int64  `json:"system"`
	Escapes  int64  `json:"escapes"`
	Lost     int64  `json:"lost"`
	Hooks    []Hook `json:"hooks"`
}

// Step is one step of a session's start (report.Step).
type Step struct {
	Name string `json:"step"`
	NS   int64  `json:"ns"`
}

// Hook is one program's runs and time, in a summary written while the
// kernel's BPF statistics were on.
type Hook struct {
	Name string `json:"name"`
	Runs uint64 `json:"runs"`
	NS   int64  `json:"ns"`
}

func (r Record) String() string {
	s := fmt.Sprintf("%s %s %q", r.Verdict, r.Op, r.Path)
	if r.Path2 != "" {
		s += fmt.Sprintf(" -> %q", r.Path2)
	}
	if r.TargetPID != 0 {
		s += fmt.Sprintf(" target=%d", r.TargetPID)
	}
	return s + fmt.Sprintf(" (%s pid %d)", r.Comm, r.PID)
}

// Report is a parsed report file.
type Report struct {
	Start   *Record
	Escapes []Record
	// Opens are the samples of in-bounds opens a live view shows (the
	// kernel streams at most one per CPU every 100 ms).
	Opens     []Record
	Summary   *Record
	Progress  int      // running-tally records, which the suites do not judge
	Malformed []string // lines that are not JSON objects with a known type
}

// ReadReport parses a report file. Paths that are not UTF-8 come back
// from their base64 twins.
func ReadReport(path string) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	defer f.Close()
	rep := &Report{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			rep.Malformed = append(rep.Malformed, line)
			continue
		}
		switch r.Type {
		case "start":
			rep.Start = &r
		case "escape", "open":
			if b, err := base64.StdEncoding.DecodeString(r.PathB64); err == nil && r.PathB64 != "" {
				r.Path = string(b)
			}
			if b, err := base64.StdEncoding.DecodeString(r.Path2B64); err == nil && r.Path2B64 != "" {
				r.Path2 = string(b)
			}
			if r.Type == "open" {
				rep.Opens = append(rep.Opens, r)
			} else {
				rep.Escapes = append(rep.Escapes, r)
			}
		case "summary":
			rep.Summary = &r
		case "progress":
			rep.Progress++
		default:
			rep.Malformed = append(rep.Malformed, line)
		}
	}
	if err := sc.Err(); err != nil {
		return rep, fmt.Errorf("read report: %w", err)
	}
	return rep, nil
}

// Complete says what is missing for the report to be a whole session's:
// a start record and a summary whose exit code matches exit.
func (rep *Report) Complete(exit int) error {
	switch {
	case rep.Start == nil:
		return fmt.Errorf("report has no start record")
	case rep.Summary == nil:
		return fmt.Errorf("report has no summary record")
	case rep.Summary.ExitCode == nil:
		return fmt.Errorf("report summary has no exit_code")
	case *rep.Summary.ExitCode != exit:
		return fmt.Errorf("report summary says exit_code %d, agent-lock exited %d", *rep.Summary.ExitCode, exit)
	}
	return nil
}
