// Package kernel finds out what the running kernel offers agent-lock, and
// says how to fix what is missing.
//
// agent-lock's verdicts are made by BPF LSM programs, which need a kernel
// that was built with CONFIG_BPF_LSM, booted with bpf in its lsm= list, and
// carries BTF; sessions are tracked through cgroup2. None of that is
// visible from a feature probe alone, and each gap has a precise fix that a
// user should not have to research: [Probe] gathers the facts from the
// places the kernel publishes them, and [Facts.Advice] turns the gaps into
// instructions. This is the engine of agent-lock's doctor; it loads no BPF
// itself (whether a trivial LSM program attaches and fires is the jail's
// test to make).
package kernel
