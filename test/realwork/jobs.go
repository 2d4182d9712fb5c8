package main

import (
	"time"

	"github.com/agent-lock/agent-lock/test/testenv"
)

// job is a piece of ordinary work an agent does in DIR.
type job struct {
	name string
	// script is bash, run in DIR with `set -euo pipefail`.
	script string
	// setup is bash run unjailed in a fresh DIR before each run: what the
	// user had there before starting the agent (a repository).
	setup string
	// want must appear in the output.
	want string
	// timeout overrides the runner's per-run limit.
	timeout time.Duration
	// carry are paths under DIR kept from the unjailed run for the jailed
	// one (a warm build cache), so the jailed run is not a cold start.
	carry []string
	// skip returns why the job cannot run on this machine, or "".
	skip func() string
	// landlockCost says why the Landlock engine refuses this job (one of
	// landlock.Costs); under that engine it must fail.
	landlockCost string
}

// gitEnv names the author without touching ~/.gitconfig, which is outside
// DIR.
const gitEnv = `export GIT_AUTHOR_NAME=Agent GIT_AUTHOR_EMAIL=agent@example.com
export GIT_COMMITTER_NAME=Agent GIT_COMMITTER_EMAIL=agent@example.com GIT_PAGER=cat
`

var jobs = []job{
	{name: "git-basic", want: "second commit", script: gitEnv + `
git init -q -b main repo && cd repo
echo hello > a.txt && mkdir -p src && echo 'int x;' > src/x.c
git add -A && git commit -q -m "first commit"
echo more >> a.txt && git commit -q -am "second commit"
git log --oneline
git status --short
git diff HEAD~1 --stat
git checkout -q -b feature && git checkout -q main && git branch -d -q feature
git tag v1 && git gc -q && git fsck --no-progress
`},
	// DIR is the user's repository: its .git/config and hooks are
	// protected, and everything a commit, a branch or a worktree writes
	// (objects, refs, logs, index, .git/worktrees) is not.
	{name: "git-worktree", want: "in worktree", setup: gitEnv + `
git init -q -b main && echo base > base.txt && git add base.txt && git commit -q -m base
`, script: gitEnv + `
echo more >> base.txt && git commit -q -am "second in DIR" && git status --short
git checkout -q -b topic && git checkout -q main
git worktree add -q ./wt2 -b wt
cd wt2 && echo w > w.txt && git add w.txt && git commit -q -m "in worktree" && cd ..
git worktree list
git log --all --oneline
git worktree remove wt2
`},
	{name: "git-clone-local", want: "cloned-ok", script: gitEnv + `
git init -q -b main src && cd src && echo x > x && git add x && git commit -q -m x && cd ..
git clone -q src dst && git -C dst log --oneline | grep -q x && echo cloned-ok
`},
	// A new project: the agent starts the repository at DIR's top. git
	// init makes .git with its config and sample hooks (the jail's own:
	// it made .git), the agent configures it and commits; nothing of it
	// runs a command, so the check at the session's end finds nothing.
	{name: "git-init-top", want: "init-top-ok", script: gitEnv + `
echo hello > README && git init -q -b main && git config user.name Agent && git config user.email agent@example.com
git add README && git commit -q -m first && git checkout -q -b feature && git checkout -q main
git remote add origin https://example.com/r.git && git config branch.main.remote origin
git status --short && git log --oneline | grep >/dev/null first && ls .git/hooks | grep >/dev/null pre-commit.sample && echo init-top-ok
`},
	// (grep reads all of a git command's output here: grep -q would close
	// the pipe early, and git submodule foreach fails on the SIGPIPE.)
	// DIR is the user's repository with a submodule, set up by the user;
	// the agent works in the submodule (its git directory is under
	// .git/modules, whose config and hooks stay protected) and records the
	// new commit in the superproject. Not git submodule update: it
	// rewrites the submodule's config (core.worktree, unchanged), which is
	// refused (README, Limits).
	{name: "git-submodule", want: "submodule-ok", setup: gitEnv + `
git init -q -b main upstream && git -C upstream commit -q --allow-empty -m up
git init -q -b main && echo base > base.txt && git add base.txt && git commit -q -m base
git -c protocol.file.allow=always submodule add -q "$PWD/upstream" sub && git commit -q -m sub
`, script: gitEnv + `
git submodule status | grep >/dev/null sub
cd sub && echo s > s.txt && git add s.txt && git commit -q -m in-sub && cd ..
git status --short | grep >/dev/null sub && git diff --submodule | grep >/dev/null in-sub
git add sub && git commit -q -m bump && git submodule foreach -q git log --oneline | grep >/dev/null in-sub
echo submodule-ok
`},
	// Repositories the agent makes inside DIR, nested and with
	// submodules: a clone with --recurse-submodules writes a submodule's
	// git directory, its .git file and configs with core.worktree, all of
	// which the check at the session's end must find inert.
	{name: "git-nested", want: "nested-ok", setup: gitEnv + `
git init -q -b main && echo base > base.txt && git add base.txt && git commit -q -m base
`, script: gitEnv + `
git init -q -b main lib && git -C lib commit -q --allow-empty -m lib
git init -q -b main app && cd app && echo a > a && git add a && git commit -q -m app
git -c protocol.file.allow=always submodule add -q ../lib lib && git commit -q -m lib && cd ..
git -c protocol.file.allow=always clone -q --recurse-submodules app copy
git -C copy submodule status | grep >/dev/null lib && git -C copy/lib log --oneline | grep >/dev/null lib
cd copy/lib && echo l > l && git add l && git commit -q -m more && cd .. && git add lib && git commit -q -m bump && cd ..
git status --short && echo nested-ok
`},
	{name: "c-compile", want: "hello 42", skip: needTool("cc"), script: `
cat > hello.c <<'C'
#include <math.h>
#include <stdio.h>
int answer(void);
int main(void) { printf("hello %d\n", answer() + (int)sqrt(0.0)); return 0; }
C
cat > answer.c <<'C'
int answer(void) { return 42; }
C
cc -O2 -Wall -c answer.c -o answer.o
cc -O2 -Wall -o hello hello.c answer.o -lm
./hello
`},
	{name: "make", want: "made: 7", skip: needTool("make"), script: `
printf 'int main(void) { return 7; }\n' > seven.c
printf 'seven: seven.c\n\tcc -o $@ $<\nclean:\n\trm -f seven\n' > Makefile
make -s -j2
./seven || echo "made: $?"
make -s clean
`},
	{name: "python-files", want: "python-ok 50", script: `
python3 - <<'PY'
import json, os, pathlib, shutil, tempfile
out = pathlib.Path("out")
out.mkdir()
for i in range(50):
    (out / f"f{i}.json").write_text(json.dumps({"i": i}))
os.rename("out/f0.json", "out/renamed.json")
shutil.copytree("out", "out2")
shutil.rmtree("out2")
with tempfile.NamedTemporaryFile(delete=False) as t:
    t.write(b"x")
assert t.name.startswith(os.environ["TMPDIR"]), t.name
os.unlink(t.name)
os.rmdir(tempfile.mkdtemp())
print("python-ok", len(os.listdir("out")))
PY
`},
	{name: "python-imports", want: "imports-ok", script: `
python3 -c '
import hashlib, json, sqlite3, ssl, subprocess, urllib.request, xml.etree.ElementTree
db = sqlite3.connect("db.sqlite")
db.execute("create table t(x)"); db.execute("insert into t values (1)"); db.commit()
print(subprocess.run(["true"]).returncode, hashlib.sha256(b"x").hexdigest()[:8], ssl.OPENSSL_VERSION)
print("imports-ok")
'
`},
	{name: "perl", want: "perl-ok", skip: needTool("perl"), script: `
perl -MJSON::PP -e 'print encode_json({a => 1}), "\n"'
echo abc > p.txt && perl -pi -e 's/b/B/' p.txt && grep -q aBc p.txt && echo perl-ok
`},
	{name: "shell-pipeline", want: "pipeline-ok", script: `
seq 1 20000 | shuf > big.txt
# Tiny buffers force sort to spill to temporary files: once in $TMPDIR
# named explicitly, once in its default (which is $TMPDIR too).
sort -n -S 1K -T "$TMPDIR" big.txt > sorted1.txt &
sort -n -S 1K big.txt > sorted2.txt &
sort -n big.txt > sorted3.txt &
wait
cmp sorted1.txt sorted2.txt && cmp sorted2.txt sorted3.txt
(for i in 1 2 3; do (sleep 0.1; echo job$i) & done; wait) | sort | tr '\n' ' '
awk '{s += $1} END {print "sum", s}' big.txt
seq 1 100 | xargs -n 10 echo | wc -l
grep -c 7 big.txt
echo pipeline-ok
`},
	{name: "mktemp", want: "mktemp-ok", script: `
f=$(mktemp) d=$(mktemp -d)
case "$f" in "$TMPDIR"/*) ;; *) echo "mktemp made $f outside TMPDIR=$TMPDIR"; exit 1 ;; esac
echo x > "$f" && touch "$d/y" && ls "$d" && rm -r "$f" "$d"
l=$(mktemp -p . local.XXXX) && rm "$l"
echo mktemp-ok
`},
	{name: "shared-scratch", want: "scratch-ok", skip: needTool("python3"),
		landlockCost: "the shared scratch places are closed (only the private TMPDIR)", script: `
# Tools that ignore TMPDIR write to /tmp; POSIX semaphores live in /dev/shm.
f=/tmp/realwork-$$ && echo x > "$f" && cat "$f" >/dev/null && rm "$f"
g=/dev/shm/realwork-$$ && echo y > "$g" && cat "$g" >/dev/null && rm "$g"
# /var/tmp, a disk file system on most systems: a folder of one's own and
# what tools make in it (a FIFO, a symlink, a socket).
v=/var/tmp/realwork-$$ && mkdir "$v" && echo z > "$v/f" && cat "$v/f" >/dev/null && echo more >> "$v/f"
mkfifo "$v/p" && ln -s f "$v/l" && cat "$v/l" >/dev/null
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$v/s" && rm -r "$v"
python3 -c 'import multiprocessing as m; l = m.Lock(); l.acquire(); l.release()'
echo scratch-ok
`},
	{name: "go-build", want: "go-ok", skip: needTool("go"), timeout: 10 * time.Minute, carry: []string{".gocache"},
		// Offline and inside DIR: GOCACHE (default ~/.cache/go-build) and
		// the go command's telemetry counters (default under
		// ~/.config/go/telemetry, via XDG_CONFIG_HOME) are both outside
		// DIR, where the jail rightly refuses them.
		script: `
export GOCACHE="$PWD/.gocache" GOPATH="$TMPDIR/gopath" XDG_CONFIG_HOME="$TMPDIR/config"
export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local GOSUMDB=off
mkdir hello && cd hello
printf 'module example.com/hello\n\ngo 1.21\n' > go.mod
cat > main.go <<'GO'
package main

func main() { println("go-ok") }
GO
go build -o hello . && ./hello
go vet .
`},
	{name: "proc-read", want: "MemTotal", script: `
head -3 /proc/meminfo
grep -E '^(Name|State|Uid|Gid):' /proc/self/status
cat /proc/self/cgroup /proc/loadavg /proc/uptime /proc/version
grep -c processor /proc/cpuinfo
nproc
wc -l < /proc/self/mountinfo
sleep 5 & grep -q sleep "/proc/$!/cmdline" && kill $! && echo child-proc-ok
`},
	{name: "system-read", want: "PRETTY_NAME", script: `
ls /usr/bin | wc -l
cat /etc/os-release
getent passwd root
ls -l /bin/sh
readlink -f /usr/bin/python3
uname -a
date -u
test -r /etc/hosts && echo hosts-readable
`},
	{name: "identity-env", want: "identity-ok", script: `
env | sort
id
whoami
test "$(pwd -P)" = "$(cd "$HOME/project" && pwd -P)"
test "$(id -u)" != 0
test -n "$TMPDIR" && test -d "$TMPDIR" && test -w "$TMPDIR"
umask
bash -lc 'echo login-shell-ok'
echo identity-ok
`},
	{name: "devices", want: "devices-ok", script: `
echo discard > /dev/null
head -c 16 /dev/urandom | od -An -tx1
head -c 8 /dev/random > /dev/null
test "$(head -c 16 /dev/zero | wc -c)" = 16
echo devices-ok
`},
	{name: "file-ops-in-dir", want: "fileops-ok", script: `
mkdir -p a/b/c && echo x > a/b/c/f
mv a/b/c/f a/g && ln a/g a/h && ln -s g a/s && cat a/s
chmod 600 a/g && chown "$(id -u):$(id -g)" a/g && touch -d 2001-01-01 a/g && truncate -s 0 a/h
mkfifo a/fifo && rm a/fifo
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("a/sock")' && rm a/sock
python3 - <<'PY'
import ctypes, errno, os
try:
    os.setxattr("a/g", "user.k", b"v"); os.removexattr("a/g", "user.k")
except OSError as e:
    if e.errno != errno.EOPNOTSUPP:  # tmpfs before Linux 6.6
        raise
libc = ctypes.CDLL(None, use_errno=True)
open("a/x", "w").close()
if libc.renameat2(-100, b"a/g", -100, b"a/x", 2) != 0:  # RENAME_EXCHANGE
    raise SystemExit("renameat2: " + os.strerror(ctypes.get_errno()))
PY
sed -i 's/^/line: /' a/x && rmdir a/b/c && rm -r a
echo fileops-ok
`},
	{name: "unix-socket-in-dir", want: "socket-ok", script: `
python3 - <<'PY'
import os, socket, threading
srv = socket.socket(socket.AF_UNIX)
srv.bind("app.sock"); srv.listen(1)
def serve():
    c, _ = srv.accept(); c.sendall(c.recv(64).upper()); c.close()
t = threading.Thread(target=serve); t.start()
cli = socket.socket(socket.AF_UNIX); cli.connect("app.sock"); cli.sendall(b"socket-ok")
print(cli.recv(64).decode().lower()); t.join()
a, b = socket.socketpair(); a.sendall(b"pair"); assert b.recv(4) == b"pair"
os.unlink("app.sock")
PY
`},
	{name: "signals-in-jail", want: "signals-ok", script: `
sleep 30 & pid=$!
kill -TERM "$pid"; wait "$pid" || true
python3 - <<'PY'
import os, signal, subprocess
p = subprocess.Popen(["sleep", "30"])
open(f"/proc/{p.pid}/status").read()
p.send_signal(signal.SIGTERM); p.wait()
r, w = os.pipe()
if os.fork() == 0:
    os.kill(os.getppid(), 0); os.write(w, b"k"); os._exit(0)
os.wait(); assert os.read(r, 1) == b"k"
print("signals-ok")
PY
`},
	{name: "archive", want: "archive-ok", script: `
mkdir -p src/sub && seq 1 1000 > src/sub/n.txt && echo hi > src/h.txt
tar czf a.tgz -C src . && mkdir x && tar xzf a.tgz -C x && diff -r src x
gzip -k src/h.txt && gunzip -c src/h.txt.gz | grep -q hi
sha256sum src/sub/n.txt > sums && sha256sum -c sums
dd if=/dev/zero of=big bs=1M count=8 status=none && rm big
echo archive-ok
`},
	{name: "find-grep-sed", want: "search-ok", script: `
mkdir -p d1/d2 && echo needle > d1/d2/a.txt && echo hay > d1/b.txt
find . -type f -name '*.txt' | xargs grep -l needle
grep -rn needle . | head -1
sed -i 's/needle/found/' d1/d2/a.txt && grep -q found d1/d2/a.txt
realpath d1/d2/../b.txt && readlink -f d1
flock lock -c 'echo locked'
echo search-ok
`},
}

func needTool(name string) func() string {
	return func() string {
		if testenv.Which(name) == "" {
			return name + " is not installed"
		}
		return ""
	}
}
