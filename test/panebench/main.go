// Command panebench measures what the one-terminal pane costs a terminal
// user (issue 17): the output throughput of `cat` of a large file, and the
// latency of a key's echo, in a shell in agent-lock's pane against the same
// shell in a plain tmux window of the same size, both inside tmux, and
// prints the two side by side with their ratio.
//
// The pane's path is longer: the agent's pseudo-terminal, agent-lock's
// terminal emulator, the dashboard's renderer (which draws at most 120
// frames a second) and then tmux; the plain window has only tmux. Key echo
// is timed from the key sent through a tmux control client to the first
// output of the window that holds it, so the polling of a screen adds
// nothing. Not a timed test: it prints numbers, it passes whatever they are.
//
// It starts agent-lock as root for the test user (uid 4242, as the suites
// do), in a project folder of its own.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agent-lock/agent-lock/test/tmuxterm"
)

const (
	uid     = 4242
	sudoEnv = "TZ=UTC TERM=xterm-256color PATH=/usr/local/bin:/usr/bin:/bin SUDO_UID=4242 SUDO_GID=4242 SUDO_USER=jailtest"
)

func main() {
	agentLock := flag.String("agent-lock", ".build/agent-lock", "the agent-lock `binary` to measure")
	engine := flag.String("engine", "auto", "agent-lock's `engine`")
	mb := flag.Int("mb", 20, "size of the file cat prints, in `MB`")
	keys := flag.Int("keys", 200, "keys whose echo is timed")
	rounds := flag.Int("rounds", 3, "times the cat is timed in each terminal (the median is kept)")
	smoke := flag.Bool("smoke", false, "1 MB, 10 keys, one round: proves the benchmark works, measures nothing")
	flag.Parse()
	if *smoke {
		*mb, *keys, *rounds = 1, 10, 1
	}
	bin, err := filepath.Abs(*agentLock)
	if err != nil {
		fail(err)
	}
	if err := run(bin, *engine, *mb, *keys, *rounds); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "panebench: %v\n", err)
	os.Exit(1)
}

func run(bin, engine string, mb, keys, rounds int) error {
	root, err := os.MkdirTemp("", "panebench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	os.Chmod(root, 0o755)
	dir := filepath.Join(root, "project")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	os.Chown(dir, uid, uid)
	// Text, as an agent's output is: lines of printable characters.
	big := filepath.Join(dir, "big.txt")
	if err := writeText(big, mb<<20); err != nil {
		return err
	}
	os.Chown(big, uid, uid)

	fmt.Printf("panebench: %d MB cat (median of %d), %d keys echoed, in a 120x40 tmux window, engine %s\n", mb, rounds, keys, engine)
	plain, err := newTerm(root, "plain", fmt.Sprintf("cd %s && env %s PS1='ready$ ' setpriv --reuid=%d --regid=%d --init-groups bash --norc", dir, sudoEnv, uid, uid))
	if err != nil {
		return err
	}
	defer plain.close()
	pane, err := newTerm(root, "pane", fmt.Sprintf("cd %s && env %s PS1='ready$ ' %s --engine %s . -- bash --norc", dir, sudoEnv, bin, engine))
	if err != nil {
		return err
	}
	defer pane.close()

	var cat, echo [2][]time.Duration
	for i, t := range []*term{plain, pane} {
		if _, err := t.WaitFor("s:w", `ready\$`, 90*time.Second); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		for r := range rounds {
			d, err := t.catTime(big, r)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			cat[i] = append(cat[i], d)
		}
		e, err := t.echoTimes(keys)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		echo[i] = e
	}
	fmt.Printf("%-22s %14s %16s %8s\n", "", "plain tmux", "agent-lock pane", "ratio")
	row := func(name string, a, b time.Duration, unit time.Duration, format string) {
		fmt.Printf("%-22s %14s %16s %7.1fx\n", name, fmt.Sprintf(format, float64(a)/float64(unit)),
			fmt.Sprintf(format, float64(b)/float64(unit)), float64(b)/float64(a))
	}
	mbs := func(d time.Duration) float64 { return float64(mb) / d.Seconds() }
	c0, c1 := median(cat[0]), median(cat[1])
	fmt.Printf("%-22s %14s %16s %7.2fx\n", fmt.Sprintf("cat %d MB: throughput", mb), fmt.Sprintf("%.0f MB/s", mbs(c0)),
		fmt.Sprintf("%.0f MB/s", mbs(c1)), mbs(c1)/mbs(c0))
	row("cat: time", c0, c1, time.Millisecond, "%.0f ms")
	row("key echo: p50", percentile(echo[0], 50), percentile(echo[1], 50), time.Microsecond, "%.0f µs")
	row("key echo: p99", percentile(echo[0], 99), percentile(echo[1], 99), time.Microsecond, "%.0f µs")
	fmt.Printf("BENCH pane cat_mb_s plain=%.1f pane=%.1f echo_p50_us plain=%.0f pane=%.0f echo_p99_us plain=%.0f pane=%.0f\n",
		mbs(c0), mbs(c1), us(percentile(echo[0], 50)), us(percentile(echo[1], 50)), us(percentile(echo[0], 99)), us(percentile(echo[1], 99)))
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func writeText(path string, size int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	raw := make([]byte, 57)
	for n := 0; n < size; {
		rand.Read(raw)
		line := fmt.Sprintf("%08d %s\n", n, base64.StdEncoding.EncodeToString(raw))
		w.WriteString(line)
		n += len(line)
	}
	return w.Flush()
}

// term is a tmux server with one 120x40 window running a shell, plain or
// in agent-lock's pane, and a control client on it: keys go in through the
// control client and the window's output comes back as it happens.
type term struct {
	*tmuxterm.Term
	name string
	ctl  *exec.Cmd
	in   io.WriteCloser
	out  chan string
}

func newTerm(root, name, shell string) (*term, error) {
	tt, err := tmuxterm.Start(filepath.Join(root, name+".sock"), 120, 40, shell+"; sleep 600")
	if err != nil {
		return nil, err
	}
	t := &term{Term: tt, name: name, out: make(chan string, 4096)}
	t.Run("set-option", "-g", "window-size", "manual")
	t.ctl = exec.Command("tmux", "-S", t.Socket, "-C", "attach", "-t", "s")
	t.in, _ = t.ctl.StdinPipe()
	stdout, _ := t.ctl.StdoutPipe()
	if err := t.ctl.Start(); err != nil {
		t.close()
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "%output "); ok {
				if _, data, ok := strings.Cut(l, " "); ok {
					// Never blocking: while cat runs no one takes the
					// output, and a control client that stops reading
					// stops tmux's window, and so cat (make bench-pane
					// hung from a few MB). The key echo drains it.
					select {
					case t.out <- data:
					default:
					}
				}
			}
		}
		close(t.out)
	}()
	return t, nil
}

