package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// supervisorTechniques turn what agent-lock itself does as root against
// the user: a report path that leads where the user may not write, a
// report or recording the agent could forge, a policy file that widens the
// next cell. Their harm is done by the supervisor, not by the agent's
// command, so most carry a Naive check: what agent-lock did before it
// acted as the user (done here, as root, in place of the effect of the
// unjailed run), which must do harm for the technique to prove anything.

// rootVictim is a file of root's that the user may not write.
func rootVictim(f *Fixture) string { return filepath.Join(f.Work, "root-victim") }

const rootVictimText = "root's own file\n"

// plantRootVictim makes the victim anew: a naive run before may have
// given it to the user.
func plantRootVictim(f *Fixture) error {
	os.Remove(rootVictim(f))
	return os.WriteFile(rootVictim(f), []byte(rootVictimText), 0o644)
}

// rootVictimHarmed: the victim lost its contents or became the user's.
func rootVictimHarmed(f *Fixture, _ *outcome) string {
	var st syscall.Stat_t
	if err := syscall.Stat(rootVictim(f), &st); err != nil {
		return "root's file is gone: " + err.Error()
	}
	b, _ := os.ReadFile(rootVictim(f))
	if string(b) != rootVictimText || st.Uid != 0 {
		return fmt.Sprintf("root's file %s now holds %d bytes, owner uid %d", rootVictim(f), len(b), st.Uid)
	}
	return ""
}

// naiveReport does what agent-lock did with --report path before it acted
// as the user: root opens it, following links, empties it and gives it
// to the user.
func naiveReport(path string) func(f *Fixture) string {
	return func(f *Fixture) string {
		p := f.expand(path)
		fd, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return ""
		}
		fd.Chown(f.U.UID, f.U.GID)
		fd.Close()
		if h := rootVictimHarmed(f, nil); h != "" {
			return h
		}
		if b, err := os.ReadFile(filepath.Join(f.Home, ".bashrc")); err == nil && len(b) == 0 {
			return "~/.bashrc emptied through the report's path"
		}
		return ""
	}
}

// trustedPolicy is the project's policy file the user trusted: it grants
// ~/bin, read-only.
const trustedPolicy = "allow = [\"~/bin\"]\n"

// trustProject writes DIR's policy file and the user's trust in it, as
// agent-lock trust would.
func trustProject(f *Fixture) error {
	if err := f.U.WriteFile(filepath.Join(f.Dir, ".agent-lock.toml"), trustedPolicy, 0o644); err != nil {
		return err
	}
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(trustedPolicy)))
	entry := fmt.Sprintf("[[trusted]]\nproject = %q\nsha256 = %q\n", f.Dir, sum)
	if err := f.U.WriteFile(filepath.Join(f.Home, ".config/agent-lock/policy.toml"), entry, 0o600); err != nil {
		return err
	}
	return f.U.WriteFile(filepath.Join(f.Home, ".config/agent-lock/trusted", sum+".toml"), trustedPolicy, 0o600)
}

