/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, observation without the BPF LSM (the Landlock engine's
 * tracepoint observers). Part of jail.bpf.c, which includes every part once,
 * in order: one object, one set of maps. Each hook in it makes one decision
 * and reports it.
 */

/* ---- observation without the BPF LSM ------------------------------------ */

/*
 * Where the kernel cannot run the hooks above, Landlock decides and these
 * tracepoint programs only watch the open and exec family, with the result
 * the caller got: an opened file is classified like file_open does (counted,
 * streamed when in bounds, reported as reached when the rules would have
 * refused it); a refused one (EACCES, EPERM) is reported as blocked with the
 * name the process gave, since nothing was opened to walk. The Go side loads
 * only these programs then (jail.Config.Observe); they never decide.
 */
#define AT_FDCWD -100
#define O_ACCMODE 00000003
#define O_CREAT 00000100
#define O_TRUNC 00001000
#define O_PATH 010000000

struct call {
	__u64 name;  /* user pointer to the name */
	__s32 dirfd;
	__u32 op;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct call);
} calls SEC(".maps");

static __always_inline int call_enter(__s64 dirfd, __u64 name, __u32 op)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct call c = { .name = name, .dirfd = (__s32)dirfd, .op = op };

	if (!jailed() && !registering())
		return 0;
	bpf_map_update_elem(&calls, &tid, &c, BPF_ANY);
	return 0;
}

static __always_inline __u32 open_op(__u64 flags)
{
	if ((flags & O_ACCMODE) || (flags & (O_CREAT | O_TRUNC)))
		return AL_OP_WRITE;
	return AL_OP_READ;
}

/* An O_PATH open reads nothing and Landlock does not check it (runtimes
 * resolve paths with it: Claude Code's, ~/.ssh among them): it is neither
 * watched nor reported. */
static __always_inline int open_enter(__s64 dirfd, __u64 name, __u64 flags)
{
	if (flags & O_PATH)
		return 0;
	return call_enter(dirfd, name, open_op(flags));
}