func (t *term) close() {
	if t.in != nil {
		t.in.Close()
	}
	t.Kill()
	if t.ctl != nil && t.ctl.Process != nil {
		t.ctl.Wait()
	}
}

// catTime is how long cat took to print the file, as the shell timed it.
func (t *term) catTime(big string, round int) (time.Duration, error) {
	tag := fmt.Sprintf("took%d", round)
	cmd := fmt.Sprintf(`s=$(date +%%s%%N); cat %s; e=$(date +%%s%%N); clear; echo %s=$(( (e-s)/1000 ))us`, big, tag)
	if _, err := t.Run("send-keys", "-t", "s:w", cmd, "Enter"); err != nil {
		return 0, err
	}
	s, err := t.WaitFor("s:w", tag+`=\d+us`, 10*time.Minute)
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(tag + `=(\d+)us`).FindStringSubmatch(s)
	n, _ := strconv.Atoi(m[1])
	return time.Duration(n) * time.Microsecond, nil
}

// echoTimes types n keys into `cat >/dev/null` (the terminal echoes them)
// and times each from its sending to the window's first output.
func (t *term) echoTimes(n int) ([]time.Duration, error) {
	if _, err := t.Run("send-keys", "-t", "s:w", "clear; cat >/dev/null", "Enter"); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	t.drain()
	var times []time.Duration
	for i := range n {
		// Capitals no redraw of the live view is made of.
		key := string("QXZKVWY"[i%7])
		start := time.Now()
		if _, err := fmt.Fprintf(t.in, "send-keys -t s:w %s\n", key); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := t.await(ctx, key)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("key %d (%s): %w", i, key, err)
		}
		times = append(times, time.Since(start))
		if i%60 == 59 {
			// A new line before the old one fills the window's width.
			fmt.Fprintf(t.in, "send-keys -t s:w Enter\n")
			time.Sleep(200 * time.Millisecond)
			t.drain()
		}
		// Let the renderer settle: the next key must not ride this one's frame.
		time.Sleep(30 * time.Millisecond)
		t.drain()
	}
	t.Run("send-keys", "-t", "s:w", "C-d")
	return times, nil
}

// await waits for output of the window that holds key.
func (t *term) await(ctx context.Context, key string) error {
	for {
		select {
		case data, ok := <-t.out:
			if !ok {
				return io.EOF
			}
			if strings.Contains(data, key) {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (t *term) drain() {
	for {
		select {
		case <-t.out:
		default:
			return
		}
	}
}

func median(ds []time.Duration) time.Duration { return percentile(ds, 50) }

func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
