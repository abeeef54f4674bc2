package scalesim_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/scalesim"
)

// requireOurs holds our signal to issue 26's claims on the step (20 to 2,000
// msg/s at 1/80): after the transient (Transient, three of the longest start
// delays, after the step) the p99 wait is within the target; once settled (from
// 13 min after the step: the transient, the signal's 5-minute scale-in window and
// the autoscaler's 5-minute cooldown) the replicas are within 25 % of the fewest
// that meet the target; at most one reversal; and fewer replica-minutes than each
// baseline that meets the target (those that miss it are beaten by meeting it).
func requireOurs(t *testing.T, results map[string]*scalesim.Result) {
	t.Helper()
	ours := results["ours"]
	require.NotNil(t, ours, "ours")
	// What holds at the CI scale, every run: ours meets the target after
	// the transient where the baselines miss it, losing nothing.
	require.True(t, ours.MeetsTarget(), "p99 wait after the transient %v, target %v", ours.SteadyP99, ours.Target)
	t.Run("plan agrees", func(t *testing.T) {
		claimsOnly(t)
		requirePlanAgrees(t, stepInput(scalesim.Signal{}), ours)
	})
	t.Run("claims", func(t *testing.T) {
		claimsOnly(t)
		requireClaims(t, ours, results)
	})
}

// claimsOnly skips issue 26's claims at the CI scale (see claimsScale):
// replicas within 25 % of the fewest, at most one reversal per step, the
// plan within 15 % of the simulation. SCALESIM_CLAIMS=1 runs them at 1/10.
func claimsOnly(t *testing.T) {
	t.Helper()
	if !claims() {
		t.Skip("issue 26's claims run at 1/10 with SCALESIM_CLAIMS=1 (CI does, without -race)")
	}
}

func requireClaims(t *testing.T, ours *scalesim.Result, results map[string]*scalesim.Result) {
	require.LessOrEqual(t, ours.SteadyP99, ours.Target, "p99 wait after the transient")
	require.Positive(t, ours.Fewest)
	lo, hi := int(math.Ceil(0.75*float64(ours.Fewest))), int(math.Floor(1.25*float64(ours.Fewest)))
	require.GreaterOrEqual(t, ours.SteadyMinReplicas, lo, "settled replicas against the fewest, %d", ours.Fewest)
	require.LessOrEqual(t, ours.SteadyMaxReplicas, hi, "settled replicas against the fewest, %d", ours.Fewest)
	require.LessOrEqual(t, ours.Reversals, 1, "reversals on one step")
	for _, name := range []string{"keda", "backlog"} {
		b := results[name]
		if b.MeetsTarget() {
			require.Less(t, ours.ReplicaMinutes, b.ReplicaMinutes, "replica-minutes against %s, which meets the target", name)
		}
	}
}

// TestIdle: a queue that goes idle. Ours scales out for the load and back in to
// one replica once it stops, losing nothing, with one reversal.
func TestIdle(t *testing.T) {
	t.Parallel()
	tr, err := scalesim.Standard("idle")
	require.NoError(t, err)
	if !claims() {
		// 12 busy minutes, not 15: the scale-out, the target held after
		// the transient and the fall to one replica are all there, for
		// four fifths of the messages.
		tr = scalesim.Idle(1000, 12*time.Minute, 20*time.Minute)
	}
	r, err := scalesim.Run(t, scalesim.Config{Trace: tr, Policy: scalesim.Signal{}, Scale: scale(), Seed: 26})
	require.NoError(t, err)
	logResult(t, r)
	requireSafe(t, r)
	require.LessOrEqual(t, r.SteadyP99, r.Target, "p99 wait while busy")
	last := r.Decisions[len(r.Decisions)-1]
	require.Equal(t, 1, last.After, "replicas once idle")
	require.Greater(t, r.PeakReplicas, 1, "it scaled out at all")
	claimsOnly(t)
	require.LessOrEqual(t, r.Reversals, tr.Steps, "reversals")
}
