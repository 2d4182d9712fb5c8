/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, reporting: the ring buffer's records, the counters,
 * what a refusal says. Part of jail.bpf.c, which includes every part once,
 * in order: one object, one set of maps. Each hook in it makes one decision
 * and reports it.
 */

/* ---- reporting ---------------------------------------------------------- */

/*
 * Path building keeps its state in the per-CPU scratch value, not on the
 * stack: values loaded from a map are unknown to the verifier, so every
 * bpf_loop iteration looks the same to it and the callback is checked once.
 * (Kernels from 6.8 verify callbacks like loops; with the cursor on the
 * stack each position would be a new state and the program too large.)
 */
static long name_step(__u32 i, void *unused)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	struct dentry *d, *p;
	const unsigned char *name;
	__u32 len, pos;

	if (!s)
		return 1;
	d = (void *)s->nb_dentry;
	if (!d)
		return 1;
	p = BPF_CORE_READ(d, d_parent);
	if (!p || p == d)
		return 1;
	len = BPF_CORE_READ(d, d_name.len);
	name = BPF_CORE_READ(d, d_name.name);
	if (len > 255)
		len = 255;
	s->nb_dentry = (__u64)p;
	if (len == 0)
		return 0;
	pos = s->nb_pos;
	if (pos < len + 1 || pos > PATH_BYTES) {
		s->nb_trunc = 1;
		return 1;
	}
	pos -= len;
	bpf_probe_read_kernel(&s->buf[pos & (PATH_BYTES - 1)], len & 255, name);
	pos -= 1;
	s->buf[pos & (PATH_BYTES - 1)] = '/';
	s->nb_pos = pos;
	return 0;
}

/* Writes the path of dentry, relative to the root of its superblock, into
 * ev->path at offset off; Go prefixes the mount point of ev->dev. Returns
 * the bytes written, with PUT_CUT when the path's head was cut (no pointer
 * to the caller's flags: the 7.x verifiers' liveness pass analyses a
 * subprogram given one again for every call). */
#define PUT_CUT (1U << 31)
static __noinline __u32 put_path(struct scratch *s, __u64 dentry, __u32 off)
{
	__u32 n, pos, cut;

	s->nb_dentry = dentry;
	s->nb_pos = PATH_BYTES;
	s->nb_trunc = 0;
	bpf_loop(PATH_BYTES / 2, name_step, 0, 0);
	cut = s->nb_trunc ? PUT_CUT : 0;
	pos = s->nb_pos;
	if (pos == PATH_BYTES) {
		pos = PATH_BYTES - 1;
		s->buf[PATH_BYTES - 1] = '/';
	}
	if (pos > PATH_BYTES)
		return cut;
	n = PATH_BYTES - pos;
	if (n > PATH_BYTES || off > PATH_BYTES)
		return cut;
	bpf_probe_read_kernel(&s->ev.path[off], n, &s->buf[pos]);
	return n | cut;
}

static __always_inline __u32 dentry_dev(__u64 dentry)
{
	struct dentry *d = (void *)dentry;
	return BPF_CORE_READ(d, d_sb, s_dev);
}

/* dentry_id is what tells dentry d from another in a repeat's key. No
 * branch for d == 0: the reads then give 0. */
static __always_inline void dentry_id(__u64 d, __u64 *ptr, __u64 *ino, __u64 *name)
{
	struct dentry *de = (void *)d;

	*ptr = d;
	*ino = BPF_CORE_READ(de, d_inode, i_ino);
	*name = BPF_CORE_READ(de, d_name.hash_len);
}

/*
 * Streams one decision. d1/d2 are dentries (0 for none). Returns 1 when the
 * operation is to be refused, 0 in audit mode and for in-bounds reports.
 *
 * report_rep and classify are global functions: the verifier checks each
 * once, not once per call site, which keeps every program far below the
 * complexity limits of all kernels we support. Their arguments are
 * scalars, packed (rep_what, rep_who), not a struct on the caller's stack:
 * a global function takes no kernel pointers, and given a pointer into its
 * caller's stack the 7.x verifiers' liveness pass analyses it again for
 * every caller (and what it calls with it).
 */
