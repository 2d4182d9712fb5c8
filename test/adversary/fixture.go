package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// needs says which parts of the fixture a technique uses beyond the
// files every fixture has.
type needs uint

const (
	needHelper   needs = 1 << iota // a copy of this binary in DIR, for -technique-helper
	needVictim                     // an outside process of the user holding secrets
	needUnixSrv                    // a pathname unix socket listener outside (like ssh-agent)
	needAbstract                   // an abstract unix socket listener (like the D-Bus bus)
	needDgramSrv                   // a unix datagram socket outside
	needFifoSrv                    // a FIFO outside with a reader
	needPTS                        // another terminal of the user
	needToolELF                    // ~/bin/tool-elf, an outside ELF program
	needUring                      // the io_uring program in DIR
	needDeep                       // a directory chain outside whose path exceeds PATH_MAX
	needXattr                      // a user.* xattr on ~/outside.txt
	needIPCOwner                   // an outside process with SysV IPC objects and a key in the user keyring
	needCgroup                     // cgroups adv-deleg/{src,dst} delegated to the user; unjailed runs start in src
	needInClient                   // outside clients that keep connecting in to DIR/in.sock and @{inabstract}
	needInDgram                    // an outside client that keeps sending datagrams to DIR/in-dgram.sock
	needFDServer                   // an outside service at ~/run/fd.sock that hands out a descriptor of the key
	needForeign                    // files of the user's in /var/tmp (a disk file system), out of the dentry cache
)

const (
	outsideText = "outside original\n"
	xattrName   = "user.adv-mark"
	// deepLevels of deepName make a path far beyond PATH_MAX (4096).
	deepLevels = 24
)

var deepName = strings.Repeat("d", 200)

// longName is a file name of 250 bytes, close to NAME_MAX.
var longName = strings.Repeat("x", 240) + "-secret.txt"

// Fixture is the world one technique runs against: the user's home with
// its secrets, the project directory DIR, and outside processes.
type Fixture struct {
	U      *testenv.User
	Home   string
	Dir    string // DIR: ~/project
	Marker string // in every secret; must never show up in jailed output
	Work   string // the runner's scratch directory (root's, world-searchable)
	Bin    string // Work/bin: the helper and compiled programs, world-readable

	services []*service
	victim   *service
	pts      string
	// next runs argv in the user's next session in DIR, under agent-lock.
	next func(argv []string) testenv.Result
	// user runs argv in DIR as the user, unjailed: their own tools after
	// the session.
	user func(argv []string) testenv.Result
}

// nextSession runs argv under agent-lock in DIR, as the user's next
// session would.
func (f *Fixture) nextSession(argv []string) testenv.Result { return f.next(argv) }

// Secrets and their owners, relative to the home directory.
func (f *Fixture) secrets() map[string]string {
	return map[string]string{
		".ssh/id_rsa":         "-----BEGIN OPENSSH PRIVATE KEY-----\nssh-" + f.Marker + "\n-----END OPENSSH PRIVATE KEY-----\n",
		".aws/credentials":    "[default]\naws_access_key_id = AKIAADVERSARY\naws_secret_access_key = aws-" + f.Marker + "\n",
		".bash_history":       "ls\nexport GITHUB_TOKEN=hist-" + f.Marker + "\n",
		"project2/secret.txt": "p2-" + f.Marker + "\n",
		longName:              "long-" + f.Marker + "\n",
	}
}

// sharedFiles are outside the home: scratch space every process shares.
func (f *Fixture) sharedFiles() map[string]string {
	return map[string]string{
		"/tmp/shared-secret":     "tmp-" + f.Marker + "\n",
		"/dev/shm/shared-secret": "shm-" + f.Marker + "\n",
	}
}

// recordings is agent-lock's session folder, relative to the home.
const recordings = ".local/state/agent-lock"

// planted are files a technique may create outside; removed before each run.
var planted = []string{"/tmp/adv-planted", "/var/tmp/adv-planted"}

// foreignScratch are the files of needForeign: /var/tmp/PREFIXnn.
const (
	foreignPrefix = "adv-foreign-"
	foreignCount  = 32
)

func foreignScratchFiles() []string {
	var out []string
	for i := 0; i < foreignCount; i++ {
		out = append(out, fmt.Sprintf("/var/tmp/%s%02d", foreignPrefix, i))
	}
	return out
}

