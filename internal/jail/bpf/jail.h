/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types shared by the BPF programs and, through bpf2go -type, the Go loader.
 * The Go mirror is generated from the BTF of these definitions, so the two
 * sides cannot drift: change a field here and `make generate` changes Go.
 */
#ifndef AGENT_LOCK_JAIL_H
#define AGENT_LOCK_JAIL_H

/* One path component is at most NAME_MAX (255) bytes; a reported path at most
 * PATH_BYTES-1. Longer paths are still decided (the decision walk has no
 * string), only their report is truncated and flagged. */
#define PATH_BYTES 4096

/* What the jailed process tried to do. Names for Go live in ops.go. */
enum al_op {
	AL_OP_READ = 1,
	AL_OP_WRITE,
	AL_OP_EXEC,
	AL_OP_CREATE,
	AL_OP_UNLINK,
	AL_OP_RMDIR,
	AL_OP_MKDIR,
	AL_OP_MKNOD,
	AL_OP_RENAME,
	AL_OP_LINK,
	AL_OP_SYMLINK,
	AL_OP_TRUNCATE,
	AL_OP_CHMOD,
	AL_OP_CHOWN,
	AL_OP_SETATTR,
	AL_OP_SETXATTR,
	AL_OP_REMOVEXATTR,
	AL_OP_MOUNT,
	AL_OP_UMOUNT,
	AL_OP_PIVOT_ROOT,
	AL_OP_CHROOT,
	AL_OP_PTRACE,
	AL_OP_SIGNAL,
	AL_OP_CONNECT,
	AL_OP_SEND,
	AL_OP_BPF,
	AL_OP_IOCTL,
	AL_OP_FORK,
	AL_OP_IPC,
	AL_OP_KEY,
	AL_OP_WATCH,
	AL_OP_GETXATTR,
	AL_OP_LISTXATTR,
	AL_OP_RECEIVE,    /* a descriptor received over a unix socket (SCM_RIGHTS) */
	AL_OP_CONNECT_IN, /* a process outside connecting to a socket of the cell */
	AL_OP_SEND_IN,    /* ... or sending it a datagram */
	AL_OP_SCHED,      /* scheduling policy, priority or affinity of another process */
	AL_OP_NICE,
	AL_OP_IOPRIO,
	AL_OP_RLIMIT,
};

/* Where a target lies, as the kernel classified it. */
enum al_class {
	AL_CLASS_INSIDE = 1,  /* DIR, the private TMPDIR, files the jail created in scratch */
	AL_CLASS_SYSTEM,      /* read-only system set, pseudo files, allowed devices */
	AL_CLASS_OUTSIDE,     /* everything else */
	AL_CLASS_UNRESOLVED,  /* the walk could not reach a root: denied */
};

/* event.flags */
#define EV_DENIED     (1 << 0) /* the kernel refused the operation */
#define EV_AUDIT      (1 << 1) /* would have been refused; audit mode let it through */
#define EV_TRUNCATED  (1 << 2) /* path longer than PATH_BYTES-1: its head was cut */
#define EV_UNRESOLVED (1 << 3) /* the path could not be resolved to a root */
#define EV_PATH2      (1 << 4) /* path2 (rename/link destination) follows path */
#define EV_INBOUNDS   (1 << 5) /* an allowed in-bounds access (live stream) */
#define EV_ASGIVEN    (1 << 6) /* path2 is the name the process passed, relative to path
                                * (a directory) unless absolute: nothing was opened */
#define EV_PROTECTED  (1 << 7) /* refused because the target is a protected file in DIR */

/* One decision, as the hook that made it reports it. Variable length on the
 * ring buffer: only path_len + path2_len bytes of path[] are sent. */
struct event {
	__u64 ts_ns;       /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u32 pid;         /* tgid, global namespace */
	__u32 tid;
	__u32 uid;
	enum al_op op;
	enum al_class class;
	__u32 flags;       /* EV_* */
	__u32 dev;         /* kernel dev_t of the target's superblock */
	__u32 dev2;        /* same for path2 */
	__u32 target_pid;  /* ptrace/signal target, global tgid */
	__u32 detail;      /* signal number, ioctl cmd, ... */
	__u32 rule;        /* the rule that decided: a rule root's id, PROT_RULE + a
	                    * protected entry's node, or 0 (no rule: outside them all,
	                    * or decided by the kind of target) */
	__u32 repeats;     /* the same escape's repeats coalesced since it was last
	                    * reported (report_rep) */
	__u16 path_len;
	__u16 path2_len;
	char comm[16];
	char path[2 * PATH_BYTES];
};

/* counters map slots (per CPU) */
enum al_counter {
	CNT_INBOUNDS = 0,
	CNT_SYSTEM,
	CNT_ESCAPES,
	CNT_LOST,        /* escape reports dropped because the ring buffer was full */
	CNT_FORK_DENIED, /* forks refused: clone3(CLONE_INTO_CGROUP) from the jail */
	CNT_GIT_MADE,    /* git command files made in folders the jail made (check_name):
	                  * agent-lock checks them when the session ends */
	CNT_REPEATS,     /* escapes coalesced into an earlier report (report_rep) */
	CNT_MAX,
};

