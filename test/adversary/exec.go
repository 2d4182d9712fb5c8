package main

// execTechniques run programs that live outside DIR.
var execTechniques = []Technique{
	{Name: "exec-outside-script", Family: "exec", Doc: "run ~/bin/tool.sh",
		Ops: ops("exec"), Path: "~/bin/tool.sh",
		Cmd: bash("{home}/bin/tool.sh"), Effect: leaked},
	{Name: "exec-outside-elf", Family: "exec", Doc: "run ~/bin/tool-elf, a compiled program",
		Ops: ops("exec"), Path: "~/bin/tool-elf", Needs: needToolELF,
		Cmd: bash("{home}/bin/tool-elf"), Effect: leaked},
	{Name: "exec-via-symlink", Family: "exec", Doc: "run ./t, a symlink planted in DIR to ~/bin/tool-elf",
		Ops: ops("exec"), Path: "~/bin/tool-elf", Needs: needToolELF,
		Setup: plant("t", "{home}/bin/tool-elf"),
		Cmd:   bash("./t"), Effect: leaked},
	{Name: "interpret-outside-script", Family: "exec", Doc: "bash ~/bin/tool.sh: the interpreter reads it",
		Ops: ops("read"), Path: "~/bin/tool.sh",
		Cmd: bash("bash {home}/bin/tool.sh"), Effect: leaked},
	{Name: "ldso-outside-elf", Family: "exec", Doc: "the dynamic loader maps ~/bin/tool-elf itself",
		Ops: ops("read", "exec"), Path: "~/bin/tool-elf", Needs: needToolELF,
		Cmd: bash("/lib64/ld-linux-x86-64.so.2 {home}/bin/tool-elf"), Effect: leaked},
	{Name: "exec-copied-binary", Family: "exec", Doc: "cp ~/bin/tool-elf into DIR, then run the copy",
		Ops: ops("read"), Path: "~/bin/tool-elf", Needs: needToolELF,
		Cmd: bash("cp {home}/bin/tool-elf ./t && ./t"), Effect: leaked},
}
