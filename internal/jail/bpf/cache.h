/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, the folders' walk cache: what the walk up from a
 * folder found (denial, nearest rule, the file system's root), kept on the
 * folder's dentry so that file_open need not walk from a file at all.
 * Part of jail.bpf.c, which includes every part once, in order.
 *
 * Why a kept walk cannot hand out a stale "allowed":
 * - What the walk up from folder P finds is a function of P's chain of
 *   ancestors (their inodes, through d_parent) and of the rule map. The
 *   rule map changes only while agent-lock registers (register_open), which
 *   counts as a move below. A dentry's d_parent is written only by
 *   __d_move, under rename_lock: every rename, exchange and the moves
 *   d_splice_alias makes when a network, FUSE or overlay file system finds
 *   a folder elsewhere than the dcache had it (no rename hook sees those).
 *   A positive folder's inode does not change.
 * - fentry and fexit on __d_move count moves of folders (moves_started,
 *   moves_done): a file's move changes no folder's chain. A kept walk
 *   carries the count it was made at, and is used only while no move has
 *   started since (and none is under way); a walk is kept only when no
 *   move started while it ran. So a kept walk is what a walk made now
 *   would find.
 * - Entries are kept by the folder's dentry address, the one the walk
 *   itself started from. A new dentry at a freed one's address is
 *   first given its inode (d_instantiate, which sees every dentry given
 *   one: d_add, d_splice_alias, d_instantiate_new, ...), where the
 *   address's entry is dropped. A folder's dentry is not freed while an
 *   open holds a file in it.
 * - Kept only for targets that have no rule of their own (file_open looks
 *   them up), whose walk is then their folder's, a step further.
 * - Readers and writers hold the entry's lock while they copy it.
 * - Ordering: the counts are read before the walk and again after it with
 *   plain loads, and the move programs count with locked adds. That holds
 *   on x86, whose loads are not reordered with loads and whose locked
 *   instructions are full barriers; BPF (-mcpu=v1) has no load-acquire to
 *   say it for weaker CPUs, so agent-lock keeps walks on x86-64 alone.
 * - Without the move programs and d_instantiate (other CPUs, the
 *   observers, the benchmark's file_open alone), walk_cache is 0 and
 *   nothing is kept.
 * - A disconnected file (a handle's open: its own parent) is never
 *   looked up by its address.
 */

const volatile __u32 walk_cache = 0; /* the move programs are loaded */

/* A folder's kept walk (struct walk's findings, depths from the folder). */
struct walked {
	__u64 seq;       /* moves_started + 1 when made; 0: empty */
	__u64 nearest_d;
	__u32 deny;
	__u32 deny_id;
	__u32 nearest;
	__u32 nearest_at;
	__u32 nearest_id;
	__u32 nearest_prot;
	/* Readers and writers hold it; alone in its word, so that no
	 * load or store of a field next to it touches it. */
	struct bpf_spin_lock lock;
	__u32 unused;
};

/* Counts of folder moves begun and ended (and of rules registered). */
__u64 moves_started = 0;
__u64 moves_done = 0;

/* Kept walks by the folder's dentry address. Entries are written in place,
 * under their lock (an element a writer replaced could be reused at once
 * for another key while a reader copies it); an entry is removed only
 * when a new dentry takes its address (d_instantiate), which cannot
 * happen while an open holds a file in the folder. Full, no more are
 * kept: opens walk as before. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 262144);
	__type(key, __u64);
	__type(value, struct walked);
} walks SEC(".maps");

/* An empty entry, to insert before writing it in place: of struct
 * walked's size without its lock (a helper may not be given memory that
 * holds a lock; the kernel sets the new entry's lock itself). */
struct walk_blank {
	__u64 word[sizeof(struct walked) / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct walk_blank);
} walk_empty SEC(".maps");

#define WALKS_BUSY ((__u64)-1)

/* moves_quiet is the count of folder moves, or WALKS_BUSY while one is
 * under way. */
static __always_inline __u64 moves_quiet(void)
{
	__u64 s = *(volatile __u64 *)&moves_started;
	__u64 d = *(volatile __u64 *)&moves_done;

	return s == d ? s : WALKS_BUSY;
}

/* moves_bump counts a change to what walks find that is not a move: a
 * rule registered. */
static __always_inline void moves_bump(void)
{
	__sync_fetch_and_add(&moves_started, 1);
	__sync_fetch_and_add(&moves_done, 1);
}

/* A kept walk as classify_walked takes and gives it (the program's own
 * copy: a global function cannot hold the entry's lock). */
struct walkq {
	__u64 dentry;    /* the folder's dentry: the walk from it */
	__u64 nearest_d;
	__u32 deny;
	__u32 deny_id;
	__u32 nearest;
	__u32 nearest_at;
	__u32 nearest_id;
	__u32 nearest_prot;
	__u32 state;     /* WQ_* */
	__u32 pad;
};

#define WQ_KEPT 1 /* in: the target has no rule; its folder's kept walk */
#define WQ_WANT 2 /* in: the target has no rule; none kept: make one */
#define WQ_MADE 3 /* out: the walk from the target's folder, to keep */

/* walk_use puts the folder's kept walk q into w, as its child's. */
static __always_inline void walk_use(struct walkq *q, struct walk *w)
{
	w->deny = q->deny;
	w->deny_id = q->deny_id;
	w->nearest = q->nearest;
	w->nearest_at = q->nearest_at + 1;
	w->nearest_id = q->nearest_id;
	w->nearest_d = q->nearest_d;
	w->nearest_prot = q->nearest_prot;
	w->at_root = 1;
	w->done = 1;
}

/* walk_made puts w, the walk just made from folder dentry from, into q, to be
 * kept and used: one that reached the root. Any other is the target's as
 * it is (unresolved, or not placed). */
static __always_inline void walk_made(struct walkq *q, __u64 from, struct walk *w)
{
	if (!w->done || !w->at_root)
		return;
	q->dentry = from;
	q->nearest_d = w->nearest_d;
	q->deny = w->deny;
	q->deny_id = w->deny_id;
	q->nearest = w->nearest;
	q->nearest_at = w->nearest_at;
	q->nearest_id = w->nearest_id;
	q->nearest_prot = w->nearest_prot;
	q->state = WQ_MADE;
}

/* walk_take copies the kept walk of folder p, made at move count seq,
 * into q, or asks for one. */
static __always_inline void walk_take(__u64 p, __u64 seq, struct walkq *q)
{
	struct walked *c = bpf_map_lookup_elem(&walks, &p);

	q->state = WQ_WANT;
	if (!c)
		return;
	bpf_spin_lock(&c->lock);
	if (c->seq == seq + 1) {
		q->nearest_d = c->nearest_d;
		q->deny = c->deny;
		q->deny_id = c->deny_id;
		q->nearest = c->nearest;
		q->nearest_at = c->nearest_at;
		q->nearest_id = c->nearest_id;
		q->nearest_prot = c->nearest_prot;
		q->state = WQ_KEPT;
	}
	bpf_spin_unlock(&c->lock);
}

/* walk_keep keeps q, made at move count seq: when no folder moved while
 * it was made. */
static __always_inline void walk_keep(__u64 seq, struct walkq *q)
{
	__u64 p = q->dentry;
	__u32 zero = 0;
	struct walked *c;
	struct walk_blank *e;

	if (q->state != WQ_MADE || *(volatile __u64 *)&moves_started != seq)
		return;
	c = bpf_map_lookup_elem(&walks, &p);
	if (!c) {
		e = bpf_map_lookup_elem(&walk_empty, &zero);
		if (!e)
			return;
		bpf_map_update_elem(&walks, &p, e, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&walks, &p);
		if (!c)
			return;
	}
	bpf_spin_lock(&c->lock);
	c->seq = seq + 1;
	c->nearest_d = q->nearest_d;
	c->deny = q->deny;
	c->deny_id = q->deny_id;
	c->nearest = q->nearest;
	c->nearest_at = q->nearest_at;
	c->nearest_id = q->nearest_id;
	c->nearest_prot = q->nearest_prot;
	bpf_spin_unlock(&c->lock);
}

/* has_rule says whether the target may have a rule of its own (a rule of
 * its number: denials hold by number): its walk is then not its folder's. */
static __always_inline int has_rule(struct dentry *d, struct inode *inode)
{
	struct rule_key k = {};

	if (!inode)
		return 1;
	k.dev = BPF_CORE_READ(d, d_sb, s_dev);
	k.ino = BPF_CORE_READ(inode, i_ino);
	return bpf_map_lookup_elem(&rules, &k) != 0;
}

/* walk_forget drops the kept walk of a dentry's address when a new dentry
 * takes it. */
static __always_inline void walk_forget(struct dentry *d)
{
	__u64 k = (__u64)d;

	bpf_map_delete_elem(&walks, &k);
}

static __always_inline void count_move(struct dentry *dentry, struct dentry *target, bool exchange,
				       __u64 *counter)
{
	struct inode *a = BPF_CORE_READ(dentry, d_inode);
	struct inode *b = exchange ? BPF_CORE_READ(target, d_inode) : 0;

	if ((a && (BPF_CORE_READ(a, i_mode) & S_IFMT) == S_IFDIR) ||
	    (b && (BPF_CORE_READ(b, i_mode) & S_IFMT) == S_IFDIR))
		__sync_fetch_and_add(counter, 1);
}

SEC("fentry/__d_move")
int BPF_PROG(move_started, struct dentry *dentry, struct dentry *target, bool exchange)
{
	count_move(dentry, target, exchange, &moves_started);
	return 0;
}

SEC("fexit/__d_move")
int BPF_PROG(move_done, struct dentry *dentry, struct dentry *target, bool exchange)
{
	count_move(dentry, target, exchange, &moves_done);
	return 0;
}
