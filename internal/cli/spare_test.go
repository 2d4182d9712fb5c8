package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-lock/agent-lock/internal/bpfload"
	"github.com/agent-lock/agent-lock/internal/jail"
	"github.com/agent-lock/agent-lock/internal/netcell"
)

const layoutChild = "AGENT_LOCK_SPARE_LAYOUT"

// TestAdoptSpareLayout: a session's agent-lock finds each descriptor it is
// handed where spareDesc says, whichever spares the daemon had (the
// engine's, the network's, both or neither): the spares are taken (no
// warning), their descriptors made close-on-exec, and the function
// adoptSpare returns closes the pipe's end while the process lives, which
// is what lets the daemon load the next. The session is a process of its
// own, as the daemon starts it: what it adopts is gone with it.
func TestAdoptSpareLayout(t *testing.T) {
	if desc := os.Getenv(layoutChild); desc != "" {
		layoutSession(t, desc)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF)")
	}
	// Natively the engine's spare is the Landlock engine's observers,
	// in the guests the BPF LSM's hooks.
	jk := jail.NewKeeper(func() bool { return os.Getenv("AGENT_LOCK_NATIVE") == "1" }, nil)
	defer jk.Close()
	nk := bpfload.NewKeeper(netcell.Ahead, (*netcell.Loaded).Close, nil)
	defer nk.Close()
	for _, tc := range []struct{ jail, net bool }{{true, true}, {false, true}, {true, false}, {false, false}} {
		t.Run(fmt.Sprintf("engine=%v,network=%v", tc.jail, tc.net), func(t *testing.T) {
			var files []*os.File
			defer func() { closeFiles(files) }()
			var d spareDesc
			if tc.jail {
				jk.Wait()
				sp := jk.Take(nil)
				if sp == nil {
					t.Fatal("no engine spare")
				}
				h, fs, err := sp.Hand()
				sp.Close()
				if err != nil {
					t.Fatal(err)
				}
				d.Jail, _ = json.Marshal(h)
				files, d.JailFDs = fs, len(fs)
			}
			if tc.net {
				nk.Wait()
				p, ok := nk.Take(nil)
				if !ok {
					t.Fatal("no network spare")
				}
				h, fs, err := p.Hand()
				p.Close()
				if err != nil {
					t.Fatal(err)
				}
				d.Net, _ = json.Marshal(h)
				files, d.NetFDs = append(files, fs...), len(fs)
			}
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			files, d.Started = append(files, w), true
			desc, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestAdoptSpareLayout$", "-test.v")
			cmd.Env = append(os.Environ(), layoutChild+"="+string(desc))
			cmd.ExtraFiles = files // from 3 on, as from daemon.SpareFD
			hold, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			closeFiles(files)
			files = nil
			// The pipe's end closed while the session lives: started.
			r.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, rerr := io.ReadAll(r)
			hold.Close()
			werr := cmd.Wait()
			if rerr != nil {
				t.Errorf("the session did not close the pipe's end it was handed (the daemon would not load the next spares): %v", rerr)
			}
			if werr != nil || !strings.Contains(out.String(), "LAYOUT-OK") {
				t.Errorf("the session: %v\n%s", werr, out.String())
			}
		})
	}
}

// layoutSession is TestAdoptSpareLayout's session: it adopts what desc
// describes from descriptor 3 on, says what went wrong, calls started,
// and lives until its parent closes its stdin.
func layoutSession(t *testing.T, desc string) {
	var d spareDesc
	if err := json.Unmarshal([]byte(desc), &d); err != nil {
		t.Fatal(err)
	}
	const first = 3
	started := adoptSpare([]byte(desc), first, func(format string, args ...any) {
		t.Errorf("warned: "+format, args...)
	})
	for fd := first; fd < first+d.JailFDs+d.NetFDs; fd++ {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("descriptor %d after adopting: flags %#x, %v", fd, flags, err)
		}
	}
	started()
	if !t.Failed() {
		t.Log("LAYOUT-OK " + strconv.Itoa(d.JailFDs+d.NetFDs))
	}
	io.Copy(io.Discard, os.Stdin)
}
