package chaos

import (
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer/chaos/proxy"
)

var (
	seedFlag   = flag.Uint64("chaos.seed", 0, "seed of every random choice (kill moments, handler times, faults); 0 picks one and prints it")
	longFlag   = flag.Bool("chaos.long", false, "run the longer version: more messages, kills and faults")
	reportFlag = flag.Bool("chaos.report", false, "print the summary table of every scenario at the end")
)

// seed is the run's seed, set by TestMain.
var seed uint64

func TestMain(m *testing.M) {
	flag.Parse()
	seed = *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())%1_000_000_000 + 1
	}
	fmt.Printf("chaos: seed %d (replay with -chaos.seed=%d)\n", seed, seed)
	code := m.Run()
	if *reportFlag {
		printReport(os.Stdout)
	}
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// rng returns a generator for the named scenario, derived from the run's
// seed, so scenarios running in parallel draw independently and replay.
func rng(name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// summary is one scenario's figures.
type summary struct {
	name       string
	control    bool
	messages   int
	kills      int
	faults     map[proxy.Class]int
	lost       int
	dups       map[string]int // by cause
	recovery   []time.Duration
	stopTook   time.Duration
	violations []violation
	elapsed    time.Duration
}

var report struct {
	mu   sync.Mutex
	runs []summary
}

func record(s summary) {
	report.mu.Lock()
	report.runs = append(report.runs, s)
	report.mu.Unlock()
}

func faultCounts(recs []proxy.Record) map[proxy.Class]int {
	m := map[proxy.Class]int{}
	for _, r := range recs {
		if r.Fault.Class != proxy.None {
			m[r.Fault.Class]++
		}
	}
	return m
}

func (s summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "messages=%d kills=%d lost=%d", s.messages, s.kills, s.lost)
	fmt.Fprintf(&b, " faults=%s duplicates=%s", counts(s.faults), counts(s.dups))
	if len(s.recovery) > 0 {
		p50, mx := percentiles(s.recovery)
		fmt.Fprintf(&b, " recovery(n=%d) p50=%v max=%v", len(s.recovery), p50, mx)
	}
	if s.stopTook > 0 {
		fmt.Fprintf(&b, " stop=%v", s.stopTook.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, " violations=%d elapsed=%v", len(s.violations), s.elapsed.Round(100*time.Millisecond))
	return b.String()
}

func counts[K ~string](m map[K]int) string {
	if len(m) == 0 {
		return "0"
	}
	total := 0
	var parts []string
	for k, n := range m {
		total += n
		parts = append(parts, fmt.Sprintf("%s:%d", k, n))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d(%s)", total, strings.Join(parts, ","))
}

func percentiles(ds []time.Duration) (p50, mx time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond)
}

func printReport(f *os.File) {
	report.mu.Lock()
	defer report.mu.Unlock()
	runs := slices.Clone(report.runs)
	sort.Slice(runs, func(i, j int) bool { return runs[i].name < runs[j].name })
	fmt.Fprintf(f, "\nchaos summary (seed %d, long %v)\n", seed, *longFlag)
	w := tabwriter.NewWriter(f, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "scenario\tmessages\tkills\tfaults\tlost\tduplicates (by cause)\trecovery p50/max\tstop\tviolations")
	for _, s := range runs {
		rec := "-"
		if len(s.recovery) > 0 {
			p50, mx := percentiles(s.recovery)
			rec = fmt.Sprintf("%v/%v (n=%d)", p50, mx, len(s.recovery))
		}
		stop := "-"
		if s.stopTook > 0 {
			stop = s.stopTook.Round(time.Millisecond).String()
		}
		v := fmt.Sprint(len(s.violations))
		if s.control {
			v += " (control: must be >0)"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", s.name, s.messages, s.kills, counts(s.faults), s.lost, counts(s.dups), rec, stop, v)
	}
	w.Flush()
}
