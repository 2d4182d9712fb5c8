// Package netlab is a small internet for the network tests (test/nettest)
// and benchmarks (test/bench): two network namespaces that exist only for
// the run, "cell", where agent-lock and the agent run, and "inet", holding
// the test hosts (a DNS server, web sites, a git server over HTTPS and
// SSH, a UDP echo, a fake cloud metadata service, a private host, a
// benchmark server), joined by a veth pair. The cell's only route leads
// into inet, whose addresses exist nowhere else: nothing run in the lab
// can reach any other network.
package netlab

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// Lab is a running lab.
type Lab struct {
	cellNS, inetNS string // names under /run/netns
	dir            string // root-only scratch: resolv.conf, the git repository
	resolvConf     string
	// CAPEM is the certificate authority of the lab's web sites.
	CAPEM []byte
	// SSHKey is the client key git.test's SSH server takes (OpenSSH
	// PEM), SSHHostLine the known_hosts line of its host key.
	SSHKey      []byte
	SSHHostLine string

	dnsMu   sync.Mutex
	queries []string // every name the lab's DNS server was asked

	closers []func()
}

// The lab's addresses. 198.51.100.0/24 (TEST-NET-2) joins the two
// namespaces; the hosts live in 203.0.113.0/24 (TEST-NET-3), plus a
// private address and the metadata address, all on inet's loopback.
var (
	cellAddr = netip.MustParseAddr("198.51.100.2")
	dnsAddr  = netip.MustParseAddr("198.51.100.1")
	siteA    = netip.MustParseAddr("203.0.113.10") // allowed.test, other.test (one address, two sites)
	siteB    = netip.MustParseAddr("203.0.113.11") // refused.test
	gitHost  = netip.MustParseAddr("203.0.113.12") // git.test
	modelAt  = netip.MustParseAddr("203.0.113.13") // model.test: a scripted model API
	private  = netip.MustParseAddr("10.200.0.9")   // private.test
	metadata = netip.MustParseAddr("169.254.169.254")
)

// BenchPort is the benchmark server's port on allowed.test's and
// refused.test's addresses: a byte 'p' is answered with 'p' (a round
// trip), a byte 'b' and a big-endian uint64 N with N bytes.
const BenchPort = 9000

// zone is what the lab's DNS server answers.
var zone = map[string]netip.Addr{
	"allowed.test": siteA, "other.test": siteA, "refused.test": siteB,
	"git.test": gitHost, "private.test": private, "model.test": modelAt,
}

// ModelReply is what the scripted model at https://model.test answers
// every Messages API request with.
const ModelReply = "scripted reply from model.test"

// New builds the lab; Close takes it down.
func New(ctx context.Context) (l *Lab, err error) {
	var rnd [3]byte
	rand.Read(rnd[:])
	id := hex.EncodeToString(rnd[:])
	l = &Lab{cellNS: "al-cell-" + id, inetNS: "al-inet-" + id}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	if l.dir, err = os.MkdirTemp("", "nettest-lab-"); err != nil {
		return l, err
	}
	l.closers = append(l.closers, func() { os.RemoveAll(l.dir) })
	for _, ns := range []string{l.cellNS, l.inetNS} {
		if err := runCmd("ip", "netns", "add", ns); err != nil {
			return l, err
		}
		l.closers = append(l.closers, func() { runCmd("ip", "netns", "del", ns) })
	}
	cmds := [][]string{
		{"-n", l.cellNS, "link", "set", "lo", "up"},
		{"-n", l.inetNS, "link", "set", "lo", "up"},
		{"-n", l.cellNS, "link", "add", "vc", "type", "veth", "peer", "name", "vi", "netns", l.inetNS},
		{"-n", l.cellNS, "addr", "add", cellAddr.String() + "/24", "dev", "vc"},
		{"-n", l.inetNS, "addr", "add", dnsAddr.String() + "/24", "dev", "vi"},
		{"-n", l.cellNS, "link", "set", "vc", "up"},
		{"-n", l.inetNS, "link", "set", "vi", "up"},
		{"-n", l.cellNS, "route", "add", "default", "via", dnsAddr.String()},
	}
	for _, a := range []netip.Addr{siteA, siteB, gitHost, modelAt, private, metadata} {
		cmds = append(cmds, []string{"-n", l.inetNS, "addr", "add", a.String() + "/32", "dev", "lo"})
	}
	for _, c := range cmds {
		if err := runCmd("ip", c...); err != nil {
			return l, err
		}
	}
	// ICMP echo sockets for every user, in the cell's namespace only
	// (the sysctl is per namespace): the unjailed ping must work.
	if err := l.inCell(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0)
	}); err != nil {
		return l, fmt.Errorf("ping_group_range: %w", err)
	}
	l.resolvConf = filepath.Join(l.dir, "resolv.conf")
	if err := os.WriteFile(l.resolvConf, []byte("nameserver "+dnsAddr.String()+"\noptions attempts:1 timeout:2\n"), 0o644); err != nil {
		return l, err
	}
	if err := l.servers(ctx); err != nil {
		return l, err
	}
	return l, nil
}

