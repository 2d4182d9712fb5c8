package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/dashboard"
	"github.com/agent-lock/agent-lock/internal/engine/landlockcell"
	"github.com/agent-lock/agent-lock/internal/kernel"
	"github.com/agent-lock/agent-lock/internal/landlock"
	"github.com/agent-lock/agent-lock/internal/netpolicy"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/secretenv"
	"github.com/agent-lock/agent-lock/internal/session"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// applyPolicyFiles merges the user's policy file and the project's into o:
// lists in file order before the flags', single settings from the flags
// first, then the project's file, then the user's. It returns the files
// read. A project's file that widens the cell is an error unless the
// user's own file trusts that file as it is now (agent-lock trust): the
// file came with the repository, and whoever wrote it (or an agent that
// changed it in an earlier session) does not decide what the agent may
// reach. Both files are read as id, the user.
func applyPolicyFiles(o *options, id asuser.ID, home, dir string) ([]string, error) {
	homeFile, err := loadPolicy(id, filepath.Join(home, policy.HomeFile), home, "")
	if err != nil {
		return nil, err
	}
	projFile, err := loadPolicy(id, filepath.Join(dir, policy.PolicyFile), home, dir)
	if err != nil {
		return nil, err
	}
	if projFile != nil {
		if err := checkTrust(id, homeFile, projFile, home, dir); err != nil {
			return nil, err
		}
	}
	var used []string
	var lists struct{ allow, allowWrite, deny, denyPatterns, unprotect, allowUnix, env []string }
	var netRules []netpolicy.Rule
	for _, f := range []*policy.File{homeFile, projFile} {
		if f == nil {
			continue
		}
		used = append(used, f.Path)
		lists.allow = append(lists.allow, f.Allow...)
		lists.allowWrite = append(lists.allowWrite, f.AllowWrite...)
		lists.deny = append(lists.deny, f.Deny...)
		lists.denyPatterns = append(lists.denyPatterns, f.DenyPatterns...)
		lists.unprotect = append(lists.unprotect, f.Unprotect...)
		lists.allowUnix = append(lists.allowUnix, f.AllowUnix...)
		lists.env = append(lists.env, f.Env...)
		netRules = append(netRules, f.NetRules...)
	}
	o.allow = append(lists.allow, o.allow...)
	o.allowWrite = append(lists.allowWrite, o.allowWrite...)
	o.deny = append(lists.deny, o.deny...)
	o.denyPatterns = append(lists.denyPatterns, o.denyPatterns...)
	o.unprotect = slices.Compact(append(lists.unprotect, o.unprotect...))
	o.allowUnix = append(lists.allowUnix, o.allowUnix...)
	o.passEnv = append(lists.env, o.passEnv...)
	o.netRules = append(netRules, o.netRules...)
	for _, f := range []*policy.File{projFile, homeFile} {
		if f == nil {
			continue
		}
		if o.engine == "" {
			o.engine = f.Engine
		}
		if len(o.profiles) == 0 {
			o.profiles = f.Profiles
		}
		if o.netFrom == "" && f.Net != "" {
			o.net, o.netFrom = f.Net, f.Path
		}
	}
	// The pane's key is the user's: a project's file does not choose
	// which key the user's terminal gives up.
	if projFile != nil && projFile.PaneKey != "" {
		return nil, fmt.Errorf("%s:%d: pane-key: the key that flips the pane is yours to choose: set it in %s", projFile.Path, projFile.KeyLine("pane-key"), filepath.Join(home, policy.HomeFile))
	}
	if o.paneKey == "" && homeFile != nil && homeFile.PaneKey != "" {
		if err := dashboard.CheckFlipKey(homeFile.PaneKey); err != nil {
			return nil, fmt.Errorf("%s:%d: pane-key: %w", homeFile.Path, homeFile.KeyLine("pane-key"), err)
		}
		o.paneKey = homeFile.PaneKey
	}
	if o.paneKey == "" {
		o.paneKey = dashboard.DefaultFlipKey
	}
	if m, _ := netpolicy.ParseMode(o.net); m != netpolicy.Grants && len(o.netRules) > 0 {
		r := o.netRules[0]
		return nil, fmt.Errorf("net = %q (from %s) grants %s, but %s grants %s: leave out one of them (--net grants keeps the grants)",
			o.net, o.netFrom, map[netpolicy.Mode]string{netpolicy.Off: "no host", netpolicy.Open: "every host"}[m], r.From, r)
	}
	return used, nil
}

