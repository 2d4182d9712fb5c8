// SPDX-License-Identifier: GPL-2.0
//go:build ignore

/*
 * agent-lock's jail: every LSM hook below decides, for a process of the jail,
 * whether an operation stays inside the cell, and reports what it refused.
 * The decision is made once, here; the Go side only presents it.
 *
 * Membership is the jail's cgroup. The first process is cloned straight into
 * it (CLONE_INTO_CGROUP), so it is jailed before its first instruction; every
 * task it creates is born there; and it cannot leave: cgroupfs is read-only
 * to it and clone3(CLONE_INTO_CGROUP) is refused in task_alloc. Unlike a pid
 * table this cannot fill up, race with pid reuse, or miss a thread.
 *
 * Files are judged by identity, not by name: the target's dentry is walked up
 * to the root of its superblock and each ancestor's (dev, inode) is looked up
 * in the rule map. Symlinks, "..", /proc magic links, bind mounts and chroots
 * change which string names a file, never which dentries lie above it.
 * A walk that cannot reach its root is denied.
 */

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "jail.h"

char LICENSE[] SEC("license") = "GPL";

#define EPERM 1
#define EACCES 13
#define ENOMEM 12

#define FMODE_READ 0x1
#define FMODE_WRITE 0x2
#define FMODE_EXEC 0x20
#define FMODE_CREATED 0x100000 /* this open made the file (all kernels from 4.19) */

#define S_IFMT 00170000
#define S_IFREG 0100000
#define S_IFDIR 0040000
#define S_IFCHR 0020000
#define S_IFBLK 0060000
#define S_IFIFO 0010000
#define S_IFSOCK 0140000
#define S_IFLNK 0120000

#define SB_NOUSER (1UL << 31)
#define CLONE_INTO_CGROUP 0x200000000ULL

#define TIOCSTI 0x5412
#define TIOCLINUX 0x541C
#define TIOCCONS 0x541D

#define ATTR_MODE (1 << 0)
#define ATTR_UID (1 << 1)
#define ATTR_GID (1 << 2)
#define ATTR_SIZE (1 << 3)

#define PROC_SUPER_MAGIC 0x9fa0
#define SYSFS_MAGIC 0x62656572
#define CGROUP_SUPER_MAGIC 0x27e0eb
#define CGROUP2_SUPER_MAGIC 0x63677270
#define SECURITYFS_MAGIC 0x73636673
#define PIPEFS_MAGIC 0x50495045
#define SOCKFS_MAGIC 0x534F434B
#define ANON_INODE_FS_MAGIC 0x09041934
#define NSFS_MAGIC 0x6e736673
#define PID_FS_MAGIC 0x50494446
#define BPF_FS_MAGIC 0xcafe4a11
#define DEBUGFS_MAGIC 0x64626720
#define TRACEFS_MAGIC 0x74726163

#define MKDEV(ma, mi) (((ma) << 20) | (mi))
#define UNIX98_PTY_SLAVE_MAJOR 136

/* Deeper than this and the walk gives up: the path is denied as unresolved. */
#define MAX_WALK 8192
#define MAX_PROC_WALK 32

/* What an operation needs from its target. */
#define P_READ 1
#define P_WRITE 2
#define P_CREATE 4

/* Set by agent-lock before load. */
const volatile __u64 jail_cgroup_id = 0;
const volatile __u32 audit_mode = 0;
const volatile __u32 stream_inbounds = 0;
const volatile __u64 inb_gap_ns = 0;    /* see inbounds_due */
const volatile __u32 tty_rdev[4] = {};
const volatile __u32 pat_count = 0;     /* patterns in use */
const volatile __u32 pat_scopes = 0;    /* PAT_IN_* any pattern has */
const volatile __u32 named_count = 0;   /* named files in use */
const volatile __u32 git_names = 0;     /* GN_* in the gitnames table */
const volatile __u32 observe_only = 0;  /* the observers alone are loaded (Landlock decides) */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct rule_key);
	__type(value, struct rule);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct registration);
} reg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct prot_key);
	__type(value, struct prot);
} protect SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, struct gitname);
	__type(value, struct gitclass);
} gitnames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PAT_MAX);
	__type(key, __u32);
	__type(value, struct pattern);
} patterns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NAMED_MAX);
	__type(key, __u32);
	__type(value, struct named);
} named_files SEC(".maps");

#define RING_BYTES (8 << 20)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RING_BYTES);
} events SEC(".maps");

/* When this CPU last streamed an in-bounds open (inbounds_due). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} inb_last SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct scratch {
	char buf[2 * PATH_BYTES];
	__u64 nb_dentry; /* path building: the next dentry to name */
	__u32 nb_pos;    /* where its name ends in buf */
	__u32 nb_trunc;
	struct event ev;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

/* Inodes the jail created itself: only these may be touched in the shared
 * scratch places (/tmp, /var/tmp, /dev/shm) and only such ptys are its own. */
