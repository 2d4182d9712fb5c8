package jail

import (
	"errors"
	"os"
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
)

// verifierBudget bounds the instructions the verifier may process for any
// one program. Every jailed run pays verification at start, and under the
// test VMs' emulation that cost is seconds: carrying three dentries through
// classify's walk once made it 22000 on 7.x kernels (and the start twice as
// slow) with every test still passing. Today's worst is file_open's 16119
// on 7.2 (13890 on 6.12, 11315 on 6.1), in a cell with files granted by
// name, git's names and in-bounds samples streamed, as sessions run: the
// folders' walk cache gives its decision two paths (a kept walk, or one
// made from the folder), some 4000 more than the other file hooks' 11736
// (path_rename), for 2.6% more in all programs.
const verifierBudget = 16500

// TestVerifierCost loads the enforcement programs with the verifier's
// statistics and fails when one needs more than verifierBudget
// instructions. AGENT_LOCK_VERIFIER_LOG=1 logs each program's statistics.
func TestVerifierCost(t *testing.T) {
	if os.Getenv("AGENT_LOCK_VM") != "1" {
		t.Skip("LSM programs load only in the test VMs")
	}
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
	if err := fitToKernel(spec); err != nil {
		t.Fatal(err)
	}
	// As Load sets them: the verifier prunes what these constants rule out
	// (with no cgroup, every hook returns at once).
	for name, v := range map[string]any{
		"jail_cgroup_id": uint64(4242),
		"pat_count":      uint32(PatternMax),
		"pat_scopes":     uint32(patInGrants | patInProject),
		"named_count":    uint32(NamedMax),
		"git_names":      uint32(1<<(giFollowed+1) - 1),
		"walk_cache":     uint32(1),
		// Sessions stream in-bounds samples: file_open then reports
		// what it allows too, a longer chain of calls.
		"stream_inbounds": uint32(1),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			t.Fatalf("set %s: %v", name, err)
		}
	}
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
