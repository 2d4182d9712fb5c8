#!/usr/bin/env bash
# make test's enforcement suites: the VM matrix (test/guest-suite.sh in
# each guest) and the native suites (test/native.sh), scheduled on CI's two
# cores. Each guest is single-threaded TCG, a core's worth, so two lanes
# run at once: forky's guest (the longest, LANE_A) in one, bookworm's then
# trixie's (LANE_B) in the other, and the native suites in whichever lane
# ends first. Run one after the other, the native suites waited for the
# longer lane while a core sat idle beside the shorter one's end: the
# saving is the lanes' difference, up to the native suites' length (about
# 5 minutes with forky at 66 and bookworm and trixie at 71; 1.5 at a9a55e9,
# whose lanes ended 70 and 71.5 minutes in). Run from the repository root
# after `make build test-bins`;
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

# Each lane's output is kept too: lanes print side by side, so a failed
# lane's recap (vmtest's "what failed:", native.sh's "what failed,
# again:") is buried by the others', and CI shows only the last lines of
# the run. They are printed again at the very end.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# lane NAME CMD...: starts CMD as lane NAME.
lane() {
	local name=$1
	shift
	setsid bash -c '"${@:2}" 2>&1 | tee "$1"; exit "${PIPESTATUS[0]}"' lane "$logs/$name" "$@" &
	lane_of[$!]=$name
}

# recap NAME: what lane NAME's suites said failed (its last lines if none
# did: a lane that timed out prints no recap).
recap() {
	local log="$logs/$1" lines
	lines=$(sed -n '/what failed/,$p' "$log" | grep -v '^$' | head -16)
	[ -n "$lines" ] || lines=$(tail -8 "$log")
	printf '%s\n' "$lines" | sed "s/^/matrix: $1: /"
}

# ended PID RC: lane PID ended with RC.
ended() {
	status[${lane_of[$1]}]=$2
	echo "matrix: ${lane_of[$1]}: exit $2"
	unset "lane_of[$1]"
}

# The kernels first, in one process: the lanes would fetch into one cache
# at once (cached, this is a check).
$vmtest -fetch-only -kernels="$lane_a,$lane_b" || exit 1

lane "guests $lane_a" $vmtest -timeout="$timeout" -parallel=1 -kernels="$lane_a" -- bash test/guest-suite.sh
lane "guests $lane_b" $vmtest -timeout="$timeout" -parallel=1 -kernels="$lane_b" -- bash test/guest-suite.sh
# The first lane to end hands its core to the native suites.
wait -n -p first "${!lane_of[@]}"
ended "$first" $?
lane native $native
for pid in "${!lane_of[@]}"; do
	wait "$pid"
	ended "$pid" $?
done

failed=()
for what in "guests $lane_a" "guests $lane_b" native; do
	if [ "${status[$what]:-1}" -ne 0 ]; then
		echo "matrix: FAIL $what (exit ${status[$what]:-none})"
		failed+=("$what")
	else
		echo "matrix: PASS $what"
	fi
done
for what in "${failed[@]}"; do
	recap "$what"
done
[ "${#failed[@]}" -eq 0 ]