/* kptr is a kernel pointer as a number, for a global function's argument:
 * the verifier refuses a pointer there (a struct on the caller's stack
 * carried it, until the 7.x verifiers' liveness pass made that cost an
 * analysis of the callee per caller). One helper call, on the report's
 * path only. */
static __always_inline __u64 kptr(__u64 p)
{
	__u64 v = 0;

	bpf_probe_read_kernel(&v, sizeof(v), &p);
	return v;
}

static __always_inline __u64 rep_what(__u32 op, __u32 class, __u32 flags, __u32 rule)
{
	return (op & 0xff) | (class & 0xff) << 8 | (flags & 0xffff) << 16 | (__u64)rule << 32;
}

static __always_inline __u64 rep_who(__u32 target_pid, __u32 detail)
{
	return target_pid | (__u64)detail << 32;
}

/* In repeat_check's flags: d2 is the process that aimed the signal
 * (report_as), not a dentry. */
#define REP_AS (1U << 15)

#define RK_DENTRY 1
#define RK_NAME 2

/* repeat_seen is repeat_check's window on key in map (repeats or
 * name_repeats). */
static __always_inline int repeat_seen(void *map, void *key, struct scratch *s)
{
	struct repeat *rp, fresh = {};
	__u64 now = bpf_ktime_get_ns();

	rp = bpf_map_lookup_elem(map, key);
	if (rp && now < rp->until) {
		rp->pending++; /* this CPU's own (the map is per CPU) */
		count(CNT_REPEATS);
		return 1;
	}
	if (rp) {
		s->ev.repeats = (__u32)rp->pending;
		rp->pending = 0;
		rp->until = now + REPEAT_NS;
		return 0;
	}
	fresh.until = now + REPEAT_NS;
	bpf_map_update_elem(map, key, &fresh, BPF_ANY);
	return 0;
}

/*
 * repeat_check says whether the escape (what, who, d1, d2, uname: as
 * report_rep's, with the verdict's flags),
 * was reported less than REPEAT_NS ago: then it is counted as a repeat and
 * not reported. Otherwise the scratch's event says how many repeats its
 * report stands for, and the window starts. The key is left in the scratch
 * for repeat_forget. A global function, as report_rep: the verifier checks
 * it once, apart from report_rep's states.
 */
__noinline int repeat_check(__u64 what, __u64 who, __u64 d1, __u64 d2, __u64 uname)
{
	__u32 zero = 0, flags = (what >> 16) & 0xffff, tgid;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	long n;

	if (!s)
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (flags & REP_AS) {
		tgid = d2;
		d2 = 0;
		flags &= ~REP_AS;
	}
	if (uname) {
		/* Zeroed first: the bytes after the name are the key's too. */
		__builtin_memset(&s->nk, 0, sizeof(s->nk));
		n = bpf_probe_read_user_str(s->nk.name, NAME_KEY, (const void *)uname);
		if (n <= 0 || n >= NAME_KEY)
			return 0; /* unreadable, or perhaps cut: reported each time */
		dentry_id(d1, &s->nk.d1, &s->nk.ino1, &s->nk.name1);
		s->nk.len = n; /* with its NUL */
		s->nk.tgid = tgid;
		s->nk.op = what & 0xff;
		s->nk.flags = flags;
		s->rk_set = RK_NAME;
		return repeat_seen(&name_repeats, &s->nk, s);
	}
	__builtin_memset(&s->rk, 0, sizeof(s->rk));
	dentry_id(d1, &s->rk.d1, &s->rk.ino1, &s->rk.name1);
	dentry_id(d2, &s->rk.d2, &s->rk.ino2, &s->rk.name2);
	s->rk.tgid = tgid;
	s->rk.op = what & 0xff;
	s->rk.class = (what >> 8) & 0xff;
	s->rk.flags = flags;
	s->rk.rule = what >> 32;
	s->rk.target_pid = (__u32)who;
	s->rk.detail = who >> 32;
	s->rk_set = RK_DENTRY;
	return repeat_seen(&repeats, &s->rk, s);
}

