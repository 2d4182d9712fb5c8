/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, protected names and git's files along the walk (the
 * protect trie, git's names at any depth). Part of jail.bpf.c, which
 * includes every part once, in order: one object, one set of maps. Each hook
 * in it makes one decision and reports it.
 */

/* The keys of the name lookups below, built off the stack: the verifier
 * bounds a chain of calls (program, classify, protected, its loop's
 * callback) to 512 bytes of stack, and classify's walk takes much of it. */
struct keys {
	struct prot_key prot;
	struct gitname git;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct keys);
} keys SEC(".maps");

/* The protect-trie entry for name d below node parent, or 0. A name longer
 * than any entry's cannot match (nor can one that cannot be read). */
static __always_inline struct prot *prot_child(__u32 parent, struct dentry *d)
{
	__u32 zero = 0;
	struct keys *kb;
	const unsigned char *name;

	if (parent == PROT_NONE || BPF_CORE_READ(d, d_name.len) >= PROT_NAME)
		return 0;
	kb = bpf_map_lookup_elem(&keys, &zero);
	if (!kb)
		return 0;
	__builtin_memset(&kb->prot, 0, sizeof(kb->prot));
	kb->prot.parent = parent;
	name = BPF_CORE_READ(d, d_name.name);
	if (bpf_probe_read_kernel_str(kb->prot.name, sizeof(kb->prot.name), name) <= 0)
		return 0;
	return bpf_map_lookup_elem(&protect, &kb->prot);
}

/* git_lookup is the entry of d's name in the gitnames table, or 0 for any
 * other name. Every name in the table is shorter than GIT_NAME_LEN, so a
 * longer one is not read. */
static __always_inline struct gitclass *git_lookup(struct dentry *d)
{
	__u32 zero = 0;
	struct keys *kb;
	const unsigned char *name;
	__u32 len;

	len = BPF_CORE_READ(d, d_name.len);
	if (len == 0 || len >= GIT_NAME_LEN)
		return 0;
	kb = bpf_map_lookup_elem(&keys, &zero);
	if (!kb)
		return 0;
	__builtin_memset(&kb->git, 0, sizeof(kb->git));
	name = BPF_CORE_READ(d, d_name.name);
	if (bpf_probe_read_kernel(kb->git.name, len & (GIT_NAME_LEN - 1), name))
		return 0;
	kb->git.len = len;
	return bpf_map_lookup_elem(&gitnames, &kb->git);
}

/* git_class is the class of d's name (GN_*: one bit), 0 for none. */
static __always_inline __u32 git_class(struct dentry *d)
{
	struct gitclass *c = git_lookup(d);

	return c ? c->bits : 0;
}

/* is_sample says whether d's name is a sample hook's (NAME.sample), which
 * git never runs. */
static __always_inline int is_sample(struct dentry *d)
{
	/* ".sample" in the last seven of eight bytes, little-endian. */
	const __u64 sample = 0x656c706d61732eULL;
	__u64 w = 0;
	__u32 len = BPF_CORE_READ(d, d_name.len);

	if (len < 8 || len > 255)
		return 0;
	if (bpf_probe_read_kernel(&w, 8, BPF_CORE_READ(d, d_name.name) + len - 8))
		return 0;
	return (w >> 8) == sample;
}

/* The first components of a target's path below its rule root: a second,
 * shorter walk up from the target (bpf_loop's context).
 *
 * Why not remembered during classify's walk: carrying the last three
 * dentries along that walk made the 7.x verifiers, which check a bpf_loop
 * callback until its state converges, process six times as many
 * instructions for classify (about 16000 instead of 2900, in each of the
 * seventeen programs that call it), which doubled agent-lock's start under
 * emulation. Walking again costs one more read per level below the rule
 * root, and only for operations that write or create below a RULE_PROTECT
 * root: a read is never refused for being protected. */
struct topq {
	__u64 cur;
	__u64 root;  /* the rule root classify's walk found at depth */
	__u32 depth; /* how far above the target it is (> 0) */
	__u32 ok;    /* the walk reached root at depth */
	__u64 top[PROT_DEPTH];
};

static long top_step(__u32 i, struct topq *t)
{
	struct dentry *d = (void *)t->cur;
	__u32 k;

	if (!d || i >= t->depth)
		return 1;
	/* d is the (depth - 1 - i)th component below the root. */
	k = t->depth - 1 - i;
	if (k == 0)
		t->top[0] = (__u64)d;
	else if (k == 1)
		t->top[1] = (__u64)d;
	else if (k == 2)
		t->top[2] = (__u64)d;
	t->cur = (__u64)BPF_CORE_READ(d, d_parent);
	if (k == 0) {
		t->ok = t->cur == t->root;
		return 1;
	}
	return 0;
}

/* Git's names along the components of a target's path below its rule root,
 * walked up from the target (bpf_loop's context): a .git protects the
 * command files seen below it. A walk of its own, apart from the trie's:
 * both in one callback made the 7.x verifiers walk it for ten times the
 * instructions. Its state is kept in values the verifier cannot know, so
 * that the callback's states converge in a pass or two. */
struct gitw {
	__u64 cur;
	__u32 left; /* components still to look at, the target's included */
	__u32 pend; /* GN_CONTROL of the components seen so far */
	__u32 prot; /* GN_CONTROL: pend as it was at each .git seen above it;
	             * GN_DOTGIT: a .git lies above the target */
	__u32 above; /* 0 for the target, then ~0 */
};