// Close stops the servers and removes the namespaces.
func (l *Lab) Close() {
	for i := len(l.closers) - 1; i >= 0; i-- {
		l.closers[i]()
	}
}

func runCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// inNS runs f on a thread that has entered the namespace ns: the sockets
// f makes belong to it, whichever thread uses them later. The thread is
// not returned to the runtime (it exits with its goroutine).
func inNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

func (l *Lab) inCell(f func() error) error { return inNS(l.cellNS, f) }
func (l *Lab) inInet(f func() error) error { return inNS(l.inetNS, f) }

// Wrap is argv run in the cell's namespace with the lab's resolv.conf
// (bind-mounted in a mount namespace of its own: the host's file is never
// touched), as root, or as uid:gid when uid is not 0.
func (l *Lab) Wrap(argv []string, uid, gid int) []string {
	w := []string{"nsenter", "--net=/run/netns/" + l.cellNS, "--",
		"unshare", "--mount", "--propagation", "private", "--",
		"/bin/sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, l.resolvConf}
	if uid != 0 {
		w = append(w, "setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), "--init-groups", "--")
	}
	return append(w, argv...)
}

// Asked reports whether the lab's DNS server was asked for name (or a
// name below it) since mark (QueryMark).
func (l *Lab) Asked(mark int, name string) bool {
	l.dnsMu.Lock()
	defer l.dnsMu.Unlock()
	for _, q := range l.queries[mark:] {
		if q == name || strings.HasSuffix(q, "."+name) {
			return true
		}
	}
	return false
}

// QueryMark marks the queries asked so far.
func (l *Lab) QueryMark() int {
	l.dnsMu.Lock()
	defer l.dnsMu.Unlock()
	return len(l.queries)
}

// servers starts the lab's hosts in inet, and a loopback service in the
// cell's namespace (a database the agent was not granted).
func (l *Lab) servers(ctx context.Context) error {
	ca, leaf, err := testPKI()
	if err != nil {
		return err
	}
	l.CAPEM = ca
	repo, err := l.gitRepo()
	if err != nil {
		return err
	}
	sshCfg, err := l.sshConfig()
	if err != nil {
		return err
	}
	web := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s (%s)\n", r.Host, r.Context().Value(http.LocalAddrContextKey))
	})
	git := &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend",
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(repo), "GIT_HTTP_EXPORT_ALL=1"}}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{leaf}}
	err = l.inInet(func() error {
		// DNS on the veth's address.
		u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dnsAddr, 53)))
		if err != nil {
			return err
		}
		l.closers = append(l.closers, func() { u.Close() })
		go l.serveDNS(u)
		for _, a := range []netip.Addr{siteA, siteB, private, metadata} {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 80).String())
			if err != nil {
				return err
			}
			l.serveHTTP(ln, web, nil)
		}
		for _, a := range []netip.Addr{siteA, siteB} {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 443).String())
			if err != nil {
				return err
			}
			l.serveHTTP(ln, web, tlsCfg)
		}
		ln, err := net.Listen("tcp", netip.AddrPortFrom(gitHost, 443).String())
		if err != nil {
			return err
		}
		l.serveHTTP(ln, git, tlsCfg)
		ml, err := net.Listen("tcp", netip.AddrPortFrom(modelAt, 443).String())
		if err != nil {
			return err
		}
		l.serveHTTP(ml, http.HandlerFunc(scriptedModel), tlsCfg)
		sl, err := net.Listen("tcp", netip.AddrPortFrom(gitHost, 22).String())
		if err != nil {
			return err
		}
		l.closers = append(l.closers, func() { sl.Close() })
		go l.serveSSH(sl, sshCfg, repo)
		for _, a := range []netip.Addr{siteA, siteB} {
			bl, err := net.Listen("tcp", netip.AddrPortFrom(a, BenchPort).String())
			if err != nil {
				return err
			}
			l.closers = append(l.closers, func() { bl.Close() })
			go serveBench(bl)
		}
		// QUIC's port, UDP: an echo.
		e, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(siteA, 443)))
		if err != nil {
			return err
		}
		l.closers = append(l.closers, func() { e.Close() })
		go echoUDP(e)
		return nil
	})
	if err != nil {
		return fmt.Errorf("lab servers: %w", err)
	}
	return l.inCell(func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:5432")
		if err != nil {
			return err
		}
		l.closers = append(l.closers, func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, "loopback database")
				c.Close()
			}
		}()
		return nil
	})
}

