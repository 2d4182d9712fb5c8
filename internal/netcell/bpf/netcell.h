/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types shared by the cell's network programs and, through bpf2go -type,
 * the Go loader (internal/netcell): one definition, so the two sides
 * cannot drift.
 *
 * Addresses are 16 bytes everywhere, an IPv4 address as its IPv4-mapped
 * IPv6 form (::ffff:a.b.c.d), so one map and one comparison serve both
 * families and a dual-stack socket's mapped address is judged as the
 * IPv4 address it is.
 */
#ifndef AGENT_LOCK_NETCELL_H
#define AGENT_LOCK_NETCELL_H

/* What the cell tried. */
enum net_op {
	NET_OP_CONNECT = 1, /* connect(2) on TCP or UDP */
	NET_OP_SEND,        /* sendto/sendmsg of an unconnected UDP socket */
	NET_OP_SOCKET,      /* socket(2) of a kind that reaches past addresses: raw, ICMP, SCTP */
};

/* What the program did with it. */
enum net_verdict {
	NET_REFUSED = 1, /* refused (EPERM) */
	NET_ALLOWED,     /* allowed: a grant by address, a sample for the live view */
	NET_AUDIT,       /* would have been refused; --audit let it through */
	NET_OPEN,        /* --net open: allowed, and every one reported */
};

/* Why a socket is redirected to agent-lock (sock_info.kind). */
enum net_kind {
	NET_KIND_DNS = 1, /* a DNS query, to agent-lock's resolver */
	NET_KIND_FORWARD, /* a connection to a name's address, to the forwarder */
};

/* The counters map's slots. */
enum net_counter {
	NET_C_ALLOWED = 0, /* connections and datagrams let through */
	NET_C_REFUSED,     /* what is reported as an escape: refusals, and what
	                    * --audit or --net open let through */
	NET_C_LOST,        /* events the ring buffer had no room for */
	NET_C_MAX,
};

/* The cell's mode (net_settings.mode). Policy is 0: settings never
 * written open nothing. */
enum net_mode {
	NET_MODE_POLICY = 0, /* grants and handed-out addresses only */
	NET_MODE_OPEN,       /* everything, reported (--net open) */
};
_Static_assert(NET_MODE_POLICY == 0, "settings never written must be the policy mode");

/* The cell's settings (netcell.bpf.c: net), written by the loader after
 * the load and before the programs are attached to the cell's cgroup, so
 * that a load can be verified before its cell exists (the daemon keeps one
 * ahead). Ports in host order; 0 for a listener that could not be opened
 * (IPv6 disabled): the redirect then fails closed. Never written (the
 * daemon's set that keeps the hooks on, netcell.Warm, on a cgroup nothing
 * joins), they refuse everything: policy mode, no grant, no redirect. */
struct net_settings {
	__u16 resolver_port4;
	__u16 resolver_port6;
	__u16 forward_port4;
	__u16 forward_port6;
	enum net_mode mode;
	__u32 audit;
};

/* grant.flags */
#define GRANT_UDP (1 << 0) /* UDP too, not only TCP */

struct net_event {
	__u64 ts_ns;
	__u32 pid;
	__u32 tid;
	__u8 addr[16];
	__u16 port;   /* host order */
	__u8 op;      /* enum net_op */
	__u8 verdict; /* enum net_verdict */
	__u8 family;  /* AF_INET, AF_INET6 */
	__u8 type;    /* SOCK_STREAM, ... */
	__u16 proto;  /* IPPROTO_TCP, ... (MPTCP is 262) */
	__u32 rule;   /* the grant that allowed it (its index + 1), 0 for none */
	char comm[16];
};

/* handed: an address agent-lock's resolver handed out for a granted name,
 * and the port the grant names (0: every port). */
struct dest_key {
	__u8 addr[16];
	__u16 port;
	__u16 pad;
};

/* grants: addresses granted as such (--allow-net 10.0.0.5:5432, a CIDR,
 * localhost), longest prefix first. The trie's data is the port (0: every
 * port) then the address, so prefixlen is 16 + the address's prefix. */
struct grant_key {
	__u32 prefixlen;
	__u16 port; /* network order, so the trie's bits are the wire's */
	__u8 addr[16];
};

struct grant {
	__u32 rule;  /* index + 1 in the loader's list, for reports */
	__u32 flags; /* GRANT_* */
};

/* What a redirected socket was going to: kept per socket (socket
 * storage), and by the socket's own port once it has one (peers), which
 * is all the resolver and the forwarder see of it. */
struct sock_info {
	__u8 addr[16];
	__u16 port;  /* host order */
	__u8 kind;   /* enum net_kind */
	__u8 mapped; /* already in peers */
	__u32 pid;
	__u32 tid;
	__u16 proto;
	__u16 pad;
	char comm[16];
};

struct peer_key {
	__u16 port;   /* the cell socket's own port, host order */
	__u8 proto;   /* IPPROTO_TCP, IPPROTO_UDP */
	__u8 family;  /* AF_INET, AF_INET6 */
};

/* own: the addresses and ports a socket of the cell is bound to (its own
 * servers, a test's listener), which the cell may connect to on loopback.
 * Two sockets cannot hold one address and port (SO_REUSEPORT aside), so
 * the socket a connection would reach is the cell's when its own address
 * and port are here. */
struct own_key {
	__u8 addr[16];
	__u16 port;
	__u8 proto; /* IPPROTO_TCP (MPTCP's 262 truncates to it) or IPPROTO_UDP */
	__u8 pad;
};

#endif
