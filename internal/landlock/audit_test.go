package landlock

import (
	"reflect"
	"testing"
)

// TestParseRecord reads records as this machine's kernel (6.18) wrote them.
func TestParseRecord(t *testing.T) {
	for _, c := range []struct {
		typ    int
		text   string
		serial uint64
		domain uint64
		fields map[string]string
	}{
		{RecordAccess, `audit(1796359121.584:130): domain=1b51634c4 blockers=fs.make_dir path="/tmp/aud2" dev="vda" ino=9977908`,
			130, 0x1b51634c4, map[string]string{"blockers": "fs.make_dir", "path": "/tmp/aud2", "dev": "vda", "ino": "9977908"}},
		{RecordDomain, `audit(1796359121.584:130): domain=1b51634c4 status=allocated mode=enforcing pid=25782 uid=4242 exe="/work/main/.build/agent-lock" comm="exe"`,
			130, 0x1b51634c4, map[string]string{"status": "allocated", "mode": "enforcing", "pid": "25782", "uid": "4242", "exe": "/work/main/.build/agent-lock", "comm": "exe"}},
		// A path with a space is written in hex, unquoted.
		{RecordAccess, "audit(1796359121.600:133): domain=2a blockers=fs.remove_file,fs.remove_dir path=2F746D702F6120622F63 dev=\"vda\" ino=1\x00",
			133, 0x2a, map[string]string{"blockers": "fs.remove_file,fs.remove_dir", "path": "/tmp/a b/c", "dev": "vda", "ino": "1"}},
		{RecordAccess, `audit(1796359121.700:140): domain=2a blockers=scope.signal opid=1 ocomm="systemd"`,
			140, 0x2a, map[string]string{"blockers": "scope.signal", "opid": "1", "ocomm": "systemd"}},
	} {
		r, err := ParseRecord(c.typ, c.text)
		if err != nil {
			t.Errorf("%s: %v", c.text, err)
			continue
		}
		if r.Serial != c.serial || r.Domain != c.domain || r.Type != c.typ || !reflect.DeepEqual(r.Fields, c.fields) {
			t.Errorf("%s:\ngot  serial %d domain %x %v\nwant serial %d domain %x %v", c.text, r.Serial, r.Domain, r.Fields, c.serial, c.domain, c.fields)
		}
		if r.Time.Unix() != 1796359121 {
			t.Errorf("%s: time %v", c.text, r.Time)
		}
	}
	if got := (Record{Fields: map[string]string{"blockers": "fs.remove_file,fs.remove_dir"}}).Blockers(); !reflect.DeepEqual(got, []string{"fs.remove_file", "fs.remove_dir"}) {
		t.Errorf("blockers %v", got)
	}
	for _, bad := range []string{"", "domain=1", `audit(1.2:3): domain=zz`, `audit(1.2:3): domain=1 path="x`} {
		if _, err := ParseRecord(RecordAccess, bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
