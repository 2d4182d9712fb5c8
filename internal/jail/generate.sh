#!/usr/bin/env bash
# Regenerates the committed BPF objects and their Go bindings (bpf2go, see
# each package's gen.go: internal/jail, internal/netcell) in a scratch
# directory at a fixed path, then copies them back.
#
# Why a fixed path: clang-19's BTF type order depends on the absolute path
# it compiles in. The same commit cloned to /work/main and to /srv/agent-lock
# gives objects that differ in the order of a few BTF types, so CI, which
# checks out wherever its runner puts it, could not reproduce the committed
# bytes. Compiling every time at /tmp/agent-lock-generate makes the result a
# function of the sources and the pinned clang only (the environment and the
# checkout's path do not enter).
set -euo pipefail
cd "$(dirname "$0")/../.."

scratch=/tmp/agent-lock-generate
rm -rf "$scratch"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch"
cp go.mod go.sum "$scratch/"
for pkg in jail netcell; do
	mkdir -p "$scratch/internal/$pkg"
	cp -r "internal/$pkg/gen.go" "internal/$pkg/bpf" "$scratch/internal/$pkg/"
	(cd "$scratch/internal/$pkg" && "${GO:-go}" generate .)
	cp "$scratch/internal/$pkg/${pkg}_bpfel.o" "$scratch/internal/$pkg/${pkg}_bpfel.go" "internal/$pkg/"
done
