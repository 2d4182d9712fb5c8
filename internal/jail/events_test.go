package jail

import "testing"

func TestNamer(t *testing.T) {
	n := &Namer{mounts: map[uint32][]mountEntry{}}
	add := func(line string) {
		dev, e, ok := parseMountinfo(line)
		if !ok {
			t.Fatalf("parse %q", line)
		}
		n.mounts[dev] = append(n.mounts[dev], e)
	}
	add(`22 1 0:21 / / rw,relatime - virtiofs hostroot ro`)
	add(`30 22 0:25 / /home rw - tmpfs tmpfs rw`)
	add(`31 22 0:25 /jailtest/project /srv/my\040project rw - tmpfs tmpfs rw`)
	add(`32 22 8:1 /sub /mnt/sub rw - ext4 /dev/sda1 rw`)
	cases := []struct {
		dev  uint32
		rel  string
		want string
	}{
		{0<<20 | 21, "/usr/bin/cat", "/usr/bin/cat"},
		{0<<20 | 21, "/", "/"},
		{0<<20 | 25, "/jailtest/.ssh/id_rsa", "/home/jailtest/.ssh/id_rsa"},
		// the longest matching root wins: the bind mount of the project
		{0<<20 | 25, "/jailtest/project/a b", "/srv/my project/a b"},
		{8<<20 | 1, "/sub/x", "/mnt/sub/x"},
		// not visible through any mount: say so rather than guess
		{8<<20 | 1, "/other/x", "(dev 8:1)/other/x"},
		{9<<20 | 9, "/x", "(dev 9:9)/x"},
	}
	for _, c := range cases {
		if got := n.Name(c.dev, c.rel); got != c.want {
			t.Errorf("Name(%d, %q) = %q, want %q", c.dev, c.rel, got, c.want)
		}
	}
}

func TestDecodeRejectsShortSamples(t *testing.T) {
	j := &Jail{names: &Namer{mounts: map[uint32][]mountEntry{}}}
	if _, err := j.decode(make([]byte, 8)); err == nil {
		t.Fatal("decoded an 8-byte sample")
	}
}
