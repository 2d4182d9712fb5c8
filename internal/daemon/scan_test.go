package daemon

import (
	"errors"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/asuser"
	"github.com/agent-lock/agent-lock/internal/dirscan"
)

// TestStandbyScan: a standby's scans through the daemon come back as the
// daemon's scanner gave them (a name that is not UTF-8 included), only as
// the session's user, and an answer that came too late is never taken for
// the next scan's: the standby asks no more.
func TestStandbyScan(t *testing.T) {
	mine, theirs, err := socketpair()
	if err != nil {
		t.Fatal(err)
	}
	slow := make(chan struct{})
	defer close(slow)
	var mu sync.Mutex
	var asked []string
	scan := func(id asuser.ID, root, name string, skip []string) ([]dirscan.Hit, dirscan.Stats, error) {
		mu.Lock()
		asked = append(asked, root)
		mu.Unlock()
		if root == "/slow" {
			<-slow
		}
		return []dirscan.Hit{
			{Path: root + "/a\xff\xfe/.git", Dir: true},
			{Path: root + "/long", Unread: unix.ENAMETOOLONG},
		}, dirscan.Stats{Folders: 3, Remembered: 2, Unlooked: 1}, nil
	}
	sb := &standby{c: mine, done: make(chan struct{})}
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		sb.follow(scan, Caller{UID: 4242, GID: 4242})
	}()
	s := &Standby{c: theirs}
	me := asuser.ID{UID: 4242, GID: 4242}

	hits, st, err := s.Scan(me, "/p\xff", ".git", []string{"/q\xfe"})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 2 || hits[0].Path != "/p\xff/a\xff\xfe/.git" || !hits[0].Dir || hits[1].Path != "/p\xff/long" || !errors.Is(hits[1].Unread, unix.ENAMETOOLONG) {
		t.Errorf("hits %+v, want the scanner's", hits)
	}
	if st != (dirscan.Stats{Folders: 3, Remembered: 2, Unlooked: 1}) {
		t.Errorf("stats %+v, want the scanner's", st)
	}
	if _, _, err := s.Scan(asuser.ID{UID: 0, GID: 0}, "/p", ".git", nil); err == nil {
		t.Error("a scan as root for a session of 4242 was answered")
	}
	if _, _, err := s.Scan(asuser.ID{UID: 4242, GID: 4242, Groups: []uint32{0}}, "/p", ".git", nil); err == nil {
		t.Error("a scan with root's group for a session of 4242 without it was answered")
	}

	old := scanBound
	scanBound = 200 * time.Millisecond
	defer func() { scanBound = old }()
	if _, _, err := s.Scan(me, "/slow", ".git", nil); err == nil {
		t.Fatal("a scan slower than scanBound was answered")
	}
	if hits, _, err := s.Scan(me, "/next", ".git", nil); err == nil {
		t.Errorf("after a scan's answer came too late, the next scan was answered (with it?): %+v", hits)
	}
	// The slow scan still under way does not keep the daemon from
	// seeing the agent run (the next standby waits for it).
	s.Started()
	select {
	case <-followed:
	case <-time.After(5 * time.Second):
		t.Error("the daemon did not see the agent run while a scan was under way")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0] != "/p\xff" || asked[1] != "/slow" {
		t.Errorf("the daemon scanned %q, want the first and the slow one only", asked)
	}
}
