module github.com/agent-lock/agent-lock

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	golang.org/x/sys v0.50.0
)

tool github.com/cilium/ebpf/cmd/bpf2go