// policyCmd prints the cell agent-lock would make: what each rule grants
// or refuses, and where it comes from.
func policyCmd(args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "agent-lock policy: %v\n", err)
		return session.ExitFailed
	}
	o, err := parse(args)
	if err != nil {
		return fail(err)
	}
	agent, err := session.InvokingUser(o.allowRoot)
	if err == session.ErrNotRoot || err == session.ErrRootAgent {
		// Printing needs no privilege: the user running it is the agent.
		agent, err = currentUser()
	}
	if err != nil {
		return fail(err)
	}
	dir, err := session.ResolveDir(o.dir)
	if err != nil {
		return fail(err)
	}
	files, err := applyPolicyFiles(&o, agent.ID(), agent.Home, dir)
	if err != nil {
		return fail(err)
	}
	plan, err := session.MakePlan(o.session(dir, agent, ""), agent)
	if err != nil {
		return fail(err)
	}
	tilde := func(p string) string {
		if p == agent.Home || strings.HasPrefix(p, agent.Home+"/") {
			return "~" + strings.TrimPrefix(p, agent.Home)
		}
		return p
	}
	engine := o.engine
	if engine == "" {
		engine = session.EngineAuto
	}
	facts, ferr := kernel.Probe()
	abi := landlock.ABI()
	shown, engineLine := engine, engine
	if engine == session.EngineAuto {
		if ferr != nil {
			engineLine = "auto: cannot tell here (" + ferr.Error() + ")"
		} else {
			pick, why := session.AutoEngine(context.Background(), facts)
			if pick != "" {
				shown = pick
				engineLine = fmt.Sprintf("auto: %s on this kernel (%s)", pick, why)
			} else {
				engineLine = "auto: " + why
			}
		}
	}
	if shown == session.EngineLandlock {
		engineLine = strings.Replace(engineLine, session.EngineLandlock, fmt.Sprintf("%s (ABI %d)", session.EngineLandlock, abi), 1)
	}
	fmt.Fprintf(stdout, "project   %s\ncommand   %s\nengine    %s\n", tilde(dir), strings.Join(plan.Argv, " "), engineLine)
	if len(plan.Profiles.Profiles) > 0 {
		fmt.Fprintf(stdout, "profiles  %s\n", strings.Join(plan.Profiles.Profiles, " "))
	} else {
		fmt.Fprintln(stdout, "profiles  none")
	}
	var shownFiles []string
	for _, f := range files {
		shownFiles = append(shownFiles, tilde(f))
	}
	if len(shownFiles) == 0 {
		shownFiles = []string{"none"}
	}
	fmt.Fprintf(stdout, "files     %s\n", strings.Join(shownFiles, ", "))
	for _, n := range plan.Notes {
		fmt.Fprintf(stdout, "note      %s\n", n)
	}
	if shown == session.EngineLandlock {
		landlockPolicy(stdout, plan, o, abi, tilde, agent.ID())
	} else {
		bpfPolicy(stdout, plan, tilde)
	}
	printNet(stdout, plan.Net, o.netFrom)
	env := append(slices.Clone(plan.Profiles.Env), o.passEnv...)
	fmt.Fprintf(stdout, "\nenvironment: variables named like credentials are withheld; passed anyway: %s\n", orNone(strings.Join(env, " ")))
	var missing []string
	for _, p := range plan.Profiles.Missing {
		if !slices.Contains(plan.Profiles.Unmade, p) {
			missing = append(missing, tilde(p))
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(stdout, "not granted (do not exist): %s\n", strings.Join(missing, " "))
	}
	if len(plan.Profiles.Unmade) > 0 {
		var m []string
		for _, p := range plan.Profiles.Unmade {
			m = append(m, tilde(p))
		}
		fmt.Fprintf(stdout, "made (as you, 0700) and granted when the agent runs: %s\n", strings.Join(m, " "))
	}
	return 0
}

