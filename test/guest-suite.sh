#!/usr/bin/env bash
# The test suite run inside each vmtest guest (`make vmtest`), as root, from
# the repository root. Everything it runs was built on the host before boot
# (`make build test-bins`); the guest sees the repository read-only.
#
# Each step prints "guest-suite: PASS|FAIL|SKIP <step> (<seconds>s)"; the
# script exits non-zero if any step failed. The seconds are what CI's
# budget is kept with.
#
# `guest-suite.sh landlock` runs the Landlock engine's suite instead: its
# Go tests, and the adversary and realwork suites with --engine landlock,
# judged against that engine's documented limits.
set -uo pipefail

repo=$(pwd)
failed=()
engine=${1:-bpf-lsm}

recap=()

# step NAME CMD...: runs CMD and records its verdict. A failed step's
# verdict lines (a suite's FAIL, LEAK, ... lines, a Go test's failures) are
# printed again at the end: CI shows only the tail of a long run, and a
# later step's output would otherwise bury them.
step() {
	local name=$1 rc log start=$SECONDS
	shift
	echo "guest-suite: RUN  $name"
	log=$(mktemp)
	"$@" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	if [ "$rc" -eq 0 ]; then
		echo "guest-suite: PASS $name ($((SECONDS - start))s)"
	else
		echo "guest-suite: FAIL $name (exit $rc, $((SECONDS - start))s)"
		failed+=("$name")
		recap+=("--- $name (exit $rc):")
		mapfile -t -O "${#recap[@]}" recap < <(grep -E '^(FAIL|LEAK|VOID|UNREPORTED|ERROR|FIXED) |^ *--- FAIL|^ +[a-z_]+_test\.go:[0-9]+: |^panic:|^(adversary|realwork|bench|panebench|worker|realagents): |^     (false alarm|step [0-9]|secrets|the |exit |timed out|could not)' "$log" | head -40)
	fi
	rm -f "$log"
}

# finish [WHAT]: the verdict of the whole suite, last.
finish() {
	if [ "${#failed[@]}" -gt 0 ]; then
		echo "guest-suite: what failed, again:"
		printf '  %s\n' "${recap[@]}"
		echo "guest-suite: FAILED on $(uname -r)${1:+ ($1)}: ${failed[*]}"
		exit 1
	fi
	echo "guest-suite: all passed on $(uname -r)${1:+ ($1)}"
	exit 0
}

# check_lsm NAME: NAME must be an active LSM. The jail is BPF LSM programs
# (or, for the Landlock engine's suite, Landlock): a guest without it tests
# nothing, and every kernel of the matrix has both when asked on the
# command line.
check_lsm() {
	local lsm
	lsm=$(cat /sys/kernel/security/lsm) || return 1
	echo "active LSMs: $lsm"
	case ",$lsm," in
	*",$1,"*) ;;
	*)
		echo "$1 is not an active LSM"
		return 1
		;;
	esac
}

check_user() {
	id jailtest && [ -d /home/jailtest ] && [ "$(stat -c %u /home/jailtest)" = "$(id -u jailtest)" ]
}

