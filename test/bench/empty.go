package main

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// emptyHook attaches to file_open a BPF LSM program that allows everything
// and does nothing else: what the kernel's call into a BPF program costs on
// each open (the trampoline, and under emulation its emulation), apart
// from what agent-lock's program does there (the file_open mode). It is
// measured in the empty-hook mode, unjailed, on the open-heavy workload.
func emptyHook() (func() error, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:       "bench_empty",
		Type:       ebpf.LSM,
		AttachType: ebpf.AttachLSMMac,
		AttachTo:   "file_open",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
		License: "GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("load an empty file_open program: %w", err)
	}
	l, err := link.AttachLSM(link.LSMOptions{Program: prog})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("attach an empty file_open program: %w", err)
	}
	return func() error { return errors.Join(l.Close(), prog.Close()) }, nil
}

// syscallTrace attaches an empty BPF program to the entry of a system call
// no workload makes (acct): what any observer on a syscall tracepoint
// costs every process of the machine, whatever its programs do. While one
// is attached the kernel sends every system call of every task through
// its tracing path (it marks them all), where it looks up whether that
// call is traced; the Landlock engine's observers are such tracepoints
// (open and exec family), so this is the floor under beside-session, and
// what is above it is theirs. Measured in the beside-trace mode, unjailed.
func syscallTrace() (func() error, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "bench_trace",
		Type: ebpf.TracePoint,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
		License: "GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("load an empty tracepoint program: %w", err)
	}
	l, err := link.Tracepoint("syscalls", "sys_enter_acct", prog, nil)
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("attach an empty program to syscalls/sys_enter_acct: %w", err)
	}
	return func() error { return errors.Join(l.Close(), prog.Close()) }, nil
}
