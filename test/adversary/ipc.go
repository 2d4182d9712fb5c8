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