# run_test_binary BIN: runs a `go test -c` binary from its package's
# directory, as `go test` would, so that testdata/ is found. Binaries live
# at .build/tests/<package path>.test.
run_test_binary() {
	local bin=$1 pkg
	shift
	pkg=${bin#.build/tests/}
	pkg=${pkg%.test}
	(cd "$repo/$pkg" && "$repo/$bin" -test.v -test.count=1 -test.timeout="${GUEST_TEST_TIMEOUT:-10m}" "$@")
}

# landlock_runners [REGEXP [REALWORK]]: the adversary suite (the techniques
# matching REGEXP, all by default) and, unless REALWORK is "no", the
# real-work suite against the Landlock engine. go-build runs natively only:
# under emulation it takes minutes.
landlock_runners() {
	local skip=(-skip '^go-build$')
	[ "${AGENT_LOCK_NATIVE:-}" = 1 ] && skip=()
	step "adversary --engine landlock ${1:-}" .build/adversary -agent-lock .build/agent-lock -engine landlock -run "${1:-}"
	if [ "${2:-yes}" != no ]; then
		step "realwork --engine landlock" .build/realwork -agent-lock .build/agent-lock -engine landlock "${skip[@]}"
	fi
}

echo "guest-suite: kernel $(uname -r) (${AGENT_LOCK_KERNEL:-unknown suite}), engine $engine"
if [ "$engine" = landlock ]; then
	step landlock check_lsm landlock
	step user check_user
	step "internal/jail.test (observers)" run_test_binary .build/tests/internal/jail.test -test.run 'Observe|LoadsInParallel|Abandon|Spare'
	step "internal/session.test (landlock)" run_test_binary .build/tests/internal/session.test -test.run 'Landlock|Profiles|RealClaudeCode|GitWorktree|GitInit|Outlives'
	# The session's life at a terminal (^C, a closed terminal, the summary
	# after q, the clean-up after a kill, the one-terminal pane, --headless
	# on a terminal, the user's environment through sudo), under each
	# engine doctor proves.
	step "internal/cli.test (lifecycle)" run_test_binary .build/tests/internal/cli.test -test.run 'CtrlC|ClosedTerminal|SummaryAfterQ|OneTerminal|ExitWithAgent|HeadlessOnATerminal|ClaudeCodeInThePane|SudoKeeps|Daemon|Install'
	landlock_runners
	# The one-terminal pane's benchmark at toy sizes (natively: it needs
	# no BPF LSM and its numbers are the host's): it must keep working.
	if [ "${AGENT_LOCK_NATIVE:-}" = 1 ]; then
		if [ -x .build/panebench ]; then
			step panebench-smoke .build/panebench -smoke -agent-lock .build/agent-lock -engine landlock
		else
			echo "guest-suite: SKIP panebench-smoke (.build/panebench not built)"
		fi
	fi
	# The Landlock engine's benchmark at toy sizes, natively (make
	# bench-native measures): it must keep working.
	if [ "${AGENT_LOCK_NATIVE:-}" = 1 ] && [ -x .build/bench ]; then
		step "bench-smoke --engine landlock" .build/bench -smoke -engine landlock -agent-lock .build/agent-lock
	fi
	step "realagents --engine landlock" .build/realagents -agent-lock .build/agent-lock -engine landlock
	# The same agents run by the test user with no daemon listening:
	# Landlock alone, no root (the cell's init mounts the scrubbed shell
	# files itself). About 20 seconds natively.
	nodaemon=$(mktemp -d)
	# Searchable by the test user: a socket it cannot reach is an answer
	# (EACCES), not "no daemon".
	chmod 755 "$nodaemon"
	step "realagents --engine landlock, alone" .build/realagents -agent-lock .build/agent-lock -engine landlock -socket "$nodaemon/agent-lock.sock" -sessions returning,first-run
	rmdir "$nodaemon"
	# The cell's network under this engine: the same cgroup programs, the
	# whole suite (test/nettest's small internet).
	step "nettest --engine landlock" .build/nettest -agent-lock .build/agent-lock -engine landlock
	# The whole adversary suite again, agent-lock run as the user through
	# its daemon (no sudo), and with Landlock's own audit records where the
	# kernel writes them (ABI 7, Linux 6.15): the adversary turns the
	# host's audit on for its run and holds the engine to reporting what
	# they cover (mkdir, unlink, rename, signals, ...). One run for both:
	# about two minutes natively, and CI's budget is short.
	if [ "${AGENT_LOCK_NATIVE:-}" = 1 ]; then
		if [ "$(printf '%s\n' 6.15 "$(uname -r | cut -d- -f1)" | sort -V | head -1)" = 6.15 ]; then
			step "adversary --engine landlock -daemon -landlock-audit" .build/adversary -agent-lock .build/agent-lock -engine landlock -daemon -landlock-audit
		else
			echo "guest-suite: no -landlock-audit: Linux $(uname -r) is older than 6.15, whose Landlock writes no audit records"
			step "adversary --engine landlock -daemon" .build/adversary -agent-lock .build/agent-lock -engine landlock -daemon
		fi
	fi
	finish landlock
fi

step lsm check_lsm bpf
step user check_user

mapfile -t bins < <(find .build/tests -name '*.test' -type f -perm -u+x 2>/dev/null | sort)
if [ "${#bins[@]}" -eq 0 ]; then
	echo "guest-suite: SKIP tests (no test binaries in .build/tests; run make test-bins)"
fi
# The terminal's tests (the pane, the dashboard in tmux, ^C, a closed
# terminal, q) are agent-lock's own conduct at a terminal more than the
# kernel's: under the BPF LSM they run in the guests named in TERMINAL_ON
# (forky), about four minutes under emulation, and natively under Landlock.
terminal_tests='TestCtrlCReachesTheAgent|TestClosedTerminalEndsTheSession|TestSummaryAfterQIsTheRecordings|TestLiveDashboardAndWatch|TestOneTerminal|TestExitWithAgent|TestHeadlessOnATerminal|TestClaudeCodeInThePane|TestDaemonPane|TestDaemonSecondUser'
# The daemon's Go tests (sessions without sudo, under each engine: about
# two minutes a guest) run in the guests named in DAEMON_ON (6.1, the
# oldest, where the daemon knows its caller by a pidfd it opens, not the
# kernel's SO_PEERPIDFD), and natively under Landlock; its part of the
# adversary suite is ADVERSARY_DAEMON_ON's (below).
daemon_tests='TestDaemon|TestDaemonSocketActivation|TestDaemonLimits'
# agent-lock's own conduct that no kernel changes (the user's environment
# through sudo: about 40 s a guest) runs with the terminal's tests.
conduct_tests='TestSudoKeepsTheUsersEnvironment'
# on LIST: whether this guest is one of LIST's (AGENT_LOCK_KERNEL).
on() {
	case " $1 " in *" ${AGENT_LOCK_KERNEL:-} "*) return 0 ;; esac
	return 1
}
for bin in "${bins[@]}"; do
	cli_skip=()
	if [[ $bin == */cli.test ]]; then
		if ! on "${TERMINAL_ON:-forky}"; then
			echo "guest-suite: the terminal's tests run on: ${TERMINAL_ON:-forky} (and natively)"
			cli_skip+=("$terminal_tests" "$conduct_tests")
		fi
		if ! on "${DAEMON_ON:-bookworm}"; then
			echo "guest-suite: the daemon's tests run on: ${DAEMON_ON:-bookworm} (and natively)"
			cli_skip+=("$daemon_tests")
		fi
	fi
	# Where the terminal's tests run, cli.test runs under the BPF LSM
	# alone (TERMINAL_ENGINES): the other guests run its other tests
	# under both engines, and natively the terminal's under Landlock.
	# Both engines each took forky's guest past its 70 minutes on a slow
	# day (cli.test alone 12 minutes).
	if [[ $bin == */cli.test ]] && on "${TERMINAL_ON:-forky}"; then
		export AGENT_LOCK_ENGINES=${TERMINAL_ENGINES:-bpf-lsm}
		echo "guest-suite: cli.test here under: $AGENT_LOCK_ENGINES"
	fi
	if [ "${#cli_skip[@]}" -gt 0 ]; then
		step "${bin#.build/tests/} (some tests run elsewhere)" run_test_binary "$bin" -test.timeout=25m -test.skip "^($(IFS='|'; echo "${cli_skip[*]}"))\$"
	else
		# A bound against a hang only: where the terminal's tests run
		# (both engines each) cli.test takes longer than ten minutes.
		step "${bin#.build/tests/}" run_test_binary "$bin" -test.timeout=25m
	fi
	unset AGENT_LOCK_ENGINES
