package vmtest

import (
	"strings"
	"testing"
)

func TestConsole(t *testing.T) {
	const nonce = "0123abcd"
	start, exit := startMarker(nonce), exitMarkerPrefix(nonce)
	tests := []struct {
		name     string
		lines    []string
		exited   bool
		code     int
		out      string
		boot     string
		panicked bool
	}{
		{
			name:   "pass",
			lines:  []string{"[    1.0] booting", start + "\r", "hello\r", exit + "0\r", "[    2.0] reboot: Power down\r"},
			exited: true, code: 0,
			out:  "hello\n",
			boot: "[    1.0] booting\n",
		},
		{
			name:   "fail",
			lines:  []string{start, "FAIL", exit + "1"},
			exited: true, code: 1,
			out: "FAIL\n",
		},
		{
			name:   "output without final newline",
			lines:  []string{start, "partial" + exit + "3"},
			exited: true, code: 3,
			out: "partial\n",
		},
		{
			name:   "killed by a signal",
			lines:  []string{start, exit + "137"},
			exited: true, code: 137,
		},
		{
			name:  "marker of another boot is output",
			lines: []string{start, markerTag + " exit ffffffff 0"},
			out:   markerTag + " exit ffffffff 0\n",
		},
		{
			name:  "malformed status is output",
			lines: []string{start, exit + "zero"},
			out:   exit + "zero\n",
		},
		{
			name:  "exit marker before start is boot noise",
			lines: []string{exit + "0", start},
			boot:  exit + "0\n",
		},
		{
			name:     "panic",
			lines:    []string{start, "running", "[    3.5] Kernel panic - not syncing: sysrq triggered crash"},
			out:      "running\n[    3.5] Kernel panic - not syncing: sysrq triggered crash\n",
			panicked: true,
		},
		{
			name:   "lines after the exit are not output",
			lines:  []string{start, exit + "0", "late"},
			exited: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stream strings.Builder
			c := &console{nonce: nonce, stream: &stream}
			for _, l := range tt.lines {
				c.line(l)
			}
			if c.exited != tt.exited || c.code != tt.code {
				t.Errorf("exited, code = %v, %d; want %v, %d", c.exited, c.code, tt.exited, tt.code)
			}
			if got := c.out.String(); got != tt.out {
				t.Errorf("output = %q, want %q", got, tt.out)
			}
			if got := stream.String(); got != tt.out {
				t.Errorf("streamed = %q, want %q", got, tt.out)
			}
			if got := c.boot.String(); got != tt.boot {
				t.Errorf("boot = %q, want %q", got, tt.boot)
			}
			if c.panicked != tt.panicked {
				t.Errorf("panicked = %v", c.panicked)
			}
			if n := strings.Count(c.all.String(), "\n"); n != len(tt.lines) {
				t.Errorf("console has %d lines, want %d", n, len(tt.lines))
			}
		})
	}
}
