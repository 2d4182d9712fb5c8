package main

import (
	"testing"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestTable checks every technique is complete: a runner that silently
// skips a half-written entry would report a pass it never tested.
func TestTable(t *testing.T) {
	techs, err := selectTechniques("")
	if err != nil {
		t.Fatal(err)
	}
	if len(techs) < 45 {
		t.Errorf("only %d techniques", len(techs))
	}
	for _, tc := range techs {
		t.Run(tc.Name, func(t *testing.T) {
			if tc.Cmd == nil || tc.Effect == nil || tc.Family == "" || tc.Doc == "" {
				t.Fatalf("incomplete: %+v", tc)
			}
			if len(tc.Ops) == 0 && tc.Family != "lifetime" && tc.Refused == "" {
				t.Errorf("no expected op (nor a refusal to start)")
			}
		})
	}
}

func TestMatch(t *testing.T) {
	f := &Fixture{Home: "/home/u", Dir: "/home/u/project", Marker: "m"}
	s := &suite{fix: f}
	rep := &testenv.Report{Escapes: []testenv.Record{
		{Op: "read", Path: "/home/u/project/x", Verdict: "blocked"},
		{Op: "rename", Path: "/home/u/project/inside.txt", Path2: "/home/u/dropped.txt", Verdict: "blocked"},
		{Op: "read", Path: "/home/u/.ssh/id_rsa", Verdict: "allowed"},
		{Op: "signal", TargetPID: 99, Verdict: "blocked"},
	}}
	victim := &service{fields: map[string]string{"pid": "42"}}
	tests := []struct {
		name   string
		tech   Technique
		victim *service
		want   bool
	}{
		{"path2 counts", Technique{Ops: ops("rename"), Path: "~/dropped.txt"}, nil, true},
		{"allowed is not blocked", Technique{Ops: ops("read"), Path: "~/.ssh/id_rsa"}, nil, false},
		{"wrong op", Technique{Ops: ops("write"), Path: "~/project/x"}, nil, false},
		{"any path", Technique{Ops: ops("read")}, nil, true},
		{"signal to another pid", Technique{Ops: ops("signal"), Target: true}, victim, false},
		{"signal without a victim", Technique{Ops: ops("signal")}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f.victim = tc.victim
			if got := s.match(&tc.tech, rep) != nil; got != tc.want {
				t.Errorf("match = %v, want %v", got, tc.want)
			}
		})
	}
}