done

# What each guest runs is sized to CI's budget (90 minutes, two cores, one
# guest per core): under emulation every jailed run pays agent-lock's start
# (5 to 10 s, most of it the verifier), and the adversary suite is 116 of
# them. Measured at 548fbbe..be51c6d, two guests at once: the Go tests about
# 5 minutes a guest, the whole adversary suite about 25, realwork 6, its
# go-build job 6 more, the Landlock subset 7, the Landlock realwork 5.
#
# The whole adversary suite runs on the newest kernel of the matrix
# (ADVERSARY_FULL_ON: forky 7.2; bookworm too before the terminal, the real
# agents and the network came, when CI's 90 minutes had room for it) and
# natively under Landlock; the other guests (6.1, 6.12) run the families
# whose hooks changed most between kernel versions (ADVERSARY_PARTIAL:
# attributes and xattrs with and without
# idmaps, keys, bpf, mounts) and agent-lock's own conduct as root
# (supervisor), and the techniques of the doors sealed since (git's files
# at any depth: protected; xattr reads, other processes' scheduling and
# limits, unix sockets both ways, received and inherited descriptors, hard
# links into a denial, scratch marks), after the Go tests, which check every
# program's load and the decisions of each hook on every kernel.
adversary_args=()
case " ${ADVERSARY_FULL_ON:-forky} " in
*" ${AGENT_LOCK_KERNEL:-} "*) ;;
*)
	partial=${ADVERSARY_PARTIAL:-sealing|mounts|kernel|supervisor|protected|xattr-outside|renice-outside|ionice-outside|chrt-idle-outside|taskset-outside|prlimit-outside|unix-inbound|scm-rights-receive|hardlink-denied-read|inherited-fd-read|mark-reuse}
	echo "guest-suite: adversary families $partial here (the whole suite runs on: ${ADVERSARY_FULL_ON:-forky})"
	adversary_args=(-run "$partial")
	;;
