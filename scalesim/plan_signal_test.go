package scalesim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/doctor"
	"github.com/sqskit/sqsconsumer/scalesim"
)

// requirePlanAgrees holds doctor.Plan to the simulation of the same step (issue
// 26 point 4): the replicas and the p99 wait once settled agree within 15 %. The
// plan gets the inputs the simulated service has: at 1/80, one slot per replica
// and 1/80 of the rates (the waits of one slot per replica are a queueing model's
// business; at 80 slots both are about 0), calls taking no time (HandOff 1 ns),
// and the autoscaler's figures.
func requirePlanAgrees(t *testing.T, in scalesim.StepInput, sim *scalesim.Result) {
	t.Helper()
	k := float64(in.Scale)
	plan, err := doctor.Plan(doctor.PlanInput{
		HandlerP50: in.HandlerP50, HandlerP99: in.HandlerP99,
		ArrivalAvg: in.ArrivalAvg / k, ArrivalPeak: in.ArrivalPeak / k,
		Target: in.Target, Concurrency: in.Concurrency / in.Scale,
		HandOff:         time.Nanosecond,
		DecisionPeriod:  scalesim.DefaultDecisionPeriod,
		StartDelay:      (scalesim.DefaultStartDelayMin + scalesim.DefaultStartDelayMax) / 2,
		ScaleInCooldown: scalesim.DefaultScaleInCooldown,
	})
	require.NoError(t, err)
	t.Logf("plan: peak %d replicas, p99 wait %v; sim settled: %d-%d replicas, p99 wait %v",
		plan.Peak.Replicas, plan.Peak.P99Wait, sim.SteadyMinReplicas, sim.SteadyMaxReplicas, sim.SettledP99)
	require.InEpsilon(t, float64(plan.Peak.Replicas), float64(sim.SteadyMaxReplicas), 0.15, "replicas, plan against sim")
	require.InEpsilon(t, float64(plan.Peak.P99Wait), float64(sim.SettledP99), 0.15, "p99 wait, plan against sim")
}