/* repeat_forget: the escape repeat_check let through was not reported
 * (the ring was full), so its next one is, not counted as its repeat. */
__noinline int repeat_forget(void)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	struct repeat *rp = 0;

	if (!s)
		return 0;
	if (s->rk_set == RK_DENTRY)
		rp = bpf_map_lookup_elem(&repeats, &s->rk);
	else if (s->rk_set == RK_NAME)
		rp = bpf_map_lookup_elem(&name_repeats, &s->nk);
	if (rp)
		rp->until = 0;
	return 0;
}

/* report_body is report_rep's and report_as's: as_ids, when not 0, is the
 * process that aimed a signal now sent (file_send_sigiotask), whom the
 * report names: its tgid in the high half, its thread in the low; as_uid
 * its user, comm0 and comm1 its name's two halves. */
static __always_inline int report_body(__u64 what, __u64 who, __u64 d1, __u64 d2, __u64 uname,
				       __u64 as_ids, __u64 as_uid, __u64 comm0, __u64 comm1)
{
	__u32 zero = 0, n1 = 0, n2 = 0, flags = (what >> 16) & 0xffff;
	struct scratch *s;
	__u64 id = bpf_get_current_pid_tgid();

	if (!(flags & EV_INBOUNDS)) {
		count(CNT_ESCAPES);
		/* The observers (below) report what Landlock decided and set the
		 * verdict themselves; the hooks decide here. */
		if (!(flags & (EV_DENIED | EV_AUDIT))) {
			if (cell.audit_mode)
				flags |= EV_AUDIT;
			else
				flags |= EV_DENIED;
		}
	}
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		goto lost;
	s->ev.ts_ns = bpf_ktime_get_ns();
	s->ev.repeats = 0;
	s->rk_set = 0;
	/* No variable for "coalesced" past this point: one live to the end
	 * would double the states the verifier walks through the rest. */
	if (!(flags & EV_INBOUNDS) &&
	    repeat_check(as_ids ? (what & ~(0xffffULL << 16)) | (__u64)(flags | REP_AS) << 16
				: (what & ~(0xffffULL << 16)) | (__u64)flags << 16,
			 who, d1, as_ids ? as_ids >> 32 : d2, uname))
		goto out;
	if (as_ids) {
		s->ev.pid = as_ids >> 32;
		s->ev.tid = (__u32)as_ids;
		s->ev.uid = as_uid;
		__builtin_memcpy(s->ev.comm, &comm0, 8);
		__builtin_memcpy(s->ev.comm + 8, &comm1, 8);
	} else {
		s->ev.pid = id >> 32;
		s->ev.tid = (__u32)id;
		s->ev.uid = (__u32)bpf_get_current_uid_gid();
		bpf_get_current_comm(s->ev.comm, sizeof(s->ev.comm));
	}
	s->ev.op = what & 0xff;
	s->ev.class = (what >> 8) & 0xff;
	s->ev.target_pid = (__u32)who;
	s->ev.detail = who >> 32;
	s->ev.rule = what >> 32;
	s->ev.dev = 0;
	s->ev.dev2 = 0;
	if (d1) {
		s->ev.dev = dentry_dev(d1);
		n1 = put_path(s, d1, 0);
		flags |= (n1 & PUT_CUT) >> 29; /* EV_TRUNCATED */
		n1 &= ~PUT_CUT;
	}
	if (d2 && n1 <= PATH_BYTES) {
		s->ev.dev2 = dentry_dev(d2);
		flags |= EV_PATH2;
		n2 = put_path(s, d2, n1);
		flags |= (n2 & PUT_CUT) >> 29; /* EV_TRUNCATED */
		n2 &= ~PUT_CUT;
	} else if (uname && n1 <= PATH_BYTES) {
		__u32 len = s->nk.len;
		long n;

		/* The name repeat_check keyed the report by, not a second read
		 * of the process's memory, which another thread may have
		 * changed since: the report names what later repeats are
		 * counted against. */
		if (s->rk_set == RK_NAME && len > 1 && len < NAME_KEY) {
			/* The mask for the verifier (len is below NAME_KEY),
			 * after a barrier: the compiler would drop it. */
			n = len;
			asm volatile("" : "+r"(n));
			n &= NAME_KEY - 1;
			if (bpf_probe_read_kernel(&s->ev.path[n1], n, s->nk.name))
				n = 0;
		} else {
			n = bpf_probe_read_user_str(&s->ev.path[n1], PATH_BYTES, (const void *)uname);
		}

		flags |= EV_PATH2 | EV_ASGIVEN;
		if (n > 1)
			n2 = n - 1; /* without the NUL */
		else
			flags |= EV_TRUNCATED;
	}
	if (n1 > PATH_BYTES)
		n1 = PATH_BYTES;
	if (n2 > PATH_BYTES)
		n2 = PATH_BYTES;
	s->ev.path_len = n1;
	s->ev.path2_len = n2;
	s->ev.flags = flags;
	if (bpf_ringbuf_output(&events, &s->ev, offsetof(struct event, path) + n1 + n2, 0))
		goto lost;
	goto out;
lost:
	if (!(flags & EV_INBOUNDS))
		count(CNT_LOST);
	repeat_forget();
out:
	return (flags & EV_DENIED) ? 1 : 0;
}

