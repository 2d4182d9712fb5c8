package main

// System call numbers the syscall package does not define for amd64.
const (
	sysProcessVMReadv  = 310
	sysBPF             = 321
	sysNameToHandleAt  = 303
	sysOpenByHandleAt  = 304
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
	sysOpenat2         = 437
	sysPidfdGetfd      = 438
	sysMembarrier      = 324
)