static long git_step(__u32 i, struct gitw *g)
{
	struct dentry *d = (void *)g->cur;
	__u32 c;

	if (!d || !g->left)
		return 1;
	c = git_class(d);
	g->prot |= (g->pend & -(c & GN_DOTGIT)) | (c & GN_DOTGIT & g->above);
	g->pend |= c & GN_CONTROL;
	g->above = ~0U;
	g->left--;
	g->cur = (__u64)BPF_CORE_READ(d, d_parent);
	return 0;
}

/* protected's and git_place's answers, one word each (a global function
 * returns one; given a pointer into its caller's stack instead, the 7.x
 * verifiers' liveness pass analyses the callee again for every caller):
 * protected: the target's trie node in the low half, the entry's rule in
 * the high half when PQ_PROT; git_place: the target's GV_* in the low byte,
 * the file's rule in the high half when GP_PROT. PQ_PROT or GP_PROT: read-only
 * (EV_PROTECTED), by that rule (none: the path changed, fail closed). */
#define PQ_PROT (1ULL << 63)
#define GP_PROT (1ULL << 8)

/* protected follows the target's first components below its RULE_PROTECT
 * root through the trie: inside a PROT_TREE entry the target is read-only
 * (EV_PROTECTED, named by that entry); node is the target's own node when
 * its whole path is in the trie, so that creating a name in it can be
 * checked (check_name).
 * A global function, like classify and report_rep: the verifier checks it
 * once per program, not once for every state of classify that reaches it. */
__noinline __u64 protected(__u64 dentry, __u64 root, __u32 depth, __u32 node0)
{
	struct topq t = {};
	__u32 node = node0;
	int k;

	if (depth == 0)
		return node;
	t.cur = dentry;
	t.root = root;
	t.depth = depth;
	/* A value the verifier cannot know (a global function's argument),
	 * so that writing a slot does not change the callback's state (fewer
	 * passes until it converges); the walk writes every slot read below
	 * before t.ok is set. */
	t.top[0] = t.top[1] = t.top[2] = dentry;
	bpf_loop(MAX_WALK, top_step, &t, 0);
	if (!t.ok)
		/* The path changed under us (a rename between the two walks):
		 * fail closed, read-only as if the target were protected. */
		return PQ_PROT | PROT_NONE;
	for (k = 0; k < PROT_DEPTH; k++) {
		struct dentry *d = (void *)t.top[k];
		struct prot *p;

		if (!d || k >= depth)
			break;
		p = prot_child(node, d);
		if (!p)
			return PROT_NONE;
		node = p->node;
		if (p->flags & PROT_TREE)
			return PQ_PROT | (__u64)(PROT_RULE + node) << 32 | PROT_NONE;
	}
	return depth <= PROT_DEPTH ? node : PROT_NONE;
}

/* git_place says where the target lies among git's files (GV_*),
 * following git's names along its components below its writable root: in
 * a git command file (or .gitmodules) the jail did not make, the target is
 * read-only (EV_PROTECTED, named by that file); a .git the jail did not make
 * may not be replaced, moved or removed (EV_PROTECTED with GV_GITDIR: what
 * is made in it is decided by name, check_name).
 * Apart from protected, as a global function of its own: in one function the
 * verifier walked this once for every state the trie's walk left. */
__noinline __u64 git_place(__u64 dentry, __u64 root, __u32 depth, __u32 git_in, __u32 zero)
{
	struct gitw g = {};
	struct dentry *d;
	__u32 git, own, cls, rule = 0, prot;

	own = git_in & GV_OWN;
	d = (void *)dentry;
	if (depth > 0) {
		g.cur = dentry;
		g.left = depth;
		/* Zero, passed by every caller: unknown to the verifier from
		 * the first pass (a global function's argument), as after it. */
		g.pend = g.prot = g.above = zero;
		bpf_loop(MAX_WALK, git_step, &g, 0);
		if (g.left || g.cur != root)
			/* Not to the root (a rename between the walks): fail
			 * closed, read-only. */
			return GP_PROT;
	}
	cls = git_class(d);
	prot = g.prot;
	/* A root in a git directory counts as a .git above all. */
	if (git_in & GV_IN)
		prot |= g.pend | GN_DOTGIT;
	/* In a hooks folder only a sample is the jail's to change: the
	 * hooks refuse making any other name there (git_make); the observers,
	 * which see a file once it is made, judge it here. */
	if ((prot & GN_HOOKS) && !(cls & GN_HOOKS) && !is_sample(d))
		own = 0;
	git = own;
	if (prot & GN_DOTGIT)
		git |= GV_IN;
	if (cls & GN_DOTGIT)
		git |= GV_GITDIR;
	if ((cls & GN_HOOKS) && (prot & GN_DOTGIT))
		git |= GV_HOOKS;
	prot &= GN_CONTROL;
	if (prot) {
		git |= GV_PROT;
		/* Named by one of the command files it lies in. */
		if (prot & GN_HOOKS)
			rule = GIT_RULE + GI_HOOKS;
		else if (prot & (1 << GI_CONFIG))
			rule = GIT_RULE + GI_CONFIG;
		else if (prot & (1 << GI_CONFIG_WT))
			rule = GIT_RULE + GI_CONFIG_WT;
		else if (prot & (1 << GI_COMMONDIR))
			rule = GIT_RULE + GI_COMMONDIR;
		else
			rule = GIT_RULE + GI_GITDIR;
	} else if (cls & GN_GITMODULES) {
		git |= GV_PROT;
		rule = GIT_RULE + GI_GITMODULES;
	}
	if (own)
		return git;
	if (git & GV_PROT)
		return git | GP_PROT | (__u64)rule << 32;
	if (git & GV_GITDIR)
		return git | GP_PROT | (__u64)(GIT_RULE + GI_DOTGIT) << 32;
	return git;
}
