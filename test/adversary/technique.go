package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// Technique is one way a same-uid agent might reach past DIR.
type Technique struct {
	Name   string
	Family string
	Doc    string

	// Ops are the report ops that count as this technique being caught;
	// the first is the one expected. Empty: the technique has no single
	// operation to refuse (lifetime), and only its effect is judged.
	Ops []string
	// Path, when set, must be a substring of the record's path or path2
	// ("~" stands for the home directory).
	Path string
	// Target: the record's target_pid, when it has one, must be the
	// victim's.
	Target bool

	Needs needs
	// Skip returns why this technique cannot be tried on this machine
	// (a kernel setting or a missing tool), or "".
	Skip func(f *Fixture) string
	// Setup adds to the standard fixture.
	Setup func(f *Fixture) error
	// Flags are agent-lock's flags for the jailed run (a profile).
	Flags []string
	// Granted are the names, relative to the home, that Flags let the
	// agent make and change outside DIR: what happens to them (and to the
	// home's own link count and times) is no leak.
	Granted []string
	// Cmd is the attack, run in DIR as the user.
	Cmd func(f *Fixture) []string
	// TTY runs the attack on a fresh terminal (script), and afterwards
	// reads one line from that terminal outside the jail, as the user's
	// shell would.
	TTY bool
	// InheritHome passes an open descriptor of the home directory as fd 3,
	// as a careless parent might.
	InheritHome bool
	// InheritFile passes an open descriptor (read-only) of this file,
	// relative to the home, as fd 5, after two of /dev/null (as a make
	// jobserver's pair would be): a CI runner's or a service's. Not fd 3,
	// which the Landlock engine's first process gets its ruleset on.
	InheritFile string
	// Settle is how long to wait after the run before judging the effect.
	Settle time.Duration
	// Effect describes what the attack achieved, or "" if nothing.
	Effect func(f *Fixture, o *outcome) string
	// Excuse, when set, may explain why a jailed run has no record: the
	// attack was stopped before it reached the kernel check, for a reason
	// the output shows.
	Excuse func(o *outcome) string

	// The supervisor family's (supervisor.go), whose harm is agent-lock's
	// own doing as root:
	// Naive, when set, judges the unjailed run in Effect's place: it does
	// (or checks for) what agent-lock did before it acted as the user,
	// and returns the harm that did, "" for none (the technique is VOID).
	Naive func(f *Fixture) string
	// Refused: the jailed run must end with agent-lock refusing to start
	// (exit 125) and saying this.
	Refused string
	// InHome: DIR is the home itself (with Flags' --allow-home).
	InHome bool
	// ReportIn: the jailed run's --report goes here, not to the suite's
	// scratch folder.
	ReportIn string
}

// dir is DIR for t.
func (f *Fixture) dir(t *Technique) string {
	if t.InHome {
		return f.Home
	}
	return f.Dir
}

// outcome is what a run left behind.
type outcome struct {
	res       testenv.Result
	out       string
	survivors []testenv.ProcInfo
}

// exitSkip is what a technique exits with when the kernel makes the
// attack impossible even without a jail; it prints "SKIP: reason".
const exitSkip = 77

// expander replaces {name} placeholders with fixture values.
func (f *Fixture) expand(s string) string {
	r := []string{
		"{home}", f.Home,
		"{dir}", f.Dir,
		"{work}", f.Work,
		"{user}", f.U.Name,
		"{helper}", filepath.Join(f.Dir, "advhelper"),
		"{longname}", longName,
		"{abstract}", f.abstractName(),
		"{inabstract}", f.inAbstractName(),
		"{pts}", f.pts,
		"{ipckey}", strconv.Itoa(f.ipcKey()),
		"{keydesc}", f.keyDesc(),
		"{cgdst}", f.cgroupDir("dst"),
	}
	if f.victim != nil {
		r = append(r, "{vpid}", f.victim.field("pid"), "{vaddr}", f.victim.field("addr"),
			"{vlen}", f.victim.field("len"), "{vfd}", f.victim.field("fd"))
	}
	return strings.NewReplacer(r...).Replace(s)
}

// bash is an attack written as a bash script.
func bash(script string) func(*Fixture) []string {
	return func(f *Fixture) []string { return []string{"/bin/bash", "-c", f.expand(script)} }
}

// py is an attack written in Python.
func py(code string) func(*Fixture) []string {
	return func(f *Fixture) []string { return []string{"/usr/bin/python3", "-c", f.expand(code)} }
}