// Reset stops everything from the last run and builds a fresh fixture for t.
func (f *Fixture) Reset(t *Technique) error {
	f.Stop()
	if err := f.U.EmptyHome(); err != nil {
		return err
	}
	for p := range f.sharedFiles() {
		os.Remove(p)
	}
	for _, p := range planted {
		os.Remove(p)
	}
	for _, p := range foreignScratchFiles() {
		os.Remove(p)
	}
	u, h := f.U, f.Home
	files := f.secrets()
	files["outside.txt"] = outsideText
	files[".bashrc"] = "# ~/.bashrc\nalias ll='ls -l'\n"
	files["bin/tool.sh"] = "#!/bin/sh\necho tool-" + f.Marker + "\n"
	files["project/README"] = "the project the agent works on\n"
	files["project/inside.txt"] = "inside\n"
	files["project/sub/file.txt"] = "sub\n"
	files["project2/README"] = "a sibling project that shares DIR's prefix\n"
	files["suid-tool"] = "#!/bin/sh\n"
	for rel, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasPrefix(rel, "bin/") {
			mode = 0o755
		}
		if strings.HasPrefix(rel, ".ssh/") || strings.HasPrefix(rel, ".aws/") {
			mode = 0o600
		}
		if err := u.WriteFile(filepath.Join(h, rel), content, mode); err != nil {
			return fmt.Errorf("fixture: %w", err)
		}
	}
	// .local/state/agent-lock is where agent-lock records each session (as
	// the user), and .config/agent-lock what it makes to keep from an
	// agent whose DIR holds it (--allow-home); made here so that their
	// creation is not a change the snapshot sees.
	for _, d := range []string{"emptydir", "run", ".config/autostart", "project2/.git/hooks", "project/.old", recordings, ".config/agent-lock"} {
		if err := u.MkdirAll(filepath.Join(h, d)); err != nil {
			return fmt.Errorf("fixture: %w", err)
		}
	}
	os.Chmod(filepath.Join(h, ".ssh"), 0o700)
	// Set after the chown in WriteFile, which clears it.
	if err := syscall.Chmod(filepath.Join(h, "suid-tool"), 0o4755); err != nil { // os.Chmod drops 0o4000
		return fmt.Errorf("fixture: %w", err)
	}
	for p, content := range f.sharedFiles() {
		if err := u.WriteFile(p, content, 0o600); err != nil {
			return fmt.Errorf("fixture: %w", err)
		}
	}
	if t.Needs&needHelper != 0 {
		if err := f.install(filepath.Join(f.Bin, "adv-helper"), filepath.Join(f.Dir, "advhelper")); err != nil {
			return err
		}
	}
	if t.Needs&needToolELF != 0 {
		if err := f.install(filepath.Join(f.Bin, "tool-elf"), filepath.Join(h, "bin/tool-elf")); err != nil {
			return err
		}
	}
	if t.Needs&needUring != 0 {
		if err := f.install(filepath.Join(f.Bin, "uring-open"), filepath.Join(f.Dir, "uring-open")); err != nil {
			return err
		}
	}
	if t.Needs&needDeep != 0 {
		if err := f.makeDeep(); err != nil {
			return fmt.Errorf("fixture: deep tree: %w", err)
		}
	}
	if t.Needs&needXattr != 0 {
		// Without user xattrs (tmpfs before 6.6) the technique skips.
		err := syscall.Setxattr(filepath.Join(h, "outside.txt"), xattrName, []byte("xattr-"+f.Marker), 0)
		if err != nil && err != syscall.EOPNOTSUPP {
			return fmt.Errorf("fixture: %w", err)
		}
	}
	if t.Needs&needFifoSrv != 0 {
		fifo := filepath.Join(h, "run/ctl.fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			return fmt.Errorf("fixture: mkfifo: %w", err)
		}
		os.Chown(fifo, u.UID, u.GID)
	}
	if t.Needs&needForeign != 0 {
		if err := f.makeForeignScratch(); err != nil {
			return fmt.Errorf("fixture: /var/tmp: %w", err)
		}
	}
	if t.Needs&needCgroup != 0 && f.cgroupRoot() != "" {
		if err := f.makeCgroups(); err != nil {
			return fmt.Errorf("fixture: cgroups: %w", err)
		}
	}
	if t.Setup != nil {
		if err := t.Setup(f); err != nil {
			return fmt.Errorf("fixture: %w", err)
		}
	}
	return f.startServices(t.Needs)
}