// bpfPolicy prints the cell as the BPF-LSM engine enforces it.
func bpfPolicy(stdout io.Writer, plan session.Plan, tilde func(string) string) {
	fmt.Fprintf(stdout, "\nrules (the kernel's; the nearest rule above a file decides, a denial anywhere above it wins):\n")
	for _, r := range plan.Policy.Rules() {
		path := tilde(r.Path)
		if r.Access&spec.Named != 0 {
			// The file and its siblings (a save's temporary file, a lock).
			path += "{,.*}"
		}
		fmt.Fprintf(stdout, "  %-22s %-40s %s\n", ruleRights(r.Access), path, r.Name)
	}
	fmt.Fprintln(stdout, "  by kind                /proc /sys /dev                          the agent's own /proc entries and the system-wide ones, /sys read-only;")
	fmt.Fprintln(stdout, "                                                                  null, zero, full, random, urandom, tty, ptmx, its terminals")
	fmt.Fprintln(stdout, "  refused                everything else")
	fmt.Fprintln(stdout, "\nrefused by name (the file's own name):")
	for _, p := range plan.Policy.Patterns() {
		where := "in your grants"
		if p.Scope&spec.InProject != 0 {
			where = "in the project and your grants"
		}
		fmt.Fprintf(stdout, "  %-22s %s\n", p.Glob, where)
	}
	fmt.Fprintln(stdout, "\nprotected in the project (read-only to the agent; --unprotect PATH lifts one):")
	var git []string
	for _, p := range plan.Policy.Protect {
		if p.Git {
			git = append(git, p.Path)
		} else {
			fmt.Fprintf(stdout, "  %s\n", p.Path)
		}
	}
	if len(git) > 0 {
		fmt.Fprintf(stdout, "  %s: in every repository, at any depth, in the project and your writable grants;\n", strings.Join(git, " "))
		fmt.Fprintln(stdout, "    in repositories the agent makes, checked for commands your git would run when the session ends")
	}
}

// landlockPolicy prints the cell as the Landlock engine enforces it on a
// kernel with ABI abi: what its ruleset grants, what it cannot do and
// refuses at start, what its tripwire keeps, what it leaves open.
func landlockPolicy(stdout io.Writer, plan session.Plan, o options, abi int, tilde func(string) string, id asuser.ID) {
	fmt.Fprintf(stdout, "\nrules (Landlock's, at ABI %d; a file gets what the rules above it grant, together; a denial is carved out of them):\n", abi)
	for _, r := range plan.Policy.Rules() {
		rights, note := landlock.Describe(r, abi)
		if note != "" {
			note = " (" + note + ")"
		}
		fmt.Fprintf(stdout, "  %-22s %-40s %s%s\n", rights, tilde(r.Path), r.Name, note)
	}
	fmt.Fprintln(stdout, "  by kind                /proc /sys                               read-only (Landlock's ptrace scoping keeps other processes' out)")
	fmt.Fprintln(stdout, "                         /dev                                     null, zero, full, random, urandom, tty, ptmx, its terminals by name,")
	fmt.Fprintln(stdout, "                                                                  the terminals it opens itself (a devpts of its own)")
	fmt.Fprintln(stdout, "  refused                everything else")
	for _, d := range plan.Policy.Denied() {
		for _, r := range plan.Policy.Rules() {
			if r.Access&spec.Deny == 0 && r.Path != d.Path && strings.HasPrefix(d.Path, r.Path+"/") {
				fmt.Fprintf(stdout, "  carved                 %s out of %s: the folders on the way can be read entry by entry, not listed, and get no new entries\n",
					tilde(d.Path), tilde(r.Path))
			}
		}
	}
	fmt.Fprintln(stdout, "\nrefused by name: nothing (Landlock grants by path); in the BPF-LSM engine's list, not refused here:")
	for _, p := range plan.Policy.Patterns() {
		where := "in your grants"
		if p.Scope&spec.InProject != 0 {
			where = "in the project and your grants"
		}
		fmt.Fprintf(stdout, "  %-22s %s\n", p.Glob, where)
	}
	if rs := landlockcell.Refusals(plan.Policy); len(rs) > 0 {
		if o.bestEffort {
			fmt.Fprintln(stdout, "\nasked, and done only as far as Landlock can (--best-effort):")
			for _, r := range rs {
				fmt.Fprintf(stdout, "  - %s\n", r.BestEffort)
			}
		} else {
			fmt.Fprintln(stdout, "\nasked, and refused at start (the Landlock engine cannot do it; --best-effort runs anyway):")
			for _, r := range rs {
				fmt.Fprintf(stdout, "  - %s\n", r.Why)
			}
		}
	}
	fmt.Fprintln(stdout, "\nprotected (the tripwire: a change is put back as it was, as soon as it is seen and again at the end, and reported; --unprotect PATH lifts one of the project's):")
	root := ""
	for _, e := range landlockcell.TripwireEntries(plan.Policy, plan.Policy.Rules()) {
		if e.Root != root {
			root = e.Root
			fmt.Fprintf(stdout, "  in %s:\n", tilde(root))
		}
		if e.DirOnly {
			fmt.Fprintf(stdout, "    %s (may be made only as a directory)\n", e.Path)
		} else {
			fmt.Fprintf(stdout, "    %s\n", e.Path)
		}
	}
	var repos []string
	var more int
	// As the user: the walk reads the user's folders.
	if err := asuser.Do(id, func() error {
		var err error
		repos, more, err = landlockcell.Repositories(id, plan.Policy, plan.Policy.Rules())
		return err
	}); err != nil {
		fmt.Fprintf(stdout, "  (the repositories below them could not be listed: %v)\n", err)
	}
	fmt.Fprintf(stdout, "  and git's files in the repositories below those tops, as found when a session starts (now %d):\n", len(repos))
	for _, r := range repos {
		fmt.Fprintf(stdout, "    %s\n", tilde(r))
	}
	if more > 0 {
		fmt.Fprintf(stdout, "    and %d more, not kept (the check at the session's end looks at what changed there)\n", more)
	}
	if abi < 9 {
		fmt.Fprintf(stdout, "\nunix sockets: at ABI %d Landlock cannot refuse connecting to one by path; %s are withheld from the agent unless their socket is granted (--allow-unix)\n",
			abi, strings.Join(secretenv.SocketVars, ", "))
	}
	fmt.Fprintf(stdout, "\nleft open on this kernel (the BPF-LSM engine closes these):\n")
	for _, l := range append(landlock.Limits(abi), landlockcell.Reports(abi)) {
		fmt.Fprintf(stdout, "  - %s\n", l)
	}
	fmt.Fprintf(stdout, "refused, though the BPF-LSM engine allows it:\n")
	for _, c := range landlock.Costs(abi) {
		fmt.Fprintf(stdout, "  - %s\n", c)
	}
}

