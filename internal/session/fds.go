package session

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// cleanStart makes sure the agent starts with descriptors 0, 1 and 2 only,
// under every engine: a descriptor agent-lock inherited without
// close-on-exec (a CI runner's, a service manager's, a careless parent's)
// would otherwise pass through exec to the agent, and an open file is read
// and written without any further check, whatever it is. Every descriptor
// above 2 is marked close-on-exec, once, before agent-lock starts anything:
// the descriptors agent-lock hands on on purpose (the Landlock engine's
// ruleset, the reaper's pipe and links) are placed by exec.Cmd.ExtraFiles,
// which clears the flag on the copies it makes for the child. warn names
// the inherited ones, which is what a user who meant to pass one needs.
func cleanStart(warn warner) error {
	inherited, err := inheritedFDs()
	if err != nil {
		return fmt.Errorf("list inherited descriptors: %w", err)
	}
	if len(inherited) == 0 {
		return nil
	}
	if err := closeOnExecAbove2(); err != nil {
		return fmt.Errorf("close inherited descriptors %v: %w", inherited, err)
	}
	warn("descriptors %s inherited by agent-lock are not passed on: the agent gets 0, 1 and 2 only", joinInts(inherited))
	return nil
}

// inheritedFDs are the open descriptors above 2 without close-on-exec: Go
// opens all of its own with it.
func inheritedFDs() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		if flags&unix.FD_CLOEXEC == 0 {
			fds = append(fds, fd)
		}
	}
	slices.Sort(fds)
	return fds, nil
}

// closeOnExecAbove2 marks every descriptor above 2 close-on-exec:
// close_range(2) where the kernel has CLOSE_RANGE_CLOEXEC (5.11), else one
// by one.
func closeOnExecAbove2() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil || !(errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL)) {
		return err
	}
	fds, err := inheritedFDs()
	if err != nil {
		return err
	}
	for _, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return err
		}
	}
	return nil
}

func joinInts(n []int) string {
	s := make([]string, len(n))
	for i, v := range n {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ", ")
}