func (f *Fixture) install(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("fixture: %w", err)
	}
	defer in.Close()
	if err := f.U.MkdirAll(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("fixture: %w", err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("fixture: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("fixture: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("fixture: %w", err)
	}
	return os.Chown(dst, f.U.UID, f.U.GID)
}

// makeDeep builds ~/deep/d.../d.../secret.txt one level at a time
// (mkdirat relative to the last level), since the whole path is too long
// for any single system call.
func (f *Fixture) makeDeep() error {
	top := filepath.Join(f.Home, "deep")
	if err := f.U.MkdirAll(top); err != nil {
		return err
	}
	fd, err := syscall.Open(top, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	for i := 0; i < deepLevels; i++ {
		if err := syscall.Mkdirat(fd, deepName, 0o755); err != nil {
			syscall.Close(fd)
			return err
		}
		if err := syscall.Fchownat(fd, deepName, f.U.UID, f.U.GID, 0); err != nil {
			syscall.Close(fd)
			return err
		}
		next, err := syscall.Openat(fd, deepName, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		syscall.Close(fd)
		if err != nil {
			return err
		}
		fd = next
	}
	defer syscall.Close(fd)
	sfd, err := syscall.Openat(fd, "secret.txt", syscall.O_WRONLY|syscall.O_CREAT|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer syscall.Close(sfd)
	if _, err := syscall.Write(sfd, []byte("deep-"+f.Marker+"\n")); err != nil {
		return err
	}
	return syscall.Fchown(sfd, f.U.UID, f.U.GID)
}

// service is a long-running process of the user outside the jail.
type service struct {
	name   string
	cmd    *exec.Cmd
	log    string
	stdin  *os.File // held open: script ends when its input does
	fields map[string]string
	done   chan struct{}
}

func (s *service) logText() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

func (s *service) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// field returns a key=value from the service's ready line.
func (s *service) field(k string) string { return s.fields[k] }

func (f *Fixture) startServices(n needs) error {
	helper := filepath.Join(f.Bin, "adv-victim")
	type spec struct {
		need  needs
		name  string
		argv  []string
		ready *regexp.Regexp
	}
	specs := []spec{
		{needVictim, "victim", []string{helper, "-technique-helper", "victim", filepath.Join(f.Home, ".ssh/id_rsa")},
			regexp.MustCompile(`ready pid=\d+`)},
		{needUnixSrv, "unix", []string{helper, "-technique-helper", "serve-unix", filepath.Join(f.Home, "run/agent.sock")},
			regexp.MustCompile(`ready`)},
		{needAbstract, "abstract", []string{helper, "-technique-helper", "serve-unix", "@" + f.abstractName()},
			regexp.MustCompile(`ready`)},
		{needDgramSrv, "dgram", []string{helper, "-technique-helper", "serve-dgram", filepath.Join(f.Home, "run/dgram.sock")},
			regexp.MustCompile(`ready`)},
		{needFifoSrv, "fifo", []string{helper, "-technique-helper", "fifo-reader", filepath.Join(f.Home, "run/ctl.fifo")},
			regexp.MustCompile(`ready`)},
		{needIPCOwner, "ipc", []string{helper, "-technique-helper", "ipc-owner", strconv.Itoa(f.ipcKey()), f.keyDesc()},
			regexp.MustCompile(`ready`)},
		{needInClient, "in-client", []string{helper, "-technique-helper", "in-client", filepath.Join(f.Dir, "in.sock"), filepath.Join(f.Home, ".ssh/id_rsa")},
			regexp.MustCompile(`ready`)},
		{needInClient, "in-client-abstract", []string{helper, "-technique-helper", "in-client", "@" + f.inAbstractName(), filepath.Join(f.Home, ".ssh/id_rsa")},
			regexp.MustCompile(`ready`)},
		{needInDgram, "in-dgram", []string{helper, "-technique-helper", "in-dgram-client", filepath.Join(f.Dir, "in-dgram.sock")},
			regexp.MustCompile(`ready`)},
		{needFDServer, "fd-server", []string{helper, "-technique-helper", "fd-server", filepath.Join(f.Home, "run/fd.sock"), filepath.Join(f.Home, ".ssh/id_rsa")},
			regexp.MustCompile(`ready`)},
		{needPTS, "pts", []string{"script", "-qfc", "tty; echo ready; exec sleep 1000", "/dev/null"},
			regexp.MustCompile(`(/dev/pts/\d+)\s+ready`)},
	}
	for _, sp := range specs {
		if n&sp.need == 0 {
			continue
		}
		s, err := f.startService(sp.name, sp.argv, sp.ready)
		if err != nil {
			return err
		}
		if sp.name == "victim" {
			f.victim = s
		}
		if sp.name == "pts" {
			f.pts = sp.ready.FindStringSubmatch(s.logText())[1]
		}
	}
	return nil
}

func (f *Fixture) abstractName() string { return "adv-bus-" + f.Marker[len(f.Marker)-8:] }

// inAbstractName is the abstract name outside clients look for (and the
// agent squats).
func (f *Fixture) inAbstractName() string { return "adv-in-" + f.Marker[len(f.Marker)-8:] }

// ipcKey is the SysV IPC key of the outside segment and queue.
func (f *Fixture) ipcKey() int {
	n, _ := strconv.ParseUint(f.Marker[len(f.Marker)-6:], 16, 32)
	return 0x41000000 | int(n)
}

// keyDesc names the outside key in the user keyring.
func (f *Fixture) keyDesc() string { return "adv:" + f.Marker[len(f.Marker)-8:] }

func (f *Fixture) startService(name string, argv []string, ready *regexp.Regexp) (*service, error) {
	s := &service{name: name, log: filepath.Join(f.Work, "svc-"+name+".log"), done: make(chan struct{})}
	logf, err := os.OpenFile(s.log, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	defer r.Close()
	s.stdin = w
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = filepath.Join(f.Home, "project2")
	cmd.Env = []string{
		"PATH=" + testenv.PathEnv, "LANG=C", "SHELL=/bin/sh",
		"HOME=" + f.Home, "USER=" + f.U.Name,
		"VICTIM_SECRET=env-" + f.Marker,
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: uint32(f.U.UID), Gid: uint32(f.U.GID), Groups: f.U.Groups},
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	s.cmd = cmd
	go func() { cmd.Wait(); close(s.done) }()
	f.services = append(f.services, s)

	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		text := s.logText()
		if m := ready.FindString(text); m != "" {
			s.fields = map[string]string{}
			for _, kv := range strings.Fields(text) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					s.fields[k] = v
				}
			}
			return s, nil
		}
		if s.exited() {
			return nil, fmt.Errorf("service %s exited before it was ready: %s", name, testenv.Tail([]byte(text), 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("service %s not ready after 15s: %s", name, testenv.Tail([]byte(s.logText()), 5))
}

// keep is the set of service pids whose process trees are the suite's own.
func (f *Fixture) keep() map[int]bool {
	k := map[int]bool{}
	for _, s := range f.services {
		if !s.exited() {
			k[s.cmd.Process.Pid] = true
		}
	}
	return k
}

// Stop ends the services and every other process of the user.
func (f *Fixture) Stop() {
	for _, s := range f.services {
		// Each service leads its own session and process group.
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		s.stdin.Close()
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
		}
	}
	f.services, f.victim, f.pts = nil, nil, ""
	testenv.KillSurvivors(f.U.UID, nil)
	if root := f.cgroupRoot(); root != "" {
		for _, d := range []string{"adv-deleg/src", "adv-deleg/dst", "adv-deleg"} {
			// EBUSY until the killed processes are gone.
			for i := 0; i < 20 && os.Remove(filepath.Join(root, d)) != nil; i++ {
				if _, err := os.Stat(filepath.Join(root, d)); err != nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	// SysV objects outlive their creator.
	const ipcRmid = 0
	if id, _, e := syscall.Syscall(syscall.SYS_SHMGET, uintptr(f.ipcKey()), 0, 0); e == 0 {
		syscall.Syscall(syscall.SYS_SHMCTL, id, ipcRmid, 0)
	}
	if id, _, e := syscall.Syscall(syscall.SYS_MSGGET, uintptr(f.ipcKey()), 0, 0); e == 0 {
		syscall.Syscall(syscall.SYS_MSGCTL, id, ipcRmid, 0)
	}
}

// snapshot records everything outside DIR that a jailed technique must
// leave alone: the home (minus DIR) and the shared scratch files. Access
// times are left out; reading is judged by the output, not by atime.
func (f *Fixture) snapshot() map[string]string {
	snap := map[string]string{}
	add := func(p string) {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			snap[p] = "error: " + err.Error()
			return
		}
		v := fmt.Sprintf("mode=%o uid=%d gid=%d nlink=%d size=%d mtime=%d.%09d ctime=%d.%09d",
			st.Mode, st.Uid, st.Gid, st.Nlink, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			if b, err := os.ReadFile(p); err == nil {
				v += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
			}
		case syscall.S_IFLNK:
			t, _ := os.Readlink(p)
			v += " -> " + t
		}
		v += " xattrs=" + listXattrs(p)
		snap[p] = v
	}
	filepath.WalkDir(f.Home, func(p string, d os.DirEntry, err error) error {
		// agent-lock's own recordings grow with every session; the jail
		// keeps the agent out of them like any outside file.
		if p == f.Dir || p == filepath.Join(f.Home, recordings) {
			return filepath.SkipDir
		}
		add(p)
		if err != nil && d != nil && d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	for p := range f.sharedFiles() {
		add(p)
	}
	for _, p := range planted {
		add(p)
	}
	return snap
}

func listXattrs(p string) string {
	buf := make([]byte, 4096)
	n, err := syscall.Listxattr(p, buf)
	if err != nil || n <= 0 {
		return "-"
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	sort.Strings(names)
	return strings.Join(names, ",")
}

// diff lists what changed between two snapshots.
// ungranted is snap without what t's grant lets the agent change (see
// Technique.Granted).
func (f *Fixture) ungranted(t *Technique, snap map[string]string) map[string]string {
	if len(t.Granted) == 0 {
		return snap
	}
	out := map[string]string{}
	for p, v := range snap {
		if p == f.Home {
			continue
		}
		granted := false
		for _, g := range t.Granted {
			if g := filepath.Join(f.Home, g); p == g || strings.HasPrefix(p, g+"/") {
				granted = true
			}
		}
		if !granted {
			out[p] = v
		}
	}
	return out
}

func diffSnapshots(before, after map[string]string) []string {
	var out []string
	for p, v := range before {
		w, ok := after[p]
		switch {
		case !ok:
			out = append(out, "gone: "+p)
		case v != w:
			out = append(out, "changed: "+p+" ("+v+" => "+w+")")
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			out = append(out, "new: "+p)
		}
	}
	sort.Strings(out)
	return out
}

// sysctl reads a /proc/sys value; "" if it does not exist.
func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// kernelVersion returns the running kernel's major and minor numbers.
func kernelVersion() (int, int) {
	var u syscall.Utsname
	syscall.Uname(&u)
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	parts := strings.SplitN(string(b), ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	maj, _ := strconv.Atoi(parts[0])
	min, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return maj, min
}

// compile builds the suite's C programs into dir once per run.
func compile(ctx context.Context, dir, marker string) error {
	for name, src := range cPrograms {
		c := filepath.Join(dir, name+".c")
		if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
			return err
		}
		out, err := exec.CommandContext(ctx, "cc", "-O2", "-Wall", `-DMARKER="`+marker+`"`, "-o", filepath.Join(dir, name), c).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cc %s: %w: %s", name, err, out)
		}
	}
	return nil
}

// readLines is a small helper for service logs.
func readLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// cgroupRoot is where the cgroup2 hierarchy is mounted, or "".
func (f *Fixture) cgroupRoot() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(l, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if fields := strings.Fields(pre); len(fields) >= 5 && fields[3] == "/" {
			return fields[4]
		}
	}
	return ""
}

// makeCgroups delegates adv-deleg and its children src and dst to the
// user, as a systemd user slice would be.
func (f *Fixture) makeCgroups() error {
	root := f.cgroupRoot()
	for _, d := range []string{"adv-deleg", "adv-deleg/src", "adv-deleg/dst"} {
		p := filepath.Join(root, d)
		if err := os.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		for _, name := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
			if err := os.Chown(filepath.Join(p, name), f.U.UID, f.U.GID); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *Fixture) cgroupDir(name string) string {
	return filepath.Join(f.cgroupRoot(), "adv-deleg", name)
}
