/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, the constants, maps and helpers every part shares, and
 * membership (the jail's cgroup). Part of jail.bpf.c, which includes every
 * part once, in order: one object, one set of maps. Each hook in it makes
 * one decision and reports it.
 */

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

/* The cell's settings: written by agent-lock after the load, before the
 * rules are registered (their own map, .data.cell), so that a load can be
 * verified and attached before the cell it serves exists (the daemon keeps
 * one ahead, see internal/jail/spare.go). Until written every field is 0:
 * jailed() is false for every process, and an attached set of programs
 * with no cell refuses nothing, reports nothing and registers nothing
 * (register_open needs agent-lock's slot in reg). Volatile: written from
 * outside. */
volatile struct cell_settings cell SEC(".data.cell") = {};

/* Set by agent-lock before load: what the kernel and the engine decide,
 * the same for every cell a load may serve. */
const volatile __u32 observe_only = 0;  /* the observers alone are loaded (Landlock decides) */

/* rule_owns says whether rule r, found by inode's number, was registered
 * for inode itself: only then does what it grants apply. The observers
 * only report what Landlock decided, by number as before. */
static __always_inline int rule_owns(struct rule *r, struct inode *inode)
{
	return observe_only || r->inode == (__u64)inode;
}

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

/*
 * Repeats: the same escape (process, operation, target, verdict) within
 * REPEAT_NS of its last report is counted, not reported again; the next
 * report of it after that says how many it stands for. A storm of one
 * refusal then cannot fill the ring and crowd out the others. Only escapes
 * The observers' refusals carry a name as the process gave it
 * (rep.uname), in its memory, where one buffer holds many names: coalescing
 * by its address would let an agent hide one refusal's name behind
 * another's, and so would a hash of it, which a cell can collide. They are
 * keyed by the name itself (name_repeats), up to NAME_KEY bytes; a longer
 * one is never coalesced. For the same reason a dentry is known by more
 * than its address, which a freed dentry's successor may take within the window (a
 * create's negative dentry on tmpfs): by its inode and its name's hash and
 * length too (the kernel salts the hash with the parent's address).
 *
 * Per CPU: each CPU keeps its own window and count, so that the count a
 * report carries is the one its CPU took, with no read-and-reset to race
 * with another CPU. A storm spread over CPUs is reported once a window per
 * CPU.
 */
#define REPEAT_NS (100 * 1000 * 1000ULL)

struct repeat_key {
	__u64 d1, d2;
	__u64 ino1, ino2;   /* the dentries' inodes, 0 for a negative one */
	__u64 name1, name2; /* their names' hash and length (d_name.hash_len) */
	__u32 tgid;
	__u32 op;
	__u32 class;
	__u32 flags;
	__u32 rule;
	__u32 target_pid;
	__u32 detail;
	__u32 pad;
};

struct repeat {
	__u64 until;   /* repeats before this are counted, not reported */
	__u64 pending; /* counted since the last report */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct repeat_key);
	__type(value, struct repeat);
} repeats SEC(".maps");

#define NAME_KEY 256

/* A refusal the observers saw: the folder the name is relative to (the
 * working directory's for an absolute one: a fixed field, not a branch),
 * and the name, zero-padded. */
struct name_repeat_key {
	__u64 d1, ino1, name1;
	__u32 tgid;
	__u32 op;
	__u32 flags;
	__u32 len; /* the name's, with its NUL */
	char name[NAME_KEY];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct name_repeat_key);
	__type(value, struct repeat);
} name_repeats SEC(".maps");

/* Files whose signal owner (F_SETOWN, FIOSETOWN, SIOCSPGRP, a lease) a
 * jailed process set last, by the file's address, with who set it: their
 * SIGIO and SIGURG may reach only the cell's own processes (see
 * file_send_sigiotask). An entry outlives its file, but the address's next
 * owner is set through file_set_fowner too, which replaces or removes it.
 * Not LRU: an entry pushed out would let the signal through. A cell can
 * fill it on purpose (many live files, each given an owner): then
 * fowners_full is set, and from then on no file without a note may signal
 * a process outside the cell (Go sizes it: Config.SignalOwners). */
struct fowner {
	__u32 tgid;
	__u32 tid;
	__u32 uid;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct fowner);
} fowners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} fowners_full SEC(".maps");

struct scratch {
	struct repeat_key rk; /* report_rep's key, off the stack */
	struct name_repeat_key nk; /* or, for a name as given, this */
	__u32 rk_set;         /* RK_DENTRY or RK_NAME: this report's key (repeat_check) */
	__u32 rk_pad;
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
	__u64 id = cell.cgroup_id;

	return id != 0 && bpf_get_current_cgroup_id() == id;
}

static __always_inline int task_jailed(struct task_struct *t)
{
	return task_cgroup_id(t) == cell.cgroup_id;
}
