package main

import (
	"fmt"
	"syscall"
)

// sealingTechniques change outside files without writing their contents:
// the namespace and metadata operations (rename, link, unlink, mkdir,
// mknod, truncate, chmod, chown, utimes, xattrs).
var sealingTechniques = []Technique{
	{Name: "rename-in", Family: "sealing", Doc: "mv an outside file into DIR",
		Ops: ops("rename"), Path: "~/outside.txt",
		Cmd: bash("mv {home}/outside.txt ./stolen.txt"), Effect: gone("{home}/outside.txt")},
	{Name: "rename-out", Family: "sealing", Doc: "mv a file from DIR to the home directory",
		Ops: ops("rename"), Path: "~/dropped.txt",
		Cmd: bash("mv ./inside.txt {home}/dropped.txt"), Effect: exists("{home}/dropped.txt")},
	{Name: "rename-dir-itself", Family: "sealing", Doc: "mv DIR itself to another name in the home directory",
		Ops: ops("rename"),
		Cmd: bash("mv {dir} {home}/moved"), Effect: exists("{home}/moved")},
	{Name: "rename-exchange", Family: "sealing", Doc: "renameat2(RENAME_EXCHANGE) a DIR file with an outside file",
		Ops: ops("rename"), Path: "~/outside.txt",
		Cmd: py(`import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
if libc.renameat2(AT_FDCWD, b"inside.txt", AT_FDCWD, b"{home}/outside.txt", RENAME_EXCHANGE) != 0:
    raise SystemExit("renameat2: " + os.strerror(ctypes.get_errno()))`),
		Effect: changed("{home}/outside.txt", outsideText)},
	{Name: "hardlink-in", Family: "sealing", Doc: "ln the key into DIR, then read the link",
		Ops: ops("link"), Path: "~/.ssh/id_rsa",
		Cmd: bash("ln {home}/.ssh/id_rsa ./key && cat ./key"),
		Effect: either(leaked, func(f *Fixture, o *outcome) string {
			if st := stat(f, "{home}/.ssh/id_rsa"); st != nil && st.Nlink > 1 {
				return fmt.Sprintf("the key has %d links", st.Nlink)
			}
			return ""
		})},
	{Name: "hardlink-out", Family: "sealing", Doc: "ln a DIR file to a new name in the home directory",
		Ops: ops("link"), Path: "~/linked.txt",
		Cmd: bash("ln ./inside.txt {home}/linked.txt"), Effect: exists("{home}/linked.txt")},
	{Name: "symlink-outside", Family: "sealing", Doc: "create a symlink in the home directory",
		Ops: ops("symlink"), Path: "~/evil-link",
		Cmd: bash("ln -s /etc/passwd {home}/evil-link"), Effect: exists("{home}/evil-link")},
	{Name: "unlink-outside", Family: "sealing", Doc: "rm an outside file",
		Ops: ops("unlink"), Path: "~/outside.txt",
		Cmd: bash("rm -f {home}/outside.txt"), Effect: gone("{home}/outside.txt")},
	{Name: "rmdir-outside", Family: "sealing", Doc: "rmdir an empty outside directory",
		Ops: ops("rmdir"), Path: "~/emptydir",
		Cmd: bash("rmdir {home}/emptydir"), Effect: gone("{home}/emptydir")},
	{Name: "mkdir-outside", Family: "sealing", Doc: "mkdir in the home directory",
		Ops: ops("mkdir"), Path: "~/newdir",
		Cmd: bash("mkdir {home}/newdir"), Effect: exists("{home}/newdir")},
	{Name: "mkfifo-outside", Family: "sealing", Doc: "mkfifo in the home directory (mknod)",
		Ops: ops("mknod"), Path: "~/evil.fifo",
		Cmd: bash("mkfifo {home}/evil.fifo"), Effect: exists("{home}/evil.fifo")},
	{Name: "bind-socket-outside", Family: "sealing", Doc: "bind a unix socket in the home directory (mknod of a socket)",
		Ops: ops("mknod", "create"), Path: "~/evil.sock",
		Cmd:    py(`import socket; socket.socket(socket.AF_UNIX).bind("{home}/evil.sock")`),
		Effect: exists("{home}/evil.sock")},
	{Name: "truncate-outside", Family: "sealing", Doc: "truncate(2) an outside file by path, without opening it",
		Ops: ops("truncate"), Path: "~/outside.txt",
		Cmd: py(`import os; os.truncate("{home}/outside.txt", 0)`), Effect: changed("{home}/outside.txt", outsideText)},
	{Name: "chmod-outside", Family: "sealing", Doc: "chmod 777 an outside file",
		Ops: ops("chmod"), Path: "~/outside.txt",
		Cmd: bash("chmod 777 {home}/outside.txt"),
		Effect: func(f *Fixture, o *outcome) string {
			if st := stat(f, "{home}/outside.txt"); st != nil && st.Mode&0o777 != 0o644 {
				return fmt.Sprintf("mode is now %o", st.Mode&0o7777)
			}
			return ""
		}},
	{Name: "chown-outside", Family: "sealing", Doc: "chown an outside setuid file to its own owner, which clears setuid",
		Ops: ops("chown"), Path: "~/suid-tool",
		Cmd: py(`import os; os.chown("{home}/suid-tool", os.getuid(), os.getgid())`),
		Effect: func(f *Fixture, o *outcome) string {
			if st := stat(f, "{home}/suid-tool"); st != nil && st.Mode&syscall.S_ISUID == 0 {
				return fmt.Sprintf("setuid bit cleared, mode %o", st.Mode&0o7777)
			}
			return ""
		}},
	{Name: "utimes-outside", Family: "sealing", Doc: "touch -d 2001-01-01 an outside file",
		Ops: ops("utimes"), Path: "~/outside.txt",
		Cmd: bash("touch -d 2001-01-01 {home}/outside.txt"),
		Effect: func(f *Fixture, o *outcome) string {
			if st := stat(f, "{home}/outside.txt"); st != nil && st.Mtim.Sec < 1e9+1e8 {
				return fmt.Sprintf("mtime set back to %d", st.Mtim.Sec)
			}
			return ""
		}},
	{Name: "setxattr-outside", Family: "sealing", Doc: "set a user.* xattr on an outside file",
		Ops: ops("setxattr"), Path: "~/outside.txt", Skip: noUserXattrs,
		Cmd: py(`import os; os.setxattr("{home}/outside.txt", "user.evil", b"1")`),
		Effect: func(f *Fixture, o *outcome) string {
			if _, err := syscall.Getxattr(f.expand("{home}/outside.txt"), "user.evil", make([]byte, 16)); err == nil {
				return "user.evil is set"
			}
			return ""
		}},
	{Name: "removexattr-outside", Family: "sealing", Doc: "remove a user.* xattr from an outside file",
		Ops: ops("removexattr"), Path: "~/outside.txt", Skip: noUserXattrs, Needs: needXattr,
		Cmd: py(`import os; os.removexattr("{home}/outside.txt", "` + xattrName + `")`),
		Effect: func(f *Fixture, o *outcome) string {
			// Asked for its size only: the value holds the marker, longer
			// than a small buffer (ERANGE is no removal).
			if _, err := syscall.Getxattr(f.expand("{home}/outside.txt"), xattrName, nil); err == syscall.ENODATA {
				return xattrName + " is gone"
			}
			return ""
		}},
}

// noUserXattrs skips when the home file system takes no user.* xattrs
// (tmpfs before Linux 6.6): then no one, jailed or not, can set them.
func noUserXattrs(f *Fixture) string {
	p := f.expand("{home}/emptydir")
	err := syscall.Setxattr(p, "user.adv-probe", []byte("1"), 0)
	if err == syscall.EOPNOTSUPP {
		var st syscall.Statfs_t
		syscall.Statfs(p, &st)
		maj, min := kernelVersion()
		return fmt.Sprintf("the home file system (type %#x) takes no user.* xattrs on Linux %d.%d (tmpfs needs 6.6)", st.Type, maj, min)
	}
	syscall.Removexattr(p, "user.adv-probe")
	return ""
}
