package jail

import (
	"errors"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Retries is how many registrations this jail asked again (handshakeOpen).
func (j *Jail) Retries() int { return j.retries }

// RecursionMisses is how many times the kernel skipped this jail's programs.
func (j *Jail) RecursionMisses() uint64 { return j.recursionMisses() }

// RuleOf says whether the rule map holds path's inode.
func (j *Jail) RuleOf(path string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false, err
	}
	k := jailRuleKey{Dev: uint32(unix.Major(st.Dev))<<20 | uint32(unix.Minor(st.Dev)), Ino: st.Ino}
	var v jailRule
	err := j.coll.Maps["rules"].Lookup(&k, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false, nil
	}
	return err == nil, err
}

// ProgramTags maps each loaded program to the kernel's tag of it (a hash of
// its instructions with map references blanked): two loads that verified the
// same programs have the same tags.
func (j *Jail) ProgramTags() (map[string]string, error) {
	tags := map[string]string{}
	for name, p := range j.coll.Programs {
		info, err := p.Info()
		if err != nil {
			return nil, err
		}
		tags[name] = info.Tag
	}
	return tags, nil
}
