package landlock

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Landlock's own record of what it refused (ABI 7, Linux 6.15): the
// kernel's audit log carries one access record per denial, and a domain
// record the first time a domain denies something (naming the process that
// enforced it) and when it is freed. Landlock writes them only while the
// host's audit is enabled (auditd, or auditctl -e 1); agent-lock reads them
// from the audit log's read-only multicast group, as journald does, and
// never turns audit on itself: that would start auditing every process on
// the machine.
const (
	RecordAccess = 1423 // AUDIT_LANDLOCK_ACCESS
	RecordDomain = 1424 // AUDIT_LANDLOCK_DOMAIN

	auditGet      = 1000 // AUDIT_GET
	auditSet      = 1001 // AUDIT_SET
	auditNlgrpLog = 1    // AUDIT_NLGRP_READLOG
)

// AuditRule is the rule agent-lock's reports name for what Landlock's
// records report.
const AuditRule = "Landlock's audit record"

// Record is one Landlock audit record.
type Record struct {
	Type   int
	Time   time.Time
	Serial uint64 // the audit event: an access record and the domain record it caused share it
	Domain uint64
	Fields map[string]string // the rest, unquoted and unhexed: blockers, path, dev, ino, opid, status, pid, ...
}

// Blockers are the rights the access record says were missing, e.g.
// fs.make_dir, fs.remove_file, scope.signal.
func (r Record) Blockers() []string {
	if b := r.Fields["blockers"]; b != "" {
		return strings.Split(b, ",")
	}
	return nil
}

// auditRequest sends one request (an AUDIT_* type and its payload) on a
// fresh audit netlink socket, and returns the socket for the reply.
func auditRequest(typ uint16, payload []byte) (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return -1, fmt.Errorf("audit netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("audit netlink bind: %w", err)
	}
	msg := make([]byte, unix.NLMSG_HDRLEN+len(payload))
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	copy(msg[unix.NLMSG_HDRLEN:], payload)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("audit request %d: %w", typ, err)
	}
	return fd, nil
}

// AuditOn says whether the kernel's audit is enabled, which is when
// Landlock logs its denials.
func AuditOn() (bool, error) {
	fd, err := auditRequest(auditGet, nil)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue // a receive with a timeout is not restarted after a signal
		}
		if err != nil {
			return false, fmt.Errorf("audit status: %w", err)
		}
		typ, data, ok := netlinkMessage(buf[:n])
		switch {
		case !ok:
			return false, errors.New("audit status: short reply")
		case typ == unix.NLMSG_ERROR && len(data) >= 4 && int32(binary.NativeEndian.Uint32(data)) != 0:
			return false, fmt.Errorf("audit status: %w", unix.Errno(-int32(binary.NativeEndian.Uint32(data))))
		case typ == auditGet && len(data) >= 8:
			// struct audit_status: mask, enabled, ...
			return binary.NativeEndian.Uint32(data[4:]) != 0, nil
		}
	}
}

// SetAudit turns the kernel's audit on or off (AUDIT_SET,
// CAP_AUDIT_CONTROL). agent-lock itself never calls it: the tests do, to
// see both sides of a host's setting, and put it back.
func SetAudit(on bool) error {
	status := make([]byte, 40)                   // struct audit_status's head
	binary.NativeEndian.PutUint32(status[0:], 1) // mask: AUDIT_STATUS_ENABLED
	if on {
		binary.NativeEndian.PutUint32(status[4:], 1)
	}
	fd, err := auditRequest(auditSet, status)
	if err != nil {
		return err
	}
	unix.Close(fd)
	if now, err := AuditOn(); err != nil || now != on {
		return fmt.Errorf("set audit to %v: it is %v (%v)", on, now, err)
	}
	return nil
}

// AuditLog is a subscription to the audit log, for Landlock's records.
type AuditLog struct {
	f   *os.File
	buf []byte
}