var supervisorTechniques = []Technique{
	{Name: "report-root-file", Family: "supervisor", Doc: "--report names a file of root's: agent-lock (root) empties it and gives it to the user",
		Setup: plantRootVictim, Flags: []string{"--report", "{work}/root-victim"},
		Cmd: bash("true"), Naive: naiveReport("{work}/root-victim"), Effect: rootVictimHarmed,
		Refused: "permission denied: agent-lock writes the report as you"},
	{Name: "report-symlink-root", Family: "supervisor", Doc: "--report names a symlink, planted in DIR, to a file of root's",
		Setup: func(f *Fixture) error {
			if err := plantRootVictim(f); err != nil {
				return err
			}
			return f.U.Symlink(rootVictim(f), filepath.Join(f.Dir, "report.json"))
		},
		Flags: []string{"--report", "{dir}/report.json"},
		Cmd:   bash("true"), Naive: naiveReport("{dir}/report.json"), Effect: rootVictimHarmed,
		Refused: "is a symbolic link: agent-lock does not follow it"},
	{Name: "report-symlink-home", Family: "supervisor", Doc: "--report names a symlink, planted in DIR, to the user's ~/.bashrc",
		Setup: func(f *Fixture) error {
			return f.U.Symlink(filepath.Join(f.Home, ".bashrc"), filepath.Join(f.Dir, "report.json"))
		},
		Flags: []string{"--report", "{dir}/report.json"},
		Cmd:   bash("true"), Naive: naiveReport("{dir}/report.json"),
		Effect:  changed("{home}/.bashrc", "# ~/.bashrc\nalias ll='ls -l'\n"),
		Refused: "is a symbolic link: agent-lock does not follow it"},
	{Name: "report-hardlink-home", Family: "supervisor", Doc: "--report names a hard link, made in DIR, to the user's ~/.bashrc",
		Setup: func(f *Fixture) error {
			return f.U.Link(filepath.Join(f.Home, ".bashrc"), filepath.Join(f.Dir, "report.json"))
		},
		Flags: []string{"--report", "{dir}/report.json"},
		Cmd:   bash("true"), Naive: naiveReport("{dir}/report.json"),
		Effect:  changed("{home}/.bashrc", "# ~/.bashrc\nalias ll='ls -l'\n"),
		Refused: "hard links: writing it would change the other names too"},
	{Name: "report-forged", Family: "supervisor", Doc: "the agent rewrites a --report file in DIR with a clean summary",
		Ops: ops("read"), Path: "~/.ssh/id_rsa", ReportIn: "{dir}/report.jsonl",
		Cmd: bash(`cat {home}/.ssh/id_rsa; sleep 0.5
printf '{"type":"summary","time":"2026-01-01T00:00:00Z","exit_code":0,"in_bounds":1,"system":1,"escapes":0,"lost":0,"duration_ms":1,"forged":"by-the-agent"}\n' > {dir}/report.jsonl`),
		Effect: func(f *Fixture, o *outcome) string {
			// A line of its own (the agent's argv in the start record
			// holds the same text, quoted).
			b, _ := os.ReadFile(filepath.Join(f.Dir, "report.jsonl"))
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, `{"type":"summary"`) && strings.Contains(l, "by-the-agent") {
					return "the report holds the agent's forged summary: " + l
				}
			}
			return ""
		}},
	{Name: "recording-rewrite", Family: "supervisor", Doc: "with DIR = the home (--allow-home), rewrite and remove an earlier session's recording",
		Ops: ops("write", "unlink", "create", "rename"), Path: "~/" + recordings, InHome: true, Flags: []string{"--allow-home"},
		Setup: func(f *Fixture) error {
			return f.U.WriteFile(filepath.Join(f.Home, recordings, "20260101T000000Z-1.jsonl"), earlierRecording, 0o600)
		},
		Cmd:    bash("echo '{\"type\":\"summary\",\"escapes\":0}' >> {home}/" + recordings + "/20260101T000000Z-1.jsonl; rm -f {home}/" + recordings + "/20260101T000000Z-1.jsonl"),
		Effect: changed("{home}/"+recordings+"/20260101T000000Z-1.jsonl", earlierRecording)},
	{Name: "policy-file-widen", Family: "supervisor", Doc: "rewrite a trusted project's policy file so that the next session grants ~/outside.txt",
		Ops: ops("write", "create", "rename"), Path: ".agent-lock.toml", Setup: trustProject,
		Cmd: bash(`printf 'allow = ["~/bin", "~/outside.txt"]\n' > {dir}/.agent-lock.toml.new && mv {dir}/.agent-lock.toml.new {dir}/.agent-lock.toml`),
		Naive: func(f *Fixture) string {
			// Trust by path would take whatever the file now says.
			if b, _ := os.ReadFile(filepath.Join(f.Dir, ".agent-lock.toml")); strings.Contains(string(b), "outside.txt") {
				return "the trusted project's policy file now grants ~/outside.txt"
			}
			return ""
		},
		Effect: func(f *Fixture, o *outcome) string {
			// The user's next session in the project.
			res := f.nextSession([]string{"cat", filepath.Join(f.Home, "outside.txt")})
			if strings.Contains(string(res.Output), strings.TrimSpace(outsideText)) {
				return "the next session read ~/outside.txt: " + strings.TrimSpace(string(res.Output))
			}
			// Where the agent could change the file (Landlock), the next
			// session must refuse it and say why.
			b, _ := os.ReadFile(filepath.Join(f.Dir, ".agent-lock.toml"))
			if string(b) != trustedPolicy && !strings.Contains(string(res.Output), "changed since you trusted it") {
				return "the changed policy file was not refused: " + testenv.Tail(res.Output, 2)
			}
			return ""
		}},
}

// earlierRecording is a recording of a session before this one.
const earlierRecording = `{"type":"start","time":"2026-01-01T00:00:00Z","mode":"enforce","dir":"/p","agent":["sh"],"pid":1,"user":"u","uid":1,"engine":"bpf-lsm"}
{"type":"escape","time":"2026-01-01T00:00:01Z","pid":2,"tid":2,"comm":"cat","op":"read","path":"/home/u/.ssh/id_rsa","verdict":"blocked"}
{"type":"summary","time":"2026-01-01T00:00:02Z","exit_code":0,"in_bounds":0,"system":0,"escapes":1,"lost":0,"duration_ms":2000}
`