func (l *Lab) serveHTTP(ln net.Listener, h http.Handler, cfg *tls.Config) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	l.closers = append(l.closers, func() { srv.Close() })
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	go srv.Serve(ln)
}

func echoUDP(u *net.UDPConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := u.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		u.WriteToUDPAddrPort(append([]byte("echo "), buf[:n]...), from)
	}
}

// serveDNS answers A queries from zone, and records every name asked.
func (l *Lab) serveDNS(u *net.UDPConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := u.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
		l.dnsMu.Lock()
		l.queries = append(l.queries, name)
		l.dnsMu.Unlock()
		a, ok := zone[name]
		rcode := dnsmessage.RCodeSuccess
		if !ok {
			rcode = dnsmessage.RCodeNameError
		}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true,
			RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rcode})
		b.StartQuestions()
		b.Question(q)
		b.StartAnswers()
		if ok && q.Type == dnsmessage.TypeA {
			b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: a.As4()})
		}
		if msg, err := b.Finish(); err == nil {
			u.WriteToUDPAddrPort(msg, from)
		}
	}
}

// testPKI makes a CA and a certificate for every lab name, signed by it.
func testPKI() (caPEM []byte, leaf tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, leaf, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agent-lock nettest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, leaf, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, leaf, err
	}
	var names []string
	for n := range zone {
		names = append(names, n)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "lab"}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, leaf, err
	}
	leaf = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), leaf, nil
}

// gitRepo makes the bare repository the git servers serve.
func (l *Lab) gitRepo() (string, error) {
	work := filepath.Join(l.dir, "work")
	repo := filepath.Join(l.dir, "git", "repo.git")
	script := `set -e
git init -q -b main "$1" && cd "$1"
echo "lab repository" > README && git add README
git -c user.name=Lab -c user.email=lab@example.com commit -q -m "lab commit"
git clone -q --bare "$1" "$2"`
	if out, err := exec.Command("/bin/sh", "-c", script, "sh", work, repo).CombinedOutput(); err != nil {
		return "", fmt.Errorf("lab repository: %v: %s", err, out)
	}
	os.Chmod(l.dir, 0o755)
	return repo, nil
}

