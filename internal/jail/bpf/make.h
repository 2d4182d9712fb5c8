/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, making a name: where a new entry may be made, git's
 * files in folders the jail made, the created marks. Part of jail.bpf.c,
 * which includes every part once, in order: one object, one set of maps.
 * Each hook in it makes one decision and reports it.
 */

/* What git_make is asked: a name to be made (by op, from src) in a folder
 * whose verdict.git is parent. */
struct gitmq {
	__u64 dentry;
	__u32 op;
	__u32 parent;
	__u32 src;
	__u32 rule; /* out: the git rule that refuses it, 0 for none */
	__u32 made; /* out: a command file or a .git file is made (CNT_GIT_MADE) */
	__u32 pad;
};

/*
 * git_make decides making a name among git's files (jail.h, struct gitname).
 * A .git: as a directory anywhere; as a file (a pointer to a git directory)
 * only in a folder the jail made. .gitmodules, and in a git directory its
 * command files: only in a folder the jail made, never as a symlink; in a
 * hooks folder (the jail's: another's is read-only) only NAME.sample files.
 * In a git directory, a symlink only in a folder the jail made (git init
 * tries one in each git directory it makes, .git or modules/NAME) and never
 * named for a command file or a folder git follows (modules, worktrees),
 * since git would follow it out of the names checked here; and a folder
 * comes in only from another git directory, since what was made in it
 * elsewhere was not checked as git's, and never as a command file.
 * Everything the jail makes is the jail's to change later (GV_OWN), and
 * what the user's git may run from it (a symlink left in a git directory
 * included) is checked when the session ends.
 * A global function: the verifier checks it once per program.
 */
__noinline int git_make(struct gitmq *m)
{
	struct gitclass *c;
	struct dentry *d;
	__u32 cls = 0, rule = 0, own, op, src, par;

	if (!m)
		return 0;
	d = (void *)m->dentry;
	op = m->op;
	src = m->src;
	par = m->parent;
	own = par & GV_OWN;
	m->rule = 0;
	m->made = 0;
	c = git_lookup(d);
	if (c) {
		cls = c->bits;
		rule = c->rule;
	}
	if (cls & GN_DOTGIT) {
		if (op == AL_OP_MKDIR)
			return 0;
		if ((op == AL_OP_CREATE || op == AL_OP_MKNOD) && own) {
			m->made = 1;
			return 0;
		}
		m->rule = rule;
		return 0;
	}
	if (cls & GN_GITMODULES) {
		if (own && op != AL_OP_SYMLINK && !(src & SRC_LINK))
			return 0;
		m->rule = rule;
		return 0;
	}
	if (!(par & (GV_IN | GV_GITDIR)))
		return 0;
	if (op == AL_OP_RENAME && (src & SRC_DIR) && (!(src & SRC_INGIT) || (cls & GN_CONTROL))) {
		/* What a folder from elsewhere holds was not made as git's;
		 * one from a git directory may hold any name in it but hooks
		 * (objects/pre-commit), so it never becomes a command file. */
		m->rule = cls & GN_CONTROL ? rule : GIT_RULE + GI_DOTGIT;
		return 0;
	}
	if (par & GV_HOOKS) {
		if (op != AL_OP_SYMLINK && op != AL_OP_MKDIR && !(src & (SRC_LINK | SRC_DIR)) &&
		    is_sample(d))
			return 0;
		m->rule = GIT_RULE + GI_HOOKS;
		return 0;
	}
	if (cls & GN_CONTROL) {
		if (own && op != AL_OP_SYMLINK && !(src & SRC_LINK)) {
			m->made = 1;
			return 0;
		}
		m->rule = rule;
		return 0;
	}
	if ((op == AL_OP_SYMLINK || (src & SRC_LINK)) && (!own || (cls & GN_FOLLOWED)))
		m->rule = GIT_RULE + GI_DOTGIT;
	return 0;
}

/* A name to be made (check_name): dentry, by op, from src (SRC_*); d1 and
 * d2 are what a refusal reports. */
struct naming {
	__u64 dentry;
	__u64 d1;
	__u64 d2;
	__u32 op;
	__u32 src;
};

/* check_name refuses making n's name in a directory whose verdict is v when
 * the protect trie keeps that name (a PROT_TREE entry is never made, a node
 * on the way to one only as a directory) or git's rules do (git_make).
 * Returns 0 or -EACCES. A global function: the verifier checks it once per
 * program, not once for every state of the hook (path_rename calls it
 * twice). */
__noinline int check_name(struct naming *n, struct verdict *v)
{
	struct gitmq m = {};
	struct prot *p;

	if (!n || !v)
		return 0;
	p = prot_child(v->node, (void *)n->dentry);
	if (p && ((p->flags & PROT_TREE) || n->op != AL_OP_MKDIR)) {
		v->rule = PROT_RULE + p->node;
		goto refuse;
	}
	if (!cell.git_names)
		return 0;
	m.dentry = n->dentry;
	m.op = n->op;
	m.parent = v->git;
	m.src = n->src;
	git_make(&m);
	if (m.made)
		count(CNT_GIT_MADE);
	if (!m.rule)
		return 0;
	v->rule = m.rule;
refuse:
	v->flags |= EV_PROTECTED;
	return report_v(n->op, v, 0, n->d1, n->d2);
}

/* may_make says whether the name of dentry may be made in folder dir, whose
 * verdict is v, because it is a writable named file's, or a sibling's (v
 * alone does not allow making names in dir). Never in a denied folder. */
static __always_inline int may_make(struct verdict *v, struct dentry *dir, struct dentry *dentry)
{
	struct namedq nq = {};

	if (!cell.named_count || v->denied)
		return 0;
	nq.group = named_group(dir, BPF_CORE_READ(dir, d_sb, s_dev));
	if (!nq.group)
		return 0;
	nq.len = BPF_CORE_READ(dentry, d_name.len);
	nq.name = (__u64)BPF_CORE_READ(dentry, d_name.name);
	named_file(&nq);
	return nq.matched && (nq.flags & RULE_WRITE);
}

/* Creating a name in directory dir: remember the dentry so d_instantiate can
 * mark the new inode as the jail's own. */
static __always_inline int check_create(__u32 op, const struct path *dir, struct dentry *dentry)
{
	struct dentry *parent = dir->dentry;
	struct verdict v;
	struct pending *pd;

	classify_at(parent, parent->d_inode, P_CREATE, &v);
	if (!(v.perm & P_CREATE) && !may_make(&v, parent, dentry))
		return report_v(op, &v, 0, (__u64)dentry, 0);
	{
		struct naming n = { .dentry = (__u64)dentry, .d1 = (__u64)dentry, .op = op };

		if (check_name(&n, &v))
			return -EACCES;
	}
	pd = bpf_task_storage_get(&pendings, bpf_get_current_task_btf(), 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (pd)
		pd->dentry = (__u64)dentry;
	return 0;
}

/* A hook that makes a name without going through check_create (link) must
 * not find a pending dentry of an earlier, failed create there. */
static __always_inline void clear_pending(void)
{
	struct pending *pd = bpf_task_storage_get(&pendings, bpf_get_current_task_btf(), 0, 0);

	if (pd)
		pd->dentry = 0;
}

/* mark_created marks inode as one the jail made. If the mark cannot be
 * stored the file stays foreign to the jail: it is denied later, which is
 * the safe side. */
static __always_inline void mark_created(struct inode *inode)
{
	struct mark *m = bpf_inode_storage_get(&marks, inode, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (m)
		m->created = 1;
}
