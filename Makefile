# agent-lock build and test entry points. A newcomer runs `make test`
# (as root: it installs packages and boots kernels); CI runs .ci/run.
#
# The jail only works on kernels that run BPF LSM programs, which the
# development machines' kernel does not; `make vmtest` runs the enforcement
# tests inside QEMU on Debian's bookworm, trixie and forky kernels (see
# internal/vmtest). Pick kernels with VMTEST_FLAGS=-kernels=bookworm.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

GO ?= go
BUILD := .build
# Packages whose tests need the VM: compiled on the host by test-bins and
# run in every guest by test/guest-suite.sh.
VM_TEST_PKGS ?= ./internal/jail ./internal/session ./internal/cli ./internal/netcell
VMTEST := $(GO) run ./internal/vmtest/cmd/vmtest
# make vmtest: two guests at once: each is single-threaded TCG (one host
# core), and CI machines have two. The longest first (forky: the whole
# adversary suite, the terminal's tests, the real agents, the network),
# bookworm beside it, trixie when bookworm is done (make test runs the same
# lanes through test/matrix.sh, with the native suites). The timeout is a
# hang guard only: on a slow day (2026-12-06) forky's guest took over 70
# minutes.
VMTEST_FLAGS ?= -timeout=75m -parallel=2 -kernels=forky,bookworm,trixie
# make bench: a guest a core, as for the tests (three guests on two cores
# made single runs vary by 3x); bookworm, the slowest, first.
BENCH_VMTEST_FLAGS ?= -timeout=30m -parallel=2 -kernels=bookworm,forky,trixie

# qemu-system-x86 brings virtiofsd; busybox-static is the guests'
# initramfs; gcc and libc6-dev are cgo for `go test -race`; tmux is the
# real terminal of the dashboard's end-to-end test. npm fetches the real
# agents the profile tests run (make agents): Debian's package where no npm
# is installed (a NodeSource nodejs brings its own and conflicts with it).
# The network suite (test/nettest) runs dig (bind9-dnsutils), curl, git,
# ssh (openssh-client) and python3 in its namespaces. btrfs-progs makes the
# btrfs of the jail's subvolume test.
DEPS := qemu-system-x86 busybox-static gcc libc6-dev tmux bind9-dnsutils curl git openssh-client python3 btrfs-progs
GENERATE_DEPS := clang-19 llvm-19 libc6-dev libbpf-dev

.PHONY: test build test-bins agents unit vmtest vmtest-self native bench bench-quick bench-native adversary deps generate-deps generate check-generate clean screenshot bench-pane

# The VM matrix and the native suites run as two lanes on CI's two cores
# (test/matrix.sh: forky's guest in one, bookworm's then trixie's in the
# other, the native suites in whichever ends first), built once before.
test:
	$(MAKE) deps
	$(MAKE) agents
	$(MAKE) unit
	$(MAKE) build test-bins
	VMTEST="$(VMTEST)" bash test/matrix.sh

# native runs the suites on this machine itself, as the unprivileged user
# jailtest (test/native.sh says what).
native: build test-bins
	bash test/native.sh

build:
	$(GO) build -o $(BUILD)/agent-lock ./cmd/agent-lock