/* A rule root, keyed by the identity the kernel sees: superblock dev_t and
 * inode number. Keys are written only by the kernel, from opens made by the
 * registering agent-lock process (see file_open), so Go never has to guess
 * how a filesystem reports st_dev. */
struct rule_key {
	__u32 dev;
	__u32 pad;
	__u64 ino;
};

#define RULE_READ    (1 << 0) /* read and exec */
#define RULE_WRITE   (1 << 1) /* every modifying operation */
#define RULE_SCRATCH (1 << 2) /* shared scratch root: only jail-created files */
#define RULE_DENY    (1 << 3) /* denied even inside a grant */
#define RULE_SOCKET  (1 << 4) /* a unix socket the user allowed by path */
#define RULE_PROTECT (1 << 5) /* the protected entries (struct prot) lie below it */
#define RULE_GRANT   (1 << 6) /* a grant the user made: PAT_IN_GRANTS patterns apply below it */
#define RULE_PROJECT (1 << 7) /* DIR: PAT_IN_PROJECT patterns apply below it */
#define RULE_NAMED   (1 << 8) /* a directory with files granted by name (struct named) */
#define RULE_SEALED  (1 << 9) /* nothing above it is denied: the walk may end here */
#define RULE_SEAL    (1 << 10) /* registration only: seal the root just opened, if
                                * nothing above it is denied (the kernel looks) */
#define RULE_INGIT   (1 << 11) /* the root lies in a git directory (a linked worktree's,
                                * outside DIR): names below it are git's (struct gitname) */

struct rule {
	__u32 flags;
	__u32 id;    /* agent-lock's number for it, reported with each decision;
	              * 0 for a directory registered only for its named files */
	__u32 prot;  /* RULE_PROTECT: the protect-trie node of this root */
	__u32 named; /* RULE_NAMED: its group in the named table */
	/* The inode registered. The key names a number on a superblock,
	 * and one number can be two inodes: btrfs numbers each subvolume's
	 * inodes on its own under one superblock, and a removed folder's
	 * number is reused. A denial holds for every inode with the number
	 * (too much is the safe side); what grants holds only for this
	 * inode, which agent-lock keeps open (and its reaper after it), so
	 * that it is neither freed nor evicted while the cell runs. Should
	 * both be killed, the pinned programs still run: an inode evicted
	 * then comes back at another address, and its grant fails closed.
	 * (Its generation would also tell a later inode of the same number
	 * that took the very address; reading it takes 6.1's combined stack
	 * of path_rename past 512 bytes.) */
	__u64 inode;
};


/*
 * Files granted read-write by name in their directory, with their siblings:
 * the names that are the file's name, a dot and anything (F.tmp.123.abc,
 * F.lock, F.backup). Programs save such files by writing a sibling and
 * renaming it over the file, which replaces the inode an inode rule would
 * have named, and some make the file on first use. The directory itself is
 * granted nothing. NAMED_MAX entries at most, names at most NAMED_LEN-2
 * bytes; written by agent-lock while it registers, before any process is
 * jailed.
 */
#define NAMED_MAX 16
#define NAMED_LEN 32

struct named {
	__u32 group; /* the directory's (struct rule.named); 0: unused slot */
	__u32 len;
	__u32 rule;  /* event.rule of the grant */
	__u32 flags; /* RULE_READ | RULE_WRITE */
	char name[NAMED_LEN];
	/* The bytes of each word of name that are the name's (len of them):
	 * written by agent-lock, so that the kernel compares words with no
	 * loop and no shift of its own. */
	__u64 mask[NAMED_LEN / 8];
};

/*
 * Protected entries below a RULE_PROTECT root (DIR): .git/hooks, .envrc, ...,
 * files the user's own tools execute outside the jail. They are kept by name,
 * not by inode, because most do not exist yet when the cell starts: creating
 * one must be refused as well as writing it. A trie of path components, written
 * by agent-lock before the programs attach; node 0 is DIR itself. Names
 * are at most PROT_NAME-1 bytes and paths at most PROT_DEPTH components.
 * Git's files are not in it: they are protected in every repository, at any
 * depth (struct gitname).
 */
#define PROT_NAME  32
#define PROT_DEPTH 3
#define PROT_NONE  0xffffffff
#define PROT_RULE  0x100000   /* event.rule of a protected entry: PROT_RULE + node */
#define PROT_TREE  (1 << 0)   /* the entry and everything below it are read-only; a
                               * node without it (.claude, on the way to an entry)
                               * may be made only as a directory */

/*
 * Name patterns of secrets, refused wherever they apply (the file's own
 * name, not its folders'): *.pem, id_*, .env* ... written by agent-lock
 * before the programs attach, PAT_MAX at most, each at most PAT_LEN-1
 * bytes. The nearest rule above the file says which apply.
 */
