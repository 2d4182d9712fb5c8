/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, classify: one verdict for one file, and check, which
 * every file hook asks. Part of jail.bpf.c, which includes every part once,
 * in order: one object, one set of maps. Each hook in it makes one decision
 * and reports it.
 */

/* What classify is asked: the dentry, its inode (0 for a negative dentry),
 * and whether that inode carries the jail's created mark, which only the
 * calling program can look up (inode storage needs a kernel pointer). */
struct query {
	__u64 dentry;
	__u64 inode;
	__u32 created;
	__u32 need;    /* P_* the operation needs: only a write or a creation
	                * asks whether the target is protected */
	__u32 own;     /* the observers' account of created, for git's files
	                * (observe_opened); the hooks use created */
	struct verdict v;
};

/*
 * named_verdict decides the target (dentry, its inode, whether the jail
 * made it), on the file system dev, when it is a named file of its folder
 * (NV_FILE) or a sibling of one (NV_SIBLING), else 0; the verdict's rule
 * in the high half, and with NV_SET its class (bits 8-15) and permissions
 * (bits 16-23). Scalars in, one word out: given a pointer into its
 * caller's stack, the 7.x verifiers' liveness pass analyses a global
 * function again for every caller.
 *
 * Its own global function, and the folder looked up apart from classify's
 * walk: written into classify, or into walk_step (which needs a branch on
 * the step to know the folder), it made the 7.x verifiers process two to
 * three times the instructions in every program that classifies (they
 * explore it once for each state classify reaches it in), a cost every
 * jailed start pays. Here it is checked once per program.
 */
#define NV_FILE    1
#define NV_SIBLING 2
#define NV_SET     4
__noinline __u64 named_verdict(__u64 dentry, __u64 inode_p, __u32 created, __u32 dev)
{
	/* Scanned here, not through named_file: one frame less on the
	 * verifier's bound of 512 bytes for a chain of calls (program,
	 * classify, this, the loop's callback). */
	struct namedl l = {};
	struct namedq *nq = &l.q;
	struct dentry *d = (void *)dentry;
	struct inode *inode = (void *)inode_p;
	__u64 r;

	nq->group = named_group(BPF_CORE_READ(d, d_parent), dev);
	if (!nq->group)
		return 0;
	nq->len = BPF_CORE_READ(d, d_name.len);
	nq->name = (__u64)BPF_CORE_READ(d, d_name.name);
	named_scan(&l);
	if (!nq->matched)
		return 0;
	/* A sibling's name is any name: the caller applies the secret
	 * patterns of grants to it, as to a name in a granted tree (calling
	 * secret_name from here would make one frame too many). */
	r = (nq->exact ? NV_FILE : NV_SIBLING) | (__u64)nq->rule << 32;
	if (nq->flags & RULE_WRITE) {
		/* No P_CREATE: a sibling made as a directory (a lock) holds
		 * nothing the grant covers. A second name of an outside
		 * file: writing it writes there. */
		if (inode && (BPF_CORE_READ(inode, i_mode) & S_IFMT) == S_IFREG &&
		    BPF_CORE_READ(inode, i_nlink) > 1 && !created)
			return r | NV_SET | AL_CLASS_INSIDE << 8 | P_READ << 16;
		return r | NV_SET | AL_CLASS_INSIDE << 8 | (P_READ | P_WRITE) << 16;
	}
	if (nq->flags & RULE_READ)
		return r | NV_SET | AL_CLASS_SYSTEM << 8 | P_READ << 16;
	return r;
}

/* decide is classify's body; wq, when not 0, is the target's folder's
 * kept walk (cache.h), to use or to make. */
