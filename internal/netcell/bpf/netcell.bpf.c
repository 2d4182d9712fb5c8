// SPDX-License-Identifier: GPL-2.0
//go:build ignore

/*
 * The cell's network: cgroup programs attached to the cell's cgroup, so
 * they see every socket a process of the cell creates, whichever engine
 * confines its files (the BPF LSM or Landlock), and load where LSM
 * programs cannot.
 *
 * Each connect(2) and each datagram sent without one is decided here, once:
 *   - DNS (port 53, UDP or TCP, to any address) goes to agent-lock's own
 *     resolver, outside the cell, which answers only granted names: the
 *     query is redirected, so a name that encodes a secret never leaves
 *     the machine;
 *   - an address granted as such (--allow-net 10.0.0.5:5432, a CIDR,
 *     localhost:PORT) is let through, TCP and UDP;
 *   - the cell's own servers on loopback (a test's listener) too;
 *   - a TCP connection to an address the resolver handed out for a granted
 *     name goes to agent-lock's forwarder, which reads the name the
 *     connection carries (TLS SNI, HTTP Host) before it forwards a byte,
 *     so another name on the same address (a CDN's) is refused;
 *   - everything else is refused (EPERM) and reported.
 * Raw, ICMP and SCTP sockets are refused when they are made.
 *
 * The resolver and the forwarder see a redirected socket only by its own
 * port on loopback; egress maps that port to where the socket was going
 * (peers), and recvmsg/getpeername give the program back the address it
 * asked for, so a resolver library checking where its answer came from is
 * satisfied.
 */

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "netcell.h"

char LICENSE[] SEC("license") = "GPL";

/* The events reach Go through a ring buffer, which has no value type, and
 * the enums are only constants here: these put them in the BTF for
 * bpf2go's -type. */
struct net_enums {
	enum net_op op;
	enum net_verdict verdict;
	enum net_kind kind;
	enum net_mode mode;
	enum net_counter counter;
};
const struct net_event *unused_net_event __attribute__((unused));
const struct net_enums *unused_net_enums __attribute__((unused));

#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define IPPROTO_MPTCP_ 262

#define LOOPBACK4 0x7f000001 /* 127.0.0.1, host order */
#define ECONNREFUSED 111

/* The cell's settings (netcell.h), in their own map (.data.net): written
 * from outside after the load, hence volatile. Until written every field
 * is 0: policy mode, no grant, every redirect refused. */
volatile struct net_settings net SEC(".data.net") = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} net_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NET_C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} net_counters SEC(".maps");

/* Not preallocated (nor own and own_by_sock below): a preallocated table
 * is made whole, entry by entry, at every session's start (8 ms here for
 * this one natively, ten times that emulated) and these hold a few
 * entries. An update that then finds no memory fails as a full table
 * does: the resolver cannot hand the address out, which ends the session
 * (records.go, resolver.go), and the cell's own server is not recorded as
 * its own (bound). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dest_key);
	__type(value, struct grant);
} handed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct grant_key);
	__type(value, struct grant);
} grants SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sock_info);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct peer_key);
	__type(value, struct sock_info);
} peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct own_key);
	__type(value, __u64); /* the socket's cookie */
} own SEC(".maps");

/* own's keys by socket: the release hook sees no port. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct own_key);
} own_by_sock SEC(".maps");

/* Open mode reports an unconnected socket's first datagram, not each. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} reported SEC(".maps");

/* noinline so that enum net_counter reaches BTF and bpf2go's -type. */
static __noinline void count(enum net_counter slot)
{
	__u64 *c = bpf_map_lookup_elem(&net_counters, &slot);
	if (c)
		*c += 1;
}

/* The address a sock_addr context names, as 16 bytes. */
static __always_inline void ctx_addr(struct bpf_sock_addr *ctx, int v6, __u32 a[4])
{
	if (v6) {
		a[0] = ctx->user_ip6[0];
		a[1] = ctx->user_ip6[1];
		a[2] = ctx->user_ip6[2];
		a[3] = ctx->user_ip6[3];
	} else {
		a[0] = 0;
		a[1] = 0;
		a[2] = bpf_htonl(0xffff);
		a[3] = ctx->user_ip4;
	}
}

