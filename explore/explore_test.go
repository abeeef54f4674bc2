package explore

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"text/tabwriter"
	"time"

	"go.uber.org/goleak"
)

var (
	seedsFlag       = flag.Int("explore.seeds", 0, "seeds to run (0: 2,000; 300 with -race; 300 with -short, 100 with both)")
	fromFlag        = flag.Uint64("explore.from", 1, "the first seed")
	seedFlag        = flag.Uint64("explore.seed", 0, "replay this one seed")
	replayFlag      = flag.String("explore.replay", "", "replay this scenario (the JSON a failure prints)")
	repeatFlag      = flag.Int("explore.repeat", 1, "runs of each seed (the interleaving at one virtual instant varies)")
	shrinkFlag      = flag.Int("explore.shrink", 3, "failing seeds to shrink (0: none)")
	knownFlag       = flag.Bool("explore.known", true, "set known issues aside (knownIssue) instead of failing on them")
	strictConflicts = flag.Bool("explore.strict", true, "fail when New (or Run, for what only the queue tells) accepts a pair of conflicting options")
	storyFlag       = flag.Int("explore.story", 30, "lines of a message's story in a report")
	covFlag         = flag.Bool("explore.coverage", false, "print the coverage table even without -v")
)

func TestMain(m *testing.M) {
	flag.Parse()
	storyLines = *storyFlag
	code := m.Run()
	if n := deadlocked.Load(); n > 0 {
		// Their goroutines are blocked for good; each bubble was reported.
		fmt.Printf("explore: %d scenarios left goroutines blocked (reported as %s); goleak skipped\n", n, chkLeak)
	} else if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// defaultSeeds is how many seeds a plain `go test ./explore` runs.
func defaultSeeds() int {
	switch {
	case *seedsFlag > 0:
		return *seedsFlag
	case raceEnabled && testing.Short():
		return 100
	case raceEnabled:
		return 300
	case testing.Short():
		return 300
	}
	return 2000
}

type testingT = *testing.T

func synctestTest(t testingT, f func()) { synctest.Test(t, func(*testing.T) { f() }) }

// leakedStacks are the stacks of the library's goroutines still alive,
// for a report of goroutines that outlived a scenario.
func leakedStacks() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/sqskit/sqsconsumer.") && !strings.Contains(g, "explore.leakedStacks") {
			out = append(out, g)
		}
	}
	s := strings.Join(out, "\n\n")
	if len(s) > 4000 {
		s = s[:4000] + "\n..."
	}
	return s
}

// seedResult is one seed's run.
type seedResult struct {
	sc      Scenario
	vs      []violation // not known issues
	known   []violation // set aside as known issues (knownIssue)
	out     outcome
	elapsed time.Duration
}

// split sets known issues aside.
func split(sc Scenario, out outcome) (real, known []violation) {
	for _, v := range out.violations {
		if k := knownIssue(sc, out.seen, v); k != "" {
			// Labelled either way, so that -explore.known=false tells
			// the known from the new.
			v.Text = "[" + k + "] " + v.Text
			if *knownFlag {
				known = append(known, v)
				continue
			}
		}
		real = append(real, v)
	}
	return real, known
}

func runSeed(t *testing.T, sc Scenario) seedResult {
	begun := time.Now()
	watchdog := time.AfterFunc(time.Minute, func() {
		fmt.Fprintf(os.Stderr, "explore: seed %d has run for a minute of wall time: %s\n", sc.Seed, sc.JSON())
	})
	defer watchdog.Stop()
	var res seedResult
	for range max(*repeatFlag, 1) {
		out := runScenario(t, sc)
		real, known := split(sc, out)
		res = seedResult{sc: sc, vs: real, known: known, out: out}
		if len(real) > 0 {
			break
		}
	}
	res.elapsed = time.Since(begun)
	return res
}

