package jail

// The BPF objects are generated with a pinned clang (Debian bookworm's
// clang-19) and committed, so `go build` needs no clang. Run `make
// generate` (generate.sh), not `go generate` here: clang's BTF depends on
// the directory it compiles in, and generate.sh always uses the same one.
// CI fails when the result differs from what is committed.
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror" -target bpfel -type event -type rule_key -type registration -type al_op -type al_class -type al_counter -type prot_key -type prot -type pattern -type named -type gitname -type gitclass jail bpf/jail.bpf.c -- -Ibpf -I/usr/include/x86_64-linux-gnu
