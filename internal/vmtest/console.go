package vmtest

import (
	"io"
	"strconv"
	"strings"
)

// The guest brackets the command's output with marker lines. The nonce,
// fresh for every boot, keeps a test that prints the init scripts (or its
// own copy of a marker) from ending the run.
const markerTag = "=== agent-lock-vmtest"

func startMarker(nonce string) string      { return markerTag + " start " + nonce }
func exitMarkerPrefix(nonce string) string { return markerTag + " exit " + nonce + " " }

// console follows the guest's serial output line by line: boot messages
// until the start marker, the command's output until the exit marker.
type console struct {
	nonce  string
	stream io.Writer // receives the command's output as it arrives

	started  bool
	exited   bool
	code     int
	panicked bool

	boot strings.Builder // everything before the start marker
	out  strings.Builder // the command's output
	all  strings.Builder // the whole console
}

// line takes one line of console output, without its newline.
func (c *console) line(l string) {
	// The serial console ends lines with CRLF.
	l = strings.TrimRight(l, "\r")
	c.all.WriteString(l + "\n")
	if strings.Contains(l, "Kernel panic - not syncing") {
		c.panicked = true
	}
	switch {
	case !c.started:
		if strings.HasSuffix(l, startMarker(c.nonce)) {
			c.started = true
			return
		}
		c.boot.WriteString(l + "\n")
	case !c.exited:
		if i := strings.LastIndex(l, exitMarkerPrefix(c.nonce)); i >= 0 {
			if code, err := strconv.Atoi(l[i+len(exitMarkerPrefix(c.nonce)):]); err == nil {
				c.exited, c.code = true, code
				// Output without a final newline shares the marker's line.
				if i > 0 {
					c.emit(l[:i])
				}
				return
			}
		}
		c.emit(l)
	}
}

func (c *console) emit(l string) {
	c.out.WriteString(l + "\n")
	if c.stream != nil {
		io.WriteString(c.stream, l+"\n")
	}
}
