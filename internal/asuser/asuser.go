// Package asuser does file-system work in a user's folders on the user's
// behalf. agent-lock runs as root, and those folders are the user's: a root
// process creating files by path there would follow whatever symlinks the
// user planted (into /etc, say) and hand the result to the user. With the
// thread's file-system ids switched to the user, the kernel checks every
// step as it would for the user, and root's file capabilities are dropped.
package asuser

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on a thread acting as uid and gid for file-system access.
// The thread is never handed back: it exits with the goroutine, whatever
// ids it was left with.
func Do(uid, gid uint32, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := setfsids(uid, gid); err != nil {
			ch <- err
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// MkdirAll makes path and its missing parents (0700) as uid and gid.
func MkdirAll(path string, uid, gid uint32) error {
	return Do(uid, gid, func() error { return os.MkdirAll(path, 0o700) })
}

// CreateFile makes the file path (0600) holding content, as uid and gid.
// It fails if path exists, whatever it is (a symlink is not followed).
func CreateFile(path, content string, uid, gid uint32) error {
	return Do(uid, gid, func() error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.WriteString(content); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

// setfsids switches the calling thread's file-system ids. setfsuid reports
// no errors, only the previous id, so a second call confirms the first.
func setfsids(uid, gid uint32) error {
	unix.Setfsgid(int(gid))
	if prev, _ := unix.SetfsgidRetGid(-1); prev != int(gid) {
		return fmt.Errorf("could not act as group %d", gid)
	}
	unix.Setfsuid(int(uid))
	if prev, _ := unix.SetfsuidRetUid(-1); prev != int(uid) {
		return fmt.Errorf("could not act as user %d", uid)
	}
	return nil
}
