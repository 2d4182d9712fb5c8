/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, the file hooks. Part of jail.bpf.c, which includes
 * every part once, in order: one object, one set of maps. Each hook in it
 * makes one decision and reports it.
 */

/* ---- membership --------------------------------------------------------- */

SEC("lsm/task_alloc")
int BPF_PROG(task_alloc, struct task_struct *task, unsigned long clone_flags)
{
	if (!jailed())
		return 0;
	/* clone3(CLONE_INTO_CGROUP) is the one way to be born outside the
	 * parent's cgroup: a child placed elsewhere would not be jailed. */
	if ((__u64)clone_flags & CLONE_INTO_CGROUP) {
		count(CNT_FORK_DENIED);
		return report(AL_OP_FORK, AL_CLASS_OUTSIDE, 0, 0, 0, 0, 0);
	}
	return 0;
}

/* ---- files -------------------------------------------------------------- */

/* The registration slot, when it names the calling thread: one of
 * agent-lock's other threads opening a file meanwhile (its recording, the
 * user's shell files) must not have that file taken for the rule. */
static __always_inline struct registration *registering(void)
{
	__u32 zero = 0;
	struct registration *r = bpf_map_lookup_elem(&reg, &zero);
	__u64 id = bpf_get_current_pid_tgid();

	if (r && r->tgid && r->tgid == (id >> 32) && r->tid == (__u32)id && r->flags)
		return r;
	return 0;
}

/* struct cgroup's kill count, on kernels that have one (6.14 and the stable
 * kernels it went back to; vmlinux.h may lack it where CO-RE finds it). */
struct cgroup___kill_seq {
	unsigned int kill_seq;
} __attribute__((preserve_access_index));

/* How many times cgroup.kill was written in the calling process's cgroup.
 * Such kernels kill a child cloned into another cgroup (CLONE_INTO_CGROUP,
 * which agent-lock starts the cell's processes with) when that cgroup's
 * count differs from the parent's own: agent-lock matches the cell's count
 * to this one before it starts anything there. */
static __always_inline __u32 own_kill_seq(void)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct cgroup___kill_seq *cg = (void *)BPF_CORE_READ(t, cgroups, dfl_cgrp);

	if (!bpf_core_field_exists(cg->kill_seq))
		return 0;
	return BPF_CORE_READ(cg, kill_seq);
}

/* agent-lock registering a rule root: record the identity of what it just
 * opened as this kernel sees it. */
static __always_inline void register_open(struct dentry *d, struct inode *inode)
{
	struct registration *r = registering();
	struct rule_key k = {};
	struct rule nr = {};
	struct rule *old;

	if (!r || !inode)
		return;
	k.dev = BPF_CORE_READ(d, d_sb, s_dev);
	k.ino = BPF_CORE_READ(inode, i_ino);
	if (r->flags == RULE_SEAL) {
		/* Sealing a registered root, after every rule is registered:
		 * if nothing above it is denied as this kernel sees its
		 * ancestors (dentries, not paths), walks may end at it. Not
		 * sealed is only slower. A denial above can no longer appear:
		 * registration is over, and the jail refuses moving the root or
		 * an outside folder above it. */
		struct query q = {};

		old = bpf_map_lookup_elem(&rules, &k);
		if (!old || !rule_owns(old, inode)) {
			/* Seen, not counted: agent-lock's error says what was
			 * seen, apart from an open these programs missed. */
			r->dev = k.dev;
			r->ino = k.ino;
			return;
		}
		nr = *old;
		q.dentry = (__u64)BPF_CORE_READ(d, d_parent);
		q.inode = (__u64)BPF_CORE_READ(d, d_parent, d_inode);
		classify(&q);
		r->sealed = 0;
		if (!q.v.denied && q.v.class != AL_CLASS_UNRESOLVED) {
			nr.flags |= RULE_SEALED;
			r->sealed = 1;
		}
		if (bpf_map_update_elem(&rules, &k, &nr, BPF_ANY) == 0) {
			moves_bump(); /* what walks find changed */
			r->flags = 0;
			r->seq++;
		}
		return;
	}
	nr.flags = r->flags;
	nr.id = r->id; /* a later registration of the same root names it (denials come last) */
	nr.prot = r->prot;
	nr.named = r->named;
	nr.inode = (__u64)inode;
	old = bpf_map_lookup_elem(&rules, &k);
	if (old && !rule_owns(old, inode)) {
		/* Two roots, one number (btrfs subvolumes). Denials hold by
		 * number: two of them are one. A grant's inode cannot share
		 * the entry with another root: agent-lock refuses to start. */
		if (!((old->flags | r->flags) & ~RULE_DENY)) {
			nr.inode = old->inode;
		} else {
			r->clash = 1;
			r->flags = 0;
			r->seq++;
			return;
		}
	}
	if (old) {
		nr.flags |= old->flags;
		if (!(r->flags & RULE_PROTECT))
			nr.prot = old->prot;
		/* A directory keeps the named group it has (agent-lock reads it
		 * back); a registration for its named files alone keeps its id. */
		if (old->named)
			nr.named = old->named;
		if (!r->id)
			nr.id = old->id;
	}
	if (bpf_map_update_elem(&rules, &k, &nr, BPF_ANY) == 0) {
		moves_bump(); /* what walks find changed */
		r->dev = k.dev;
		r->ino = k.ino;
		r->named = nr.named;
		r->kill_seq = own_kill_seq();
		r->flags = 0;
		r->seq++;
	}
}