// sshConfig makes the SSH server's host key and the client's key.
func (l *Lab) sshConfig() (*ssh.ServerConfig, error) {
	_, hostPriv, err := ed25519Key()
	if err != nil {
		return nil, err
	}
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		return nil, err
	}
	clientPub, clientPriv, err := ed25519Key()
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(clientPriv, "nettest")
	if err != nil {
		return nil, err
	}
	l.SSHKey = pem.EncodeToMemory(block)
	want, err := ssh.NewPublicKey(clientPub)
	if err != nil {
		return nil, err
	}
	l.SSHHostLine = "git.test " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey()))) + "\n"
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(k.Marshal(), want.Marshal()) {
			return nil, nil
		}
		return nil, errors.New("unknown key")
	}}
	cfg.AddHostKey(hostSigner)
	return cfg, nil
}

// serveSSH runs two commands for the lab's key: echo, and
// git-upload-pack of the lab repository (git clone over SSH).
func (l *Lab) serveSSH(ln net.Listener, cfg *ssh.ServerConfig, repo string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, chans, reqs, err := ssh.NewServerConn(c, cfg)
			if err != nil {
				return
			}
			go ssh.DiscardRequests(reqs)
			for nc := range chans {
				if nc.ChannelType() != "session" {
					nc.Reject(ssh.UnknownChannelType, "session only")
					continue
				}
				ch, reqs, err := nc.Accept()
				if err != nil {
					continue
				}
				go sshSession(ch, reqs, repo)
			}
		}()
	}
}

func sshSession(ch ssh.Channel, reqs <-chan *ssh.Request, repo string) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			req.Reply(req.Type == "env", nil)
			continue
		}
		var payload struct{ Cmd string }
		ssh.Unmarshal(req.Payload, &payload)
		req.Reply(true, nil)
		status := 0
		switch {
		case strings.HasPrefix(payload.Cmd, "echo "):
			fmt.Fprintln(ch, strings.TrimPrefix(payload.Cmd, "echo "))
		case strings.HasPrefix(payload.Cmd, "git-upload-pack"):
			cmd := exec.Command("git-upload-pack", repo)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
			if err := cmd.Run(); err != nil {
				status = 1
			}
		default:
			fmt.Fprintln(ch.Stderr(), "nettest ssh: unknown command")
			status = 127
		}
		ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, uint32(status)))
		return
	}
}

func ed25519Key() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// serveBench answers the benchmark's round trips and bulk reads.
func serveBench(ln net.Listener) {
	zeros := make([]byte, 256<<10)
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var cmd [1]byte
			for {
				if _, err := io.ReadFull(c, cmd[:]); err != nil {
					return
				}
				switch cmd[0] {
				case 'p':
					if _, err := c.Write(cmd[:]); err != nil {
						return
					}
				case 'b':
					var n [8]byte
					if _, err := io.ReadFull(c, n[:]); err != nil {
						return
					}
					for left := binary.BigEndian.Uint64(n[:]); left > 0; {
						k := min(left, uint64(len(zeros)))
						if _, err := c.Write(zeros[:k]); err != nil {
							return
						}
						left -= k
					}
				default:
					return
				}
			}
		}()
	}
}

// scriptedModel answers the Anthropic Messages API (POST /v1/messages)
// with ModelReply, streamed (server-sent events) when the request asks
// for it, and every other path with an empty JSON object.
func scriptedModel(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/messages") || strings.HasSuffix(r.URL.Path, "count_tokens") {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "count_tokens") {
			io.WriteString(w, `{"input_tokens":10}`)
			return
		}
		io.WriteString(w, "{}")
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	const msg = `{"id":"msg_lab","type":"message","role":"assistant","model":"claude-lab","content":[%s],` +
		`"stop_reason":%s,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}}`
	if !bytes.Contains(body, []byte(`"stream":true`)) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, msg, `{"type":"text","text":"`+ModelReply+`"}`, `"end_turn"`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	events := []struct{ name, data string }{
		{"message_start", `{"type":"message_start","message":` + fmt.Sprintf(msg, "", "null") + `}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + ModelReply + `"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`},
		{"message_stop", `{"type":"message_stop"}`},
	}
	for _, e := range events {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, e.data)
	}
}