esac
# realwork's go-build compiles the standard library twice, about six minutes
# per guest under emulation: it runs in the guests named in GO_BUILD_ON
# (natively by default: make native), the other guests run every other job.
realwork_skip=()
case " ${GO_BUILD_ON:-native} " in
*" ${AGENT_LOCK_KERNEL:-} "*) ;;
*)
	echo "guest-suite: realwork without go-build here (runs on: ${GO_BUILD_ON:-native})"
	realwork_skip=(-skip '^go-build$')
	;;
esac
for runner in adversary realwork; do
	if [ ! -x ".build/$runner" ]; then
		echo "guest-suite: SKIP $runner (.build/$runner not built)"
	elif [ "$runner" = realwork ]; then
		step "$runner" ".build/$runner" -agent-lock .build/agent-lock "${realwork_skip[@]}"
	else
		step "$runner" ".build/$runner" -agent-lock .build/agent-lock "${adversary_args[@]}"
	fi
done

# agent-lock's conduct as root and a session's life, agent-lock run as the
# user through its daemon (no sudo), in the guests named in
# ADVERSARY_DAEMON_ON (bookworm, with the daemon's Go tests: about two
# minutes; forky's guest, with it, passed its 70 minutes on a slow day).
if on "${ADVERSARY_DAEMON_ON:-bookworm}" && [ -x .build/adversary ]; then
	step "adversary -daemon" .build/adversary -agent-lock .build/agent-lock -daemon -run "${ADVERSARY_DAEMON:-supervisor|lifetime}"
fi

# Real agents (test/realagents: Claude Code, Codex and Gemini CLI from
# `make agents`, driven through a scripted session by a stand-in model
# server on 127.0.0.1). Natively (make native) every agent runs unjailed,
# as a returning user and as a first run under Landlock; in the guests
# named in REALAGENTS_ON (forky) the agents matching REALAGENTS_RUN (all
# three) run jailed by the BPF LSM as a first run: under emulation each
# session takes one to three minutes, and CI's budget has room for one
# each.
case " ${REALAGENTS_ON:-forky} " in
*" ${AGENT_LOCK_KERNEL:-} "*)
	if [ -x .build/realagents ]; then
		step realagents .build/realagents -agent-lock .build/agent-lock -run "${REALAGENTS_RUN:-}" -sessions "${REALAGENTS_SESSIONS:-first-run}"
	else
		echo "guest-suite: SKIP realagents (.build/realagents not built)"
	fi
	;;
*) echo "guest-suite: SKIP realagents (runs on: ${REALAGENTS_ON:-forky})" ;;
esac

