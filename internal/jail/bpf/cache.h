/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, the folders' walk cache: what the walk up from a
 * folder found (denial, nearest rule, the file system's root), kept on the
 * folder's inode so that file_open walks from a file to its folder only.
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
 * - The entry lives on the folder's inode (freed with it) and names the
 *   dentry it walked from: another dentry of the inode walks anew. An
 *   inode can outlive its dentries in the inode cache, and a network file
 *   system can give it a new dentry elsewhere, at the old one's address,
 *   with no move (d_splice_alias when no alias is left): d_instantiate,
 *   which sees every dentry given an inode, empties a folder's entry.
 * - Readers and writers hold the entry's lock while they copy it.
 * - Ordering: the counts are read before the walk and again after it with
 *   plain loads, and the move programs count with locked adds. That holds
 *   on x86, whose loads are not reordered with loads and whose locked
 *   instructions are full barriers; BPF (-mcpu=v1) has no load-acquire to
 *   say it for weaker CPUs, so agent-lock keeps walks on x86-64 alone.
 * - Without the move programs (other CPUs, the observers), walk_cache is
 *   0 and nothing is kept.
 */

const volatile __u32 walk_cache = 0; /* the move programs are loaded */

/* A folder's kept walk (struct walk's findings, depths from the folder). */
struct walked {
	struct bpf_spin_lock lock; /* readers and writers hold it */
	__u32 deny;
	__u64 seq;       /* moves_started + 1 when made; 0: empty */
	__u64 dentry;    /* the folder's dentry it walked up from */
	__u64 nearest_d;
	__u32 deny_id;
	__u32 nearest;
	__u32 nearest_at;
	__u32 nearest_id;
	__u32 nearest_prot;
	__u32 at_root;
};

/* Counts of folder moves begun and ended (and of rules registered). */
__u64 moves_started = 0;
__u64 moves_done = 0;

struct {
	__uint(type, BPF_MAP_TYPE_INODE_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct walked);
} walks SEC(".maps");

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
	__u64 dentry;    /* the folder's dentry it walked up from */
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

#define WQ_KEPT 1 /* in: the folder's kept walk, made at the present count */
#define WQ_MADE 2 /* out: the walk from the folder, to keep */

/* walk_use puts the folder's kept walk q, when it is the walk from dentry
 * p, into w as its child's (depths one more), and says whether it did. */
static __always_inline int walk_use(struct walkq *q, __u64 p, struct walk *w)
{
	if (q->state != WQ_KEPT || q->dentry != p)
		return 0;
	w->deny = q->deny;
	w->deny_id = q->deny_id;
	w->nearest = q->nearest;
	w->nearest_at = q->nearest_at + 1;
	w->nearest_id = q->nearest_id;
	w->nearest_d = q->nearest_d;
	w->nearest_prot = q->nearest_prot;
	w->at_root = 1;
	w->done = 1;
	return 1;
}

/* walk_made puts w, the walk from folder dentry p (its depths from p's
 * child), into q to be kept: a walk that reached the file system's root. */
static __always_inline void walk_made(struct walkq *q, __u64 p, struct walk *w)
{
	if (!w->done || !w->at_root)
		return;
	q->dentry = p;
	q->nearest_d = w->nearest_d;
	q->deny = w->deny;
	q->deny_id = w->deny_id;
	q->nearest = w->nearest;
	q->nearest_at = w->nearest_at - 1;
	q->nearest_id = w->nearest_id;
	q->nearest_prot = w->nearest_prot;
	q->state = WQ_MADE;
}

/* walk_take copies c, made at move count seq, into q. */
static __always_inline void walk_take(struct walked *c, __u64 seq, struct walkq *q)
{
	bpf_spin_lock(&c->lock);
	if (c->seq == seq + 1) {
		q->dentry = c->dentry;
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

/* walk_keep keeps q, made at move count seq, in c: when no folder moved
 * while it was made. */
static __always_inline void walk_keep(struct walked *c, __u64 seq, struct walkq *q)
{
	if (q->state != WQ_MADE || *(volatile __u64 *)&moves_started != seq)
		return;
	bpf_spin_lock(&c->lock);
	c->seq = seq + 1;
	c->dentry = q->dentry;
	c->nearest_d = q->nearest_d;
	c->deny = q->deny;
	c->deny_id = q->deny_id;
	c->nearest = q->nearest;
	c->nearest_at = q->nearest_at;
	c->nearest_id = q->nearest_id;
	c->nearest_prot = q->nearest_prot;
	c->at_root = 1;
	bpf_spin_unlock(&c->lock);
}

/* walk_forget empties c, the kept walk of a folder that gets a dentry. */
static __always_inline void walk_forget(struct walked *c)
{
	if (!c)
		return;
	bpf_spin_lock(&c->lock);
	c->seq = 0;
	bpf_spin_unlock(&c->lock);
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