static __always_inline int is_mapped(const __u32 a[4])
{
	return a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff);
}

static __always_inline int is_loopback(const __u32 a[4])
{
	if (is_mapped(a))
		return (bpf_ntohl(a[3]) >> 24) == 127;
	return a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == bpf_htonl(1);
}

static __always_inline void emit(enum net_op op, enum net_verdict verdict, const __u32 a[4], __u16 port,
				 __u8 family, __u8 type, __u16 proto, __u32 rule)
{
	struct net_event *e = bpf_ringbuf_reserve(&net_events, sizeof(*e), 0);
	if (!e) {
		count(NET_C_LOST);
		return;
	}
	__u64 id = bpf_get_current_pid_tgid();
	e->ts_ns = bpf_ktime_get_ns();
	e->pid = id >> 32;
	e->tid = (__u32)id;
	__builtin_memcpy(e->addr, a, 16);
	e->port = port;
	e->op = op;
	e->verdict = verdict;
	e->family = family;
	e->type = type;
	e->proto = proto;
	e->rule = rule;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

/* A grant by address covering a:port (or a:every port). */
static __always_inline struct grant *granted(const __u32 a[4], __u16 port)
{
	struct grant_key k = { .prefixlen = 16 + 128, .port = bpf_htons(port) };
	struct grant *g;

	__builtin_memcpy(k.addr, a, 16);
	g = bpf_map_lookup_elem(&grants, &k);
	if (g)
		return g;
	k.port = 0;
	return bpf_map_lookup_elem(&grants, &k);
}

static __always_inline struct grant *handed_out(const __u32 a[4], __u16 port)
{
	struct dest_key k = { .port = port };
	struct grant *g;

	__builtin_memcpy(k.addr, a, 16);
	g = bpf_map_lookup_elem(&handed, &k);
	if (g)
		return g;
	k.port = 0;
	return bpf_map_lookup_elem(&handed, &k);
}

/* Who a connection to loopback a:port would reach: nobody (the kernel
 * would refuse it), the cell's own server, or a service of the machine. */
enum { PEER_NOBODY, PEER_OWN, PEER_OTHER };

static __always_inline int loopback_peer(struct bpf_sock_addr *ctx, const __u32 a[4], __u16 port, __u16 proto)
{
	struct bpf_sock_tuple t = {};
	struct own_key k = { .port = 0 };
	struct bpf_sock *sk;
	__u32 size;

	if (is_mapped(a)) {
		t.ipv4.daddr = a[3];
		t.ipv4.dport = bpf_htons(port);
		size = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.daddr, a, 16);
		t.ipv6.dport = bpf_htons(port);
		size = sizeof(t.ipv6);
	}
	if (proto == IPPROTO_UDP)
		sk = bpf_sk_lookup_udp(ctx, &t, size, BPF_F_CURRENT_NETNS, 0);
	else
		sk = bpf_sk_lookup_tcp(ctx, &t, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return PEER_NOBODY;
	/* Every field read at its fixed offset, before any branch: the
	 * verifier allows no arithmetic on a socket pointer. */
	__u32 family = sk->family, ip4 = sk->src_ip4;
	__u32 m[4] = { sk->src_ip6[0], sk->src_ip6[1], sk->src_ip6[2], sk->src_ip6[3] };
	k.port = sk->src_port;
	bpf_sk_release(sk);
	k.proto = (__u8)proto;
	if (family == AF_INET) {
		m[0] = 0;
		m[1] = 0;
		m[2] = bpf_htonl(0xffff);
		m[3] = ip4;
	}
	__builtin_memcpy(k.addr, m, 16);
	return bpf_map_lookup_elem(&own, &k) ? PEER_OWN : PEER_OTHER;
}

/* Sends the socket to agent-lock's resolver or forwarder on loopback,
 * remembering where it was going. A family with no listener (IPv6
 * disabled on loopback) is refused: never sent on unredirected. */
static __always_inline int redirect(struct bpf_sock_addr *ctx, int v6, const __u32 a[4], __u16 port,
				    __u16 proto, enum net_kind kind, enum net_op op)
{
	struct bpf_sock *sk = ctx->sk;
	struct sock_info *info;
	__u16 to4 = kind == NET_KIND_DNS ? net.resolver_port4 : net.forward_port4;
	__u16 to6 = kind == NET_KIND_DNS ? net.resolver_port6 : net.forward_port6;
	__u16 to;

	if (!sk)
		return 0;
	info = bpf_sk_storage_get(&socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!info)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__builtin_memcpy(info->addr, a, 16);
	info->port = port;
	info->kind = kind;
	info->mapped = 0;
	info->pid = id >> 32;
	info->tid = (__u32)id;
	info->proto = proto;
	bpf_get_current_comm(info->comm, sizeof(info->comm));

	if (!v6) {
		to = to4;
		ctx->user_ip4 = bpf_htonl(LOOPBACK4);
	} else if (is_mapped(a)) {
		to = to4;
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = bpf_htonl(0xffff);
		ctx->user_ip6[3] = bpf_htonl(LOOPBACK4);
	} else {
		to = to6;
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = 0;
		ctx->user_ip6[3] = bpf_htonl(1);
	}
	if (!to)
		return 0;
	ctx->user_port = bpf_htons(to);
	/* An unconnected socket already has its port (sendmsg binds first):
	 * tell the resolver now. A connecting one gets it later (egress). */
	if (op == NET_OP_SEND && sk->src_port) {
		struct peer_key pk = { .port = sk->src_port, .proto = (__u8)proto, .family = (__u8)sk->family };
		bpf_map_update_elem(&peers, &pk, info, BPF_ANY);
		info->mapped = 1;
	}
	return 1;
}

static __always_inline int refuse(struct bpf_sock_addr *ctx, __u8 op, const __u32 a[4], __u16 port, __u16 proto)
{
	count(NET_C_REFUSED);
	emit(op, net.audit ? NET_AUDIT : NET_REFUSED, a, port, ctx->family, ctx->type, proto, 0);
	return net.audit ? 1 : 0;
}

static __always_inline int decide(struct bpf_sock_addr *ctx, int v6, __u8 op)
{
	__u32 a[4];
	__u16 port = bpf_ntohs(ctx->user_port);
	__u16 proto = ctx->protocol;
	struct grant *g;
	int peer;

	ctx_addr(ctx, v6, a);

	if (net.mode == NET_MODE_OPEN) {
		if (is_loopback(a) && loopback_peer(ctx, a, port, proto) != PEER_OTHER) {
			count(NET_C_ALLOWED);
			return 1;
		}
		if (op == NET_OP_SEND) {
			/* Each datagram would flood the report: the first of a socket. */
			__u32 *seen;
			if (!ctx->sk)
				return 1;
			seen = bpf_sk_storage_get(&reported, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
			if (!seen || *seen) {
				count(NET_C_ALLOWED);
				return 1;
			}
			*seen = 1;
		}
		/* Reported: counted with the escapes, as audit's are. */
		count(NET_C_REFUSED);
		emit(op, NET_OPEN, a, port, ctx->family, ctx->type, proto, 0);
		return 1;
	}

	if (port == 53 && (proto == IPPROTO_UDP || proto == IPPROTO_TCP || proto == IPPROTO_MPTCP_))
		return redirect(ctx, v6, a, port, proto, NET_KIND_DNS, op);

	peer = is_loopback(a) ? loopback_peer(ctx, a, port, proto) : PEER_OTHER;
	if (peer == PEER_OWN) {
		count(NET_C_ALLOWED);
		return 1;
	}
	g = granted(a, port);
	if (g && (proto != IPPROTO_UDP || (g->flags & GRANT_UDP))) {
		count(NET_C_ALLOWED);
		emit(op, NET_ALLOWED, a, port, ctx->family, ctx->type, proto, g->rule);
		return 1;
	}
	if ((proto == IPPROTO_TCP || proto == IPPROTO_MPTCP_) && handed_out(a, port))
		return redirect(ctx, v6, a, port, proto, NET_KIND_FORWARD, op);
	if (peer == PEER_NOBODY) {
		/* Nobody listens: the kernel would refuse it (ECONNREFUSED), so
		 * do that, unreported: a client polling for its own server to
		 * come up is not an escape. */
		if (net.audit)
			return 1;
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}
	return refuse(ctx, op, a, port, proto);
}

SEC("cgroup/connect4")
int connect4(struct bpf_sock_addr *ctx)
{
	return decide(ctx, 0, NET_OP_CONNECT);
}

SEC("cgroup/connect6")
int connect6(struct bpf_sock_addr *ctx)
{
	return decide(ctx, 1, NET_OP_CONNECT);
}

SEC("cgroup/sendmsg4")
int sendmsg4(struct bpf_sock_addr *ctx)
{
	return decide(ctx, 0, NET_OP_SEND);
}

SEC("cgroup/sendmsg6")
int sendmsg6(struct bpf_sock_addr *ctx)
{
	return decide(ctx, 1, NET_OP_SEND);
}

/* Where a redirected socket's peer is agent-lock's listener, the address
 * the program asked for. */
static __always_inline struct sock_info *redirected(struct bpf_sock_addr *ctx, int v6)
{
	__u32 a[4];
	__u16 port = bpf_ntohs(ctx->user_port);

	if (!ctx->sk || !port)
		return 0;
	ctx_addr(ctx, v6, a);
	if (!is_loopback(a))
		return 0;
	if (port != net.resolver_port4 && port != net.resolver_port6 && port != net.forward_port4 && port != net.forward_port6)
		return 0;
	return bpf_sk_storage_get(&socks, ctx->sk, 0, 0);
}

static __always_inline void restore(struct bpf_sock_addr *ctx, int v6, struct sock_info *info)
{
	__u32 a[4];

	__builtin_memcpy(a, info->addr, 16);
	if (v6) {
		ctx->user_ip6[0] = a[0];
		ctx->user_ip6[1] = a[1];
		ctx->user_ip6[2] = a[2];
		ctx->user_ip6[3] = a[3];
	} else {
		ctx->user_ip4 = a[3];
	}
	ctx->user_port = bpf_htons(info->port);
}

SEC("cgroup/recvmsg4")
int recvmsg4(struct bpf_sock_addr *ctx)
{
	struct sock_info *info = redirected(ctx, 0);
	if (info && info->kind == NET_KIND_DNS && is_mapped((__u32 *)info->addr))
		restore(ctx, 0, info);
	return 1;
}

SEC("cgroup/recvmsg6")
int recvmsg6(struct bpf_sock_addr *ctx)
{
	struct sock_info *info = redirected(ctx, 1);
	if (info && info->kind == NET_KIND_DNS)
		restore(ctx, 1, info);
	return 1;
}

SEC("cgroup/getpeername4")
int getpeername4(struct bpf_sock_addr *ctx)
{
	struct sock_info *info = redirected(ctx, 0);
	if (info && is_mapped((__u32 *)info->addr))
		restore(ctx, 0, info);
	return 1;
}

SEC("cgroup/getpeername6")
int getpeername6(struct bpf_sock_addr *ctx)
{
	struct sock_info *info = redirected(ctx, 1);
	if (info)
		restore(ctx, 1, info);
	return 1;
}

/* A connected socket learns its own port after connect: the first packet
 * it sends to agent-lock's listener tells the resolver or the forwarder
 * whose it is. */
SEC("cgroup_skb/egress")
int egress(struct __sk_buff *skb)
{
	struct bpf_sock *sk = skb->sk;
	struct sock_info *info;
	__u16 dport;

	if (!sk)
		return 1;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 1;
	dport = bpf_ntohs(sk->dst_port);
	if (!dport || (dport != net.resolver_port4 && dport != net.resolver_port6 && dport != net.forward_port4 &&
		       dport != net.forward_port6))
		return 1;
	info = bpf_sk_storage_get(&socks, sk, 0, 0);
	if (!info || info->mapped)
		return 1;
	struct peer_key pk = { .port = sk->src_port, .proto = (__u8)sk->protocol, .family = (__u8)sk->family };
	bpf_map_update_elem(&peers, &pk, info, BPF_ANY);
	info->mapped = 1;
	return 1;
}

/* Sockets that reach past addresses and ports: raw IP, ICMP echo (ping
 * sockets need no privilege where ping_group_range allows), SCTP, UDP-Lite.
 * TCP, MPTCP (its subflows pass connect4/6) and UDP are decided per
 * connection above. */
SEC("cgroup/sock_create")
int sock_create(struct bpf_sock *ctx)
{
	__u32 family = ctx->family, type = ctx->type, proto = ctx->protocol;
	__u32 a[4] = {};

	if (family != AF_INET && family != AF_INET6)
		return 1;
	if (type == SOCK_STREAM && (proto == IPPROTO_TCP || proto == IPPROTO_MPTCP_))
		return 1;
	if (type == SOCK_DGRAM && proto == IPPROTO_UDP)
		return 1;
	if (net.mode == NET_MODE_OPEN) {
		count(NET_C_REFUSED);
		emit(NET_OP_SOCKET, NET_OPEN, a, 0, family, type, proto, 0);
		return 1;
	}
	count(NET_C_REFUSED);
	emit(NET_OP_SOCKET, net.audit ? NET_AUDIT : NET_REFUSED, a, 0, family, type, proto, 0);
	return net.audit ? 1 : 0;
}

/* The cell's own servers on loopback: recorded when bound (the port is
 * known after the bind, whether asked for or picked), forgotten when the
 * socket goes. */
static __always_inline int bound(struct bpf_sock *ctx, int v6)
{
	struct own_key k = { .port = ctx->src_port, .proto = (__u8)ctx->protocol };
	__u64 cookie = bpf_get_socket_cookie(ctx);

	if (v6) {
		__u32 m[4] = { ctx->src_ip6[0], ctx->src_ip6[1], ctx->src_ip6[2], ctx->src_ip6[3] };
		__builtin_memcpy(k.addr, m, 16);
	} else {
		__u32 m[4] = { 0, 0, bpf_htonl(0xffff), ctx->src_ip4 };
		__builtin_memcpy(k.addr, m, 16);
	}

	if (!k.port)
		return 1;
	/* A port left recorded as the cell's own would let the cell reach
	 * whoever binds it next, outside the cell. A socket binds again when
	 * connect(AF_UNSPEC) gave its ephemeral port back: its old port goes
	 * first. */
	struct own_key *old = bpf_map_lookup_elem(&own_by_sock, &cookie);
	if (old) {
		struct own_key ok = *old;
		__u64 *c = bpf_map_lookup_elem(&own, &ok);
		if (c && *c == cookie)
			bpf_map_delete_elem(&own, &ok);
	}
	/* And a port is kept only if its release can forget it. */
	if (!bpf_map_update_elem(&own_by_sock, &cookie, &k, BPF_ANY))
		bpf_map_update_elem(&own, &k, &cookie, BPF_ANY);
	return 1;
}

SEC("cgroup/post_bind4")
int post_bind4(struct bpf_sock *ctx)
{
	return bound(ctx, 0);
}

SEC("cgroup/post_bind6")
int post_bind6(struct bpf_sock *ctx)
{
	return bound(ctx, 1);
}

SEC("cgroup/sock_release")
int sock_release(struct bpf_sock *ctx)
{
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct own_key *k = bpf_map_lookup_elem(&own_by_sock, &cookie);
	__u64 *c;

	if (!k)
		return 1;
	c = bpf_map_lookup_elem(&own, k);
	/* Another socket may have the port now (SO_REUSEPORT, a rebind). */
	if (c && *c == cookie)
		bpf_map_delete_elem(&own, k);
	bpf_map_delete_elem(&own_by_sock, &cookie);
	return 1;
}
