/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, mounts and roots, other processes and their signals.
 * Part of jail.bpf.c, which includes every part once, in order: one object,
 * one set of maps. Each hook in it makes one decision and reports it.
 */

/* ---- mounts and roots --------------------------------------------------- */

SEC("lsm/sb_mount")
int BPF_PROG(sb_mount, const char *dev_name, const struct path *path)
{
	if (!jailed())
		return 0;
	return report(AL_OP_MOUNT, AL_CLASS_OUTSIDE, 0, (__u64)path->dentry, 0, 0, 0);
}

SEC("lsm/sb_umount")
int BPF_PROG(sb_umount, struct vfsmount *mnt, int flags)
{
	if (!jailed())
		return 0;
	return report(AL_OP_UMOUNT, AL_CLASS_OUTSIDE, 0, (__u64)mnt->mnt_root, 0, 0, 0);
}

SEC("lsm/move_mount")
int BPF_PROG(move_mount, const struct path *from_path, const struct path *to_path)
{
	if (!jailed())
		return 0;
	return report(AL_OP_MOUNT, AL_CLASS_OUTSIDE, 0, (__u64)from_path->dentry,
		      (__u64)to_path->dentry, 0, 0);
}

SEC("lsm/sb_pivotroot")
int BPF_PROG(sb_pivotroot, const struct path *old_path, const struct path *new_path)
{
	if (!jailed())
		return 0;
	return report(AL_OP_PIVOT_ROOT, AL_CLASS_OUTSIDE, 0, (__u64)new_path->dentry, 0, 0, 0);
}

SEC("lsm/path_chroot")
int BPF_PROG(path_chroot, const struct path *path)
{
	if (!jailed())
		return 0;
	return report(AL_OP_CHROOT, AL_CLASS_OUTSIDE, 0, (__u64)path->dentry, 0, 0, 0);
}

/* ---- other processes ---------------------------------------------------- */

/* Whether the caller is listing a directory: getdents64 (or the old
 * getdents), read from the system call number its registers hold. Only
 * where the kernel's registers have orig_ax (x86-64); elsewhere no. */
static __always_inline int listing_dir(void)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	long nr;

	if (!regs || !bpf_core_field_exists(regs->orig_ax))
		return 0;
	nr = BPF_CORE_READ(regs, orig_ax);
	return nr == 217 /* getdents64 */ || nr == 78 /* getdents */;
}

/* ptrace attach, /proc/PID/{mem,environ,maps,...}, process_vm_readv/writev,
 * pidfd_getfd and kcmp all ask ptrace_may_access, which asks this hook.
 * So does /proc when it is mounted hidepid=4, as the agent's is: for each
 * process it would list, and for each it would find. Listing /proc (ps,
 * top, pgrep) is not a reach: the other processes are left out of the
 * listing, refused without a report; finding one by its number (stat or
 * open of /proc/PID/...) is refused and reported as before. */
SEC("lsm/ptrace_access_check")
int BPF_PROG(ptrace_access_check, struct task_struct *child, unsigned int mode)
{
	if (!jailed() || task_jailed(child))
		return 0;
	if (listing_dir())
		return -EPERM; /* what report() answers for processes */
	return report(AL_OP_PTRACE, AL_CLASS_OUTSIDE, 0, 0, 0, child->tgid, mode);
}

SEC("lsm/ptrace_traceme")
int BPF_PROG(ptrace_traceme, struct task_struct *parent)
{
	if (!jailed() || task_jailed(parent))
		return 0;
	return report(AL_OP_PTRACE, AL_CLASS_OUTSIDE, 0, 0, 0, parent->tgid, 0);
}

SEC("lsm/task_kill")
int BPF_PROG(task_kill, struct task_struct *p, struct kernel_siginfo *info, int sig)
{
	if (!jailed() || task_jailed(p))
		return 0;
	return report(AL_OP_SIGNAL, AL_CLASS_OUTSIDE, 0, 0, 0, p->tgid, sig);
}

/*
 * Another process's scheduling, priority and limits: a process of the user
 * may starve the user's others (SCHED_IDLE, nice 19, the idle I/O class, one
 * CPU) or make them fail (a file or memory limit), as the same user may.
 * Only the cell's own processes are the cell's to tune, as with signals.
 * (Reading another's limits with prlimit is left alone: the task_prlimit
 * hook names no process, only credentials, and the limits are no secret.)
 */
static __always_inline int other_task(__u32 op, struct task_struct *p, __u32 detail)
{
	if (!jailed() || task_jailed(p))
		return 0;
	return report(op, AL_CLASS_OUTSIDE, 0, 0, 0, p->tgid, detail);
}

/* sched_setscheduler, sched_setparam, sched_setattr and sched_setaffinity. */
SEC("lsm/task_setscheduler")
int BPF_PROG(task_setscheduler, struct task_struct *p)
{
	return other_task(AL_OP_SCHED, p, 0);
}

/* setpriority(2): detail is the nice value asked for. */
SEC("lsm/task_setnice")
int BPF_PROG(task_setnice, struct task_struct *p, int nice)
{
	return other_task(AL_OP_NICE, p, (__u32)nice);
}

SEC("lsm/task_setioprio")
int BPF_PROG(task_setioprio, struct task_struct *p, int ioprio)
{
	return other_task(AL_OP_IOPRIO, p, (__u32)ioprio);
}

/* prlimit(2) of another process (setrlimit(2) is the caller's own): detail
 * is the resource. */
SEC("lsm/task_setrlimit")
int BPF_PROG(task_setrlimit, struct task_struct *p, unsigned int resource, struct rlimit *new_rlim)
{
	return other_task(AL_OP_RLIMIT, p, resource);
}

/* F_SETOWN aims SIGIO/SIGURG at a process: at another process of the user
 * it is a kill(2) that task_kill never sees. Only the caller itself may be
 * named; the indirect forms (F_SETOWN_EX, a negative process group) are
 * refused rather than resolved. */
#define F_SETOWN 8
#define F_SETOWN_EX 15

SEC("lsm/file_fcntl")
int BPF_PROG(file_fcntl, struct file *file, unsigned int cmd, unsigned long arg)
{
	__u32 tgid;

	/* The command first: nearly every fcntl is another one (a Go program
	 * makes four for each file it opens), and it costs no helper call. */
	if (cmd != F_SETOWN && cmd != F_SETOWN_EX)
		return 0;
	if (!jailed())
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (cmd == F_SETOWN && (arg == 0 || arg == tgid))
		return 0;
	return report(AL_OP_SIGNAL, AL_CLASS_OUTSIDE, 0, 0, 0, (__u32)arg, cmd);
}
