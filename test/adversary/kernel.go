package main

// kernelTechniques use kernel interfaces that bypass ordinary system calls.
var kernelTechniques = []Technique{
	{Name: "bpf-map-create", Family: "kernel", Doc: "bpf(BPF_MAP_CREATE)",
		Ops: ops("bpf"), Needs: needHelper,
		Skip: func(*Fixture) string {
			if v := sysctl("kernel.unprivileged_bpf_disabled"); v != "0" {
				return "kernel.unprivileged_bpf_disabled=" + v + ": bpf() needs privilege even without a jail"
			}
			return ""
		},
		Cmd: helper(nil, "bpf-map"), Effect: outputHas("bpf-map-created")},
	{Name: "io-uring-openat", Family: "kernel", Doc: "open and read the key with IORING_OP_OPENAT (raw io_uring, C)",
		Ops: ops("read"), Path: "~/.ssh/id_rsa", Needs: needUring,
		Skip: func(*Fixture) string {
			if v := sysctl("kernel.io_uring_disabled"); v != "" && v != "0" {
				return "kernel.io_uring_disabled=" + v
			}
			return ""
		},
		Cmd: bash("./uring-open {home}/.ssh/id_rsa"), Effect: leaked,
		Excuse: func(o *outcome) string {
			if o.res.Exit == exitSkip {
				return "io_uring refused outright"
			}
			return ""
		}},
	{Name: "keyring-read", Family: "kernel", Doc: "search the user keyring (@u) for a key an outside process stored, and read it",
		Ops: ops("keyring"), Needs: needHelper | needIPCOwner,
		Cmd: helper(nil, "key-read", "{keydesc}"), Effect: leaked},
}
