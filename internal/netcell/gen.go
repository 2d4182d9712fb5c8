package netcell

// Generated like internal/jail's objects: `make generate` (generate.sh)
// compiles at a fixed path with the pinned clang, and the results are
// committed, so `go build` needs no clang. The programs use only the
// kernel's UAPI (linux/bpf.h), not vmlinux.h: cgroup programs see the
// stable bpf_sock_addr/bpf_sock/__sk_buff views, nothing of the kernel's
// own structs.
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror" -target bpfel -type net_event -type net_op -type net_verdict -type net_mode -type net_kind -type net_counter -type dest_key -type grant_key -type grant -type sock_info -type peer_key -type own_key netcell bpf/netcell.bpf.c -- -Ibpf -I/usr/include/x86_64-linux-gnu
