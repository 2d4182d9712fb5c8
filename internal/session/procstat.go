package session

import (
	"iter"
	"os"
	"strconv"
	"strings"
)

// Processes yields each process's number and the fields of its
// /proc/PID/stat after the command's name, which may hold anything:
// state, ppid, pgrp, session, tty_nr, ... A process gone meanwhile is
// passed over; the error is /proc's, unreadable.
func Processes() (iter.Seq2[int, []string], error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	return func(yield func(int, []string) bool) {
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			i := strings.LastIndexByte(string(b), ')')
			if err != nil || i < 0 {
				continue
			}
			if !yield(pid, strings.Fields(string(b[i+1:]))) {
				return
			}
		}
	}, nil
}
