// Package landlock confines the agent with Landlock, the kernel's
// unprivileged path-based LSM, where BPF LSM programs cannot run. It turns
// the cell's rule roots into a ruleset in agent-lock (as root, before the
// agent exists) and enforces it in the agent's first process just before
// exec, so every process the agent starts inherits it and it holds whatever
// happens to agent-lock.
//
// Landlock only grants; it has no "deny inside a grant". A denied tree
// inside a granted one is carved out by granting the grant's other entries
// one by one instead (see Carve), which has a cost this package's callers
// must tell the user: the carved directories themselves cannot be listed or
// gain new entries.
package landlock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/spec"
)

// ABI is the Landlock ABI version the running kernel offers; 0 when
// Landlock is not available (not built in, or not in the active LSM list).
func ABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// Rule is one path and what the agent may do beneath it.
type Rule struct {
	Path   string
	Rights Rights
}

// Rights are agent-lock's grants, mapped to Landlock access rights by
// Ruleset.
type Rights int

const (
	ReadOnly  Rights = iota + 1 // read, list, execute
	ReadWrite                   // everything, renames and links within included
	Device                      // a device file the agent reads, writes and controls (/dev/null, its terminal)
	List                        // list directories, nothing else (/dev)
	Socket                      // connect to this unix socket (kernels with ABI 9)
)

// Devices are the device files every program expects to open for writing.
var Devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"}

// FromCell maps the cell's rule roots to Landlock rules. Deny roots are
// carved out of every grant that contains them. What Landlock cannot say
// grants nothing: the shared scratch roots (the BPF LSM lets the agent use
// only the files it created there), and /dev beyond listing it and the
// devices every program needs (the BPF LSM judges device files by number;
// a read-only /dev would hand out /dev/shm, the user's other terminals and
// every device a group membership opens). Sockets allowed by path are
// granted where the kernel restricts them (ABI 9); ttys are the agent's
// terminals.
func FromCell(rules []spec.Rule, ttys []string) ([]Rule, error) {
	var deny []string
	var rs, files []Rule
	for _, r := range rules {
		switch {
		case r.Access&spec.Deny != 0:
			deny = append(deny, r.Path)
		case r.Access&spec.Named != 0:
			// Landlock grants by identity, not by name: the file as it
			// is now, if it is (its siblings, a save's temporary file
			// and lock, are refused; a file made later is not granted).
			if _, err := os.Stat(r.Path); err == nil {
				rs = append(rs, Rule{r.Path, ReadWrite})
			}
		case spec.Under(r.Path, "/dev"):
			if r.Path == "/dev" {
				rs = append(rs, Rule{r.Path, List})
			}
		case r.Access&spec.Write != 0:
			rs = append(rs, Rule{r.Path, ReadWrite})
		case r.Access&spec.Read != 0:
			rs = append(rs, Rule{r.Path, ReadOnly})
		case r.Access&spec.Socket != 0:
			files = append(files, Rule{r.Path, Socket})
		}
	}
	// The BPF LSM judges /proc and /sys entry by entry (a process's own
	// /proc files are writable); Landlock grants them read-only, and its
	// ptrace scoping keeps other processes' environ, mem and fds out.
	for _, d := range []string{"/proc", "/sys"} {
		rs = append(rs, Rule{d, ReadOnly})
	}
	out, err := Carve(rs, deny)
	if err != nil {
		return nil, err
	}
	// Single files named on purpose, after carving: the agent's own
	// terminal lies under /dev/pts, which nothing else grants.
	for _, d := range append(slices.Clone(Devices), ttys...) {
		if _, err := os.Stat(d); err == nil {
			files = append(files, Rule{d, Device})
		}
	}
	return append(out, files...), nil
}

// maxRules bounds carving: a denied path under a huge directory would make
// a ruleset too large to be useful, and failing is better than guessing.
const maxRules = 20000