SEC("lsm/file_open")
int BPF_PROG(file_open, struct file *file)
{
	struct dentry *d = file->f_path.dentry;
	struct inode *inode = file->f_inode;
	__u32 fmode = file->f_mode, need, op;

	if (!jailed()) {
		register_open(d, inode);
		return 0;
	}
	/* The regular file this open just created (O_CREAT) is the jail's own:
	 * the kernel sets FMODE_CREATED only when the creation succeeded, on
	 * every file system (d_instantiate below does not see creations that
	 * file systems with atomic_open finish with d_splice_alias). */
	if ((fmode & FMODE_CREATED) && inode && (BPF_CORE_READ(inode, i_mode) & S_IFMT) == S_IFREG)
		mark_created(inode);

	/* Exec opens carry __FMODE_EXEC in f_flags on every kernel; f_mode's
	 * FMODE_EXEC is set only after the LSM has run on newer ones. */
	if ((fmode & FMODE_EXEC) || (file->f_flags & FMODE_EXEC)) {
		op = AL_OP_EXEC;
		need = P_READ;
	} else if (fmode & FMODE_WRITE) {
		op = AL_OP_WRITE;
		need = P_WRITE | ((fmode & FMODE_READ) ? P_READ : 0);
	} else {
		op = AL_OP_READ;
		need = P_READ;
	}
	struct query q = { .dentry = (__u64)d, .inode = (__u64)inode,
			   .created = inode_created(inode), .need = need };
	struct walkq wq = {};
	__u64 seq = WALKS_BUSY;

	/* The folder's kept walk (cache.h), while no folder moves, for a
	 * target with no rule of its own. */
	if (walk_cache) {
		seq = moves_quiet();
		/* A file that is its own parent (disconnected: a handle's
		 * open) walks as ever: no kept walk is of its address. */
		if (seq != WALKS_BUSY && d->d_parent != d && !has_rule(d, inode))
			walk_take((__u64)d->d_parent, seq, &wq);
	}
	/* Always this one (state 0: walk as classify does): one global
	 * function for the verifier to check in this program, not two. */
	classify_walked(&q, &wq);
	walk_keep(seq, &wq);
	/* q.v itself, not a copy: 6.1 bounds a chain of calls (this
	 * program, report_rep's) to 512 bytes of stack in all. */
	if ((q.v.perm & need) == need) {
		if (q.v.class == AL_CLASS_INSIDE) {
			count(CNT_INBOUNDS);
			if (inbounds_due())
				report_v(op, &q.v, EV_INBOUNDS, (__u64)d, 0);
		} else {
			count(CNT_SYSTEM);
		}
		return 0;
	}
	return report_v(op, &q.v, 0, (__u64)d, 0);
}

SEC("lsm/path_unlink")
int BPF_PROG(path_unlink, const struct path *dir, struct dentry *dentry)
{
	if (!jailed())
		return 0;
	return check(AL_OP_UNLINK, dentry, P_WRITE, 1);
}

SEC("lsm/path_rmdir")
int BPF_PROG(path_rmdir, const struct path *dir, struct dentry *dentry)
{
	if (!jailed())
		return 0;
	return check(AL_OP_RMDIR, dentry, P_WRITE, 1);
}

SEC("lsm/path_mkdir")
int BPF_PROG(path_mkdir, const struct path *dir, struct dentry *dentry, umode_t mode)
{
	if (!jailed())
		return 0;
	return check_create(AL_OP_MKDIR, dir, dentry);
}

SEC("lsm/path_mknod")
int BPF_PROG(path_mknod, const struct path *dir, struct dentry *dentry, umode_t mode,
	     unsigned int dev)
{
	__u32 op = AL_OP_MKNOD;

	if (!jailed())
		return 0;
	/* open(O_CREAT) comes here too, with a regular mode. */
	if ((mode & S_IFMT) == S_IFREG || (mode & S_IFMT) == 0)
		op = AL_OP_CREATE;
	return check_create(op, dir, dentry);
}