// ListenAudit subscribes to the audit log (CAP_AUDIT_READ).
func ListenAudit() (*AuditLog, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("audit netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (auditNlgrpLog - 1)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("subscribe to the audit log: %w", err)
	}
	// Every record of the machine comes through here (a BPF program's
	// load alone is two): room for a burst, so that ours are not dropped.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	return &AuditLog{f: os.NewFile(uintptr(fd), "audit-log"), buf: make([]byte, 1<<16)}, nil
}

// Next returns the next Landlock record. It fails when the log is closed
// or the deadline set passes.
func (a *AuditLog) Next() (Record, error) {
	for {
		n, err := a.f.Read(a.buf)
		if err != nil {
			return Record{}, err
		}
		typ, data, ok := netlinkMessage(a.buf[:n])
		if !ok || (typ != RecordAccess && typ != RecordDomain) {
			continue
		}
		if r, err := ParseRecord(int(typ), string(data)); err == nil {
			return r, nil
		}
	}
}

// SetDeadline bounds Next.
func (a *AuditLog) SetDeadline(t time.Time) error { return a.f.SetReadDeadline(t) }

// Close ends the subscription; a waiting Next returns.
func (a *AuditLog) Close() error { return a.f.Close() }

// netlinkMessage is the one message of an audit datagram. Not
// syscall.ParseNetlinkMessage: audit's messages are not padded to the
// netlink alignment, which it takes for a truncated message.
func netlinkMessage(b []byte) (typ uint16, data []byte, ok bool) {
	if len(b) < unix.NLMSG_HDRLEN {
		return 0, nil, false
	}
	l := int(binary.NativeEndian.Uint32(b))
	if l < unix.NLMSG_HDRLEN || l > len(b) {
		l = len(b)
	}
	return binary.NativeEndian.Uint16(b[4:]), b[unix.NLMSG_HDRLEN:l], true
}

// ParseRecord reads a record's text: `audit(SECONDS.MS:SERIAL): domain=HEX
// key=value ...`, where a value is "quoted", or hex when it holds what
// audit will not quote (spaces, quotes, control characters), or bare.
func ParseRecord(typ int, s string) (Record, error) {
	r := Record{Type: typ, Fields: map[string]string{}}
	rest, ok := strings.CutPrefix(strings.TrimRight(s, "\x00\n"), "audit(")
	head, rest, ok2 := strings.Cut(rest, "): ")
	if !ok || !ok2 {
		return r, fmt.Errorf("audit record %q: no audit(...) header", s)
	}
	stamp, serial, _ := strings.Cut(head, ":")
	sec, ms, _ := strings.Cut(stamp, ".")
	secs, err1 := strconv.ParseInt(sec, 10, 64)
	msecs, err2 := strconv.ParseInt(ms, 10, 64)
	var err3 error
	r.Serial, err3 = strconv.ParseUint(serial, 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return r, fmt.Errorf("audit record %q: header: %w", s, err)
	}
	r.Time = time.Unix(secs, msecs*int64(time.Millisecond))
	for rest != "" {
		rest = strings.TrimLeft(rest, " ")
		key, after, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		var val string
		if strings.HasPrefix(after, `"`) {
			end := strings.IndexByte(after[1:], '"')
			if end < 0 {
				return r, fmt.Errorf("audit record %q: unterminated %s", s, key)
			}
			val, rest = after[1:1+end], after[2+end:]
		} else {
			val, rest, _ = strings.Cut(after, " ")
			if key == "path" || key == "ocomm" || key == "comm" || key == "exe" || key == "name" {
				// Untrusted strings: bare means hex.
				if b, err := hex.DecodeString(val); err == nil {
					val = string(b)
				}
			}
		}
		r.Fields[key] = val
	}
	d, err := strconv.ParseUint(r.Fields["domain"], 16, 64)
	if err != nil {
		return r, fmt.Errorf("audit record %q: domain: %w", s, err)
	}
	r.Domain = d
	delete(r.Fields, "domain")
	return r, nil
}
