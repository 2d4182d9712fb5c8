package main

// unshareUserMount makes the caller root in a new user namespace with its
// own mount namespace: the unprivileged way to get mount(2), chroot(2)
// and pivot_root(2).
var unshareUserMount = []string{"unshare", "--user", "--map-root-user", "--mount"}

// mountTechniques rearrange the file system view from a user namespace.
var mountTechniques = []Technique{
	{Name: "userns-bind-mount", Family: "mounts", Doc: "bind-mount ~/.ssh into DIR in a user+mount namespace",
		Ops: ops("mount"),
		Cmd: bash("unshare -Urm sh -c 'mkdir -p x && mount --bind {home}/.ssh x && cat x/id_rsa'"), Effect: leaked},
	{Name: "userns-overlay", Family: "mounts", Doc: "an overlay mount with ~/.ssh as its lower layer",
		Ops:    ops("mount"),
		Cmd:    bash("unshare -Urm sh -c 'mkdir -p e m && mount -t overlay overlay -o lowerdir={home}/.ssh:e m && cat m/id_rsa'"),
		Effect: leaked},
	{Name: "userns-tmpfs-write", Family: "mounts", Doc: "mount a fresh tmpfs over ~/bin and write into it",
		Ops:    ops("mount"),
		Cmd:    bash("unshare -Urm sh -c 'mount -t tmpfs none {home}/bin && echo tmpfs-write-ok > {home}/bin/x && cat {home}/bin/x'"),
		Effect: outputHas("tmpfs-write-ok")},
	{Name: "userns-chroot", Family: "mounts", Doc: "chroot to the home directory in a user namespace",
		Ops:    ops("chroot"),
		Cmd:    bash(`unshare -Ur python3 -c 'import os; os.chroot("{home}"); print(open("/.ssh/id_rsa").read())'`),
		Effect: leaked},
	{Name: "userns-pivot-root", Family: "mounts", Doc: "pivot_root to /home in a user+mount namespace, then read the key",
		// A user namespace owns no mount it did not make, so the new root
		// is bind-mounted first: the jail may stop it at mount or at
		// pivot_root.
		Ops: ops("pivot_root", "mount"), Needs: needHelper,
		Cmd:    helper(append(unshareUserMount, "--propagation", "unchanged"), "pivot-root", "{home}"),
		Effect: leaked},
}
