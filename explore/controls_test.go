package explore

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// control is a negative control: a deliberately broken variant of the
// library (a broken.Mode) and the check that must catch it. applies, when
// set, skips the seeds whose scenario cannot show the bug (they still
// count among the seeds examined).
type control struct {
	mode    broken.Mode
	check   string
	applies func(sc *Scenario) bool
}

// controls: one row each. A new control is a broken.Mode at its code path
// and a row here.
var controls = []control{
	{broken.DeleteFailed, chkDelete, nil},
	{broken.FIFOHandBackSkipped, chkFIFO, func(sc *Scenario) bool { return sc.Queue == queueFIFO }},
	{broken.ReleaseReportedEarly, chkEvents, nil},
	{broken.RenewalWithoutCall, chkEvents, nil},
	{broken.AdoptionSkipped, chkTwice, nil},
	{broken.HealthIgnoresReceives, chkHealth, nil},
	{broken.BreakerCountsNeutral, chkBreaker, func(sc *Scenario) bool { return sc.Options.Breaker != nil }},
	{broken.ShutdownKeepsUnstarted, chkStranded, nil},
	{broken.RunSkipsHandlers, chkLeak, nil},
	{broken.GroupLimitIgnored, chkGroup, func(sc *Scenario) bool { r := run{sc: sc}; return r.groupLimit() > 0 }},
	{broken.StatsSkipUnstarted, chkStats, nil},
	{broken.ResumeKeepsFlowPaused, chkReceiving, func(sc *Scenario) bool { return sc.has(evResume) }},
	{broken.TransientReceiveFatal, chkRunErr, func(sc *Scenario) bool { return sc.FaultRate > 0 }},
	// Issue 35's cases 1, 2 and 1b reintroduced.
	{broken.FIFOBatchShutdownHang, chkReturn, func(sc *Scenario) bool {
		return sc.Queue == queueFIFO && sc.Handler == "batch" && !sc.Middleware && sc.Idempotent == ""
	}},
	{broken.ShutdownStrandsReceive, chkReturn, nil},
	// The options and behaviours that joined later, one per invariant.
	{broken.ThrottlePauseIgnored, chkThrottle, func(sc *Scenario) bool {
		return sc.Behaviour.Weights[bThrottled] > 0 && sc.Options.AdaptiveConc == nil
	}},
	{broken.ThrottledCountsForBreaker, chkBreaker, func(sc *Scenario) bool {
		return sc.Behaviour.Weights[bThrottled] > 0 && sc.Options.Breaker != nil
	}},
	{broken.RetryAfterIgnored, chkRelease, func(sc *Scenario) bool {
		return sc.Behaviour.Weights[bThrottled] > 0 || sc.Behaviour.Weights[bRetryNil] > 0 || sc.Behaviour.Weights[bRetry] > 0
	}},
	{broken.AdaptiveLimitIgnored, chkLimit, func(sc *Scenario) bool {
		return sc.Options.AdaptiveConc != nil && sc.Handler == "single"
	}},
	{broken.ByteBoundIgnored, chkBytes, func(sc *Scenario) bool { return sc.Options.MaxBytes != nil }},
	{broken.CallLimitIgnored, chkCalls, func(sc *Scenario) bool { return sc.Pool > 0 }},
	// (With a round trip: what a paused Consumer receives it hands back
	// at once, and receives again, a loop that takes no virtual time
	// without one.)
	{broken.PauseKeepsReceiving, chkPaused, func(sc *Scenario) bool { return sc.has(evPause) && sc.RTT >= Dur(5*time.Millisecond) }},
	{broken.FirstContactRetried, chkFirst, func(sc *Scenario) bool {
		fc := firstContactOf(sc.FirstContact)
		return fc != nil && fc.fatal
	}},
	{broken.BundleReversed, chkSettings, func(sc *Scenario) bool { return sc.Bundle > 0 }},
}

