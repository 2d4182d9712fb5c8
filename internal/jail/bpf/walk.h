/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, the verdict and the walk from a target up to its rule
 * root. Part of jail.bpf.c, which includes every part once, in order: one
 * object, one set of maps. Each hook in it makes one decision and reports
 * it.
 */

/* ---- classification ----------------------------------------------------- */

struct verdict {
	__u32 class;
	__u32 perm;     /* P_* allowed on this target */
	__u32 is_root;  /* the target is itself a rule root (DIR, TMPDIR, ...) */
	__u32 flags;    /* EV_UNRESOLVED, EV_PROTECTED */
	__u32 rule;     /* event.rule */
	__u32 node;     /* the target's protect node, PROT_NONE when it has none */
	__u32 denied;   /* by a denied root above it */
	__u32 named;    /* decided by a named file's grant */
	__u32 git;      /* GV_*: where it lies among git's files (only when a write
	                 * or a creation is asked: struct query.need) */
};

/* verdict.git */
#define GV_IN     (1 << 0) /* a git directory lies above the target */
#define GV_GITDIR (1 << 1) /* the target is named .git */
#define GV_PROT   (1 << 2) /* the target is, or lies in, a git directory's command
                            * file (GN_CONTROL), or is .gitmodules */
#define GV_HOOKS  (1 << 3) /* the target is a git directory's hooks folder */
#define GV_OWN    (1 << 4) /* the jail made the target in this session */

/* report_v reports a file decision with what classify said about it. */
static __always_inline int report_v(__u32 op, struct verdict *v, __u32 flags, __u64 d1, __u64 d2)
{
	return refuse_file(report_rep(rep_what(op, v->class, v->flags | flags, v->rule), 0, kptr(d1), kptr(d2), 0));
}

struct walk {
	__u64 dentry;
	__u32 dev;
	__u32 nearest;    /* flags of the nearest read/write/scratch rule */
	__u32 nearest_at; /* its depth: 0 is the target itself */
	__u32 nearest_id;
	__u32 deny;
	__u32 deny_id;
	__u32 done;
	__u32 at_root;
	__u64 sb_root;
	__u64 nearest_d;  /* the nearest rule's dentry */
	__u32 nearest_prot; /* its protect-trie node */
	__u32 pad;
};

static long walk_step(__u32 i, struct walk *w)
{
	struct dentry *d = (void *)w->dentry;
	struct dentry *p;
	struct inode *inode;
	__u32 sealed = 0;

	if (!d)
		return 1;
	inode = BPF_CORE_READ(d, d_inode);
	if (inode) {
		struct rule_key k = { .dev = w->dev, .ino = BPF_CORE_READ(inode, i_ino) };
		struct rule *r = bpf_map_lookup_elem(&rules, &k);

		if (r) {
			/* Denied by number; granted only as the very inode
			 * registered (struct rule.inode). */
			__u32 own = rule_owns(r, inode);

			if ((r->flags & RULE_DENY) && !w->deny) {
				w->deny = 1;
				w->deny_id = r->id;
			}
			if (own && !w->nearest && (r->flags & (RULE_READ | RULE_WRITE | RULE_SCRATCH))) {
				w->nearest = r->flags;
				w->nearest_at = i;
				w->nearest_id = r->id;
				w->nearest_d = (__u64)d;
				w->nearest_prot = r->prot;
			}
			/* Nothing above a sealed root is denied, and the rules
			 * above the nearest one decide nothing: the walk ends
			 * here, as at the root (one exit: fewer states for the
			 * verifier to walk through). */
			sealed = own && (r->flags & RULE_SEALED) && w->nearest;
		}
	}
	p = BPF_CORE_READ(d, d_parent);
	if (sealed || !p || p == d) {
		w->done = 1;
		w->at_root = sealed || (__u64)d == w->sb_root;
		return 1;
	}
	w->dentry = (__u64)p;
	return 0;
}

/* named_group is the group of named files of folder dir, on the file
 * system dev, or 0 when it has none. */
static __always_inline __u32 named_group(struct dentry *dir, __u32 dev)
{
	struct rule_key k = { .dev = dev };
	struct inode *inode;
	struct rule *r;

	if (!dir)
		return 0;
	inode = BPF_CORE_READ(dir, d_inode);
	if (!inode)
		return 0;
	k.ino = BPF_CORE_READ(inode, i_ino);
	r = bpf_map_lookup_elem(&rules, &k);
	if (!r || !(r->flags & RULE_NAMED) || !rule_owns(r, inode))
		return 0;
	return r->named;
}

/* The pid a /proc entry belongs to, or 0 for system-wide entries. A negative
 * value means the entry could not be resolved. */
static __always_inline long proc_owner_jailed(struct dentry *d)
{
	struct dentry *top = d, *p;
	struct super_block *sb = BPF_CORE_READ(d, d_sb);
	struct dentry *root = BPF_CORE_READ(sb, s_root);
	struct inode *inode;
	struct proc_inode *pi;
	struct pid *pid;
	struct hlist_node *first;
	struct task_struct *task;
	int i;

	if (d == root)
		return 0;
	for (i = 0; i < MAX_PROC_WALK; i++) {
		p = BPF_CORE_READ(top, d_parent);
		if (p == root)
			break;
		if (!p || p == top)
			return -1;
		top = p;
	}
	if (i == MAX_PROC_WALK)
		return -1;
	inode = BPF_CORE_READ(top, d_inode);
	if (!inode)
		return 0;
	pi = (void *)((char *)inode - bpf_core_field_offset(struct proc_inode, vfs_inode));
	pid = BPF_CORE_READ(pi, pid);
	if (!pid)
		return 0; /* /proc/meminfo, /proc/sys/..., /proc/self (the link) */
	first = BPF_CORE_READ(pid, tasks[0].first);
	if (!first)
		return -1; /* the process is gone */
	task = (void *)((char *)first - bpf_core_field_offset(struct task_struct, pid_links));
	return task_jailed(task) ? 1 : 2;
}

static __always_inline int dev_allowed(__u32 created, __u32 rdev)
{
	int i;

	switch (rdev) {
	case MKDEV(1, 3): /* null */
	case MKDEV(1, 5): /* zero */
	case MKDEV(1, 7): /* full */
	case MKDEV(1, 8): /* random */
	case MKDEV(1, 9): /* urandom */
	case MKDEV(5, 0): /* tty: the caller's own controlling terminal */
	case MKDEV(5, 2): /* ptmx: new ptys are the jail's own */
		return 1;
	}
	for (i = 0; i < 4; i++)
		if (cell.tty_rdev[i] && rdev == cell.tty_rdev[i])
			return 1;
	/* Another pty of the user's (a terminal tab, tmux, an ssh session) is a
	 * way to type into a shell outside: only ptys the jail opened itself. */
	if ((rdev >> 20) >= UNIX98_PTY_SLAVE_MAJOR && (rdev >> 20) < UNIX98_PTY_SLAVE_MAJOR + 8)
		return created;
	return 0;
}