SEC("lsm/path_symlink")
int BPF_PROG(path_symlink, const struct path *dir, struct dentry *dentry, const char *old_name)
{
	if (!jailed())
		return 0;
	return check_create(AL_OP_SYMLINK, dir, dentry);
}

SEC("lsm/path_link")
int BPF_PROG(path_link, struct dentry *old_dentry, const struct path *new_dir,
	     struct dentry *new_dentry)
{
	struct naming n = { .dentry = (__u64)new_dentry, .d1 = (__u64)old_dentry,
			    .d2 = (__u64)new_dentry, .op = AL_OP_LINK };
	struct verdict v;

	if (!jailed())
		return 0;
	/* The new name is instantiated with the old inode (d_instantiate):
	 * that is no creation to mark. */
	clear_pending();
	/* A new name for an outside file would make it look inside. */
	classify_at(old_dentry, old_dentry->d_inode, P_WRITE, &v);
	if (!(v.perm & P_WRITE) || v.class != AL_CLASS_INSIDE)
		return report_v(AL_OP_LINK, &v, 0, (__u64)old_dentry, (__u64)new_dentry);
	classify_at(new_dir->dentry, new_dir->dentry->d_inode, P_CREATE, &v);
	if (!(v.perm & P_CREATE) && !may_make(&v, new_dir->dentry, new_dentry))
		return report_v(AL_OP_LINK, &v, 0, (__u64)old_dentry, (__u64)new_dentry);
	n.src = is_symlink(old_dentry) ? SRC_LINK : 0;
	if (check_name(&n, &v))
		return -EACCES;
	return 0;
}

#define RENAME_EXCHANGE (1 << 1)

SEC("lsm/path_rename")
int BPF_PROG(path_rename, const struct path *old_dir, struct dentry *old_dentry,
	     const struct path *new_dir, struct dentry *new_dentry, unsigned int flags)
{
	struct naming n = { .dentry = (__u64)new_dentry, .d1 = (__u64)old_dentry,
			    .d2 = (__u64)new_dentry, .op = AL_OP_RENAME };
	struct verdict v;
	__u32 src_new = 0;

	if (!jailed())
		return 0;
	/* Either end outside is an escape: in, it brings an outside file into
	 * view; out, it takes one of ours (or DIR itself) away. */
	/* A directory with a named file's name (a lock) moves nowhere: one
	 * the user had would bring what it holds into view. */
	classify_at(old_dentry, old_dentry->d_inode, P_WRITE, &v);
	if (!(v.perm & P_WRITE) || v.is_root || (v.named && is_dir(old_dentry)))
		return report_v(AL_OP_RENAME, &v, 0, (__u64)old_dentry, (__u64)new_dentry);
	n.src = rename_src(old_dentry, v.git);
	classify_at(new_dir->dentry, new_dir->dentry->d_inode, P_CREATE, &v);
	if (!(v.perm & P_CREATE) && !may_make(&v, new_dir->dentry, new_dentry))
		return report_v(AL_OP_RENAME, &v, 0, (__u64)old_dentry, (__u64)new_dentry);
	/* Renamed onto a protected name: as if made there (AL_OP_RENAME is
	 * never AL_OP_MKDIR, so a node on the way to an entry refuses too). */
	if (check_name(&n, &v))
		return -EACCES;
	if (new_dentry->d_inode) {
		/* Replacing (or, with RENAME_EXCHANGE, swapping) an existing name. */
		classify_at(new_dentry, new_dentry->d_inode, P_WRITE, &v);
		if (!(v.perm & P_WRITE) || v.is_root || (v.named && is_dir(new_dentry)))
			return report_v(AL_OP_RENAME, &v, 0, (__u64)old_dentry, (__u64)new_dentry);
		src_new = rename_src(new_dentry, v.git);
	}
	if (flags & RENAME_EXCHANGE) {
		/* The other way too: new_dentry takes old_dentry's name. */
		classify_at(old_dir->dentry, old_dir->dentry->d_inode, P_CREATE, &v);
		n.dentry = (__u64)old_dentry;
		n.d1 = (__u64)new_dentry;
		n.d2 = (__u64)old_dentry;
		n.src = src_new;
		if (check_name(&n, &v))
			return -EACCES;
	}
	return 0;
}

SEC("lsm/path_truncate")
int BPF_PROG(path_truncate, const struct path *path)
{
	if (!jailed())
		return 0;
	return check(AL_OP_TRUNCATE, path->dentry, P_WRITE, 0);
}

SEC("lsm/path_chmod")
int BPF_PROG(path_chmod, const struct path *path, umode_t mode)
{
	if (!jailed())
		return 0;
	return check(AL_OP_CHMOD, path->dentry, P_WRITE, 0);
}