// TestExploreControls switches each control on in turn and runs the seeds
// TestExplore runs, in order, until the control's check reports it on a
// seed whose scenario passes that check with the control off: the check
// catches the bug, not the scenario (nor a known issue: the filter does
// not apply here). Each must be caught within the seeds CI runs without
// the race detector (2,000: CI's explorer step); under -race, whose 300
// seeds are there to run the library under the detector, the controls are
// left to that step.
func TestExploreControls(t *testing.T) {
	switch {
	case *seedFlag != 0 || *replayFlag != "":
		t.Skip("replaying a scenario")
	case raceEnabled && *seedsFlag == 0:
		t.Skip("the controls' budget is the 2,000 seeds CI's explorer step runs without -race (go test ./explore); -explore.seeds=N runs them here")
	}
	budget := defaultSeeds()
	type row struct {
		c                control
		examined, ran    int
		seed             uint64
		found            bool
		wall             time.Duration
		example, skipped string
	}
	var rows []row
	for _, c := range controls {
		t.Run(c.mode.String(), func(t *testing.T) {
			begun := time.Now()
			rw := row{c: c}
			defer func() {
				rw.wall = time.Since(begun)
				rows = append(rows, rw)
			}()
			var ruledOut []uint64 // seeds that fail the check with the control off too
			for from := 0; from < budget && !rw.found; {
				seed, examined, ran, v := searchControl(t, c, *fromFlag+uint64(from), budget-from)
				rw.examined = from + examined
				rw.ran += ran
				if v == nil {
					break
				}
				from += examined
				// Confirm with the control off.
				sc := drawScenario(seed)
				out := runScenario(t, sc)
				if slices.ContainsFunc(out.violations, func(x violation) bool { return x.Check == c.check }) {
					ruledOut = append(ruledOut, seed)
					continue
				}
				rw.found, rw.seed, rw.example = true, seed, v.Text
			}
			if len(ruledOut) > 0 {
				rw.skipped = fmt.Sprintf(" (seeds %v fail it without the control too)", ruledOut)
			}
			if !rw.found {
				t.Errorf("control %s: check %s caught nothing in %d seeds%s", c.mode, c.check, rw.examined, rw.skipped)
				return
			}
			text := rw.example
			if i := strings.IndexByte(text, '\n'); i > 0 {
				text = text[:i]
			}
			t.Logf("control %s: caught by %s at seed %d (%d seeds examined, %d run)%s: %s", c.mode, c.check, rw.seed, rw.examined, rw.ran, rw.skipped, text)
		})
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "control\tcheck\tcaught at seed\tseeds examined\tseeds run\twall")
	for _, rw := range rows {
		at := "NOT CAUGHT"
		if rw.found {
			at = fmt.Sprint(rw.seed)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%v\n", rw.c.mode, rw.c.check, at, rw.examined, rw.ran, rw.wall.Round(time.Millisecond))
	}
	w.Flush()
	t.Logf("negative controls (budget %d seeds each):\n%s", budget, b.String())
}

// searchControl runs the seeds from first on (at most n), with c's mode
// on, until one reports c's check: it returns that seed, how many seeds
// it examined to get there, how many it ran, and the violation (nil:
// none in n seeds).
func searchControl(t *testing.T, c control, first uint64, n int) (seed uint64, examined, ran int, v *violation) {
	restore := broken.Set(c.mode)
	defer restore()
	var next, runs atomic.Int64
	var mu sync.Mutex
	best := n // the lowest index that reported the check
	var bestV *violation
	// One subtest per worker: synctest.Test wants a test of its own.
	t.Run("seeds", func(t *testing.T) {
		for w := range runtime.GOMAXPROCS(0) {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				searchFrom(t, c, first, &next, &runs, &mu, &best, &bestV)
			})
		}
	})
	if bestV == nil {
		return 0, n, int(runs.Load()), nil
	}
	return first + uint64(best), best + 1, int(runs.Load()), bestV
}

// searchFrom is one worker of searchControl.
func searchFrom(t *testing.T, c control, first uint64, next, runs *atomic.Int64, mu *sync.Mutex, best *int, bestV **violation) {
	for {
		i := int(next.Add(1)) - 1
		mu.Lock()
		stop := i >= *best
		mu.Unlock()
		if stop {
			return
		}
		sc := drawScenario(first + uint64(i))
		if c.applies != nil && !c.applies(&sc) {
			continue
		}
		runs.Add(1)
		out := runScenario(t, sc)
		for _, x := range out.violations {
			if x.Check == c.check {
				mu.Lock()
				if i < *best {
					*best, *bestV = i, &x
				}
				mu.Unlock()
				break
			}
		}
	}
}
