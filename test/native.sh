#!/usr/bin/env bash
# The suites on this machine itself (make native), as the unprivileged user
# jailtest (uid 4242, created if missing): the BPF-LSM guest suite when this
# kernel runs BPF LSM programs, and the Landlock engine's suite when it has
# Landlock (agent-lock doctor --engine proves each with a live self-test).
# An engine this kernel cannot run is reported skipped, with why. Run from
# the repository root after `make build test-bins`.
set -uo pipefail

if ! id jailtest >/dev/null 2>&1; then
	useradd --uid 4242 --user-group --create-home --shell /bin/sh jailtest
fi
rc=0
export AGENT_LOCK_VM=1 AGENT_LOCK_NATIVE=1 AGENT_LOCK_KERNEL=native
if .build/agent-lock doctor --engine bpf-lsm >/dev/null 2>&1; then
	bash test/guest-suite.sh || rc=1
else
	echo "native: bpf-lsm skipped: this kernel cannot run the BPF-LSM jail (.build/agent-lock doctor says why); the VM matrix covers it"
fi
if .build/agent-lock doctor --engine landlock >/dev/null 2>&1; then
	bash test/guest-suite.sh landlock || rc=1
else
	echo "native: landlock skipped: this kernel has no Landlock (.build/agent-lock doctor says why)"
fi
exit $rc