static __always_inline int decide(struct query *q, struct walkq *wq)
{
	struct dentry *d;
	struct inode *inode;
	struct verdict *v;
	struct super_block *sb;
	__u64 magic;
	struct walk w = {};
	__u16 mode = 0;

	if (!q)
		return 0;
	d = (void *)q->dentry;
	inode = (void *)q->inode;
	v = &q->v;
	sb = BPF_CORE_READ(d, d_sb);
	magic = BPF_CORE_READ(sb, s_magic);

	v->class = AL_CLASS_OUTSIDE;
	v->perm = 0;
	v->is_root = 0;
	v->flags = 0;
	v->rule = 0;
	v->node = PROT_NONE;
	v->denied = 0;
	v->named = 0;
	v->git = 0;
	if (inode)
		mode = BPF_CORE_READ(inode, i_mode);

	if ((mode & S_IFMT) == S_IFCHR || (mode & S_IFMT) == S_IFBLK) {
		if (dev_allowed(q->created, BPF_CORE_READ(inode, i_rdev))) {
			v->class = AL_CLASS_SYSTEM;
			v->perm = P_READ | P_WRITE;
		}
		return 0;
	}

	switch (magic) {
	case PROC_SUPER_MAGIC: {
		long o = proc_owner_jailed(d);

		if (o == 0) {
			v->class = AL_CLASS_SYSTEM;
			v->perm = P_READ;
		} else if (o == 1) {
			v->class = AL_CLASS_SYSTEM;
			v->perm = P_READ | P_WRITE;
		} else if (o < 0) {
			v->class = AL_CLASS_UNRESOLVED;
			v->flags = EV_UNRESOLVED;
		}
		return 0;
	}
	case SYSFS_MAGIC:
	case CGROUP_SUPER_MAGIC:
	case CGROUP2_SUPER_MAGIC: /* read-only: writing cgroup.procs would leave the jail */
	case SECURITYFS_MAGIC:
		v->class = AL_CLASS_SYSTEM;
		v->perm = P_READ;
		return 0;
	case PIPEFS_MAGIC:
	case SOCKFS_MAGIC:
	case ANON_INODE_FS_MAGIC:
	case NSFS_MAGIC:
	case PID_FS_MAGIC:
		/* Reachable only through a descriptor the jail already holds. */
		v->class = AL_CLASS_SYSTEM;
		v->perm = P_READ | P_WRITE;
		return 0;
	case BPF_FS_MAGIC:
	case DEBUGFS_MAGIC:
	case TRACEFS_MAGIC:
		return 0;
	}

	w.dentry = (__u64)d;
	w.dev = BPF_CORE_READ(sb, s_dev);
	w.sb_root = (__u64)BPF_CORE_READ(sb, s_root);
	if (wq && walk_cache && wq->state) {
		/* The target has no rule of its own (file_open looked): its
		 * walk is its folder's, a step further; the folder's kept
		 * one, or one made from the folder now, to keep. */
		if (wq->state == WQ_WANT) {
			__u64 from = (__u64)BPF_CORE_READ(d, d_parent);

			w.dentry = from;
			/* One step less: the target's was taken. */
			bpf_loop(MAX_WALK - 1, walk_step, &w, 0);
			walk_made(wq, from, &w);
		}
		if (wq->state != WQ_WANT)
			walk_use(wq, &w);
	} else {
		bpf_loop(MAX_WALK, walk_step, &w, 0);
	}
	if (!w.done) {
		v->class = AL_CLASS_UNRESOLVED;
		v->flags = EV_UNRESOLVED;
		return 0;
	}
	if (!w.at_root) {
		/* A disconnected dentry. Kernel-internal mounts (memfd, shm) are
		 * only reachable through a descriptor; anything else (a handle
		 * opened by open_by_handle_at) cannot be placed: deny. */
		if (BPF_CORE_READ(sb, s_flags) & SB_NOUSER) {
			v->class = AL_CLASS_SYSTEM;
			v->perm = P_READ | P_WRITE;
			return 0;
		}
		v->class = AL_CLASS_UNRESOLVED;
		v->flags = EV_UNRESOLVED;
		return 0;
	}
	if (w.deny) {
		v->rule = w.deny_id;
		v->denied = 1;
		return 0;
	}
	/* A file granted by name (or its sibling) in its folder, unless the
	 * target is itself a rule root: its own rule decides. Only in cells
	 * with named files. */
	if (cell.named_count && (!w.nearest || w.nearest_at > 0)) {
		__u64 nv = named_verdict(q->dentry, q->inode, q->created, w.dev);
		int by_name = nv & (NV_FILE | NV_SIBLING);

		if (by_name) {
			v->rule = nv >> 32;
			v->named = 1;
			if (nv & NV_SET) {
				v->class = (nv >> 8) & 0xff;
				v->perm = (nv >> 16) & 0xff;
			}
		}

		if (by_name == 2 && cell.pat_count && (cell.pat_scopes & PAT_IN_GRANTS)) {
			struct patq pq = { .scope = PAT_IN_GRANTS };

			pq.len = BPF_CORE_READ(d, d_name.len);
			pq.name = (__u64)BPF_CORE_READ(d, d_name.name);
			pq.matched = secret_name(pq.name, pq.len, pq.scope);
			if (pq.matched) {
				v->class = AL_CLASS_OUTSIDE;
				v->perm = 0;
				v->named = 0;
				v->rule = PAT_RULE + pq.matched - 1;
				v->denied = 1;
			}
		}
		if (by_name)
			return 0;
	}
	if (!w.nearest)
		return 0;
	if ((w.nearest & (RULE_GRANT | RULE_PROJECT)) && w.nearest_at > 0) {
		struct patq pq = {
			.scope = (w.nearest & RULE_GRANT) ? PAT_IN_GRANTS : PAT_IN_PROJECT,
		};

		if (cell.pat_count && (cell.pat_scopes & pq.scope)) {
			pq.len = BPF_CORE_READ(d, d_name.len);
			pq.name = (__u64)BPF_CORE_READ(d, d_name.name);
			pq.matched = secret_name(pq.name, pq.len, pq.scope);
		}
		if (pq.matched) {
			/* Refused like a denied path: outside, named by the pattern. */
			v->rule = PAT_RULE + pq.matched - 1;
			v->denied = 1;
			return 0;
		}
	}
	v->rule = w.nearest_id;
	v->is_root = w.nearest_at == 0;
	if ((w.nearest & (RULE_WRITE | RULE_SCRATCH)) && (q->need & (P_WRITE | P_CREATE))) {
		__u32 git_in = ((observe_only ? q->own : q->created) ? GV_OWN : 0) |
			       ((w.nearest & RULE_INGIT) ? GV_IN : 0);
		__u64 r;

		/* The observers say every file is the jail's, for second
		 * names (git_in); for git they keep their own account. */
		if (cell.git_names) {
			r = git_place((__u64)d, w.nearest_d, w.nearest_at, git_in, 0);
			v->git = r & 0xff;
			if (r & GP_PROT) {
				v->flags |= EV_PROTECTED;
				if (r >> 32)
					v->rule = r >> 32;
			}
		}
		if (w.nearest & RULE_PROTECT) {
			r = protected((__u64)d, w.nearest_d, w.nearest_at, w.nearest_prot);
			v->node = (__u32)r;
			if (r & PQ_PROT) {
				/* Inside an entry of the trie: read-only, .git
				 * or not. */
				v->flags |= EV_PROTECTED;
				v->git &= ~GV_GITDIR;
				if ((r >> 32) & 0x7fffffff)
					v->rule = (r >> 32) & 0x7fffffff;
			}
		}
	}
	if (w.nearest & RULE_SCRATCH) {
		if (w.nearest_at == 0) {
			/* The scratch directory itself: list it, create in it. */
			v->class = AL_CLASS_SYSTEM;
			v->perm = P_READ | P_CREATE;
			return 0;
		}
		if (q->created) {
			v->class = AL_CLASS_INSIDE;
			v->perm = P_READ | P_WRITE | P_CREATE;
			v->is_root = 0;
		}
		return 0;
	}
	if (w.nearest & RULE_WRITE) {
		v->class = AL_CLASS_INSIDE;
		v->perm = P_READ | P_WRITE | P_CREATE;
		if (v->flags & EV_PROTECTED) {
			/* A .git the jail did not make keeps its place; what
			 * is made in it is decided by name (check_name). */
			v->perm = (v->git & (GV_GITDIR | GV_PROT)) == GV_GITDIR ? P_READ | P_CREATE
										: P_READ;
			return 0;
		}
		/* A second name of an outside file: writing it writes there. */
		if (inode && (mode & S_IFMT) == S_IFREG && BPF_CORE_READ(inode, i_nlink) > 1 &&
		    !q->created)
			v->perm = P_READ;
		return 0;
	}
	if (w.nearest & RULE_READ) {
		v->class = AL_CLASS_SYSTEM;
		v->perm = P_READ;
	}
	return 0;
}

