/* SPDX-License-Identifier: GPL-2.0 */
/* agent-lock's jail, IPC, keys and sockets. Part of jail.bpf.c, which
 * includes every part once, in order: one object, one set of maps. Each hook
 * in it makes one decision and reports it.
 */

/* ---- IPC ---------------------------------------------------------------- */

/* A socket created in the jail is the jail's own. */
static __always_inline int sock_jailed(struct sock *sk)
{
	__u64 cg = cell.cgroup_id;

	return cg != 0 && BPF_CORE_READ(sk, sk_cgrp_data.cgroup, kn, id) == cg;
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
	return r && (r->flags & RULE_SOCKET) && rule_owns(r, inode);
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
