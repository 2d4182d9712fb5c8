package main

import "time"

// lifetimeTechniques try to outlive agent-lock: once it exits, its jail is
// gone, so anything left running is unconfined. There is no single
// operation to refuse; the judge is whether a process survives.
var lifetimeTechniques = []Technique{
	{Name: "bg-setsid-nohup", Family: "lifetime", Doc: "setsid nohup sleep &, then exit",
		Settle: time.Second,
		Cmd:    bash("setsid nohup sleep 1000 >/dev/null 2>&1 &"), Effect: survived},
	{Name: "double-fork-setsid", Family: "lifetime", Doc: "fork, setsid, fork again, exec sleep",
		Settle: time.Second,
		Cmd: py(`import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open("/dev/null", os.O_RDWR)
        for i in range(3): os.dup2(fd, i)
        os.execvp("sleep", ["sleep", "1000"])
    os._exit(0)
os.wait()`), Effect: survived},
	{Name: "bg-ignore-term", Family: "lifetime", Doc: "a detached process that ignores SIGTERM, SIGHUP and SIGINT",
		Settle: time.Second,
		Cmd: py(`import os, signal
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT): signal.signal(s, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    fd = os.open("/dev/null", os.O_RDWR)
    for i in range(3): os.dup2(fd, i)
    os.execvp("sleep", ["sleep", "1000"])`), Effect: survived},
	{Name: "late-write", Family: "lifetime", Doc: "a detached process that writes outside 2 s after the agent exits",
		Settle: 3500 * time.Millisecond,
		Cmd:    bash("setsid nohup sh -c 'sleep 2; echo late > {home}/late.txt' >/dev/null 2>&1 &"),
		Effect: either(exists("{home}/late.txt"), survived)},
}