#define PAT_MAX 16
#define PAT_LEN 32
#define PAT_RULE 0x200000 /* event.rule of a pattern: PAT_RULE + its index */
#define PAT_EXACT  1
#define PAT_PREFIX 2      /* id_*  */
#define PAT_SUFFIX 3      /* *.pem */
#define PAT_IN_GRANTS  (1 << 0) /* below RULE_GRANT roots */
#define PAT_IN_PROJECT (1 << 1) /* below RULE_PROJECT (DIR) */

struct pattern {
	__u32 kind;  /* PAT_EXACT, PAT_PREFIX, PAT_SUFFIX; 0: unused slot */
	__u32 len;
	__u32 scope; /* PAT_IN_* */
	__u32 pad;
	char s[PAT_LEN];
};

struct prot_key {
	__u32 parent;          /* node of the directory it is in */
	char name[PROT_NAME];  /* NUL-padded */
};

struct prot {
	__u32 node;
	__u32 flags;  /* PROT_* */
};

/*
 * Git's command files, wherever a repository lies below a writable rule root
 * (DIR, the grants, TMPDIR, the scratch places) and however deep: what the
 * user's own git runs or follows outside the jail. The kernel matches the
 * names of the components between the target and its rule root, along the
 * walk up from the target, against this table (written by agent-lock before
 * the programs attach; only the names still protected after --unprotect):
 * .git makes a git directory; in one, hooks, config, config.worktree,
 * commondir and gitdir (and what lies below them) are read-only unless the
 * jail made them, and may be made only in a folder the jail made (hooks:
 * only *.sample files, which git never runs); modules and worktrees lead to
 * other git directories, so no symlink may have their names. A .git may be
 * made as a directory anywhere, as a file only in a folder the jail made;
 * one the jail did not make is never replaced, moved or removed.
 * .gitmodules anywhere is read-only unless the jail made it.
 */
#define GIT_NAME_LEN 16

struct gitname {
	__u32 len;
	char name[GIT_NAME_LEN]; /* NUL-padded */
};

/* struct gitclass.bits: bit GI_x is (1 << GI_x). */
#define GI_DOTGIT     0 /* .git */
#define GI_HOOKS      1
#define GI_CONFIG     2
#define GI_CONFIG_WT  3 /* config.worktree */
#define GI_COMMONDIR  4
#define GI_GITDIR     5
#define GI_GITMODULES 6
#define GI_FOLLOWED   7 /* modules, worktrees */
#define GN_DOTGIT     (1 << GI_DOTGIT)
#define GN_HOOKS      (1 << GI_HOOKS)
#define GN_GITMODULES (1 << GI_GITMODULES)
#define GN_FOLLOWED   (1 << GI_FOLLOWED)
/* The command files of a git directory. */
#define GN_CONTROL    ((1 << GI_HOOKS) | (1 << GI_CONFIG) | (1 << GI_CONFIG_WT) | \
		       (1 << GI_COMMONDIR) | (1 << GI_GITDIR))
#define GIT_RULE 0x300000 /* event.rule of a git name: GIT_RULE + its GI_ */

struct gitclass {
	__u32 bits; /* GN_*: one bit */
	__u32 rule; /* GIT_RULE + its GI_ */
};

/* One cell's settings (maps.h: cell), written before the cell's rules are
 * registered (a daemon's spare is attached already, jailing nobody). */
struct cell_settings {
	__u64 cgroup_id;       /* the cgroup (v2) whose processes are jailed; 0: none */
	__u64 inb_gap_ns;      /* see inbounds_due */
	__u32 audit_mode;      /* allow what would be refused, and report it */
	__u32 stream_inbounds; /* report a sample of the in-bounds opens */
	__u32 tty_rdev[4];     /* the agent's terminal */
	__u32 pat_count;       /* patterns in use */
	__u32 pat_scopes;      /* PAT_IN_* any pattern has */
	__u32 named_count;     /* named files in use */
	__u32 git_names;       /* GN_* in the gitnames table */
};

/* The registration handshake between agent-lock and file_open. */
struct registration {
	__u32 tgid;    /* the registering process; 0 when closed */
	__u32 flags;   /* RULE_* for the next open */
	__u32 seq;     /* bumped by the kernel when it recorded a rule */
	__u32 dev;     /* identity it recorded, for agent-lock's log */
	__u64 ino;
	__u32 id;      /* the rule's id, for the next open */
	__u32 prot;    /* its protect-trie node, for the next open */
	__u32 named;   /* RULE_NAMED: its group, for the next open; the kernel
	                * writes back the group the directory has (an earlier
	                * registration of it may have given it one) */
	__u32 sealed;  /* RULE_SEAL: the kernel writes 1 when it sealed the root */
	__u32 kill_seq; /* the kernel writes how many times cgroup.kill was
	                 * written in the registering process's cgroup (0 on
	                 * kernels that do not count them) */
	__u32 clash;   /* the kernel writes 1 when the root's number is already
	                * another registered inode's (struct rule.inode) */
	__u32 tid;     /* the registering thread: the process's other threads
	                * open files of their own meanwhile */
	__u32 pad;
};

#endif
