package main

// ipcTechniques talk to outside processes of the user.
var ipcTechniques = []Technique{
	{Name: "unix-socket-path", Family: "ipc", Doc: "connect to an agent socket at ~/run/agent.sock (like ssh-agent)",
		Ops: ops("connect"), Path: "~/run/agent.sock", Needs: needHelper | needUnixSrv,
		Cmd: helper(nil, "connect", "{home}/run/agent.sock"), Effect: leaked},
	{Name: "unix-socket-abstract", Family: "ipc", Doc: "connect to an abstract unix socket (like the D-Bus bus)",
		Ops: ops("connect"), Needs: needHelper | needAbstract,
		Cmd: helper(nil, "connect", "@{abstract}"), Effect: leaked},
	{Name: "unix-dgram-sendto", Family: "ipc", Doc: "sendto an outside datagram socket without connecting",
		Ops: ops("send", "connect"), Needs: needHelper | needDgramSrv,
		Cmd: helper(nil, "sendto", "{home}/run/dgram.sock", "dgram-ok"), Effect: serviceGot("dgram", "got dgram-ok")},
	// The other way in: the agent binds a name an outside program of the
	// user connects to, and takes what it sends (its secret, a descriptor).
	{Name: "unix-inbound-path", Family: "ipc", Doc: "bind DIR/in.sock and take what an outside client connecting to it sends",
		Ops: ops("connect-in"), Path: "~/project/in.sock", Needs: needHelper | needInClient,
		Cmd: helper(nil, "listen-unix", "{dir}/in.sock"), Effect: leaked},
	{Name: "unix-inbound-abstract", Family: "ipc", Doc: "squat an abstract name an outside client looks for, and take what it sends",
		Ops: ops("connect-in"), Needs: needHelper | needInClient,
		Cmd: helper(nil, "listen-unix", "@{inabstract}"), Effect: leaked},
	{Name: "unix-inbound-dgram", Family: "ipc", Doc: "bind a datagram socket in DIR that an outside program sends to",
		Ops: ops("send-in"), Path: "~/project/in-dgram.sock", Needs: needHelper | needInDgram,
		Cmd: helper(nil, "listen-dgram", "{dir}/in-dgram.sock"), Effect: leaked},
	{Name: "scm-rights-receive", Family: "ipc", Doc: "receive a descriptor of the key from an allowed outside socket (SCM_RIGHTS) and read it",
		Ops: ops("receive"), Path: "~/.ssh/id_rsa", Needs: needHelper | needFDServer,
		Flags: []string{"--allow-unix", "{home}/run/fd.sock"},
		Cmd:   helper(nil, "recv-fd", "{home}/run/fd.sock"), Effect: leaked},
	{Name: "outside-fifo-write", Family: "ipc", Doc: "write a command into an outside FIFO someone reads",
		Ops: ops("write"), Path: "~/run/ctl.fifo", Needs: needFifoSrv,
		Cmd: bash("echo fifo-ok > {home}/run/ctl.fifo"), Effect: serviceGot("fifo", "got fifo-ok")},
	{Name: "sysv-shm-read", Family: "ipc", Doc: "shmat an outside SysV shared memory segment by its key",
		Ops: ops("ipc"), Needs: needHelper | needIPCOwner,
		Cmd: helper(nil, "shm-read", "{ipckey}"), Effect: leaked},
	{Name: "sysv-msgq-read", Family: "ipc", Doc: "msgrcv from an outside SysV message queue by its key",
		Ops: ops("ipc"), Needs: needHelper | needIPCOwner,
		Cmd: helper(nil, "msg-read", "{ipckey}"), Effect: leaked},
}