/* The file behind descriptor fd of the calling process, or 0. */
static __always_inline struct file *fd_file(long fd)
{
	struct task_struct *t = (void *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(t, files, fdt);
	struct file **fds = BPF_CORE_READ(fdt, fd);
	__u32 max = BPF_CORE_READ(fdt, max_fds);
	struct file *f = 0;

	if (fd < 0 || fd >= max || !fds)
		return 0;
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

/* The files the jail created, by the observers' account (observe_opened):
 * what the marks are to the hooks, for git's files (struct gitname), so
 * that the git files of a repository the agent makes are not reported as
 * reaches. Keyed by identity; an entry a later file inherits with its inode
 * number, or one the LRU drops, only changes what is reported. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct rule_key);
	__type(value, __u32);
} obs_created SEC(".maps");

#define FMODE_CREATED 0x100000 /* the open made the file */

static __always_inline void observe_opened(struct file *f, __u32 op)
{
	struct dentry *d = BPF_CORE_READ(f, f_path.dentry);
	struct inode *inode = BPF_CORE_READ(f, f_inode);
	__u32 fmode = BPF_CORE_READ(f, f_mode), need, one = 1;
	/* created = 1: the observers have no marks (inode storage needs the
	 * BPF LSM), and Landlock decided already; without it every second
	 * name the agent made in DIR would look like an outside file's. */
	struct query q = { .dentry = (__u64)d, .inode = (__u64)inode, .created = 1 };
	struct rule_key k = {};

	if (inode) {
		k.dev = BPF_CORE_READ(d, d_sb, s_dev);
		k.ino = BPF_CORE_READ(inode, i_ino);
		if (fmode & FMODE_CREATED)
			bpf_map_update_elem(&obs_created, &k, &one, BPF_ANY);
		q.own = bpf_map_lookup_elem(&obs_created, &k) != 0;
	}

	if (fmode & FMODE_WRITE) {
		op = AL_OP_WRITE;
		need = P_WRITE | ((fmode & FMODE_READ) ? P_READ : 0);
	} else {
		if (op != AL_OP_EXEC)
			op = AL_OP_READ;
		need = P_READ;
	}
	q.need = need;
	classify(&q);
	if ((q.v.perm & need) == need) {
		if (q.v.class == AL_CLASS_INSIDE) {
			count(CNT_INBOUNDS);
			if (inbounds_due())
				report_v(op, &q.v, EV_INBOUNDS, (__u64)d, 0);
		} else {
			count(CNT_SYSTEM);
		}
		return;
	}
	/* Landlock let through what the rules refuse: say so, as reached. */
	report_v(op, &q.v, EV_AUDIT, (__u64)d, 0);
}

/*
 * A refused name that goes through one of the calling process's own magic
 * links in /proc (/proc/self/fd/3/../x, /proc/self/cwd/.., /proc/PID/root/...)
 * is named here, from the link's target now, while the process and its
 * descriptors are alive: by the time Go reads the event the process may be
 * gone and the link with it (under load it was, and the report named
 * /proc/PID/fd/x instead of the file). proc_link recognises the forms
 * /proc/{self,thread-self,TGID,TID}/{fd/N,cwd,root}[/rest]; anything else,
 * another process's links included, is left to Go's reading of the name.
 * A global function, so that the verifier checks the parse once.
 */
#define PL_BYTES 64
#define PL_FD 1
#define PL_CWD 2
#define PL_ROOT 3

struct plink {
	__u64 uname; /* in: the name as the process gave it */
	__u32 kind;  /* out: PL_*, 0 for none */
	__u32 fd;
	__u32 rest;  /* offset in the name of what follows the link's slash; 0 for nothing */
};

static __always_inline int pl_num(const char *b, __u32 *off, __u32 *val)
{
	__u32 o = *off, v = 0, k;

#pragma unroll
	for (k = 0; k < 10; k++) {
		char c = b[(o + k) & (PL_BYTES - 1)];

		if (c < '0' || c > '9')
			break;
		v = v * 10 + (c - '0');
	}
	if (k == 0)
		return 0;
	*off = o + k;
	*val = v;
	return 1;
}

__noinline int proc_link(struct plink *p)
{
	__u32 zero = 0, o, v, kind;
	__u64 id = bpf_get_current_pid_tgid();
	struct scratch *s;
	const char *b;
	char c;

	if (!p)
		return 0;
	p->kind = 0;
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s || bpf_probe_read_user_str(s->buf, PL_BYTES, (const void *)p->uname) < 8)
		return 0;
	b = s->buf;
	if (b[0] != '/' || b[1] != 'p' || b[2] != 'r' || b[3] != 'o' || b[4] != 'c' || b[5] != '/')
		return 0;
	if (b[6] == 's' && b[7] == 'e' && b[8] == 'l' && b[9] == 'f') {
		o = 10;
	} else if (b[6] == 't' && b[7] == 'h' && b[8] == 'r' && b[9] == 'e' && b[10] == 'a' &&
		   b[11] == 'd' && b[12] == '-' && b[13] == 's' && b[14] == 'e' && b[15] == 'l' &&
		   b[16] == 'f') {
		o = 17;
	} else {
		o = 6;
		if (!pl_num(b, &o, &v) || (v != id >> 32 && v != (__u32)id))
			return 0;
	}
	if (b[o & (PL_BYTES - 1)] != '/')
		return 0;
	o++;
	if (b[o & (PL_BYTES - 1)] == 'f' && b[(o + 1) & (PL_BYTES - 1)] == 'd' &&
	    b[(o + 2) & (PL_BYTES - 1)] == '/') {
		o += 3;
		if (!pl_num(b, &o, &v))
			return 0;
		kind = PL_FD;
		p->fd = v;
	} else if (b[o & (PL_BYTES - 1)] == 'c' && b[(o + 1) & (PL_BYTES - 1)] == 'w' &&
		   b[(o + 2) & (PL_BYTES - 1)] == 'd') {
		o += 3;
		kind = PL_CWD;
	} else if (b[o & (PL_BYTES - 1)] == 'r' && b[(o + 1) & (PL_BYTES - 1)] == 'o' &&
		   b[(o + 2) & (PL_BYTES - 1)] == 'o' && b[(o + 3) & (PL_BYTES - 1)] == 't') {
		o += 4;
		kind = PL_ROOT;
	} else {
		return 0;
	}
	/* The link must end its component, and all of it must have been read
	 * (o < PL_BYTES - 1: the last byte read is always the NUL). */
	if (o >= PL_BYTES - 1)
		return 0;
	c = b[o & (PL_BYTES - 1)];
	if (c == '/')
		p->rest = b[(o + 1) & (PL_BYTES - 1)] ? o + 1 : 0;
	else if (c == 0)
		p->rest = 0;
	else
		return 0;
	p->kind = kind;
	return 1;
}

/* Whether name is one of proc's own files of a process, /proc/PID/FILE
 * or /proc/PID/task/TID/FILE, and not a link it holds (cwd, root, exe,
 * fd/N: through those a name leads to any file). A read of such a file
 * refused with EACCES is not Landlock's, which grants /proc to read, and
 * the agent's /proc holds only the processes its domain may trace
 * (hidepid=4, session's mountns.go; the others are not found). It is the
 * kernel's own ptrace check on a process of the agent's caught in the
 * middle of an exec (ps reading a sibling's environ): not a reach, and not
 * reported. A global function, so that the verifier checks it once. */
__noinline int proc_pid_file(__u64 uname)
{
	__u32 zero = 0, o = 6, v, k;
	struct scratch *s;
	const char *b;

	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s || bpf_probe_read_user_str(s->buf, PL_BYTES, (const void *)uname) < 8)
		return 0;
	b = s->buf;
	if (b[0] != '/' || b[1] != 'p' || b[2] != 'r' || b[3] != 'o' || b[4] != 'c' || b[5] != '/')
		return 0;
	if (!pl_num(b, &o, &v) || b[o & (PL_BYTES - 1)] != '/')
		return 0;
	o++;
	if (b[o & (PL_BYTES - 1)] == 't' && b[(o + 1) & (PL_BYTES - 1)] == 'a' && b[(o + 2) & (PL_BYTES - 1)] == 's' &&
	    b[(o + 3) & (PL_BYTES - 1)] == 'k' && b[(o + 4) & (PL_BYTES - 1)] == '/') {
		o += 5;
		if (!pl_num(b, &o, &v) || b[o & (PL_BYTES - 1)] != '/')
			return 0;
		o++;
	}
	if (o >= PL_BYTES - 1 || b[o & (PL_BYTES - 1)] == 0)
		return 0;
	if ((b[o & (PL_BYTES - 1)] == 'c' && b[(o + 1) & (PL_BYTES - 1)] == 'w' && b[(o + 2) & (PL_BYTES - 1)] == 'd' &&
	     b[(o + 3) & (PL_BYTES - 1)] == 0) ||
	    (b[o & (PL_BYTES - 1)] == 'e' && b[(o + 1) & (PL_BYTES - 1)] == 'x' && b[(o + 2) & (PL_BYTES - 1)] == 'e' &&
	     b[(o + 3) & (PL_BYTES - 1)] == 0) ||
	    (b[o & (PL_BYTES - 1)] == 'r' && b[(o + 1) & (PL_BYTES - 1)] == 'o' && b[(o + 2) & (PL_BYTES - 1)] == 'o' &&
	     b[(o + 3) & (PL_BYTES - 1)] == 't' && b[(o + 4) & (PL_BYTES - 1)] == 0))
		return 0;
	/* One component to the end of the name, all of it read. */
#pragma unroll
	for (k = 0; k < 32; k++) {
		char c = b[(o + k) & (PL_BYTES - 1)];

		if (o + k >= PL_BYTES - 1 || c == '/')
			return 0;
		if (c == 0)
			return 1;
	}
	return 0;
}