__noinline int report_rep(__u64 what, __u64 who, __u64 d1, __u64 d2, __u64 uname)
{
	return report_body(what, who, d1, d2, uname, 0, 0, 0, 0);
}

/* report_as reports a signal refused at delivery (who: its target and
 * number), naming the process of the cell that aimed it, as the signal
 * owners' note the hook read holds it (report_body's as_*). */
__noinline int report_as(__u64 who, __u64 ids, __u64 uid, __u64 comm0, __u64 comm1)
{
	return report_body(rep_what(AL_OP_SIGNAL, AL_CLASS_OUTSIDE, 0, 0), who, 0, 0, 0,
			   ids, uid, comm0, comm1);
}

/* In-bounds opens are streamed as a sample for the live view: at most one per
 * CPU every cell.inb_gap_ns, and only while the ring is nearly empty, so that they
 * never take the room escapes need (escapes are never sampled, and a lost
 * sample is not counted as lost). The tallies count every open. */
static __always_inline int inbounds_due(void)
{
	__u32 zero = 0;
	__u64 now, *last;

	if (!cell.stream_inbounds)
		return 0;
	last = bpf_map_lookup_elem(&inb_last, &zero);
	if (!last)
		return 0;
	now = bpf_ktime_get_ns();
	if (now - *last < cell.inb_gap_ns)
		return 0;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > RING_BYTES / 8)
		return 0;
	*last = now;
	return 1;
}

/* The errno a hook returns for a refusal. Every path ends in a constant so
 * that the verifier sees the return value within the LSM's [-4095, 0]. */
static __always_inline int refuse(int denied)
{
	/* Hide that denied is 0 or 1, or clang returns -denied instead. */
	asm volatile("" : "+r"(denied));
	if (denied)
		return -EPERM;
	return 0;
}

/* A refused file operation is EACCES, as the file's own permissions, other
 * LSMs and Landlock refuse it: programs then take the way they have for an
 * unwritable place (Claude Code saves ~/.claude.json in place when it may
 * not make a temporary file next to it; on EPERM it gave up the save). */
static __always_inline int refuse_file(int denied)
{
	asm volatile("" : "+r"(denied));
	if (denied)
		return -EACCES;
	return 0;
}

static __always_inline int report(__u32 op, __u32 class, __u32 flags, __u64 d1, __u64 d2,
				  __u32 target_pid, __u32 detail)
{
	return refuse(report_rep(rep_what(op, class, flags, 0), rep_who(target_pid, detail), kptr(d1), kptr(d2), 0));
}
