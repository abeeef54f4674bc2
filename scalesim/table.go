package scalesim

import (
	"fmt"
	"io"
	"time"
)

// PolicyNames are the policies [PolicyByName] knows, in the table's order.
var PolicyNames = []string{"ours", "keda", "backlog"}

// PolicyByName returns the named policy: "ours" ([Signal]), "keda" ([KEDA]) or
// "backlog" ([BacklogPerInstance]).
func PolicyByName(name string) (Policy, error) {
	switch name {
	case "ours":
		return Signal{}, nil
	case "keda":
		return KEDA{}, nil
	case "backlog":
		return BacklogPerInstance{}, nil
	}
	return nil, fmt.Errorf("scalesim: unknown policy %q (known: %v)", name, PolicyNames)
}

// Conditions writes the run's conditions as markdown, for the table's heading.
func Conditions(w io.Writer, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	k := cfg.Scale
	_, err = fmt.Fprintf(w, `Virtual time (testing/synctest), one in-memory sqstest queue, replicas that are real
Consumers. Handler time lognormal, p50 %v, p99 %v (mean %v), ending on a %v grid;
%d handler slots per replica (about %.0f msg/s each); arrivals Poisson.
Autoscaler: a decision every %v; a new replica serves %v–%v after the decision
(uniform, whole seconds); scale-out at once; scale-in only %v after the last scaling
activity, newest replicas first, each stopped gracefully (Run's context cancelled);
%d to %d replicas. Target wait %v (send to handler start). KEDA's queueLength and the
backlog-per-instance target are target / mean handler time × concurrency. Scale 1/%d:
rates, bursts and slots divided by %d (replicas and waits about the same as at full rate).
Replica-minutes over the trace's duration; "settled" is the replica count in the window
after the transient and one scale-in; "steady p99" the waits after %v.
`, cfg.HandlerP50, cfg.HandlerP99, cfg.MeanHandler().Round(100*time.Microsecond), cfg.Tick,
		cfg.Concurrency, float64(cfg.Concurrency)/cfg.MeanHandler().Seconds(),
		cfg.DecisionPeriod, cfg.StartDelayMin, cfg.StartDelayMax, cfg.ScaleInCooldown,
		cfg.MinReplicas, cfg.MaxReplicas, cfg.Target, k, k, Transient)
	return err
}

// TableHeader writes the markdown table's header.
func TableHeader(w io.Writer) error {
	_, err := fmt.Fprintln(w, "| trace | policy | replica-min | p50 wait | p99 wait | steady p99 | meets target | settled replicas | fewest | peak | reversals | lost | duplicates |\n|---|---|--:|--:|--:|--:|:-:|--:|--:|--:|--:|--:|--:|")
	return err
}

// TableRow writes r as one row of the markdown table.
func TableRow(w io.Writer, r *Result) error {
	meets := "no"
	if r.MeetsTarget() {
		meets = "yes"
	}
	settled := fmt.Sprint(r.SteadyMaxReplicas)
	if r.SteadyMinReplicas != r.SteadyMaxReplicas {
		settled = fmt.Sprintf("%d–%d", r.SteadyMinReplicas, r.SteadyMaxReplicas)
	}
	_, err := fmt.Fprintf(w, "| %s | %s | %.0f | %v | %v | %v | %s | %s | %d | %d | %d | %d | %d |\n",
		r.Trace, r.Policy, r.ReplicaMinutes, round(r.WaitP50), round(r.WaitP99), round(r.SteadyP99), meets,
		settled, r.Fewest, r.PeakReplicas, r.Reversals, r.Lost, r.Duplicates)
	return err
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
