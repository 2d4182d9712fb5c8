package main

// System call numbers the syscall package does not define for arm64.
const (
	sysProcessVMReadv  = 270
	sysBPF             = 280
	sysNameToHandleAt  = 264
	sysOpenByHandleAt  = 265
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
	sysOpenat2         = 437
	sysPidfdGetfd      = 438
	sysMembarrier      = 283
)
