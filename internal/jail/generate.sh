#!/usr/bin/env bash
# Regenerates the committed BPF object and its Go bindings (bpf2go, see
# gen.go) in a scratch directory at a fixed path, then copies them back.
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
mkdir -p "$scratch/internal/jail"
cp go.mod go.sum "$scratch/"
cp -r internal/jail/gen.go internal/jail/bpf "$scratch/internal/jail/"
(cd "$scratch/internal/jail" && "${GO:-go}" generate .)
cp "$scratch"/internal/jail/jail_bpfel.o "$scratch"/internal/jail/jail_bpfel.go internal/jail/
