package session_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-lock/agent-lock/internal/report"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// TestSecretsStayOutOfTheEnvironment: variables named like credentials do
// not reach the agent, its own API key does, --env passes one on purpose,
// and the report names what was withheld. Runs in the test VMs only.
func TestSecretsStayOutOfTheEnvironment(t *testing.T) {
	testenv.NeedVM(t)
	bin := testenv.AgentLockBin(t)
	_, dir := testenv.ProjectDir(t, 4242)
	// An "agent" named claude that prints its environment.
	if err := os.Symlink("/usr/bin/env", filepath.Join(dir, "claude")); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"GITHUB_TOKEN=ghp_secret", "AWS_SECRET_ACCESS_KEY=aws_secret", "ANTHROPIC_API_KEY=sk-ant-own"}

	run := func(extra ...string) (string, *report.Start) {
		t.Helper()
		rep := testenv.ReportPath(t, 4242)
		args := append([]string{"--headless", "--report", rep}, extra...)
		cmd := exec.Command(bin, append(args, dir, "--", "./claude")...)
		cmd.Dir = dir
		// Not this process's environment: a machine's own (a CI
		// runner's AWS_CA_BUNDLE) would be withheld too.
		cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "TERM=dumb", "SUDO_UID=4242", "SUDO_GID=4242"}, secrets...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("agent-lock %v: %v", extra, err)
		}
		return string(out), startRecord(t, rep)
	}

	env, start := run()
	for _, gone := range []string{"ghp_secret", "aws_secret"} {
		if strings.Contains(env, gone) {
			t.Errorf("the agent's environment holds %s:\n%s", gone, env)
		}
	}
	if !strings.Contains(env, "ANTHROPIC_API_KEY=sk-ant-own") {
		t.Errorf("claude was not given its own API key:\n%s", env)
	}
	if strings.Join(start.WithheldEnv, ",") != "AWS_SECRET_ACCESS_KEY,GITHUB_TOKEN" {
		t.Errorf("the report says withheld %v", start.WithheldEnv)
	}

	env, start = run("--env", "GITHUB_TOKEN")
	if !strings.Contains(env, "GITHUB_TOKEN=ghp_secret") || strings.Contains(env, "aws_secret") {
		t.Errorf("--env GITHUB_TOKEN:\n%s", env)
	}
	if strings.Join(start.WithheldEnv, ",") != "AWS_SECRET_ACCESS_KEY" {
		t.Errorf("with --env the report says withheld %v", start.WithheldEnv)
	}
}

// startRecord is the start record of the report at path.
func startRecord(t *testing.T, path string) *report.Start {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var start *report.Start
	report.Read(f, func(r report.Record) error {
		if r.Start != nil {
			start = r.Start
		}
		return nil
	})
	if start == nil {
		t.Fatalf("no start record in %s", path)
	}
	return start
}