// Carve replaces every rule whose tree contains a denied path by rules for
// its entries, recursively along the way to the denied path, leaving out
// the denied path and its ancestors: Landlock grants a file the union of
// the rules on all its ancestors, so no rule may sit above a denied path.
// Rules at or under a denied path are dropped. Symlinks among the entries
// are left out (a rule on one would grant its target).
func Carve(rules []Rule, deny []string) ([]Rule, error) {
	var out []Rule
	var carve func(r Rule) error
	carve = func(r Rule) error {
		var inside []string
		for _, d := range deny {
			if spec.Under(r.Path, d) {
				return nil // denied itself
			}
			if spec.Under(d, r.Path) {
				inside = append(inside, d)
			}
		}
		if len(inside) == 0 {
			out = append(out, r)
			return nil
		}
		if len(out) > maxRules {
			return fmt.Errorf("carving %s out of %s needs more than %d rules", inside[0], r.Path, maxRules)
		}
		ents, err := os.ReadDir(r.Path)
		if err != nil {
			return fmt.Errorf("carve %s: %w", r.Path, err)
		}
		for _, e := range ents {
			if e.Type()&os.ModeSymlink != 0 {
				continue
			}
			if err := carve(Rule{filepath.Join(r.Path, e.Name()), r.Rights}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range rules {
		if err := carve(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// config handles every file system right and both IPC scopes this kernel
// knows (BestEffort drops what it does not): from ABI 9 that includes
// connecting to pathname unix sockets. Network rights are not handled, as
// the BPF-LSM jail does not confine TCP either.
func config() landlock.Config {
	all := landlock.AccessFSSet(1<<17 - 1) // up to resolve_unix (ABI 9)
	// Logging for subprocesses (ABI 7): the agent is exec'd after the
	// ruleset is enforced, and by default Landlock audits only denials of
	// the program that enforced it. Where the host's audit is off, Landlock
	// logs nothing either way.
	return landlock.Config{HandledAccessFS: all, Scoped: landlock.ScopedSet(ll.ScopeAbstractUnixSocket | ll.ScopeSignal)}.
		EnableLoggingForSubprocesses().BestEffort()
}

// Ports is what of the network a ruleset holds: Landlock knows ports,
// not hosts. A nil Ports leaves the network alone (the cell's cgroup
// programs hold it, by name).
type Ports struct {
	// TCP are the ports the agent may connect to; every other is refused.
	TCP []uint16
	// UDP are the ports it may send to, where Landlock has UDP (ABI 10);
	// every other is refused there.
	UDP []uint16
	// NoBind refuses every bind (TCP, and UDP from ABI 10).
	NoBind bool
}

// Ruleset creates the ruleset (close-on-exec) and returns it with the
// flags to enforce it with; net is what it holds of the network (nil for
// nothing). Every path must exist: the caller left out what does not.
func Ruleset(rules []Rule, net *Ports) (fd int, flags uint32, err error) {
	var opts []landlock.Rule
	for _, r := range rules {
		st, err := os.Stat(r.Path)
		if err != nil {
			return -1, 0, err
		}
		dir := st.IsDir()
		var o landlock.FSRule
		switch {
		case r.Rights == Device:
			o = landlock.RWFiles(r.Path).WithIoctlDev()
		case r.Rights == List:
			o = landlock.PathAccess(ll.AccessFSReadDir, r.Path)
		case r.Rights == Socket:
			o = landlock.PathAccess(ll.AccessFSResolveUnix, r.Path)
		case r.Rights == ReadWrite && dir:
			o = landlock.RWDirs(r.Path).WithRefer().WithResolveUnix()
		case r.Rights == ReadWrite:
			o = landlock.RWFiles(r.Path)
		case dir:
			o = landlock.RODirs(r.Path)
		default:
			o = landlock.ROFiles(r.Path)
		}
		opts = append(opts, o)
	}
	c := config()
	if net != nil {
		c.HandledAccessNet = landlock.AccessNetSet(ll.AccessNetConnectTCP | ll.AccessNetConnectSendUDP)
		if net.NoBind {
			c.HandledAccessNet |= landlock.AccessNetSet(ll.AccessNetBindTCP | ll.AccessNetBindUDP)
		}
		for _, p := range net.TCP {
			opts = append(opts, landlock.ConnectTCP(p))
		}
		for _, p := range net.UDP {
			opts = append(opts, landlock.ConnectSendUDP(p))
		}
	}
	fd, flags, err = c.NewRulesetFD(opts...)
	if err != nil {
		return -1, 0, fmt.Errorf("landlock ruleset: %w", err)
	}
	if fd < 0 {
		// Best effort found nothing to enforce: no Landlock here. Fail
		// closed; the caller must not start the agent.
		return -1, 0, errors.New("landlock ruleset: this kernel has no Landlock")
	}
	return fd, flags, nil
}

// ExecArg is the argument that makes agent-lock enforce a ruleset and exec
// the agent (Exec): the first process of the cell is agent-lock itself,
// since Go cannot run code between fork and exec.
const ExecArg = "__landlock-exec"

// RulesetFD is the descriptor the ruleset has in that process.
const RulesetFD = 3

// EnvFD is the descriptor that process reads the agent's environment
// from (EnvFile): it starts with none of its own.
const EnvFD = 4

// EnvFile is a memory file holding env, for EnvFD. Of a name given twice
// only the last is kept, as os/exec does for the BPF LSM's agent: C's
// getenv would take the first, and an agent would see another value
// under each engine.
func EnvFile(env []string) (*os.File, error) {
	env = lastOfEach(env)
	fd, err := unix.MemfdCreate("agent-lock-env", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("a memory file for the agent's environment: %w", err)
	}
	f := os.NewFile(uintptr(fd), "agent-lock-env")
	var b strings.Builder
	for _, kv := range env {
		b.WriteString(kv)
		b.WriteByte(0)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return nil, fmt.Errorf("the agent's environment: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("the agent's environment: %w", err)
	}
	return f, nil
}

// lastOfEach is env with only the last entry of each name, in order.
func lastOfEach(env []string) []string {
	seen := map[string]bool{}
	kept := make([]string, 0, len(env))
	for i := len(env) - 1; i >= 0; i-- {
		name, _, _ := strings.Cut(env[i], "=")
		if !seen[name] {
			seen[name] = true
			kept = append(kept, env[i])
		}
	}
	slices.Reverse(kept)
	return kept
}

// readEnv reads the environment EnvFile wrote, on EnvFD, and closes it.
func readEnv() ([]string, error) {
	f := os.NewFile(EnvFD, "agent-lock-env")
	if f == nil {
		return nil, errors.New("no environment handed over")
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read the agent's environment: %w", err)
	}
	var env []string
	for kv := range strings.SplitSeq(string(b), "\x00") {
		if kv != "" {
			env = append(env, kv)
		}
	}
	return env, nil
}

// Mode is how that process starts the agent.
type Mode string

const (
	// AsAgent: it becomes the agent (exec), its namespaces made by
	// root's agent-lock.
	AsAgent Mode = "exec"
	// AsInit: it is the first process of a PID namespace of its own, in
	// a user namespace of the user's own (a cell without root): it
	// mounts the cell's devpts and that namespace's /proc, and stays, as
	// its init, while the agent runs as its child (init.go).
	AsInit Mode = "init"
	// reap is the init once its mounts are made (init.go).
	reap Mode = "reap"
	// Bare: no namespaces (the kernel refused the user one): no devpts
	// of its own; it becomes the agent.
	Bare Mode = "bare"
)

// Start is how the cell's first process starts the agent.
type Start struct {
	// Flags are landlock_restrict_self's.
	Flags uint32
	// TTYs are the terminals the agent inherits, by name, kept at those
	// names in the cell's own devpts (pts.go).
	TTYs []string
	Mode Mode
	// Binds are files mounted over others in the agent's view by a cell
	// alone's init (AsInit), where no root made the agent's mount
	// namespace: the user's shell files by their scrubbed copies.
	Binds []Bind
}

// Bind is a file mounted over Target in the agent's view.
type Bind struct{ Src, Target string }

// Argv is the command line of that process, to start path with argv as s
// says.
func Argv(s Start, path string, argv []string) []string {
	t := strings.Join(s.TTYs, ",")
	if t == "" {
		t = "-"
	}
	// Quoted, a path may hold any byte (strconv.QuotedPrefix reads them
	// back one by one).
	var b strings.Builder
	for _, x := range s.Binds {
		b.WriteString(strconv.Quote(x.Src))
		b.WriteString(strconv.Quote(x.Target))
	}
	return append([]string{"agent-lock(landlock)", ExecArg, strconv.FormatUint(uint64(s.Flags), 10), t, string(s.Mode), b.String(), path}, argv...)
}

// parseStart reads what Argv wrote, after ExecArg, and returns the rest:
// the agent's path and argv.
func parseStart(args []string) (s Start, path string, argv []string, err error) {
	if len(args) < 6 {
		return s, "", nil, errors.New("usage: " + ExecArg + " FLAGS TTYS MODE BINDS PATH ARGV0 [ARG...]")
	}
	flags, err := strconv.ParseUint(args[0], 10, 32)
	if err != nil {
		return s, "", nil, fmt.Errorf("flags: %w", err)
	}
	s.Flags = uint32(flags)
	if args[1] != "-" {
		s.TTYs = strings.Split(args[1], ",")
	}
	s.Mode = Mode(args[2])
	for rest := args[3]; rest != ""; {
		var pair [2]string
		for i := range pair {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return s, "", nil, fmt.Errorf("binds: %w", err)
			}
			pair[i], _ = strconv.Unquote(q)
			rest = rest[len(q):]
		}
		s.Binds = append(s.Binds, Bind{Src: pair[0], Target: pair[1]})
	}
	return s, args[4], args[5:], nil
}

// Exec gives the cell its own terminals (pts.go), drops the capability
// that took, enforces the ruleset on descriptor RulesetFD and execs path
// with argv and the environment on EnvFD (or, AsInit, starts it and waits).
// It returns only on failure, and then the agent must not run: the caller
// exits.
func Exec(args []string) error {
	s, path, argv, err := parseStart(args)
	if err != nil {
		return err
	}
	mode, ttys, flags := s.Mode, s.TTYs, s.Flags
	switch mode {
	case AsInit:
		return initCell(s, path, argv)
	case reap:
		return reapCell(s, path, argv)
	case AsAgent, Bare:
	default:
		return fmt.Errorf("mode %q: exec, init or bare", mode)
	}
	env, err := readEnv()
	if err != nil {
		return err
	}
	runtime.LockOSThread() // never unlocked: the thread execs
	var masters []int
	var ptsErr error
	if mode == AsAgent {
		masters, ptsErr = privatePTS(RulesetFD, ttys)
	}
	// Whatever became of the mount, no capability goes further.
	if err := dropCaps(); err != nil {
		return err
	}
	if ptsErr != nil {
		// The agent runs without terminals of its own (Costs), as
		// before: the cell is no weaker for it.
		fmt.Fprintf(os.Stderr, "agent-lock: the agent cannot open terminals of its own: %v\n", ptsErr)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := grantProc(); err != nil {
		return err
	}
	// This thread only: it is the one that execs, and exec ends the
	// others, which run nothing of the agent's.
	if err := ll.LandlockRestrictSelf(RulesetFD, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	unix.Close(RulesetFD)
	if err := installFilter(); err != nil {
		return err
	}
	if err := keepOpen(masters); err != nil {
		return err
	}
	return syscall.Exec(path, argv, env)
}

// grantProc grants the /proc this process sees, read-only. The agent has
// a /proc of its own (a new instance, mounted in its mount namespace so
// that it lists only the processes it may look at), and the ruleset was
// made where agent-lock sees the host's: Landlock's rules hold inodes, so
// the agent's /proc is granted here, where it is the one mounted.
func grantProc() error {
	fd, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /proc: %w", err)
	}
	defer unix.Close(fd)
	attr := ll.PathBeneathAttr{AllowedAccess: ll.AccessFSReadFile | ll.AccessFSReadDir, ParentFd: fd}
	if err := ll.LandlockAddPathBeneathRule(RulesetFD, &attr, 0); err != nil {
		return fmt.Errorf("landlock: grant /proc: %w", err)
	}
	return nil
}

// Limits are the side doors the Landlock engine leaves open on a kernel
// with Landlock ABI abi, which the BPF-LSM engine closes: what doctor, the
// report and the dashboard tell the user, and what the adversary suite
// expects (test/adversary/landlock.go). Short, for the masthead.
func Limits(abi int) []string {
	l := []string{
		"metadata of outside files (chmod, chown, utimes, xattrs read and written)",
		"inotify watches outside",
		"other processes' scheduling, priority and limits (renice, taskset, chrt, ionice, prlimit)",
		"reads and writes through hard links made before the session, to denied files too",
		"outside processes connecting to the agent's unix sockets, and descriptors the agent receives",
		"protected files in the project (.git/hooks, .git/config, .envrc, ...) can be changed while the agent runs (Landlock grants the directory whole): the tripwire puts DIR's back as they were and reports it, git's at any depth, in DIR and in the folders granted with --allow-write (a repository the agent makes is its own, checked when the session ends)",
		"secrets by name inside grants (*.pem, id_*, .env*, --deny PATTERN): Landlock grants by path",
	}
	if abi < 9 {
		l = append(l, "pathname unix sockets, e.g. ssh-agent, docker.sock (closed from ABI 9)")
	}
	if abi < 3 {
		l = append(l, "truncate(2) of outside files (closed from ABI 3)")
	}
	if abi < 5 {
		l = append(l, "ioctl on devices (closed from ABI 5)")
	}
	if abi < 6 {
		l = append(l, "signals to the user's processes, abstract unix sockets (closed from ABI 6)")
	}
	// What the reports cover follows, from the session, which knows
	// whether Landlock's own records can be read (landlockcell.Reports).
	return l
}

// Costs are what the Landlock engine refuses that the BPF-LSM engine
// allows: the price of its coarser rules.
func Costs(abi int) []string {
	c := []string{
		"the shared scratch places (/tmp, /var/tmp, /dev/shm) are closed; the agent has its private TMPDIR",
		"devices beyond /dev/null, zero, full, random, urandom, tty, ptmx and its own terminals cannot be opened (the terminals it opens live in a devpts of the cell's own, which the observers report as reached when it is listed)",
		"writing /proc (user namespaces cannot be set up, a process cannot adjust itself there)",
		"keyrings (keyctl, add_key, request_key) and bpf() are refused; SysV IPC and POSIX message queues are private to the agent",
		"a directory a denied path was carved out of can be read entry by entry but not listed, and gets no new entries",
	}
	if abi < 2 {
		c = append(c, "renames and links across directories, even inside the project (Landlock ABI 2, Linux 5.19)")
	}
	return c
}

// Describe says what FromCell makes of rule r on a kernel with Landlock
// ABI abi, for agent-lock policy: the rights the rule gives, and a note
// where they differ from the BPF-LSM engine's ("" for none).
func Describe(r spec.Rule, abi int) (rights, note string) {
	switch {
	case r.Access&spec.Deny != 0:
		return "refused", ""
	case r.Access&spec.Named != 0:
		if _, err := os.Stat(r.Path); err != nil {
			return "not granted", "missing: Landlock grants a file as it is, so one made later is refused, as are its siblings"
		}
		return "read-write, this file", "as it is now: its siblings (a save's temporary file, its lock) and a replacement renamed onto it are refused"
	case spec.Under(r.Path, "/dev"):
		if r.Path == "/dev" {
			return "list only", "and the devices below, by kind"
		}
		return "not granted", "devices are granted one by one, below"
	case r.Access&spec.Scratch != 0:
		return "refused", "Landlock cannot say \"only the files it made\": the agent's private TMPDIR instead"
	case r.Access&spec.Write != 0 && r.Access&spec.Protect != 0:
		return "read-write, tripwire", "its protected entries (below) are put back as they were when changed"
	case r.Access&spec.Write != 0:
		return "read-write", ""
	case r.Access&spec.Read != 0:
		return "read-only", ""
	case r.Access&spec.Socket != 0:
		if abi < 9 {
			return "connect", fmt.Sprintf("below Landlock ABI 9 (this kernel: %d) every pathname socket is open anyway", abi)
		}
		return "connect", ""
	}
	return fmt.Sprintf("flags %#x", uint32(r.Access)), ""
}
