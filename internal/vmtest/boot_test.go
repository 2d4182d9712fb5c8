package vmtest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBoot boots every kernel of the matrix and checks that exit statuses,
// the working directory and the environment reach the guest and come back.
// It needs root, QEMU and the Debian archive (or a filled cache), and takes
// about 15 seconds a kernel, so it only runs when asked to.
func TestBoot(t *testing.T) {
	if os.Getenv("AGENT_LOCK_VMTEST_BOOT") != "1" {
		t.Skip("set AGENT_LOCK_VMTEST_BOOT=1 to boot the test kernels")
	}
	if os.Geteuid() != 0 {
		t.Fatal("booting a guest needs root")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Kernels() {
		t.Run(k.Suite, func(t *testing.T) {
			ctx := context.Background()
			img, err := Fetch(ctx, k, FetchOptions{Log: tlog{t}})
			if err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				cmd  []string
				want int
			}{
				{[]string{"true"}, 0},
				{[]string{"false"}, 1},
				{[]string{"sh", "-c", `test "$AGENT_LOCK_KERNEL" = ` + k.Suite + ` && test "$PWD" = "` + dir + `" &&
					test "$EXTRA" = "a b" && grep -q '^` + TestUser + `:' /etc/passwd && exit 7`}, 7},
			}
			for _, tt := range tests {
				res, err := Run(ctx, img, Options{
					Command: tt.cmd,
					Env:     []string{"EXTRA=a b"},
					Timeout: 3 * time.Minute,
					Output:  tlog{t},
				})
				if err != nil {
					t.Fatalf("%q: %v\n%s", tt.cmd, err, res.Console)
				}
				if res.ExitCode != tt.want {
					t.Errorf("%q exited %d, want %d", tt.cmd, res.ExitCode, tt.want)
				}
				t.Logf("%q: exit %d in %v", tt.cmd, res.ExitCode, res.Duration.Round(time.Millisecond))
			}
		})
	}
}

// tlog sends guest and apt output to the test log.
type tlog struct{ t *testing.T }

func (l tlog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
