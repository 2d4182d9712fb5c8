#!/usr/bin/env bash
# make test's enforcement suites: the VM matrix (test/guest-suite.sh in
# each guest) and the native suites (test/native.sh), scheduled on CI's two
# cores. Each guest is single-threaded TCG, a core's worth, so two lanes
# run at once: forky's guest (the longest, LANE_A) in one, bookworm's then
# trixie's (LANE_B) in the other, and the native suites in whichever lane
# ends first. Run one after the other, the native suites waited for the
# longer lane while a core sat idle beside the shorter one's end: about 5
# of CI's minutes (2026-12-06: forky 66 minutes, bookworm and trixie 71,
# native 9.5). Run from the repository root after `make build test-bins`;
# the test binaries must not be rebuilt while guests run them.
#
# Exits non-zero if any lane failed; its last lines say which.
set -uo pipefail

vmtest=${VMTEST:-go run ./internal/vmtest/cmd/vmtest}
timeout=${VMTEST_TIMEOUT:-75m}
lane_a=${LANE_A:-forky}
lane_b=${LANE_B:-bookworm,trixie}
native=${NATIVE:-bash test/native.sh}

# Each lane is a process group of its own (setsid), so that ^C or a TERM
# ends every guest and test of it: a shell's background commands ignore
# the terminal's ^C.
declare -A status lane_of
trap 'echo "matrix: stopped: ending the lanes"; for p in "${!lane_of[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done; wait; exit 130' INT TERM

# lane NAME CMD...: starts CMD as lane NAME.
lane() {
	local name=$1
	shift
	setsid "$@" &
	lane_of[$!]=$name
}

# The kernels first, in one process: the lanes would fetch into one cache
# at once (cached, this is a check).
$vmtest -fetch-only -kernels="$lane_a,$lane_b" || exit 1

lane "guests $lane_a" $vmtest -timeout="$timeout" -parallel=1 -kernels="$lane_a" -- bash test/guest-suite.sh
lane "guests $lane_b" $vmtest -timeout="$timeout" -parallel=1 -kernels="$lane_b" -- bash test/guest-suite.sh
native_ran=no
for _ in 1 2; do
	wait -n -p done_pid "${!lane_of[@]}"
	rc=$?
	status[${lane_of[$done_pid]}]=$rc
	echo "matrix: ${lane_of[$done_pid]}: exit $rc"
	unset "lane_of[$done_pid]"
	if [ "$native_ran" = no ]; then
		native_ran=yes
		# The first lane to end hands its core to the native suites.
		lane native $native
	fi
done
# The native suites and the last lane, whichever ends last.
for pid in "${!lane_of[@]}"; do
	wait "$pid"
	rc=$?
	status[${lane_of[$pid]}]=$rc
	echo "matrix: ${lane_of[$pid]}: exit $rc"
done

failed=0
for what in "guests $lane_a" "guests $lane_b" native; do
	if [ "${status[$what]:-1}" -ne 0 ]; then
		echo "matrix: FAIL $what (exit ${status[$what]:-none})"
		failed=1
	else
		echo "matrix: PASS $what"
	fi
done
exit $failed