SEC("lsm/path_chown")
int BPF_PROG(path_chown, const struct path *path)
{
	if (!jailed())
		return 0;
	return check(AL_OP_CHOWN, path->dentry, P_WRITE, 0);
}

/* utimes has no path hook; inode_setattr carries it. Its arguments gained an
 * idmap in front after 6.1, so there are two programs and the loader keeps
 * the one that matches the running kernel's BTF. */
static __always_inline int setattr(struct dentry *dentry, struct iattr *attr)
{
	if (!jailed())
		return 0;
	return check(AL_OP_SETATTR, dentry, P_WRITE, 0);
}

SEC("lsm/inode_setattr")
int BPF_PROG(inode_setattr, struct mnt_idmap *idmap, struct dentry *dentry, struct iattr *attr)
{
	return setattr(dentry, attr);
}

SEC("lsm/inode_setattr")
int BPF_PROG(inode_setattr_noidmap, struct dentry *dentry, struct iattr *attr)
{
	return setattr(dentry, attr);
}

/* The first argument is a user_namespace on 6.1 and an idmap later; the
 * dentry is second on both. */
SEC("lsm/inode_setxattr")
int BPF_PROG(inode_setxattr, void *idmap, struct dentry *dentry)
{
	if (!jailed())
		return 0;
	return check(AL_OP_SETXATTR, dentry, P_WRITE, 0);
}

SEC("lsm/inode_removexattr")
int BPF_PROG(inode_removexattr, void *idmap, struct dentry *dentry)
{
	if (!jailed())
		return 0;
	return check(AL_OP_REMOVEXATTR, dentry, P_WRITE, 0);
}

/*
 * Reading an attribute needs read access, as reading the file would: user.*
 * attributes hold data (where a file was downloaded from, a tool's notes).
 * The access-control attributes (security.*: labels, file capabilities;
 * system.*: POSIX ACLs) say who may do what, as the mode bits that stat
 * shows of any file do, and ls -l asks for them on every file it lists:
 * refusing those would refuse `ls -l /tmp` for every file of others there.
 */
static __always_inline int access_attr(const char *name)
{
	char b[16] = {};

	if (bpf_probe_read_kernel_str(b, sizeof(b), name) <= 0)
		return 0;
	if (b[0] == 's' && b[1] == 'e' && b[2] == 'c' && b[3] == 'u' && b[4] == 'r' &&
	    b[5] == 'i' && b[6] == 't' && b[7] == 'y' && b[8] == '.')
		return 1;
	return b[0] == 's' && b[1] == 'y' && b[2] == 's' && b[3] == 't' && b[4] == 'e' &&
	       b[5] == 'm' && b[6] == '.';
}

SEC("lsm/inode_getxattr")
int BPF_PROG(inode_getxattr, struct dentry *dentry, const char *name)
{
	if (!jailed() || access_attr(name))
		return 0;
	return check(AL_OP_GETXATTR, dentry, P_READ, 0);
}

/* The names of a file's attributes: user.* names are data of their own. */
SEC("lsm/inode_listxattr")
int BPF_PROG(inode_listxattr, struct dentry *dentry)
{
	if (!jailed())
		return 0;
	return check(AL_OP_LISTXATTR, dentry, P_READ, 0);
}

/*
 * d_instantiate gives a dentry its inode, for a creation and for a lookup
 * alike: a lookup that finds a file not in the dentry cache (on a disk file
 * system: /var/tmp, anything evicted) instantiates a fresh dentry through
 * d_splice_alias. A pending dentry left by a failed create is freed once its
 * directory goes, and its memory can come back as that fresh dentry, for
 * someone else's file: the mark would land there. A creation instantiates
 * the negative dentry its lookup hashed, which the path hook saw; a lookup
 * instantiates one not hashed yet (d_splice_alias insists). So only a
 * hashed dentry that is the pending one is a creation of ours.
 * Void hooks return 0 too: newer verifiers check every LSM program's return.
 */
SEC("lsm/d_instantiate")
int BPF_PROG(d_instantiate, struct dentry *dentry, struct inode *inode)
{
	struct pending *pd;
	__u64 magic;

	/* A folder given a dentry: a kept walk at its address was another's. */
	if (walk_cache && inode && (inode->i_mode & S_IFMT) == S_IFDIR)
		walk_forget(dentry);
	if (!inode || !jailed())
		return 0;
	magic = dentry->d_sb->s_magic;
	if (magic != 0x1cd1 /* devpts: a pty this jail opened */) {
		pd = bpf_task_storage_get(&pendings, bpf_get_current_task_btf(), 0, 0);
		if (!pd || pd->dentry != (__u64)dentry)
			return 0;
		pd->dentry = 0;
		if (!dentry->d_hash.pprev)
			return 0;
	}
	mark_created(inode);
	return 0;
}
