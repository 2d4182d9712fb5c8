package jail

import (
	"errors"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// verifierBudget bounds the instructions the verifier may process for any
// one program. Every jailed run pays verification at start, and under the
// test VMs' emulation that cost is seconds: carrying three dentries through
// classify's walk once made it 22000 on 7.x kernels (and the start twice as
// slow) with every test still passing. Today's worst is file_open's 14300
// on 7.2 (13526 on 6.12, 9857 on 6.1), in a cell with files granted by
// name, git's names and in-bounds samples streamed, as sessions run: the
// folders' walk cache gives its decision two paths (a kept walk, or one
// made from the folder).
const verifierBudget = 15000

// sessionSpec is the enforcement programs' spec as a session loads it.
// The cell's settings are written after the load (bpf/maps.h: cell), so
// the verifier knows none of them and checks every path a cell may take:
// the cost measured is every session's.
func sessionSpec(t *testing.T) *ebpf.CollectionSpec {
	t.Helper()
	spec, err := loadJail()
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range spec.Programs {
		if p.Type == ebpf.TracePoint {
			delete(spec.Programs, name)
		}
	}
	delete(spec.Maps, "calls")
	delete(spec.Maps, "obs_created")
	if err := fitToKernel(spec, btf.NewCache()); err != nil {
		t.Fatal(err)
	}
	if err := spec.Variables["walk_cache"].Set(uint32(1)); err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestVerifierCost loads the enforcement programs with the verifier's
// statistics and fails when one needs more than verifierBudget
// instructions. AGENT_LOCK_VERIFIER_LOG=1 logs each program's statistics.
func TestVerifierCost(t *testing.T) {
	if os.Getenv("AGENT_LOCK_VM") != "1" {
		t.Skip("LSM programs load only in the test VMs")
	}
	spec := sessionSpec(t)
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
	})
	if err != nil {
		// The verifier's whole log, not the error's last lines.
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("%v:\n%+v", err, ve)
		}
		t.Fatalf("%+v", err)
	}
	defer coll.Close()

	names := make([]string, 0, len(coll.Programs))
	for name := range coll.Programs {
		names = append(names, name)
	}
	sort.Strings(names)
	processed := regexp.MustCompile(`processed (\d+) insns`)
	verbose := os.Getenv("AGENT_LOCK_VERIFIER_LOG") == "1"
	total, worst, worstName := 0, 0, ""
	for _, name := range names {
		log := coll.Programs[name].VerifierLog
		m := processed.FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("%s: no statistics in the verifier's log:\n%s", name, log)
		}
		n, _ := strconv.Atoi(m[1])
		total += n
		if n > worst {
			worst, worstName = n, name
		}
		if verbose {
			t.Logf("%s:\n%s", name, log)
		}
		if n > verifierBudget {
			t.Errorf("%s: the verifier processed %d instructions, over the budget of %d", name, n, verifierBudget)
		}
	}
	t.Logf("%d programs, %d instructions processed; the most: %s, %d", len(names), total, worstName, worst)
}

// livenessBudget bounds how many times the verifier's liveness pass (Linux
// 7.x, compute_subprog_args) analyses a subprogram while loading the
// program. It analyses one again, callees included, for every call site
// that hands it a pointer into the caller's stack; when our global
// functions took their arguments as a struct there, file_open ran 70
// analyses, path_unlink 42 and path_rename 109, and the pass was a quarter
// of a session's start in forky's guest. With scalar arguments and packed
// returns they run 25, 19 and 36.
var livenessBudget = map[string]int{"file_open": 30, "path_unlink": 24, "path_rename": 44}

// TestVerifierLiveness counts the liveness pass's analyses in the
// verifier's instruction-level log, on kernels that have the pass.
func TestVerifierLiveness(t *testing.T) {
	if os.Getenv("AGENT_LOCK_VM") != "1" {
		t.Skip("LSM programs load only in the test VMs")
	}
	spec := sessionSpec(t)
	for name := range spec.Programs {
		if _, ok := livenessBudget[name]; !ok {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelInstruction, LogSizeStart: 1 << 26},
	})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer coll.Close()
	analyzing := regexp.MustCompile(`subprog#\d+: analyzing \(depth \d+\)`)
	seen := 0
	for name, budget := range livenessBudget {
		n := len(analyzing.FindAllStringIndex(coll.Programs[name].VerifierLog, -1))
		seen += n
		t.Logf("%s: %d analyses by the liveness pass (budget %d)", name, n, budget)
		if n > budget {
			t.Errorf("%s: the liveness pass ran %d analyses, over the budget of %d: does a global function take a pointer to its caller's stack?", name, n, budget)
		}
	}
	if seen == 0 {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			t.Fatal(err)
		}
		release := unix.ByteSliceToString(u.Release[:])
		major, _, _ := strings.Cut(release, ".")
		if n, err := strconv.Atoi(major); err != nil || n >= 7 {
			t.Fatalf("no liveness analyses logged on %s: has the log's wording changed?", release)
		}
		t.Skipf("%s has no liveness pass", release)
	}
}
