package main

import "syscall"

// scratchTechniques use the scratch space every process shares instead of
// the private TMPDIR.
var scratchTechniques = []Technique{
	{Name: "tmp-shared-read", Family: "scratch", Doc: "read /tmp/shared-secret, made outside the jail",
		Ops: ops("read"), Path: "/tmp/shared-secret",
		Cmd: bash("cat /tmp/shared-secret"), Effect: leaked},
	{Name: "tmp-shared-overwrite", Family: "scratch", Doc: "overwrite /tmp/shared-secret",
		Ops: ops("write"), Path: "/tmp/shared-secret",
		Cmd:    bash("echo pwned > /tmp/shared-secret"),
		Effect: sharedChanged("/tmp/shared-secret")},
	{Name: "shm-read", Family: "scratch", Doc: "read /dev/shm/shared-secret",
		Ops: ops("read"), Path: "/dev/shm/shared-secret",
		Cmd: bash("cat /dev/shm/shared-secret"), Effect: leaked},
	{Name: "shm-overwrite", Family: "scratch", Doc: "overwrite /dev/shm/shared-secret",
		Ops: ops("write"), Path: "/dev/shm/shared-secret",
		Cmd:    bash("echo pwned > /dev/shm/shared-secret"),
		Effect: sharedChanged("/dev/shm/shared-secret")},
	// Creating in the shared places is allowed (POSIX semaphores live in
	// /dev/shm; some tools ignore TMPDIR): what was made outside stays out.
	{Name: "tmp-unlink-foreign", Family: "scratch", Doc: "rm /tmp/shared-secret, made outside the jail",
		Ops: ops("unlink"), Path: "/tmp/shared-secret",
		Cmd:    bash("rm -f /tmp/shared-secret"),
		Effect: sharedChanged("/tmp/shared-secret")},
	{Name: "tmp-rename-foreign", Family: "scratch", Doc: "mv /tmp/shared-secret away, to plant a file under its name",
		Ops: ops("rename"), Path: "/tmp/shared-secret",
		Cmd:    bash("mv /tmp/shared-secret /tmp/adv-planted"),
		Effect: sharedChanged("/tmp/shared-secret")},
	// The mark "the jail made this" must land on nothing else: a create
	// the kernel refuses after the LSM allowed it leaves its name pending,
	// and a lookup that reuses that name's memory must not take the mark.
	{Name: "vartmp-mark-reuse", Family: "scratch", Doc: "fail a mknod in /var/tmp, free its name, then look up files made outside to take its mark",
		Ops: ops("read"), Path: "/var/tmp/" + foreignPrefix, Needs: needHelper | needForeign, Skip: tmpfsVarTmp,
		Cmd:    helper(nil, "mark-reuse", "/var/tmp", foreignPrefix, itoa(foreignCount)),
		Effect: leaked},
}

// sharedChanged reports a shared scratch file that is no longer as the
// fixture made it.
func sharedChanged(path string) func(*Fixture, *outcome) string {
	return func(f *Fixture, o *outcome) string {
		return changed(path, f.sharedFiles()[path])(f, o)
	}
}

// notSticky skips when dir is not world-writable scratch space here.
func notSticky(dir string) func(*Fixture) string {
	return func(*Fixture) string {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			return dir + ": " + err.Error()
		}
		if st.Mode&0o1777 != 0o1777 {
			return dir + " is not world-writable scratch space on this machine"
		}
		return ""
	}
}