/* The dentry a proc_link names, or 0 (a closed descriptor). */
static __always_inline __u64 proc_link_dentry(struct plink *p)
{
	struct task_struct *t = (void *)bpf_get_current_task();
	struct file *f;

	if (p->kind == PL_FD)
		return (f = fd_file(p->fd)) ? (__u64)BPF_CORE_READ(f, f_path.dentry) : 0;
	if (p->kind == PL_CWD)
		return (__u64)BPF_CORE_READ(t, fs, pwd.dentry);
	return (__u64)BPF_CORE_READ(t, fs, root.dentry);
}

/* call_refused reports a call the kernel refused: it names the directory the
 * name is relative to (none for an absolute name), and the name as given.
 * Apart from call_exit, so that the compiler need not keep its report and
 * the /proc link it parses on the stack beside those of an opened file's
 * classification: the verifier bounds a chain of calls to 512 bytes. */
static __noinline int call_refused(struct call *cp)
{
	struct call cc = *cp;
	struct plink pl = {};
	struct file *f;
	__u64 d1 = 0, uname = cc.name;

	pl.uname = cc.name;
	if (proc_link(&pl) && (d1 = proc_link_dentry(&pl))) {
		/* Named from the link's target: the rest of the name relative to
		 * it, or, with no rest, the target itself. */
		uname = pl.rest ? cc.name + pl.rest : 0;
	} else if (cc.dirfd == AT_FDCWD) {
		struct task_struct *t = (void *)bpf_get_current_task();

		d1 = (__u64)BPF_CORE_READ(t, fs, pwd.dentry);
	} else if ((f = fd_file(cc.dirfd))) {
		d1 = (__u64)BPF_CORE_READ(f, f_path.dentry);
	}
	report_rep(rep_what(cc.op, AL_CLASS_OUTSIDE, EV_DENIED, 0), 0, d1, 0, uname);
	return 0;
}