// helper is an attack this binary makes itself (-technique-helper), for
// system calls no shell tool offers. prefix runs before it (unshare).
func helper(prefix []string, args ...string) func(*Fixture) []string {
	return func(f *Fixture) []string {
		argv := append([]string{}, prefix...)
		argv = append(argv, filepath.Join(f.Dir, "advhelper"), "-technique-helper")
		for _, a := range args {
			argv = append(argv, f.expand(a))
		}
		return argv
	}
}

func ops(o ...string) []string { return o }

// Effects.

func leaked(f *Fixture, o *outcome) string {
	if strings.Contains(o.out, f.Marker) {
		return "secret in output"
	}
	return ""
}

func outputHas(s string) func(*Fixture, *outcome) string {
	return func(f *Fixture, o *outcome) string {
		if strings.Contains(o.out, f.expand(s)) {
			return fmt.Sprintf("output has %q", f.expand(s))
		}
		return ""
	}
}

func exists(rel string) func(*Fixture, *outcome) string {
	return func(f *Fixture, o *outcome) string {
		p := f.expand(rel)
		if _, err := os.Lstat(p); err == nil {
			return p + " exists"
		}
		return ""
	}
}

func gone(rel string) func(*Fixture, *outcome) string {
	return func(f *Fixture, o *outcome) string {
		p := f.expand(rel)
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			return p + " is gone"
		}
		return ""
	}
}

// changed: the file no longer holds want.
func changed(rel, want string) func(*Fixture, *outcome) string {
	return func(f *Fixture, o *outcome) string {
		p := f.expand(rel)
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Sprintf("%s unreadable: %v", p, err)
		}
		if string(b) != f.expand(want) {
			return fmt.Sprintf("%s now holds %q", p, testenv.Tail(b, 2))
		}
		return ""
	}
}

func stat(f *Fixture, rel string) *syscall.Stat_t {
	var st syscall.Stat_t
	if syscall.Lstat(f.expand(rel), &st) != nil {
		return nil
	}
	return &st
}

func either(effects ...func(*Fixture, *outcome) string) func(*Fixture, *outcome) string {
	return func(f *Fixture, o *outcome) string {
		for _, e := range effects {
			if s := e(f, o); s != "" {
				return s
			}
		}
		return ""
	}
}

func victimDead(f *Fixture, o *outcome) string {
	if f.victim == nil {
		return ""
	}
	select {
	case <-f.victim.done:
		return "the outside process died: " + f.victim.cmd.ProcessState.String()
	case <-time.After(500 * time.Millisecond):
		return ""
	}
}

func serviceGot(name, s string) func(*Fixture, *outcome) string {
	return func(f *Fixture, o *outcome) string {
		// The service logs what it got asynchronously. Two seconds, not
		// less: a leak seen late on a busy machine must still count (and
		// the Landlock engine's expected leaks must still show).
		for i := 0; i < 40; i++ {
			for _, svc := range f.services {
				if svc.name == name && strings.Contains(svc.logText(), s) {
					return fmt.Sprintf("the outside %s received %q", name, s)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		return ""
	}
}

func survived(f *Fixture, o *outcome) string {
	if len(o.survivors) == 0 {
		return ""
	}
	var s []string
	for _, p := range o.survivors {
		s = append(s, p.String())
	}
	return "still running: " + strings.Join(s, "; ")
}

// Skips.

func ptraceScope(f *Fixture) string {
	if v := sysctl("kernel.yama.ptrace_scope"); v != "" && v != "0" {
		return "yama ptrace_scope=" + v + " forbids attaching to a non-child even without a jail"
	}
	return ""
}

func missing(tool string) func(*Fixture) string {
	return func(*Fixture) string {
		if testenv.Which(tool) == "" {
			return tool + " is not installed"
		}
		return ""
	}
}

// families, in the order they run.
var families = [][]Technique{
	filesTechniques,
	pathTechniques,
	execTechniques,
	sealingTechniques,
	mountTechniques,
	processTechniques,
	ipcTechniques,
	scratchTechniques,
	lifetimeTechniques,
	terminalTechniques,
	kernelTechniques,
	persistenceTechniques,
	protectedTechniques,
	namedTechniques,
	supervisorTechniques,
}

func allTechniques() []Technique {
	var all []Technique
	for _, fam := range families {
		all = append(all, fam...)
	}
	return all
}

func itoa(n int) string { return strconv.Itoa(n) }