func ruleRights(f spec.Access) string {
	switch {
	case f&spec.Deny != 0:
		return "refused"
	case f&spec.Scratch != 0:
		return "own files only"
	case f&spec.Named != 0:
		return "read-write, by name"
	case f&spec.Write != 0 && f&spec.Protect != 0:
		return "read-write, protected"
	case f&spec.Write != 0:
		return "read-write"
	case f&spec.Read != 0:
		return "read-only"
	case f&spec.Socket != 0:
		return "connect"
	}
	return fmt.Sprintf("flags %#x", uint32(f))
}

// currentUser is the user running agent-lock policy without sudo.
func currentUser() (session.Agent, error) {
	u, err := user.Current()
	if err != nil {
		return session.Agent{}, err
	}
	shell := os.Getenv("SHELL")
	if shell == "" {
		shell = "/bin/sh"
	}
	// The ids too: the policy files are read as this user (asuser), and
	// a zero id would be root's, which a user cannot act as.
	return session.Agent{Name: u.Username, Home: u.HomeDir, Shell: shell,
		UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}, nil
}

// printNet prints the cell's network: what its resolver answers and its
// programs let through.
func printNet(w io.Writer, p netpolicy.Policy, from string) {
	switch p.Mode {
	case netpolicy.Off:
		fmt.Fprintf(w, "\nnetwork: off (%s): no connection, no name resolved\n", from)
		return
	case netpolicy.Open:
		fmt.Fprintf(w, "\nnetwork: open (%s): every connection allowed, and reported\n", from)
		return
	}
	fmt.Fprintln(w, "\nnetwork (names through agent-lock's resolver, checked again by TLS server name and HTTP Host;")
	fmt.Fprintln(w, "loopback, link-local and private addresses only as granted by address and port):")
	seen := map[string]bool{}
	for _, r := range p.Rules {
		if seen[r.String()+r.From] {
			continue // localhost is two rules
		}
		seen[r.String()+r.From] = true
		fmt.Fprintf(w, "  %-40s %s\n", r, r.From)
	}
	fmt.Fprintln(w, "  refused                                  everything else (--allow-net HOST[:PORT] grants a host)")
}
