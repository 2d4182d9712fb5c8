package main

import (
	"path/filepath"
	"strings"
)

// claudeMade are what agent-lock makes for the claude profile on a first
// run (~/.claude and ~/.claude.json, and ~/.npm for the node toolchain it
// runs on).
var claudeMade = []string{".claude", ".claude.json", ".npm"}

// claudeGrants are those and the sibling names the techniques make.
var claudeGrants = append([]string{".claude.json.x", ".claude.json.d"}, claudeMade...)

// namedTechniques go through a file the agent's profile grants by name
// (claude: ~/.claude.json, with the siblings its saves make, F.tmp.N and
// F.lock) to what lies next to it in the home.
var namedTechniques = []Technique{
	{Name: "named-sibling-rename-in", Family: "named", Doc: "rename an outside file onto a sibling name of ~/.claude.json",
		Ops: ops("rename"), Path: "~/project2/secret.txt", Flags: claudeProfile, Granted: claudeGrants,
		Cmd:    bash(`mv {home}/project2/secret.txt {home}/.claude.json.x && cat {home}/.claude.json.x`),
		Effect: exists("{home}/.claude.json.x")},
	{Name: "named-sibling-hardlink", Family: "named", Doc: "hard-link an outside file at a sibling name of ~/.claude.json",
		Ops: ops("link"), Path: "~/project2/secret.txt", Flags: claudeProfile, Granted: claudeGrants,
		Cmd:    bash(`ln {home}/project2/secret.txt {home}/.claude.json.x && cat {home}/.claude.json.x`),
		Effect: exists("{home}/.claude.json.x")},
	{Name: "named-sibling-symlink", Family: "named", Doc: "a sibling of ~/.claude.json that is a symlink to an outside file",
		Ops: ops("read"), Path: "~/project2/secret.txt", Flags: claudeProfile, Granted: claudeGrants,
		Cmd:    bash(`ln -s project2/secret.txt {home}/.claude.json.x; cat {home}/.claude.json.x`),
		Effect: leaked, Excuse: symlinkRefused},
	{Name: "named-sibling-folder", Family: "named", Doc: "make a sibling of ~/.claude.json a folder and fill it",
		Ops: ops("create"), Path: "~/.claude.json.d/payload", Flags: claudeProfile, Granted: append([]string{".claude.json.d"}, claudeMade...),
		Cmd:    bash(`mkdir {home}/.claude.json.d; echo x > {home}/.claude.json.d/payload`),
		Effect: exists("{home}/.claude.json.d/payload"), Excuse: mkdirRefused},
	{Name: "named-sibling-folder-steal", Family: "named", Doc: "move the user's own folder with a sibling's name into DIR",
		Ops: ops("rename"), Path: "~/.claude.json.old", Flags: claudeProfile, Granted: claudeMade,
		Setup: func(f *Fixture) error {
			return f.U.WriteFile(filepath.Join(f.Home, ".claude.json.old/notes"), "old-"+f.Marker+"\n", 0o600)
		},
		Cmd:    bash(`mv {home}/.claude.json.old {dir}/stolen && cat {dir}/stolen/notes`),
		Effect: exists("{dir}/stolen")},
	{Name: "named-other-name", Family: "named", Doc: "make a file next to ~/.claude.json whose name only begins like it",
		Ops: ops("create", "write"), Path: "~/.claude.jsonx", Flags: claudeProfile, Granted: claudeMade,
		Cmd:    bash(`echo x > {home}/.claude.jsonx`),
		Effect: exists("{home}/.claude.jsonx")},
}

var claudeProfile = []string{"--profile", "claude"}

// symlinkRefused: where siblings cannot be made at all (Landlock grants by
// identity), the read never happens.
func symlinkRefused(o *outcome) string {
	if strings.Contains(o.out, "failed to create symbolic link") {
		return "the symlink was refused (siblings cannot be made here)"
	}
	return ""
}

// mkdirRefused: where siblings cannot be made at all, the folder never is.
func mkdirRefused(o *outcome) string {
	if strings.Contains(o.out, "mkdir: cannot create directory") {
		return "the folder was refused (siblings cannot be made here)"
	}
	return ""
}
