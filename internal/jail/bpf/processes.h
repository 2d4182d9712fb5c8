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

/* A file's signal owner (F_SETOWN, F_SETOWN_EX, FIOSETOWN, SIOCSPGRP)
 * aims SIGIO and SIGURG, or F_SETSIG's choice, at a process: at another
 * process of the user it is a kill(2) that task_kill never sees. Checked at
 * delivery, as Landlock scopes signals: file_set_fowner notes whether a
 * jailed process set the owner last, and file_send_sigiotask refuses the
 * signal to a process outside the cell. Not on file_fcntl: every fcntl of
 * the machine would pay for it (a Go program makes four for each file it
 * opens), for a command nearly nobody uses. */
SEC("lsm/file_set_fowner")
int BPF_PROG(file_set_fowner, struct file *file)
{
	__u64 key = (__u64)file;
	__u64 id;
	struct fowner o = {};

	if (!jailed()) {
		/* Someone outside the cell owns it now (or the address is a
		 * new file's): its signals are theirs to aim. */
		bpf_map_delete_elem(&fowners, &key);
		return 0;
	}
	id = bpf_get_current_pid_tgid();
	o.tgid = id >> 32;
	o.tid = (__u32)id;
	o.uid = (__u32)bpf_get_current_uid_gid();
	bpf_get_current_comm(o.comm, sizeof(o.comm));
	/* The hook cannot refuse, and the owner is set whatever happens
	 * here: a file that cannot be noted marks the notes full (see
	 * file_send_sigiotask), and its setter is killed if it can be (the
	 * signal may be refused: the hook runs with interrupts off). */
	if (bpf_map_update_elem(&fowners, &key, &o, BPF_ANY)) {
		__u32 zero = 0, *full = bpf_map_lookup_elem(&fowners_full, &zero);

		if (full)
			*full = 1;
		bpf_send_signal(9 /* SIGKILL */);
	}
	return 0;
}

/* Kernels before 6.12 embed the owner in the file; later ones point to it
 * and it points back. */
struct file___embedded_owner {
	struct fown_struct f_owner;
} __attribute__((preserve_access_index));

static __always_inline __u64 fown_file(struct fown_struct *fown)
{
	if (bpf_core_field_exists(fown->file))
		return (__u64)BPF_CORE_READ(fown, file);
	return (__u64)fown - bpf_core_field_offset(struct file___embedded_owner, f_owner);
}

#define SIGIO 29

/* Runs for each process a SIGIO or SIGURG would reach, in the context of
 * whoever made the file ready (the user typing, another process writing a
 * pipe): the report names the process that aimed it. */
SEC("lsm/file_send_sigiotask")
int BPF_PROG(file_send_sigiotask, struct task_struct *tsk, struct fown_struct *fown, int sig)
{
	__u64 key, comm[2];
	__u32 zero = 0, *full;
	struct fowner *o;

	if (!cell.cgroup_id || task_jailed(tsk))
		return 0;
	key = fown_file(fown);
	o = bpf_map_lookup_elem(&fowners, &key);
	if (!o) {
		/* No note: someone outside set the owner, unless the notes
		 * overflowed; then any file may be one the cell aimed, and
		 * signals to processes outside it are refused (fail closed),
		 * reported as whoever made the file ready. Not those of owners
		 * root set: the cell has no root to set them with. */
		full = bpf_map_lookup_elem(&fowners_full, &zero);
		if (!full || !*full || BPF_CORE_READ(fown, euid.val) == 0)
			return 0;
		return report(AL_OP_SIGNAL, AL_CLASS_OUTSIDE, 0, 0, 0, tsk->tgid, sig ? sig : SIGIO);
	}
	/* The note as read here, in scalars (report_as). */
	__builtin_memcpy(comm, o->comm, sizeof(comm));
	return refuse(report_as(rep_who(tsk->tgid, sig ? sig : SIGIO), (__u64)o->tgid << 32 | o->tid,
				o->uid, comm[0], comm[1]));
}