static __always_inline int call_exit(long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct call *c = bpf_map_lookup_elem(&calls, &tid);
	struct call cc;
	struct file *f;

	if (!c)
		return 0;
	cc = *c;
	bpf_map_delete_elem(&calls, &tid);
	if (!jailed()) {
		if (ret >= 0 && cc.op != AL_OP_EXEC && (f = fd_file(ret)))
			register_open(BPF_CORE_READ(f, f_path.dentry), BPF_CORE_READ(f, f_inode));
		return 0;
	}
	if (ret >= 0) {
		if (cc.op != AL_OP_EXEC && (f = fd_file(ret)))
			observe_opened(f, cc.op);
		return 0;
	}
	if (ret != -EACCES && ret != -EPERM)
		return 0;
	if (ret == -EACCES && cc.op == AL_OP_READ && proc_pid_file(cc.name))
		return 0;
	return call_refused(&cc);
}

SEC("tracepoint/syscalls/sys_enter_openat")
int enter_openat(struct trace_event_raw_sys_enter *ctx)
{
	return open_enter(ctx->args[0], ctx->args[1], ctx->args[2]);
}

SEC("tracepoint/syscalls/sys_exit_openat")
int exit_openat(struct trace_event_raw_sys_exit *ctx)
{
	return call_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_enter_openat2")
int enter_openat2(struct trace_event_raw_sys_enter *ctx)
{
	struct open_how how = {};

	bpf_probe_read_user(&how, sizeof(how), (void *)ctx->args[2]);
	return open_enter(ctx->args[0], ctx->args[1], how.flags);
}

SEC("tracepoint/syscalls/sys_exit_openat2")
int exit_openat2(struct trace_event_raw_sys_exit *ctx)
{
	return call_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_enter_open")
int enter_open(struct trace_event_raw_sys_enter *ctx)
{
	return open_enter(AT_FDCWD, ctx->args[0], ctx->args[1]);
}

SEC("tracepoint/syscalls/sys_exit_open")
int exit_open(struct trace_event_raw_sys_exit *ctx)
{
	return call_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_enter_creat")
int enter_creat(struct trace_event_raw_sys_enter *ctx)
{
	return call_enter(AT_FDCWD, ctx->args[0], AL_OP_WRITE);
}

SEC("tracepoint/syscalls/sys_exit_creat")
int exit_creat(struct trace_event_raw_sys_exit *ctx)
{
	return call_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_enter_execve")
int enter_execve(struct trace_event_raw_sys_enter *ctx)
{
	return call_enter(AT_FDCWD, ctx->args[0], AL_OP_EXEC);
}

SEC("tracepoint/syscalls/sys_exit_execve")
int exit_execve(struct trace_event_raw_sys_exit *ctx)
{
	return call_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_enter_execveat")
int enter_execveat(struct trace_event_raw_sys_enter *ctx)
{
	return call_enter(ctx->args[0], ctx->args[1], AL_OP_EXEC);
}

SEC("tracepoint/syscalls/sys_exit_execveat")
int exit_execveat(struct trace_event_raw_sys_exit *ctx)
{
	return call_exit(ctx->ret);
}
