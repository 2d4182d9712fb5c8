/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, secrets by name (the patterns) and files granted by
 * name. Part of jail.bpf.c, which includes every part once, in order: one
 * object, one set of maps. Each hook in it makes one decision and reports
 * it.
 */

/* A name matched against the patterns (bpf_loop's context). */
struct patq {
	__u64 name;    /* kernel pointer to the name */
	__u32 len;
	__u32 scope;   /* PAT_IN_* that apply here */
	__u32 matched; /* index + 1 of the first pattern that matched */
	__u32 pad;
};

static long pat_step(__u32 i, struct patq *q)
{
	struct pattern *p;
	__u64 buf[PAT_LEN / 8] = {};
	__u32 n, off = 0, k;

	if (i >= cell.pat_count)
		return 1;
	p = bpf_map_lookup_elem(&patterns, &i);
	if (!p || !(p->scope & q->scope))
		return 0;
	n = p->len;
	if (n == 0 || n >= PAT_LEN || n > q->len)
		return 0;
	switch (p->kind) {
	case PAT_EXACT:
		if (n != q->len)
			return 0;
		break;
	case PAT_PREFIX:
		break;
	case PAT_SUFFIX:
		off = q->len - n;
		break;
	default:
		return 0;
	}
	if (bpf_probe_read_kernel(buf, n & (PAT_LEN - 1), (void *)(q->name + off)))
		return 0;
	/* Whole words (see named_step): buf holds the n bytes read and zeros,
	 * the table's patterns are NUL-padded. */
	for (k = 0; k < PAT_LEN / 8; k++)
		if (buf[k] != ((__u64 *)p->s)[k])
			return 0;
	q->matched = i + 1;
	return 1;
}

/* secret_name says whether the name in q matches a pattern of q->scope:
 * sets q->matched to the pattern's index + 1.
 * A global function for the same reason as protected: bpf_loop's callback is
 * checked once here rather than for every state of classify that reaches it. */
__noinline int secret_name(__u64 name, __u32 len, __u32 scope)
{
	struct patq l = { .name = name, .len = len, .scope = scope };

	if (len == 0 || len > 255)
		return 0;
	bpf_loop(PAT_MAX, pat_step, &l, 0);
	return l.matched;
}

/* A name looked up among the named files of one directory. */
struct namedq {
	__u64 name;    /* kernel pointer to the name */
	__u32 len;
	__u32 group;   /* the directory's */
	__u32 matched; /* the name is a named file's or a sibling's */
	__u32 exact;   /* the file's own name, not a sibling's */
	__u32 rule;    /* the matching entry's */
	__u32 flags;
};

/* named_file's loop (bpf_loop's context): the query and the name's bytes,
 * kept apart from the query so that its callers' stacks stay small (the
 * verifier bounds a chain of calls to 512 bytes of stack). */
struct namedl {
	struct namedq q;
	union {
		char buf[NAMED_LEN]; /* the name's first NAMED_LEN-1 bytes */
		__u64 w[NAMED_LEN / 8];
	};
};

static long named_step(__u32 i, struct namedl *l)
{
	struct named *e;
	__u32 n;

	if (i >= cell.named_count)
		return 1;
	e = bpf_map_lookup_elem(&named_files, &i);
	if (!e || !e->group || e->group != l->q.group)
		return 0;
	n = e->len;
	if (n == 0 || n >= NAMED_LEN - 1 || n > l->q.len)
		return 0;
	/* A sibling: the file's name, a dot, anything. */
	if (n < l->q.len && l->buf[n] != '.')
		return 0;
	/* Word by word, masked to the name by the table (no loop, no shift:
	 * the verifier walks this callback once for each state it reaches). */
	if (((l->w[0] ^ ((__u64 *)e->name)[0]) & e->mask[0]) |
	    ((l->w[1] ^ ((__u64 *)e->name)[1]) & e->mask[1]) |
	    ((l->w[2] ^ ((__u64 *)e->name)[2]) & e->mask[2]) |
	    ((l->w[3] ^ ((__u64 *)e->name)[3]) & e->mask[3]))
		return 0;
	l->q.matched = 1;
	l->q.exact = n == l->q.len;
	l->q.rule = e->rule;
	l->q.flags = e->flags;
	return 1;
}

/* named_scan looks l->q's name up among the named files of l->q.group.
 * l is on the caller's own stack (bpf_loop takes its context there only). */
static __always_inline void named_scan(struct namedl *l)
{
	__u32 n;

	if (l->q.len == 0 || l->q.len > 255 || !l->q.group)
		return;
	n = l->q.len < NAMED_LEN - 1 ? l->q.len : NAMED_LEN - 1;
	if (bpf_probe_read_kernel(l->buf, n & (NAMED_LEN - 1), (void *)l->q.name))
		return;
	bpf_loop(NAMED_MAX, named_step, l, 0);
}

/* named_file says whether q's name is a named file of q->group or one of
 * its siblings. A global function for the same reason as protected. */
__noinline int named_file(struct namedq *q)
{
	struct namedl l = {};

	if (!q)
		return 0;
	l.q = *q;
	named_scan(&l);
	*q = l.q;
	return 0;
}
