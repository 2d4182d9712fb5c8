package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcInfo is a process as /proc shows it.
type ProcInfo struct {
	PID, PPID, PGID, SID int
	State                byte
	Comm                 string
	Cmdline              string
}

func (p ProcInfo) String() string {
	return fmt.Sprintf("pid %d (%s) sid %d: %s", p.PID, p.Comm, p.SID, p.Cmdline)
}

// UserProcs lists the live (not zombie) processes whose real uid is uid.
func UserProcs(uid int) []ProcInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var ps []ProcInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readProc(pid, uid)
		if ok && p.State != 'Z' && p.State != 'X' {
			ps = append(ps, p)
		}
	}
	return ps
}

func readProc(pid, uid int) (ProcInfo, bool) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcInfo{}, false
	}
	owner := -1
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Uid:" {
			owner, _ = strconv.Atoi(f[1])
		}
	}
	if owner != uid {
		return ProcInfo{}, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcInfo{}, false
	}
	// pid (comm) state ppid pgrp session ...; comm may hold spaces and ')'.
	s := string(stat)
	open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || close < open {
		return ProcInfo{}, false
	}
	f := strings.Fields(s[close+1:])
	if len(f) < 4 {
		return ProcInfo{}, false
	}
	p := ProcInfo{PID: pid, Comm: s[open+1 : close], State: f[0][0]}
	p.PPID, _ = strconv.Atoi(f[1])
	p.PGID, _ = strconv.Atoi(f[2])
	p.SID, _ = strconv.Atoi(f[3])
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
	return p, true
}

// Survivors lists the user's live processes that are not, and do not
// descend from, the processes in keep (the suite's own long-running
// helpers, which may start sessions of their own, as script does).
func Survivors(uid int, keep map[int]bool) []ProcInfo {
	ps := UserProcs(uid)
	parent := make(map[int]int, len(ps))
	for _, p := range ps {
		parent[p.PID] = p.PPID
	}
	var out []ProcInfo
	for _, p := range ps {
		kept := false
		for pid, n := p.PID, 0; pid > 1 && n < 64; pid, n = parent[pid], n+1 {
			if keep[pid] {
				kept = true
				break
			}
		}
		if !kept {
			out = append(out, p)
		}
	}
	return out
}

// KillSurvivors SIGKILLs the user's processes outside keep, by pid, until
// none are left or a few seconds have passed.
func KillSurvivors(uid int, keep map[int]bool) {
	for i := 0; i < 30; i++ {
		ps := Survivors(uid, keep)
		if len(ps) == 0 {
			return
		}
		for _, p := range ps {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PidsOf lists the processes running the executable bin.
func PidsOf(bin string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && strings.TrimSuffix(exe, " (deleted)") == bin {
			pids = append(pids, pid)
		}
	}
	return pids
}