# Test binaries live at .build/tests/<package path>.test so the guest can
# run each from its package directory.
test-bins:
	rm -rf $(BUILD)/tests $(BUILD)/adversary $(BUILD)/realwork $(BUILD)/bench $(BUILD)/panebench $(BUILD)/realagents $(BUILD)/nettest
	@for pkg in $(VM_TEST_PKGS); do \
		dir=$${pkg#./}; \
		if ! compgen -G "$$dir/*_test.go" >/dev/null; then \
			echo "test-bins: $$pkg has no tests, skipped"; continue; \
		fi; \
		echo "$(GO) test -c -o $(BUILD)/tests/$$dir.test ./$$dir"; \
		$(GO) test -c -o $(BUILD)/tests/$$dir.test ./$$dir; \
	done
	@for runner in adversary realwork bench panebench realagents nettest; do \
		if [ "$$($(GO) list -f '{{.Name}}' ./test/$$runner 2>/dev/null)" = main ]; then \
			echo "$(GO) build -o $(BUILD)/$$runner ./test/$$runner"; \
			$(GO) build -o $(BUILD)/$$runner ./test/$$runner; \
		else \
			echo "test-bins: test/$$runner is not a command (yet), skipped"; \
		fi; \
	done

# The daemon's decoder takes any local user's bytes as root, and root
# reads the walks' memories (internal/dirscan): both are fuzzed on every
# run, beyond their seed corpora (a million inputs each, 15 and 10 s
# here). A count, not a time: Go 1.26's coordinator can report a bare
# "context deadline exceeded" when a -fuzztime duration ends
# (golang/go#75804, fixed in 1.27), which failed make unit once.
unit:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime 1000000x ./internal/daemon
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 1000000x ./internal/dirscan

vmtest: build test-bins
	$(VMTEST) $(VMTEST_FLAGS) -- bash test/guest-suite.sh

# The harness's own boot test: exit statuses, environment and working
# directory make it through every kernel.
vmtest-self:
	AGENT_LOCK_VMTEST_BOOT=1 $(GO) test -count=1 -run '^TestBoot$$' -v ./internal/vmtest

# What the jail costs, against no jail and Landlock, on each kernel (see
# test/bench). Not part of make test, which runs it only as a smoke test.
# BENCH_FLAGS for more (-repeat 5 -cfiles 200) where the machine allows.
# Then, natively where this kernel has the Landlock engine (bench-native):
# that engine against a bare Landlock sandbox, and what a session's
# observers cost processes outside its cell.
bench: build test-bins
	$(VMTEST) $(BENCH_VMTEST_FLAGS) -- $(BUILD)/bench -agent-lock $(BUILD)/agent-lock $(BENCH_FLAGS)
	$(MAKE) bench-native

# The per-open figures (the kernel's statistics), the targets of issue 22
# and the storm's exact counts, in one guest (forky, where the targets were
# set) in minutes. make test runs the same step in forky's guest suite.
bench-quick: build test-bins
	$(VMTEST) -timeout=20m -kernels=forky -- $(BUILD)/bench -quick -agent-lock $(BUILD)/agent-lock

bench-native: build test-bins
	@if ! id jailtest >/dev/null 2>&1; then \
		useradd --uid 4242 --user-group --create-home --shell /bin/sh jailtest; \
	fi; \
	if $(BUILD)/agent-lock doctor --engine landlock >/dev/null 2>&1; then \
		AGENT_LOCK_VM=1 $(BUILD)/bench -engine landlock -agent-lock $(BUILD)/agent-lock $(BENCH_FLAGS); \
	else \
		echo "bench-native: skipped: this kernel has no Landlock engine ($(BUILD)/agent-lock doctor says why)"; \
	fi

# The README's picture, from a real session in a real terminal (tmux) on
# this machine, drawn by test/screenshot (test/screenshot.sh).
SCREENSHOT_DEPS := librsvg2-bin fonts-jetbrains-mono fonts-noto-color-emoji
screenshot: build
	@$(call apt_install,$(SCREENSHOT_DEPS))
	bash test/screenshot.sh docs/dashboard.png

# What the one-terminal pane costs a terminal user: cat of 20 MB and key
# echo, in the pane against plain tmux (see test/panebench). Natively, as
# root; not part of make test, which runs it as a smoke test natively.
bench-pane: build test-bins
	$(BUILD)/panebench -agent-lock $(BUILD)/agent-lock $(PANEBENCH_FLAGS)

adversary: build
	$(GO) build -o $(BUILD)/adversary ./test/adversary
	$(VMTEST) $(VMTEST_FLAGS) -- $(BUILD)/adversary -agent-lock $(BUILD)/agent-lock

# Real agents from the npm registry, pinned, for the profile tests and the
# scripted sessions of test/realagents (run jailed in the guests and
# natively). Each is installed once in a prefix of its own,
# .build/agents/NAME, as `npm install --prefix` makes one (its package.json
# at the top, which the agents' own start-up looks for); the version
# installed is named by .build/agents/NAME/.version-VERSION. The tests fail, not skip,
# when one is missing.
CLAUDE_CODE_VERSION := 2.1.197
CODEX_VERSION := 0.171.0
GEMINI_CLI_VERSION := 0.61.0
AGENTS := $(BUILD)/agents
agents: $(AGENTS)/claude-code/.version-$(CLAUDE_CODE_VERSION) \
	$(AGENTS)/codex/.version-$(CODEX_VERSION) \
	$(AGENTS)/gemini/.version-$(GEMINI_CLI_VERSION)

# agent NAME PACKAGE VERSION COMMAND: installs PACKAGE@VERSION, checks
# that it left COMMAND (relative to the prefix).
define agent
$(AGENTS)/$(1)/.version-$(3):
	rm -rf $(AGENTS)/$(1) $(AGENTS)/$(1)-* && mkdir -p $(AGENTS)/$(1)
	npm install --prefix $(AGENTS)/$(1) --no-audit --no-fund --loglevel=error $(2)@$(3)
	test -x $(AGENTS)/$(1)/$(4)
	touch $$@
endef
$(eval $(call agent,claude-code,@anthropic-ai/claude-code,$(CLAUDE_CODE_VERSION),node_modules/@anthropic-ai/claude-code/bin/claude.exe))
$(eval $(call agent,codex,@openai/codex,$(CODEX_VERSION),node_modules/.bin/codex))
$(eval $(call agent,gemini,@google/gemini-cli,$(GEMINI_CLI_VERSION),node_modules/.bin/gemini))

# Installs only what is missing, so it is quick on a prepared machine.
define apt_install
	missing=$$(for p in $(1); do \
		dpkg-query -W -f='$${db:Status-Abbrev}' $$p 2>/dev/null | grep -q '^ii' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "missing packages:" $$missing "(run make $@ as root)"; exit 1; fi; \
		apt-get update -q; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi
endef

deps:
	@$(call apt_install,$(DEPS))
	@command -v npm >/dev/null || { $(call apt_install,npm); }

generate-deps:
	@$(call apt_install,$(GENERATE_DEPS))

# Not plain `go generate`: clang's output depends on the path it compiles
# in, so generate.sh compiles at a fixed one.
generate:
	GO=$(GO) internal/jail/generate.sh

# Regenerating with the pinned clang must reproduce the committed objects.
BPF_PKGS := internal/jail internal/netcell
check-generate: generate
	git diff --exit-code -- $(BPF_PKGS)
	test -z "$$(git status --porcelain -- $(BPF_PKGS))" || { git status --short -- $(BPF_PKGS); exit 1; }

clean:
	rm -rf $(BUILD)