/* classify_with is classify, with wq as decide takes it. */
static __always_inline int classify_with(struct query *q, struct walkq *wq)
{
	struct verdict *v;
	struct inode *inode;
	struct dentry *d;

	if (!q)
		return 0;
	decide(q, wq);
	/* A folder of named files may be listed (its names, not what they
	 * hold) where nothing else lets the agent read it: programs that
	 * save such a file look for it and its siblings there (Claude Code
	 * lists the home on each save). Never a denied one. */
	v = &q->v;
	inode = (void *)q->inode;
	d = (void *)q->dentry;
	if (cell.named_count && v->class == AL_CLASS_OUTSIDE && !v->denied && !(v->perm & P_READ) &&
	    inode && (BPF_CORE_READ(inode, i_mode) & S_IFMT) == S_IFDIR &&
	    named_group(d, BPF_CORE_READ(d, d_sb, s_dev))) {
		v->class = AL_CLASS_SYSTEM;
		v->perm |= P_READ;
	}
	return 0;
}

/*
 * classify decides where q->dentry lies and what may be done to it, into q->v.
 * A global function: see report_rep.
 */
__noinline int classify(struct query *q)
{
	return classify_with(q, 0);
}

/* classify_walked is classify with the target's folder's kept walk, wq
 * (file_open's: the opens of a build are most of what the jail decides). */
