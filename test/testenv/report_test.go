package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadReport(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.jsonl")
	lines := `{"type":"start","time":"2026-01-01T00:00:00Z","dir":"/home/u/project","tmpdir":"/tmp/agent-lock-1"}
{"type":"escape","time":"t","pid":7,"tid":7,"comm":"cat","op":"read","path_b64":"L2hvbWUvdS//","verdict":"blocked","sensitive":true}
not json
{"type":"open","time":"t","pid":8,"tid":8,"comm":"cc","op":"read","path":"/home/u/project/a.c","verdict":"in-bounds"}
{"type":"progress","time":"t","in_bounds":1,"system":2,"escapes":1,"lost":0}
{"type":"summary","time":"t","exit_code":1,"in_bounds":3,"system":4,"escapes":1,"lost":0,"duration_ms":5}
`
	if err := os.WriteFile(p, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := ReadReport(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Escapes) != 1 || rep.Escapes[0].Path != "/home/u/\xff" || len(rep.Malformed) != 1 || rep.Progress != 1 ||
		len(rep.Opens) != 1 || rep.Opens[0].Path != "/home/u/project/a.c" || rep.Opens[0].Verdict != "in-bounds" {
		t.Errorf("report = %+v", rep)
	}
	if err := rep.Complete(1); err != nil {
		t.Error(err)
	}
	if err := rep.Complete(0); err == nil {
		t.Error("Complete(0) passed a summary with exit_code 1")
	}
}
