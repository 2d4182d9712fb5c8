package jail_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/policy"
	"github.com/agent-lock/agent-lock/internal/spec"
)

// TestSubvolumes: btrfs numbers each subvolume's inodes on its own (its
// root 256, then 257, ...), all under one superblock. A folder made first
// in one subvolume and a folder made first in another have the same device
// and inode number; the project's grant must not reach the other.
func TestSubvolumes(t *testing.T) {
	top := mountBtrfs(t)
	for _, sv := range []string{"a", "b", "c"} {
		if out, err := exec.Command("btrfs", "subvolume", "create", filepath.Join(top, sv)).CombinedOutput(); err != nil {
			t.Fatalf("btrfs subvolume create: %v: %s", err, out)
		}
	}
	proj, keys := filepath.Join(top, "a", "proj"), filepath.Join(top, "b", "keys")
	for _, d := range []string{proj, keys} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(d, testUID, testUID)
	}
	secret := filepath.Join(keys, "secret")
	os.WriteFile(secret, []byte("SECRET-MARKER\n"), 0o644)
	os.Chown(secret, testUID, testUID)
	var sp, sk syscall.Stat_t
	syscall.Stat(proj, &sp)
	syscall.Stat(keys, &sk)
	if sp.Ino != sk.Ino {
		t.Fatalf("the two folders' inode numbers differ (%d, %d): the test needs them equal", sp.Ino, sk.Ino)
	}
	// Unjailed, the test user reads it (so the test is real).
	if b, err := asTestUser("cat", secret).Output(); err != nil || !strings.Contains(string(b), "SECRET-MARKER") {
		t.Fatalf("unjailed, the test user cannot read %s: %v %s", secret, err, b)
	}
	c := newCellWith(t, func(cfg *jail.Config, _, _ string) {
		cfg.Rules = policy.Policy{Dir: proj}.Rules()
	})
	if out, err := c.run("cat " + secret); strings.Contains(out, "SECRET-MARKER") || err == nil {
		t.Errorf("the cell read a file in another subvolume's folder of the project's inode number: %v %s", err, out)
	}
	if out, err := c.run("echo x > " + keys + "/planted"); err == nil {
		t.Errorf("the cell wrote into another subvolume's folder of the project's inode number: %s", out)
	}
	if ev := findEvent(c.events(), "read", secret); ev == nil {
		t.Error("the read of the other subvolume's secret was not reported")
	}
	if out, err := c.run("echo ok > " + proj + "/mine && cat " + proj + "/mine"); err != nil || !strings.Contains(out, "ok") {
		t.Errorf("the project on btrfs: %v %s", err, out)
	}

	// Two denials of one number are one (denials hold by number): the
	// start goes on.
	other := filepath.Join(top, "c", "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	var so syscall.Stat_t
	syscall.Stat(other, &so)
	if so.Ino != sk.Ino {
		t.Fatalf("the two denied folders' inode numbers differ (%d, %d): the test needs them equal", so.Ino, sk.Ino)
	}
	cg := newCgroup(t, needJail(t))
	twoDenials := append(policy.Policy{Dir: c.dir}.Rules(),
		spec.Rule{Path: keys, Access: spec.Deny, Name: "test denial"},
		spec.Rule{Path: other, Access: spec.Deny, Name: "another test denial"})
	if j, err := jail.Load(jail.Config{CgroupID: cg.id, Rules: twoDenials}); err != nil {
		t.Errorf("two denials of one inode number in two subvolumes: %v", err)
	} else {
		j.Close()
	}

	// Two roots of one number (a grant here, a denial there) cannot be
	// told apart by one map entry: the start is refused, and says what to
	// use instead.
	rules := append(policy.Policy{Dir: proj}.Rules(), spec.Rule{Path: keys, Access: spec.Deny, Name: "test denial"})
	if j, err := jail.Load(jail.Config{CgroupID: cg.id, Rules: rules}); err == nil {
		j.Close()
		t.Error("a grant and a denial of one inode number in two subvolumes loaded")
	} else if !strings.Contains(err.Error(), "--engine landlock") || !strings.Contains(err.Error(), keys) {
		t.Errorf("the refusal does not name the root and what to do: %v", err)
	}
}

func asTestUser(argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testUID, Gid: testUID}}
	return cmd
}

// mountBtrfs mounts a fresh btrfs on a loop device and returns its top.
func mountBtrfs(t *testing.T) string {
	t.Helper()
	return mountLoop(t, "btrfs", []string{"mkfs.btrfs", "-q", "-f"}, 128<<20, 0o755)
}

// TestFreedRootNumber: a granted folder removed from outside during the
// session would free its inode, and ext4 gives a freed number to the next
// folder made there. The grant must not pass to that folder.
func TestFreedRootNumber(t *testing.T) {
	fs := mountExt4(t)
	grant, keys := filepath.Join(fs, "grant"), filepath.Join(fs, "keys")
	if err := os.Mkdir(grant, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(grant, testUID, testUID)
	var before syscall.Stat_t
	syscall.Stat(grant, &before)
	c := newCellWith(t, func(cfg *jail.Config, dir, _ string) {
		cfg.Rules = append(policy.Policy{Dir: dir}.Rules(),
			spec.Rule{Path: grant, Access: spec.Read | spec.Write | spec.Grant, Name: "test grant"})
	})
	if out, err := c.run("echo ok > " + grant + "/mine"); err != nil {
		t.Fatalf("the grant: %v %s", err, out)
	}
	os.RemoveAll(grant)
	if err := os.Mkdir(keys, 0o755); err != nil {
		t.Fatal(err)
	}
	var after syscall.Stat_t
	syscall.Stat(keys, &after)
	// Without the jail holding the grant's inode, ext4 reuses its number
	// here (the test fails on a jail that knows roots by number); held,
	// the inode is not freed and the number not reused.
	t.Logf("the removed grant's inode number %d, the new folder's %d", before.Ino, after.Ino)
	secret := filepath.Join(keys, "secret")
	os.WriteFile(secret, []byte("SECRET-MARKER\n"), 0o644)
	os.Chown(secret, testUID, testUID)
	os.Chown(keys, testUID, testUID)
	if b, err := asTestUser("cat", secret).Output(); err != nil || !strings.Contains(string(b), "SECRET-MARKER") {
		t.Fatalf("unjailed, the test user cannot read %s: %v %s", secret, err, b)
	}
	if out, err := c.run("cat " + secret); strings.Contains(out, "SECRET-MARKER") || err == nil {
		t.Errorf("the cell read a file in a folder that took a removed grant's inode number: %v %s", err, out)
	}
}