# The cell's network (test/nettest, in network namespaces of its own):
# the whole suite natively under Landlock (the same cgroup programs under
# either engine), and where NETTEST_FULL_ON names the guest (none by
# default); a case per program and path where NETTEST_PART_ON does (forky:
# DNS, the forwarder's TLS check, an unresolved address, UDP, a raw
# socket, a granted name over TLS, git over SSH, the agent's own server,
# beside the BPF LSM's programs); nothing more elsewhere:
# internal/netcell's Go tests above load and exercise the programs on
# every kernel. Measured under TCG on a busy build machine: the whole
# suite about 11 minutes, the part about 6.
if [ ! -x .build/nettest ]; then
	echo "guest-suite: SKIP nettest (.build/nettest not built)"
else
	case " ${NETTEST_FULL_ON:-} / ${NETTEST_PART_ON:-forky} " in
	*" ${AGENT_LOCK_KERNEL:-} "*/*) step nettest .build/nettest -agent-lock .build/agent-lock ;;
	*/*" ${AGENT_LOCK_KERNEL:-} "*) step "nettest (part)" .build/nettest -agent-lock .build/agent-lock \
		-run "${NETTEST_PART:-^(refused-name|shared-address-tls|raw-address|udp-443|icmp-echo|curl-https|git-clone-ssh|own-loopback-server)$}" ;;
	*) echo "guest-suite: SKIP nettest here (whole on: ${NETTEST_FULL_ON:-native only}; part on: ${NETTEST_PART_ON:-forky})" ;;
	esac
fi

# The Landlock engine's Go tests ran above with the others (observers,
# TestLandlockEngine). Its whole adversary suite runs natively (make native,
# Landlock ABI 7 on the development machines); under emulation it takes
# minutes, so the guests named in LANDLOCK_SUITE_ON (bookworm, ABI 2, the
# farthest from the native run's 7) run the families whose outcome depends
# on the ABI (truncate, signals, unix sockets, terminal), and those named in
# LANDLOCK_REALWORK_ON (none by default: the native run has the whole
# real-work suite) the real-work suite; the CI budget has no room for more.
landlock_on=${LANDLOCK_SUITE_ON:-bookworm}
realwork_on=${LANDLOCK_REALWORK_ON:-}
with_realwork=no
case " $realwork_on " in *" ${AGENT_LOCK_KERNEL:-} "*) with_realwork=yes ;; esac
case " $landlock_on " in
*" ${AGENT_LOCK_KERNEL:-} "*) landlock_runners 'sealing|processes|ipc|terminal' "$with_realwork" ;;
*) echo "guest-suite: SKIP Landlock engine's adversary and realwork (run on: $landlock_on)" ;;
esac
# The Landlock engine's tripwire against the protected family (the hooks,
# configs, .envrc, .mcp.json and agent-lock's policy file planted and
# undone) in the guests named in LANDLOCK_TRIPWIRE_ON (forky: fanotify; its
# inotify fallback, tmpfs before 6.6, is TestLandlockTripwire's in bookworm).
case " ${LANDLOCK_TRIPWIRE_ON:-forky} " in
*" ${AGENT_LOCK_KERNEL:-} "*) landlock_runners 'protected' no ;;
*) echo "guest-suite: SKIP the Landlock engine's protected family (run on: ${LANDLOCK_TRIPWIRE_ON:-forky})" ;;
esac

# bench_step NAME LIST FLAG: the benchmark with FLAG as step NAME, in the
# guests of LIST.
bench_step() {
	if ! on "$2"; then
		echo "guest-suite: SKIP $1 (runs on: $2)"
	elif [ -x .build/bench ]; then
		step "$1" .build/bench "$3" -agent-lock .build/agent-lock
	else
		echo "guest-suite: SKIP $1 (.build/bench not built)"
	fi
}

# The benchmark suite at toy sizes, in the guests named in BENCH_SMOKE_ON
# (forky, whose guest ends before bookworm's and trixie's together): it
# must keep working, its numbers mean nothing here (make bench measures).
# bench-quick below runs its per-open workloads only.
bench_step bench-smoke "${BENCH_SMOKE_ON:-forky}" -smoke
# The benchmark at a tenth of its size in forky (make bench-quick): the
# kernel's ns per program run and the storm's counts hold at that size.
# It fails only if it cannot run; its targets are printed, not asserted.
bench_step bench-quick "${BENCH_QUICK_ON:-forky}" -quick

finish