struct mark {
	__u32 created;
};

struct {
	__uint(type, BPF_MAP_TYPE_INODE_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mark);
} marks SEC(".maps");

/* The dentry a jailed thread is creating, between the path_* hook that
 * allowed it and d_instantiate, which gives us the new inode to mark. A
 * create that fails after the hook (mknod of a device without CAP_MKNOD, a
 * full disk) leaves it behind: d_instantiate only trusts it for a creation
 * (see there). */
struct pending {
	__u64 dentry;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct pending);
} pendings SEC(".maps");

/* noinline so that enum al_counter reaches BTF and bpf2go's -type. */
static __noinline void count(enum al_counter slot)
{
	__u32 key = slot;
	__u64 *v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		*v += 1;
}

static __always_inline __u64 task_cgroup_id(struct task_struct *t)
{
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

/* A process is jailed iff it runs in the jail's cgroup (see top comment). */
static __always_inline int jailed(void)
{
	return jail_cgroup_id != 0 && bpf_get_current_cgroup_id() == jail_cgroup_id;
}

static __always_inline int task_jailed(struct task_struct *t)
{
	return task_cgroup_id(t) == jail_cgroup_id;
}

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
 * ev->path at offset off; Go prefixes the mount point of ev->dev. */
static __noinline __u32 put_path(struct scratch *s, __u64 dentry, __u32 off, __u32 *flags)
{
	__u32 n, pos;

	s->nb_dentry = dentry;
	s->nb_pos = PATH_BYTES;
	s->nb_trunc = 0;
	bpf_loop(PATH_BYTES / 2, name_step, 0, 0);
	if (s->nb_trunc)
		*flags |= EV_TRUNCATED;
	pos = s->nb_pos;
	if (pos == PATH_BYTES) {
		pos = PATH_BYTES - 1;
		s->buf[PATH_BYTES - 1] = '/';
	}
	if (pos > PATH_BYTES)
		return 0;
	n = PATH_BYTES - pos;
	if (n > PATH_BYTES || off > PATH_BYTES)
		return 0;
	bpf_probe_read_kernel(&s->ev.path[off], n, &s->buf[pos]);
	return n;
}

static __always_inline __u32 dentry_dev(__u64 dentry)
{
	struct dentry *d = (void *)dentry;
	return BPF_CORE_READ(d, d_sb, s_dev);
}

/*
 * Streams one decision. d1/d2 are dentries (0 for none). Returns 1 when the
 * operation is to be refused, 0 in audit mode and for in-bounds reports.
 *
 * report_rep and classify are global functions: the verifier checks each
 * once, not once per call site, which keeps every program far below the
 * complexity limits of all kernels we support. Their arguments travel in
 * structs on the caller's stack, since a global function takes no kernel
 * pointers.
 */
struct rep {
	__u32 op;
	__u32 class;
	__u32 flags;
	__u32 target_pid;
	__u32 detail;
	__u32 rule;
	__u64 d1;
	__u64 d2;
	__u64 uname; /* a user-space name: path2 is the name as the process gave it */
};

__noinline int report_rep(struct rep *r)
{
	__u32 zero = 0, n1 = 0, n2 = 0, flags;
	__u64 d1, d2, uname;
	struct scratch *s;
	__u64 id = bpf_get_current_pid_tgid();

	if (!r)
		return 1;
	flags = r->flags;
	d1 = r->d1;
	d2 = r->d2;
	uname = r->uname;

	if (!(flags & EV_INBOUNDS)) {
		count(CNT_ESCAPES);
		/* The observers (below) report what Landlock decided and set the
		 * verdict themselves; the hooks decide here. */
		if (!(flags & (EV_DENIED | EV_AUDIT))) {
			if (audit_mode)
				flags |= EV_AUDIT;
			else
				flags |= EV_DENIED;
		}
	}
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		goto lost;
	s->ev.ts_ns = bpf_ktime_get_ns();
	s->ev.pid = id >> 32;
	s->ev.tid = (__u32)id;
	s->ev.uid = (__u32)bpf_get_current_uid_gid();
	s->ev.op = r->op;
	s->ev.class = r->class;
	s->ev.target_pid = r->target_pid;
	s->ev.detail = r->detail;
	s->ev.rule = r->rule;
	s->ev.dev = 0;
	s->ev.dev2 = 0;
	bpf_get_current_comm(s->ev.comm, sizeof(s->ev.comm));
	if (d1) {
		s->ev.dev = dentry_dev(d1);
		n1 = put_path(s, d1, 0, &flags);
	}
	if (d2 && n1 <= PATH_BYTES) {
		s->ev.dev2 = dentry_dev(d2);
		flags |= EV_PATH2;
		n2 = put_path(s, d2, n1, &flags);
	} else if (uname && n1 <= PATH_BYTES) {
		long n = bpf_probe_read_user_str(&s->ev.path[n1], PATH_BYTES, (const void *)uname);

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
out:
	return (flags & EV_DENIED) ? 1 : 0;
}

/* In-bounds opens are streamed as a sample for the live view: at most one per
 * CPU every inb_gap_ns, and only while the ring is nearly empty, so that they
 * never take the room escapes need (escapes are never sampled, and a lost
 * sample is not counted as lost). The tallies count every open. */
static __always_inline int inbounds_due(void)
{
	__u32 zero = 0;
	__u64 now, *last;

	if (!stream_inbounds)
		return 0;
	last = bpf_map_lookup_elem(&inb_last, &zero);
	if (!last)
		return 0;
	now = bpf_ktime_get_ns();
	if (now - *last < inb_gap_ns)
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
	struct rep r = { .op = op, .class = class, .flags = flags, .target_pid = target_pid,
			 .detail = detail, .d1 = d1, .d2 = d2 };

	return refuse(report_rep(&r));
}

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
	struct rep r = { .op = op, .class = v->class, .flags = v->flags | flags,
			 .rule = v->rule, .d1 = d1, .d2 = d2 };

	return refuse_file(report_rep(&r));
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
			if ((r->flags & RULE_DENY) && !w->deny) {
				w->deny = 1;
				w->deny_id = r->id;
			}
			if (!w->nearest && (r->flags & (RULE_READ | RULE_WRITE | RULE_SCRATCH))) {
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
			sealed = (r->flags & RULE_SEALED) && w->nearest;
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
	if (!r || !(r->flags & RULE_NAMED))
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
		if (tty_rdev[i] && rdev == tty_rdev[i])
			return 1;
	/* Another pty of the user's (a terminal tab, tmux, an ssh session) is a
	 * way to type into a shell outside: only ptys the jail opened itself. */
	if ((rdev >> 20) >= UNIX98_PTY_SLAVE_MAJOR && (rdev >> 20) < UNIX98_PTY_SLAVE_MAJOR + 8)
		return created;
	return 0;
}

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

/* What protected is asked: the target, its rule root and how far above the
 * target that root is (classify's walk), and the verdict to complete. */
struct protq {
	__u64 dentry;
	__u64 root;
	__u32 depth;
	__u32 node0; /* the root's own trie node, PROT_NONE for none */
	__u32 git;   /* in: GV_OWN: the jail made the target; GV_IN: the root
	              * lies in a git directory (RULE_INGIT); out: verdict.git */
	/* out, for the verdict (not the verdict itself: this lies on
	 * classify's stack, and the verifier bounds a chain of calls to 512
	 * bytes of stack) */
	__u32 flags; /* EV_PROTECTED, or 0 */
	__u32 rule;  /* the protected entry's, when flags says so */
	__u32 node;  /* verdict.node */
};

/* protected follows the target's first components below its RULE_PROTECT
 * root through the trie: inside a PROT_TREE entry the target is read-only
 * (EV_PROTECTED, named by that entry); node is the target's own node when
 * its whole path is in the trie, so that creating a name in it can be
 * checked (check_name).
 * A global function, like classify and report_rep: the verifier checks it
 * once per program, not once for every state of classify that reaches it. */
__noinline int protected(struct protq *q)
{
	struct topq t = {};
	__u32 node;
	int k;

	if (!q)
		return 0;
	node = q->node0;
	q->flags = 0;
	q->node = node;
	if (q->depth == 0)
		return 0;
	t.cur = q->dentry;
	t.root = q->root;
	t.depth = q->depth;
	/* A value the verifier cannot know, so that writing a slot does not
	 * change the callback's state (fewer passes until it converges); the
	 * walk writes every slot read below before t.ok is set. */
	t.top[0] = t.top[1] = t.top[2] = q->dentry;
	bpf_loop(MAX_WALK, top_step, &t, 0);
	q->node = PROT_NONE;
	if (!t.ok) {
		/* The path changed under us (a rename between the two walks):
		 * fail closed, read-only as if the target were protected. */
		q->flags = EV_PROTECTED;
		return 0;
	}
	for (k = 0; k < PROT_DEPTH; k++) {
		struct dentry *d = (void *)t.top[k];
		struct prot *p;

		if (!d || k >= q->depth)
			break;
		p = prot_child(node, d);
		if (!p)
			return 0;
		node = p->node;
		if (p->flags & PROT_TREE) {
			q->flags = EV_PROTECTED;
			q->rule = PROT_RULE + node;
			return 0;
		}
	}
	if (q->depth <= PROT_DEPTH)
		q->node = node;
	return 0;
}

/* git_place says where the target lies among git's files (q->git, GV_*),
 * following git's names along its components below its writable root: in
 * a git command file (or .gitmodules) the jail did not make, the target is
 * read-only (EV_PROTECTED, named by that file); a .git the jail did not make
 * may not be replaced, moved or removed (EV_PROTECTED with GV_GITDIR: what
 * is made in it is decided by name, check_name).
 * Apart from protected, as a global function of its own: in one function the
 * verifier walked this once for every state the trie's walk left. */
__noinline int git_place(struct protq *q)
{
	struct gitw g = {};
	struct dentry *d;
	__u32 git, own, cls, rule = 0, prot;

	if (!q)
		return 0;
	own = q->git & GV_OWN;
	d = (void *)q->dentry;
	q->flags = 0;
	if (q->depth > 0) {
		g.cur = q->dentry;
		g.left = q->depth;
		/* Zero, read back through q, which the verifier does not
		 * follow: unknown to it from the first pass, as after it. */
		g.pend = g.prot = g.above = *(volatile __u32 *)&q->flags;
		bpf_loop(MAX_WALK, git_step, &g, 0);
		if (g.left || g.cur != q->root) {
			/* Not to the root (a rename between the walks): fail
			 * closed, read-only. */
			q->flags = EV_PROTECTED;
			q->git = 0;
			return 0;
		}
	}
	cls = git_class(d);
	prot = g.prot;
	/* A root in a git directory counts as a .git above all. */
	if (q->git & GV_IN)
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
	q->git = git;
	if (own)
		return 0;
	if (git & GV_PROT) {
		q->flags = EV_PROTECTED;
		q->rule = rule;
	} else if (git & GV_GITDIR) {
		q->flags = EV_PROTECTED;
		q->rule = GIT_RULE + GI_DOTGIT;
	}
	return 0;
}

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

	if (i >= pat_count)
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
__noinline int secret_name(struct patq *q)
{
	struct patq l; /* bpf_loop takes its context on this stack only */

	if (!q || q->len == 0 || q->len > 255)
		return 0;
	l = *q;
	bpf_loop(PAT_MAX, pat_step, &l, 0);
	q->matched = l.matched;
	return 0;
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

	if (i >= named_count)
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
 * named_verdict decides q's target, on the file system dev, when it is a
 * named file of its folder (returns 1) or a sibling of one (2), with q->v
 * made, else 0.
 *
 * Its own global function, and the folder looked up apart from classify's
 * walk: written into classify, or into walk_step (which needs a branch on
 * the step to know the folder), it made the 7.x verifiers process two to
 * three times the instructions in every program that classifies (they
 * explore it once for each state classify reaches it in), a cost every
 * jailed start pays. Here it is checked once per program.
 */
__noinline int named_verdict(struct query *q, __u32 dev)
{
	/* Scanned here, not through named_file: one frame less on the
	 * verifier's bound of 512 bytes for a chain of calls (program,
	 * classify, this, the loop's callback). */
	struct namedl l = {};
	struct namedq *nq = &l.q;
	struct dentry *d;
	struct inode *inode;
	struct verdict *v;

	if (!q)
		return 0;
	d = (void *)q->dentry;
	inode = (void *)q->inode;
	v = &q->v;
	nq->group = named_group(BPF_CORE_READ(d, d_parent), dev);
	if (!nq->group)
		return 0;
	nq->len = BPF_CORE_READ(d, d_name.len);
	nq->name = (__u64)BPF_CORE_READ(d, d_name.name);
	named_scan(&l);
	if (!nq->matched)
		return 0;
	v->rule = nq->rule;
	v->named = 1;
	if (nq->flags & RULE_WRITE) {
		/* No P_CREATE: a sibling made as a directory (a lock) holds
		 * nothing the grant covers. */
		v->class = AL_CLASS_INSIDE;
		v->perm = P_READ | P_WRITE;
		/* A second name of an outside file: writing it writes there. */
		if (inode && (BPF_CORE_READ(inode, i_mode) & S_IFMT) == S_IFREG &&
		    BPF_CORE_READ(inode, i_nlink) > 1 && !q->created)
			v->perm = P_READ;
	} else if (nq->flags & RULE_READ) {
		v->class = AL_CLASS_SYSTEM;
		v->perm = P_READ;
	}
	/* A sibling's name is any name: the caller applies the secret
	 * patterns of grants to it, as to a name in a granted tree (calling
	 * secret_name from here would make one frame too many). */
	return nq->exact ? 1 : 2;
}

/* decide is classify's body. */
static __always_inline int decide(struct query *q)
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
	bpf_loop(MAX_WALK, walk_step, &w, 0);
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
	if (named_count && (!w.nearest || w.nearest_at > 0)) {
		int by_name = named_verdict(q, w.dev);

		if (by_name == 2 && pat_count && (pat_scopes & PAT_IN_GRANTS)) {
			struct patq pq = { .scope = PAT_IN_GRANTS };

			pq.len = BPF_CORE_READ(d, d_name.len);
			pq.name = (__u64)BPF_CORE_READ(d, d_name.name);
			secret_name(&pq);
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

		if (pat_count && (pat_scopes & pq.scope)) {
			pq.len = BPF_CORE_READ(d, d_name.len);
			pq.name = (__u64)BPF_CORE_READ(d, d_name.name);
			secret_name(&pq);
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
		struct protq pq = {
			.dentry = (__u64)d,
			.root = w.nearest_d,
			.depth = w.nearest_at,
			.node0 = w.nearest_prot,
			/* The observers say every file is the jail's, for
			 * second names; for git they keep their own account. */
			.git = ((observe_only ? q->own : q->created) ? GV_OWN : 0) |
			       ((w.nearest & RULE_INGIT) ? GV_IN : 0),
		};

		if (git_names) {
			git_place(&pq);
			v->git = pq.git;
			if (pq.flags) {
				v->flags |= pq.flags;
				if (pq.rule)
					v->rule = pq.rule;
			}
		}
		if (w.nearest & RULE_PROTECT) {
			pq.rule = 0;
			protected(&pq);
			v->node = pq.node;
			if (pq.flags) {
				/* Inside an entry of the trie: read-only, .git
				 * or not. */
				v->flags |= pq.flags;
				v->git &= ~GV_GITDIR;
				if (pq.rule)
					v->rule = pq.rule;
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

/*
 * classify decides where q->dentry lies and what may be done to it, into q->v.
 * A global function: see report_rep.
 */
__noinline int classify(struct query *q)
{
	struct verdict *v;
	struct inode *inode;
	struct dentry *d;

	if (!q)
		return 0;
	decide(q);
	/* A folder of named files may be listed (its names, not what they
	 * hold) where nothing else lets the agent read it: programs that
	 * save such a file look for it and its siblings there (Claude Code
	 * lists the home on each save). Never a denied one. */
	v = &q->v;
	inode = (void *)q->inode;
	d = (void *)q->dentry;
	if (named_count && v->class == AL_CLASS_OUTSIDE && !v->denied && !(v->perm & P_READ) &&
	    inode && (BPF_CORE_READ(inode, i_mode) & S_IFMT) == S_IFDIR &&
	    named_group(d, BPF_CORE_READ(d, d_sb, s_dev))) {
		v->class = AL_CLASS_SYSTEM;
		v->perm |= P_READ;
	}
	return 0;
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
	if (!git_names)
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

	if (!named_count || v->denied)
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

/* The registration slot, when it names the calling process. */
static __always_inline struct registration *registering(void)
{
	__u32 zero = 0;
	struct registration *r = bpf_map_lookup_elem(&reg, &zero);

	if (r && r->tgid && r->tgid == (bpf_get_current_pid_tgid() >> 32) && r->flags)
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
		if (!old)
			return;
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
			r->flags = 0;
			r->seq++;
		}
		return;
	}
	nr.flags = r->flags;
	nr.id = r->id; /* a later registration of the same root names it (denials come last) */
	nr.prot = r->prot;
	nr.named = r->named;
	old = bpf_map_lookup_elem(&rules, &k);
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
	struct verdict v;

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
	classify_at(d, inode, need, &v);
	if ((v.perm & need) == need) {
		if (v.class == AL_CLASS_INSIDE) {
			count(CNT_INBOUNDS);
			if (inbounds_due())
				report_v(op, &v, EV_INBOUNDS, (__u64)d, 0);
		} else {
			count(CNT_SYSTEM);
		}
		return 0;
	}
	return report_v(op, &v, 0, (__u64)d, 0);
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

/* ---- mounts and roots --------------------------------------------------- */

SEC("lsm/sb_mount")
int BPF_PROG(sb_mount, const char *dev_name, const struct path *path)
{
	if (!jailed())
		return 0;
	return report(AL_OP_MOUNT, AL_CLASS_OUTSIDE, 0, (__u64)path->dentry, 0, 0, 0);
}

SEC("lsm/sb_umount")
int BPF_PROG(sb_umount, struct vfsmount *mnt, int flags)
{
	if (!jailed())
		return 0;
	return report(AL_OP_UMOUNT, AL_CLASS_OUTSIDE, 0, (__u64)mnt->mnt_root, 0, 0, 0);
}

SEC("lsm/move_mount")
int BPF_PROG(move_mount, const struct path *from_path, const struct path *to_path)
{
	if (!jailed())
		return 0;
	return report(AL_OP_MOUNT, AL_CLASS_OUTSIDE, 0, (__u64)from_path->dentry,
		      (__u64)to_path->dentry, 0, 0);
}

SEC("lsm/sb_pivotroot")
int BPF_PROG(sb_pivotroot, const struct path *old_path, const struct path *new_path)
{
	if (!jailed())
		return 0;
	return report(AL_OP_PIVOT_ROOT, AL_CLASS_OUTSIDE, 0, (__u64)new_path->dentry, 0, 0, 0);
}

SEC("lsm/path_chroot")
int BPF_PROG(path_chroot, const struct path *path)
{
	if (!jailed())
		return 0;
	return report(AL_OP_CHROOT, AL_CLASS_OUTSIDE, 0, (__u64)path->dentry, 0, 0, 0);
}

/* ---- other processes ---------------------------------------------------- */

/* Whether the caller is listing a directory: getdents64 (or the old
 * getdents), read from the system call number its registers hold. Only
 * where the kernel's registers have orig_ax (x86-64); elsewhere no. */
static __always_inline int listing_dir(void)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	long nr;

	if (!regs || !bpf_core_field_exists(regs->orig_ax))
		return 0;
	nr = BPF_CORE_READ(regs, orig_ax);
	return nr == 217 /* getdents64 */ || nr == 78 /* getdents */;
}

/* ptrace attach, /proc/PID/{mem,environ,maps,...}, process_vm_readv/writev,
 * pidfd_getfd and kcmp all ask ptrace_may_access, which asks this hook.
 * So does /proc when it is mounted hidepid=4, as the agent's is: for each
 * process it would list, and for each it would find. Listing /proc (ps,
 * top, pgrep) is not a reach: the other processes are left out of the
 * listing, refused without a report; finding one by its number (stat or
 * open of /proc/PID/...) is refused and reported as before. */
SEC("lsm/ptrace_access_check")
int BPF_PROG(ptrace_access_check, struct task_struct *child, unsigned int mode)
{
	if (!jailed() || task_jailed(child))
		return 0;
	if (listing_dir())
		return -EPERM; /* what report() answers for processes */
	return report(AL_OP_PTRACE, AL_CLASS_OUTSIDE, 0, 0, 0, child->tgid, mode);
}

SEC("lsm/ptrace_traceme")
int BPF_PROG(ptrace_traceme, struct task_struct *parent)
{
	if (!jailed() || task_jailed(parent))
		return 0;
	return report(AL_OP_PTRACE, AL_CLASS_OUTSIDE, 0, 0, 0, parent->tgid, 0);
}

SEC("lsm/task_kill")
int BPF_PROG(task_kill, struct task_struct *p, struct kernel_siginfo *info, int sig)
{
	if (!jailed() || task_jailed(p))
		return 0;
	return report(AL_OP_SIGNAL, AL_CLASS_OUTSIDE, 0, 0, 0, p->tgid, sig);
}

/*
 * Another process's scheduling, priority and limits: a process of the user
 * may starve the user's others (SCHED_IDLE, nice 19, the idle I/O class, one
 * CPU) or make them fail (a file or memory limit), as the same user may.
 * Only the cell's own processes are the cell's to tune, as with signals.
 * (Reading another's limits with prlimit is left alone: the task_prlimit
 * hook names no process, only credentials, and the limits are no secret.)
 */
static __always_inline int other_task(__u32 op, struct task_struct *p, __u32 detail)
{
	if (!jailed() || task_jailed(p))
		return 0;
	return report(op, AL_CLASS_OUTSIDE, 0, 0, 0, p->tgid, detail);
}

/* sched_setscheduler, sched_setparam, sched_setattr and sched_setaffinity. */
SEC("lsm/task_setscheduler")
int BPF_PROG(task_setscheduler, struct task_struct *p)
{
	return other_task(AL_OP_SCHED, p, 0);
}

/* setpriority(2): detail is the nice value asked for. */
SEC("lsm/task_setnice")
int BPF_PROG(task_setnice, struct task_struct *p, int nice)
{
	return other_task(AL_OP_NICE, p, (__u32)nice);
}

SEC("lsm/task_setioprio")
int BPF_PROG(task_setioprio, struct task_struct *p, int ioprio)
{
	return other_task(AL_OP_IOPRIO, p, (__u32)ioprio);
}

/* prlimit(2) of another process (setrlimit(2) is the caller's own): detail
 * is the resource. */
SEC("lsm/task_setrlimit")
int BPF_PROG(task_setrlimit, struct task_struct *p, unsigned int resource, struct rlimit *new_rlim)
{
	return other_task(AL_OP_RLIMIT, p, resource);
}

/* F_SETOWN aims SIGIO/SIGURG at a process: at another process of the user
 * it is a kill(2) that task_kill never sees. Only the caller itself may be
 * named; the indirect forms (F_SETOWN_EX, a negative process group) are
 * refused rather than resolved. */
#define F_SETOWN 8
#define F_SETOWN_EX 15

SEC("lsm/file_fcntl")
int BPF_PROG(file_fcntl, struct file *file, unsigned int cmd, unsigned long arg)
{
	__u32 tgid;

	/* The command first: nearly every fcntl is another one (a Go program
	 * makes four for each file it opens), and it costs no helper call. */
	if (cmd != F_SETOWN && cmd != F_SETOWN_EX)
		return 0;
	if (!jailed())
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (cmd == F_SETOWN && (arg == 0 || arg == tgid))
		return 0;
	return report(AL_OP_SIGNAL, AL_CLASS_OUTSIDE, 0, 0, 0, (__u32)arg, cmd);
}

/* ---- IPC ---------------------------------------------------------------- */

/* A socket created in the jail is the jail's own. */
static __always_inline int sock_jailed(struct sock *sk)
{
	return BPF_CORE_READ(sk, sk_cgrp_data.cgroup, kn, id) == jail_cgroup_id;
}

static __always_inline int peer_allowed(struct sock *other)
{
	struct unix_sock *u = (void *)other;
	struct dentry *d;
	struct inode *inode;

	if (sock_jailed(other))
		return 1;
	/* Or one the user allowed by path (--allow-unix). */
	d = BPF_CORE_READ(u, path.dentry);
	if (!d)
		return 0;
	inode = BPF_CORE_READ(d, d_inode);
	if (!inode)
		return 0;
	struct rule_key k = { .dev = BPF_CORE_READ(d, d_sb, s_dev), .ino = BPF_CORE_READ(inode, i_ino) };
	struct rule *r = bpf_map_lookup_elem(&rules, &k);
	return r && (r->flags & RULE_SOCKET);
}

static __always_inline int unix_report(__u32 op, struct sock *other)
{
	struct unix_sock *u = (void *)other;
	struct dentry *d = BPF_CORE_READ(u, path.dentry);

	return report(op, AL_CLASS_OUTSIDE, 0, (__u64)d, 0, 0, 0);
}

/*
 * The same rule holds both ways: the cell talks to its own sockets and to
 * those the user allowed by path, and a process outside talks to a socket
 * of the cell (pathname or abstract) only from a socket the user allowed.
 * An outside process that connects in hands the agent a channel it did not
 * have: its data, descriptors over SCM_RIGHTS (see file_receive), and a
 * name the user's tools look for (an abstract name squatted by the agent).
 * An inbound refusal is reported with the outside process as its caller.
 */
SEC("lsm/unix_stream_connect")
int BPF_PROG(unix_stream_connect, struct sock *sock, struct sock *other, struct sock *newsk)
{
	if (jailed()) {
		if (peer_allowed(other))
			return 0;
		return unix_report(AL_OP_CONNECT, other);
	}
	if (!sock_jailed(other) || peer_allowed(sock))
		return 0;
	return unix_report(AL_OP_CONNECT_IN, other);
}

/* Datagrams (sendmsg, and connect on a datagram socket). */
SEC("lsm/unix_may_send")
int BPF_PROG(unix_may_send, struct socket *sock, struct socket *other)
{
	struct sock *sk = other->sk, *me = sock->sk;

	if (!sk)
		return 0;
	if (jailed()) {
		if (peer_allowed(sk))
			return 0;
		return unix_report(AL_OP_SEND, sk);
	}
	if (!me || !sock_jailed(sk) || peer_allowed(me))
		return 0;
	return unix_report(AL_OP_SEND_IN, sk);
}

/*
 * A descriptor received over a unix socket (SCM_RIGHTS; pidfd_getfd asks
 * ptrace first) is judged as opening its file with the same mode would be:
 * an open descriptor of an outside file is that file, whoever opened it.
 * Pipes, sockets and memfds are the kinds of files classify lets through.
 * A refused descriptor is dropped from the message (MSG_CTRUNC).
 */
SEC("lsm/file_receive")
int BPF_PROG(file_receive, struct file *file)
{
	struct dentry *d = file->f_path.dentry;
	__u32 fmode = file->f_mode, need = 0;
	struct verdict v;

	if (!jailed())
		return 0;
	if (fmode & FMODE_READ)
		need |= P_READ;
	if (fmode & FMODE_WRITE)
		need |= P_WRITE;
	classify_at(d, file->f_inode, need, &v);
	if ((v.perm & need) == need)
		return 0;
	return report_v(AL_OP_RECEIVE, &v, 0, (__u64)d, 0);
}

/* SysV shared memory, queues and semaphores are shared by key with every
 * process of the user: only objects the jail created are its own. Objects
 * are remembered by address from allocation to free; if one cannot be
 * remembered, its creation is refused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u32);
} owned SEC(".maps");

static __always_inline int own(void *obj)
{
	__u64 k = (__u64)obj;
	__u32 one = 1;

	if (!jailed())
		return 0;
	if (bpf_map_update_elem(&owned, &k, &one, BPF_ANY))
		return -ENOMEM;
	return 0;
}

static __always_inline int disown(void *obj)
{
	__u64 k = (__u64)obj;

	bpf_map_delete_elem(&owned, &k);
	return 0;
}

static __always_inline int owned_by_jail(void *obj)
{
	__u64 k = (__u64)obj;

	return bpf_map_lookup_elem(&owned, &k) != 0;
}

SEC("lsm/shm_alloc_security")
int BPF_PROG(shm_alloc_security, struct kern_ipc_perm *perm) { return own(perm); }
SEC("lsm/shm_free_security")
int BPF_PROG(shm_free_security, struct kern_ipc_perm *perm) { return disown(perm); }
SEC("lsm/msg_queue_alloc_security")
int BPF_PROG(msg_queue_alloc_security, struct kern_ipc_perm *perm) { return own(perm); }
SEC("lsm/msg_queue_free_security")
int BPF_PROG(msg_queue_free_security, struct kern_ipc_perm *perm) { return disown(perm); }
SEC("lsm/sem_alloc_security")
int BPF_PROG(sem_alloc_security, struct kern_ipc_perm *perm) { return own(perm); }
SEC("lsm/sem_free_security")
int BPF_PROG(sem_free_security, struct kern_ipc_perm *perm) { return disown(perm); }

SEC("lsm/ipc_permission")
int BPF_PROG(ipc_permission, struct kern_ipc_perm *ipcp, short flag)
{
	if (!jailed() || owned_by_jail(ipcp))
		return 0;
	return report(AL_OP_IPC, AL_CLASS_OUTSIDE, 0, 0, 0, 0, ipcp->key);
}

/* The user's keyrings (session, user, persistent) hold credentials: only keys
 * the jail created are its own. The kernel dropped the key_free LSM hook in
 * 6.10 (key blobs are freed by the LSM core now), so where it is missing the
 * loader attaches key_freed to security_key_free instead; with neither, it
 * refuses to run, since a freed key's address could come back as the
 * user's. */
SEC("lsm/key_alloc")
int BPF_PROG(key_alloc, struct key *key) { return own(key); }
SEC("lsm/key_free")
int BPF_PROG(key_free, struct key *key) { return disown(key); }
SEC("fentry/security_key_free")
int BPF_PROG(key_freed, struct key *key) { return disown(key); }

SEC("lsm/key_permission")
int key_permission(unsigned long long *ctx)
{
	__u64 key_ref = 0;
	void *key;

	if (!jailed())
		return 0;
	/* key_ref_t points to an opaque struct, whose direct load 6.1's
	 * verifier refuses: read the argument as memory. */
	if (bpf_probe_read_kernel(&key_ref, sizeof(key_ref), &ctx[0]))
		return -EPERM;
	key = (void *)(key_ref & ~1ULL); /* the low bit marks possession */
	if (owned_by_jail(key))
		return 0;
	return report(AL_OP_KEY, AL_CLASS_OUTSIDE, 0, 0, 0, 0, 0);
}

/* inotify/fanotify marks: watching outside files tells when the user touches
 * them. Watching needs read access, as opening would. */
SEC("lsm/path_notify")
int BPF_PROG(path_notify, const struct path *path)
{
	if (!jailed())
		return 0;
	return check(AL_OP_WATCH, path->dentry, P_READ, 0);
}

/* ---- the jail's own machinery ------------------------------------------ */

SEC("lsm/bpf")
int BPF_PROG(bpf, int cmd)
{
	if (!jailed())
		return 0;
	return report(AL_OP_BPF, AL_CLASS_OUTSIDE, 0, 0, 0, 0, cmd);
}

#define FIOSETOWN 0x8901
#define SIOCSPGRP 0x8902

static __always_inline int check_ioctl(unsigned int cmd)
{
	if (!jailed())
		return 0;
	/* Typing into the terminal's input queue runs commands in the user's
	 * shell after the agent exits. Setting a file's signal owner is F_SETOWN
	 * by another name (see file_fcntl). */
	if (cmd == TIOCSTI || cmd == TIOCLINUX || cmd == TIOCCONS || cmd == FIOSETOWN ||
	    cmd == SIOCSPGRP)
		return report(AL_OP_IOCTL, AL_CLASS_OUTSIDE, 0, 0, 0, 0, cmd);
	return 0;
}

SEC("lsm/file_ioctl")
int BPF_PROG(file_ioctl, struct file *file, unsigned int cmd)
{
	return check_ioctl(cmd);
}

/* 32-bit callers take this path on kernels that have it (6.8+). */
SEC("lsm/file_ioctl_compat")
int BPF_PROG(file_ioctl_compat, struct file *file, unsigned int cmd)
{
	return check_ioctl(cmd);
}

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
	struct rep r = {};
	struct plink pl = {};
	struct file *f;

	r.op = cc.op;
	r.class = AL_CLASS_OUTSIDE;
	r.flags = EV_DENIED;
	r.uname = cc.name;
	pl.uname = cc.name;
	if (proc_link(&pl) && (r.d1 = proc_link_dentry(&pl))) {
		/* Named from the link's target: the rest of the name relative to
		 * it, or, with no rest, the target itself. */
		r.uname = pl.rest ? cc.name + pl.rest : 0;
	} else if (cc.dirfd == AT_FDCWD) {
		struct task_struct *t = (void *)bpf_get_current_task();

		r.d1 = (__u64)BPF_CORE_READ(t, fs, pwd.dentry);
	} else if ((f = fd_file(cc.dirfd))) {
		r.d1 = (__u64)BPF_CORE_READ(f, f_path.dentry);
	}
	report_rep(&r);
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