__noinline int classify_walked(struct query *q, struct walkq *wq)
{
	return classify_with(q, wq);
}

static __always_inline __u32 inode_created(struct inode *inode)
{
	struct mark *m;

	if (!inode)
		return 0;
	m = bpf_inode_storage_get(&marks, inode, 0, 0);
	return m && m->created;
}

static __always_inline int is_dir(struct dentry *d)
{
	struct inode *inode = BPF_CORE_READ(d, d_inode);

	return inode && (BPF_CORE_READ(inode, i_mode) & S_IFMT) == S_IFDIR;
}

/* What is renamed or linked to a new name (check_name's src). */
#define SRC_DIR   (1 << 0) /* a directory */
#define SRC_LINK  (1 << 1) /* a symlink */
#define SRC_INGIT (1 << 2) /* from a git directory (GV_IN), or a .git itself */

static __always_inline int is_symlink(struct dentry *d)
{
	struct inode *inode = BPF_CORE_READ(d, d_inode);

	return inode && (BPF_CORE_READ(inode, i_mode) & S_IFMT) == S_IFLNK;
}

/* rename_src is check_name's src for d, whose verdict.git is git. */
static __always_inline __u32 rename_src(struct dentry *d, __u32 git)
{
	__u32 src = 0;

	if (is_dir(d))
		src |= SRC_DIR;
	if (is_symlink(d))
		src |= SRC_LINK;
	if (git & (GV_IN | GV_GITDIR))
		src |= SRC_INGIT;
	return src;
}

/* classify_at asks classify about d, a kernel pointer from the hook, for an
 * operation that needs need (P_*). */
static __always_inline void classify_at(struct dentry *d, struct inode *inode, __u32 need,
					struct verdict *v)
{
	struct query q = { .dentry = (__u64)d, .inode = (__u64)inode,
			   .created = inode_created(inode), .need = need };

	classify(&q);
	*v = q.v;
}

/* check decides one operation on one dentry. Returns 0 or -EACCES. */
static __always_inline int check(__u32 op, struct dentry *d, __u32 need, int protect_root)
{
	struct verdict v;

	classify_at(d, d->d_inode, need, &v);
	if ((v.perm & need) == need && !(protect_root && v.is_root))
		return 0;
	return report_v(op, &v, 0, (__u64)d, 0);
}
