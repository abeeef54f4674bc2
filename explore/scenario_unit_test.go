package explore

import (
	"reflect"
	"testing"
)

// TestScenarioReplays: a seed draws the same scenario every time, and a
// scenario's JSON (a replay line) reads back as the same scenario, so that
// both replay lines run what failed.
func TestScenarioReplays(t *testing.T) {
	for seed := uint64(1); seed <= 500; seed++ {
		sc := drawScenario(seed)
		if again := drawScenario(seed); !reflect.DeepEqual(sc, again) {
			t.Fatalf("seed %d drew two scenarios:\n%s\n%s", seed, sc.JSON(), again.JSON())
		}
		back, err := parseScenario(sc.JSON())
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, sc.JSON())
		}
		if !reflect.DeepEqual(sc, back) {
			t.Fatalf("seed %d: the replay line reads back as another scenario:\n%s\n%s", seed, sc.JSON(), back.JSON())
		}
	}
}

// TestShrinkCandidatesAreSmaller: each candidate the shrinker tries takes
// one step towards the default scenario, so that shrinking ends.
func TestShrinkCandidatesAreSmaller(t *testing.T) {
	size := func(sc Scenario) int {
		n := sc.Messages + len(sc.Events) + len(sc.Options.optionNames()) + len(sc.Behaviour.Weights) + sc.Groups
		for _, b := range []bool{sc.FaultRate > 0, sc.ExpireRate > 0, sc.Spread > 0, sc.Idempotent != "", sc.Middleware, sc.SDKRetries, sc.QueueWait > 0,
			sc.BodySize > 0, sc.BigShare > 0, sc.Bundle > 0, sc.Pool > 0, sc.FirstContact != "", sc.Idem != nil, sc.Protect > 0} {
			if b {
				n++
			}
		}
		if e := sc.shutdownEvent(); e != nil && e.Trigger != trTime {
			n++
		}
		return n
	}
	for seed := uint64(1); seed <= 200; seed++ {
		sc := drawScenario(seed)
		for _, c := range append(candidates(sc), sc) {
			if c.Options.WaitTime != nil && *c.Options.WaitTime == 0 && c.QueueWait == 0 {
				t.Fatalf("seed %d: a scenario whose receives are short polls (they loop at no cost in virtual time):\n%s", seed, c.JSON())
			}
			if c.Seed == sc.Seed && c.JSON() != sc.JSON() && size(c) >= size(sc) {
				t.Fatalf("seed %d: a candidate is no smaller:\n%s\n%s", seed, sc.JSON(), c.JSON())
			}
		}
	}
}

// TestShrinkKeepsConflicts: a seed drawn with a conflict stays one while
// it shrinks. The shrinker once reset the options the conflict is made of:
// New (or Run) then accepted a scenario still labelled with the conflict,
// which the harness judged as "accepted the conflicting options" (the
// same check a wrongly worded refusal fails, so the shrink drifted to a
// scenario without the conflict), and which it never ran as a valid one.
// Nor may a step make New refuse something else first: WithConcurrency
// reset to its default under an adaptive floor above it.
func TestShrinkKeepsConflicts(t *testing.T) {
	n := 0
	for seed := uint64(1); seed <= 10000; seed++ {
		sc := drawScenario(seed)
		if sc.Conflict == "" {
			continue
		}
		for _, c := range candidates(sc) {
			n++
			if out := runScenario(t, c); out.refused != c.Conflict || len(out.violations) > 0 {
				t.Fatalf("seed %d: a shrink candidate of conflict %s is not refused (%v):\n%s", seed, c.Conflict, out.violations, c.JSON())
			}
		}
	}
	if n == 0 {
		t.Fatal("no seed drew a conflict")
	}
}