// TestExplore runs the seeds (-explore.seeds from -explore.from), or
// replays one (-explore.seed, -explore.replay), and checks every
// invariant after each run.
func TestExplore(t *testing.T) {
	var scs []Scenario
	switch {
	case *replayFlag != "":
		sc, err := parseScenario(*replayFlag)
		if err != nil {
			t.Fatalf("-explore.replay: %v", err)
		}
		scs = append(scs, sc)
	case *seedFlag != 0:
		scs = append(scs, drawScenario(*seedFlag))
	default:
		for i := range defaultSeeds() {
			scs = append(scs, drawScenario(*fromFlag+uint64(i)))
		}
	}
	if len(scs) == 1 {
		t.Logf("scenario %s\n%s", scs[0].JSON(), scs[0])
		reportLimit = 1 << 20
	}
	wall := time.Now()
	results := make([]seedResult, len(scs))
	var next atomic.Int64
	t.Run("seeds", func(t *testing.T) {
		for w := range runtime.GOMAXPROCS(0) {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for {
					i := int(next.Add(1)) - 1
					if i >= len(scs) {
						return
					}
					results[i] = runSeed(t, scs[i])
				}
			})
		}
	})
	elapsed := time.Since(wall)
	if len(scs) == 1 {
		t.Logf("run: %s", results[0].out.summary)
	}
	cov := newCoverage()
	var failed, knownOnly []seedResult
	var virtual time.Duration
	for _, res := range results {
		cov.add(res)
		virtual += res.out.virtual
		switch {
		case len(res.vs) > 0:
			failed = append(failed, res)
		case len(res.known) > 0:
			knownOnly = append(knownOnly, res)
		}
	}
	t.Logf("%d seeds in %v (%.1f seeds/s wall, GOMAXPROCS %d, race %v): %d failed, %d with known issues only",
		len(scs), elapsed.Round(time.Millisecond), float64(len(scs))/elapsed.Seconds(), runtime.GOMAXPROCS(0), raceEnabled, len(failed), len(knownOnly))
	if testing.Verbose() || *covFlag {
		t.Logf("coverage (seeds drawing or meeting each):\n%s", cov.table())
	}
	byIssue := map[string][]uint64{}
	var unknown []uint64 // failing seeds with a violation no known issue explains
	for _, res := range append(slices.Clone(knownOnly), failed...) {
		isNew := false
		for _, v := range append(slices.Clone(res.known), res.vs...) {
			if !strings.HasPrefix(v.Text, "[") {
				isNew = true
				continue
			}
			k := v.Text[1:strings.Index(v.Text, "]")]
			if s := byIssue[k]; len(s) == 0 || s[len(s)-1] != res.sc.Seed {
				byIssue[k] = append(s, res.sc.Seed)
			}
		}
		if isNew {
			unknown = append(unknown, res.sc.Seed)
		}
	}
	if !*knownFlag && len(failed) > 0 {
		slices.Sort(unknown)
		t.Logf("failing seeds with a violation no known issue explains: %d, %v", len(unknown), unknown[:min(len(unknown), 50)])
	}
	if len(byIssue) > 0 {
		keys := sortedKeys(byIssue)
		var b strings.Builder
		for _, k := range keys {
			s := byIssue[k]
			fmt.Fprintf(&b, "\n  %s: %d seeds, e.g. %v", k, len(s), s[:min(len(s), 8)])
		}
		t.Logf("known issues (knownIssue; set aside unless -explore.known=false):%s", b.String())
	}
	// The seeds whose violations no known issue explains first: those
	// are reported (and shrunk) before the known ones.
	slices.SortStableFunc(failed, func(a, b seedResult) int {
		isNew := func(r seedResult) bool {
			return slices.ContainsFunc(r.vs, func(v violation) bool { return !strings.HasPrefix(v.Text, "[") })
		}
		switch na, nb := isNew(a), isNew(b); {
		case na && !nb:
			return -1
		case nb && !na:
			return 1
		}
		return 0
	})
	for i, res := range failed {
		if i >= 20 {
			t.Errorf("... and %d more failing seeds", len(failed)-20)
			break
		}
		t.Errorf("%s", report(res))
	}
	for _, res := range failed[:min(len(failed), *shrinkFlag)] {
		check := res.vs[0].Check
		small, vs, runs := shrink(t, res.sc, shrinkKey(res.sc, res.out.seen, res.vs[0]))
		t.Errorf("seed %d (%s) shrunk in %d runs to:\n  %s\n  replay: go test ./explore -run 'TestExplore$' -explore.replay='%s'\n  first violation: %s",
			res.sc.Seed, check, runs, strings.ReplaceAll(small.String(), "\n", "\n  "), small.JSON(), firstLine(vs))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func firstLine(vs []violation) string {
	for _, v := range vs {
		return v.String()
	}
	return "(none)"
}

// reportLimit bounds each violation's text in a report.
var reportLimit = 3000

// report is a failing seed: its replay line, its scenario and its
// violations.
func report(res seedResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d failed: go test ./explore -run 'TestExplore$' -explore.seed=%d\n  %s\n", res.sc.Seed, res.sc.Seed, strings.ReplaceAll(res.sc.String(), "\n", "\n  "))
	for i, v := range res.vs {
		if i >= 5 {
			fmt.Fprintf(&b, "  ... %d more violations\n", len(res.vs)-5)
			break
		}
		text := v.Text
		if len(text) > reportLimit {
			text = text[:reportLimit] + "..."
		}
		fmt.Fprintf(&b, "  [%s] %s\n", v.Check, text)
	}
	return b.String()
}

// shrink looks for a smaller scenario that still fails check: fewer
// messages, options at their defaults, fewer events, faults and
// behaviours. Each candidate runs once (a failure that needs a rare
// interleaving may shrink less).
func shrink(t *testing.T, sc Scenario, key string) (Scenario, []violation, int) {
	best := sc
	var bestVs []violation
	runs := 0
	const budget = 80
	for progress := true; progress && runs < budget; {
		progress = false
		for _, cand := range candidates(best) {
			if runs >= budget {
				break
			}
			runs++
			out := runScenario(t, cand)
			real, _ := split(cand, out)
			if slices.ContainsFunc(real, func(v violation) bool { return shrinkKey(cand, out.seen, v) == key }) {
				best, bestVs, progress = cand, real, true
				break
			}
		}
	}
	return best, bestVs, runs
}

// shrinkKey is what a smaller scenario must still fail: the same check,
// and the same known issue when the violation is one (so that shrinking
// one bug does not drift to another the same check reports).
func shrinkKey(sc Scenario, seen map[string]bool, v violation) string {
	return v.Check + "|" + knownIssue(sc, seen, v)
}

// candidates are the scenarios one step smaller than sc.
func candidates(sc Scenario) []Scenario {
	var out []Scenario
	add := func(f func(c *Scenario) bool) {
		c := sc
		c.Options = sc.Options
		c.Events = slices.Clone(sc.Events)
		c.Behaviour.Weights = make(map[string]int, len(sc.Behaviour.Weights))
		for k, v := range sc.Behaviour.Weights {
			c.Behaviour.Weights[k] = v
		}
		if f(&c) {
			out = append(out, c)
		}
	}
	for i, e := range sc.Events {
		if e.Kind != evShutdown {
			add(func(c *Scenario) bool { c.Events = slices.Delete(c.Events, i, i+1); return true })
		}
	}
	add(func(c *Scenario) bool { ok := c.FaultRate > 0; c.FaultRate = 0; return ok })
	add(func(c *Scenario) bool { ok := c.ExpireRate > 0; c.ExpireRate = 0; return ok })
	add(func(c *Scenario) bool {
		ok := c.Messages > 1
		c.Messages = max(1, c.Messages/2)
		c.SameBody = min(c.SameBody, c.Messages/3)
		return ok
	})
	for _, name := range sc.Options.optionNames() {
		if slices.Contains(conflicts[sc.Conflict].options, name) {
			continue // the conflict drawn on purpose stays
		}
		add(func(c *Scenario) bool { return c.Options.reset(name) && c.fitsConcurrency() })
	}
	add(func(c *Scenario) bool { ok := c.Spread > 0; c.Spread = 0; return ok })
	add(func(c *Scenario) bool { ok := c.Groups > 1; c.Groups = 1; return ok })
	add(func(c *Scenario) bool { ok := c.Idempotent != ""; c.Idempotent, c.SameBody = "", 0; return ok })
	add(func(c *Scenario) bool { ok := c.Middleware; c.Middleware = false; return ok })
	add(func(c *Scenario) bool { ok := c.SDKRetries; c.SDKRetries = false; return ok })
	add(func(c *Scenario) bool { ok := c.Bundle > 0; c.Bundle = 0; return ok })
	add(func(c *Scenario) bool { ok := c.Pool > 0; c.Pool, c.PoolKnown = 0, false; return ok })
	add(func(c *Scenario) bool { ok := c.FirstContact != ""; c.FirstContact, c.Heal = "", 0; return ok })
	add(func(c *Scenario) bool { ok := c.BigShare > 0; c.BigBody, c.BigShare = 0, 0; return ok })
	add(func(c *Scenario) bool { ok := c.BodySize > 0 && c.BigShare == 0; c.BodySize = 0; return ok })
	add(func(c *Scenario) bool { ok := c.Idem != nil; c.Idem = nil; return ok })
	add(func(c *Scenario) bool { ok := c.Protect > 0; c.Protect = 0; return ok })
	add(func(c *Scenario) bool {
		// Not under WithWaitTime(0): short polls would loop at no cost
		// in virtual time.
		ok := c.QueueWait > 0 && (c.Options.WaitTime == nil || *c.Options.WaitTime > 0)
		c.QueueWait = 0
		return ok
	})
	for k := range sc.Behaviour.Weights {
		if k != bSucceed && len(sc.Behaviour.Weights) > 1 {
			add(func(c *Scenario) bool { delete(c.Behaviour.Weights, k); return true })
		}
	}
	add(func(c *Scenario) bool { ok := c.Messages > 1; c.Messages--; return ok })
	if e := sc.shutdownEvent(); e != nil && e.Trigger != trTime {
		add(func(c *Scenario) bool { s := c.shutdownEvent(); s.Trigger, s.N = trTime, 0; return true })
	}
	return out
}

// fitsConcurrency: what WithConcurrency bounds (a Batch's size, the
// group limit, the adaptive limit's floor and start) is within it, as New
// requires (drawScenario draws it so; resetting WithConcurrency to its
// default may undo it, and New would refuse the scenario).
func (sc *Scenario) fitsConcurrency() bool {
	if sc.Conflict != "" && slices.Contains(conflicts[sc.Conflict].options, "Concurrency") {
		return true // the conflict's own
	}
	c, o := sc.concurrency(), sc.Options
	switch {
	case sc.Handler == "batch" && sc.BatchSize > c:
	case o.GroupLimit != nil && *o.GroupLimit >= c:
	case o.AdaptiveConc != nil && (o.AdaptiveConc[0] >= c || o.AdaptiveConc[1] > c):
	default:
		return true
	}
	return false
}

// reset sets the named option back to its default; false if it was.
func (o *Options) reset(name string) bool {
	before := o.describe()
	switch name {
	case "Concurrency":
		o.Concurrency = nil
	case "ReceiveSize":
		o.ReceiveSize = nil
	case "ReadAhead":
		o.ReadAhead = nil
	case "Pollers":
		o.Pollers = nil
	case "Visibility":
		o.Visibility = nil
	case "Heartbeat":
		o.Heartbeat = nil
	case "MaxLease":
		o.MaxLease, o.CeilingGrace = nil, nil
	case "CeilingGrace":
		o.CeilingGrace = nil
	case "Adaptive":
		o.Adaptive = nil
	case "Breaker":
		o.Breaker = nil
	case "Rate":
		o.Rate = nil
	case "GroupLimit":
		o.GroupLimit = nil
	case "FairDispatch":
		o.FairDispatch = nil
	case "Backoff":
		o.Backoff = nil
	case "DLQ":
		o.DLQ = nil
	case "Scaling":
		o.Scaling = nil
	case "HealthLimits":
		o.HealthLimits = nil
	case "StartupLimit":
		o.StartupLimit = nil
	case "HandlerTimeout":
		o.HandlerTimeout = nil
	case "ShutdownTimeout":
		o.ShutdownTimeout = nil
	case "WaitTime":
		o.WaitTime = nil
	case "CancelIdlePolls":
		o.CancelIdlePolls = nil
	case "PanicPolicy":
		o.PanicPolicy = nil
	case "RequireDLQ":
		o.RequireDLQ = nil
	case "AdaptiveConc":
		o.AdaptiveConc = nil
	case "MaxBytes":
		o.MaxBytes = nil
	}
	return o.describe() != before
}

// coverage counts, for each thing a seed can draw or meet, the seeds that
// did.
type coverage struct {
	mu     sync.Mutex
	counts map[string]int
	seeds  int
}

func newCoverage() *coverage { return &coverage{counts: map[string]int{}} }

func (c *coverage) add(res seedResult) {
	sc := res.sc
	seen := map[string]bool{}
	mark := func(k string) { seen[k] = true }
	mark("queue:" + sc.Queue)
	h := sc.Handler
	if sc.Middleware {
		h += "+middleware"
	}
	mark("handler:" + h)
	if sc.Idempotent != "" {
		mark("handler:idempotent-key-" + sc.Idempotent)
	}
	if sc.Handler == "batch" && sc.BatchWindow == 0 {
		mark("handler:batch-window-0")
	}
	if sc.SDKRetries {
		mark("drawn:sdk-retries")
	}
	if sc.FaultRate > 0 {
		mark("drawn:faults")
	}
	if sc.ExpireRate > 0 {
		mark("drawn:expiries")
	}
	if sc.QueueWait > 0 {
		mark("drawn:queue-wait")
	}
	if sc.Spread > 0 {
		mark("drawn:spread-arrivals")
	}
	for _, o := range sc.Options.optionNames() {
		mark("option:" + o)
	}
	if o := sc.Options.ReadAhead; o != nil && *o == 0 {
		mark("option:ReadAhead=0")
	}
	if o := sc.Options.ShutdownTimeout; o != nil && *o < Dur(time.Second) {
		mark("option:ShutdownTimeout<1s")
	}
	if o := sc.Options.DLQ; o != nil {
		mark("option:DLQ=" + o.Kind)
	}
	if o := sc.Options.AdaptiveConc; o != nil && o[1] == 0 {
		mark("option:AdaptiveConc.Initial=default")
	}
	if o := sc.Options.MaxBytes; o != nil && sc.BigShare > 0 {
		mark("option:MaxBytes+big-bodies")
	}
	if sc.BodySize > 0 {
		mark("drawn:body-size")
	}
	if sc.BigShare > 0 {
		mark("drawn:big-bodies")
	}
	if sc.Pool > 0 {
		k := "drawn:pool"
		if sc.PoolKnown {
			k += "-known"
		}
		mark(k)
	}
	if sc.FirstContact != "" {
		mark("first-contact-drawn:" + sc.FirstContact)
	}
	if sc.Bundle > 0 {
		mark(fmt.Sprintf("drawn:bundle-%d", sc.Bundle))
	}
	if sc.Protect > 0 {
		mark("option:ScaleInProtection")
	}
	if io := sc.Idem; io != nil {
		if io.TTL > 0 {
			mark("handler:idempotent-ttl")
		}
		if io.Retry > 0 {
			mark("handler:idempotent-in-progress-retry")
		}
		if io.Hook != "" {
			mark("handler:idempotent-hook-" + io.Hook)
		}
		if io.Validate {
			mark("handler:idempotent-payload-validation")
		}
	}
	if sc.Behaviour.Throttle != "" {
		mark("behaviour-drawn:throttled-" + sc.Behaviour.Throttle)
	}
	if o := sc.Options.Breaker; o != nil && o.Probe {
		mark("option:Breaker.Probe")
	}
	for k := range sc.Behaviour.Weights {
		mark("behaviour-drawn:" + k)
	}
	mark("profile:" + sc.Behaviour.Profile)
	for _, e := range sc.Events {
		k := "event-drawn:" + e.Kind
		if e.Trigger != trTime {
			k += "@" + e.Trigger
		}
		mark(k)
	}
	if sc.Conflict != "" {
		mark("conflict:" + sc.Conflict)
	}
	for k := range res.out.seen {
		if k == "refused" {
			k = "conflict:refused"
		}
		mark(k)
	}
	if len(res.vs) > 0 {
		mark("result:failed")
	}
	if len(res.known) > 0 {
		mark("result:known-issue")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seeds++
	for k := range seen {
		c.counts[k]++
	}
}

func (c *coverage) table() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := sortedKeys(c.counts)
	sort.SliceStable(keys, func(i, j int) bool {
		ci, _, _ := strings.Cut(keys[i], ":")
		cj, _, _ := strings.Cut(keys[j], ":")
		return ci < cj
	})
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	last := ""
	for _, k := range keys {
		cat, item, _ := strings.Cut(k, ":")
		if cat != last {
			fmt.Fprintf(w, "%s\t\t\n", cat)
			last = cat
		}
		fmt.Fprintf(w, "\t%s\t%d\t\n", item, c.counts[k])
	}
	fmt.Fprintf(w, "seeds\t\t%d\t\n", c.seeds)
	w.Flush()
	return b.String()
}
