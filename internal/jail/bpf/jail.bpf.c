// SPDX-License-Identifier: GPL-2.0
//go:build ignore

/*
 * agent-lock's jail: every LSM hook below decides, for a process of the jail,
 * whether an operation stays inside the cell, and reports what it refused.
 * The decision is made once, here; the Go side only presents it.
 *
 * Membership is the jail's cgroup. The first process is cloned straight into
 * it (CLONE_INTO_CGROUP), so it is jailed before its first instruction; every
 * task it creates is born there; and it cannot leave: cgroupfs is read-only
 * to it and clone3(CLONE_INTO_CGROUP) is refused in task_alloc. Unlike a pid
 * table this cannot fill up, race with pid reuse, or miss a thread.
 *
 * Files are judged by identity, not by name: the target's dentry is walked up
 * to the root of its superblock and each ancestor's (dev, inode) is looked up
 * in the rule map. Symlinks, "..", /proc magic links, bind mounts and chroots
 * change which string names a file, never which dentries lie above it.
 * A walk that cannot reach its root is denied.
 */

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "jail.h"

char LICENSE[] SEC("license") = "GPL";

#include "maps.h"
#include "report.h"
#include "walk.h"
#include "cache.h"
#include "git.h"
#include "names.h"
#include "classify.h"
#include "make.h"
#include "files.h"
#include "processes.h"
#include "ipc.h"

/* ---- the jail's own machinery ------------------------------------------ */

SEC("lsm/bpf")
int BPF_PROG(bpf, int cmd)
{
	if (!jailed())
		return 0;
	return report(AL_OP_BPF, AL_CLASS_OUTSIDE, 0, 0, 0, 0, cmd);
}

static __always_inline int check_ioctl(unsigned int cmd)
{
	if (!jailed())
		return 0;
	/* Typing into the terminal's input queue runs commands in the user's
	 * shell after the agent exits. (Setting a file's signal owner, FIOSETOWN
	 * and SIOCSPGRP, is checked where the signal is sent: see
	 * file_send_sigiotask.) */
	if (cmd == TIOCSTI || cmd == TIOCLINUX || cmd == TIOCCONS)
		return report(AL_OP_IOCTL, AL_CLASS_OUTSIDE, 0, 0, 0, 0, cmd);
	return 0;
}

SEC("lsm/file_ioctl")
int BPF_PROG(file_ioctl, struct file *file, unsigned int cmd)
{
	return check_ioctl(cmd);
}

/* 32-bit callers take this path on kernels that have it (6.8+). */
SEC("lsm/file_ioctl_compat")
int BPF_PROG(file_ioctl_compat, struct file *file, unsigned int cmd)
{
	return check_ioctl(cmd);
}

#include "observe.h"
