package main

import (
	"os"
	"path/filepath"
	"strings"
)

// pathTechniques reach outside DIR through names that do not look like
// it: symbolic links, /proc magic links, descriptors, handles, and paths
// too long for a fixed buffer.
var pathTechniques = []Technique{
	{Name: "planted-symlink-file", Family: "paths", Doc: "a symlink in DIR, made before the jail, to the key",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Setup: plant("key", "{home}/.ssh/id_rsa"),
		Cmd:   bash("cat key"), Effect: leaked},
	{Name: "planted-symlink-dir", Family: "paths", Doc: "a symlink in DIR to the home directory",
		Ops: ops("read"), Path: "~/.aws/credentials",
		Setup: plant("home", "{home}"),
		Cmd:   bash("cat home/.aws/credentials"), Effect: leaked},
	{Name: "symlink-create-read", Family: "paths", Doc: "make a symlink in DIR pointing out, then read through it",
		Ops:    ops("read", "symlink"),
		Cmd:    bash("ln -s {home}/.ssh/id_rsa leak && cat leak"),
		Effect: leaked},
	{Name: "long-symlink-target", Family: "paths", Doc: "a planted symlink whose 4000-byte target leads to the key",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Setup: plant("longlink", "{home}"+strings.Repeat("/.", 1950)+"/.ssh/id_rsa"),
		Cmd:   bash("cat longlink"), Effect: leaked},
	{Name: "long-dotdot-path", Family: "paths", Doc: "a 3900-byte path that starts in DIR and climbs out at the end",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Cmd: bash("cat {dir}/" + strings.Repeat("./", 1900) + "../.ssh/id_rsa"), Effect: leaked},
	{Name: "deep-outside-path", Family: "paths", Doc: "chdir down an outside tree until the path passes PATH_MAX, then read",
		Ops: ops("read"), Needs: needDeep,
		Cmd: py(`import os
os.chdir("{home}/deep")
for _ in range(` + itoa(deepLevels) + `):
    os.chdir("` + deepName + `")
print(open("secret.txt").read())`), Effect: leaked},
	{Name: "proc-self-root", Family: "paths", Doc: "re-enter / through /proc/self/root",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Cmd: bash("cat /proc/self/root{home}/.ssh/id_rsa"), Effect: leaked},
	{Name: "proc-self-cwd", Family: "paths", Doc: "climb out through /proc/self/cwd/..",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Cmd: bash("cat /proc/self/cwd/../.ssh/id_rsa"), Effect: leaked},
	{Name: "proc-fd-dotdot", Family: "paths", Doc: "open DIR, then climb out through its /proc/self/fd magic link",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Cmd: bash("exec 3< . && cat /proc/self/fd/3/../.ssh/id_rsa"), Effect: leaked},
	{Name: "proc-fd-inherited", Family: "paths", Doc: "read through /proc/self/fd/3, a home directory descriptor inherited from the parent",
		Ops: ops("read"), Path: "~/.ssh/id_rsa", InheritHome: true,
		Cmd:    bash("if readlink /proc/self/fd/3; then cat /proc/self/fd/3/.ssh/id_rsa; else echo fd3-not-inherited; fi"),
		Effect: leaked, Excuse: fd3NotInherited},
	{Name: "inherited-dirfd-openat", Family: "paths", Doc: "openat relative to an inherited home directory descriptor",
		Ops: ops("read"), Path: "~/.ssh/id_rsa", InheritHome: true,
		Cmd: py(`import os
try:
    os.readlink("/proc/self/fd/3")
except OSError:
    print("fd3-not-inherited"); raise SystemExit(1)
print(os.read(os.open(".ssh/id_rsa", os.O_RDONLY, dir_fd=3), 4096).decode())`),
		Effect: leaked, Excuse: fd3NotInherited},
	{Name: "inherited-fd-read", Family: "paths", Doc: "read fd 5, the key open in the parent (a CI runner's, a service's descriptor)",
		Ops: ops("read"), Path: "~/.ssh/id_rsa", InheritFile: ".ssh/id_rsa",
		Cmd:    bash("if readlink /proc/self/fd/5; then cat <&5; else echo fd5-not-inherited; fi"),
		Effect: leaked, Excuse: fdNotInherited("fd5-not-inherited")},
	// The kernel judges a file by the name it was reached by; a second
	// name of a denied file, made before the session, is a name in DIR.
	{Name: "hardlink-denied-read", Family: "paths", Doc: "read the key through a hard link to it in DIR, made before the session",
		Ops: ops("read"), Path: "~/project/notes.txt",
		Setup: func(f *Fixture) error {
			p := filepath.Join(f.Dir, "notes.txt")
			if err := os.Link(filepath.Join(f.Home, ".ssh/id_rsa"), p); err != nil {
				return err
			}
			return os.Lchown(p, f.U.UID, f.U.GID)
		},
		Cmd: bash("cat notes.txt"), Effect: leaked},
	{Name: "opath-dirfd", Family: "paths", Doc: "an O_PATH descriptor of ~/.ssh (no open check), then openat through it",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Cmd: py(`import os
d = os.open("{home}/.ssh", os.O_PATH)
print(os.read(os.open("id_rsa", os.O_RDONLY, dir_fd=d), 4096).decode())`), Effect: leaked},
	{Name: "openat2", Family: "paths", Doc: "open the key with openat2(2) instead of openat",
		Ops: ops("read"), Path: "~/.ssh/id_rsa", Needs: needHelper,
		Cmd: helper(nil, "openat2", "{home}/.ssh/id_rsa"), Effect: leaked},
	{Name: "open-by-handle", Family: "paths", Doc: "name_to_handle_at(~/.ssh), then open_by_handle_at in a user namespace",
		Ops: ops("read", "mount"), Path: "~", Needs: needHelper,
		Cmd:    helper([]string{"unshare", "--user", "--map-root-user", "--mount", "--propagation", "unchanged"}, "handle-open", "{home}"),
		Effect: leaked},
}

// plant makes a symlink in DIR, owned by the user, before the run.
func plant(name, target string) func(*Fixture) error {
	return func(f *Fixture) error {
		p := filepath.Join(f.Dir, name)
		if err := os.Symlink(f.expand(target), p); err != nil {
			return err
		}
		return os.Lchown(p, f.U.UID, f.U.GID)
	}
}

func fd3NotInherited(o *outcome) string { return fdNotInherited("fd3-not-inherited")(o) }

// fdNotInherited excuses a technique whose output says (with note) that
// the descriptor it was to use was not there.
func fdNotInherited(note string) func(*outcome) string {
	return func(o *outcome) string {
		if strings.Contains(o.out, note) {
			return "agent-lock did not pass the inherited descriptor on"
		}
		return ""
	}
}
