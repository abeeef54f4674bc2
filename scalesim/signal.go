package scalesim

import (
	"context"

	"github.com/sqskit/sqsconsumer"
)

// Signal is our policy: the replicas figure of the scaling signal
// (sqsconsumer.Consumer.Scaling().Replicas), read from the oldest serving replica
// (every replica reads the same queue and computes about the same figure). While
// that figure is not known yet (no reading or no completions measured), the
// service keeps its current count.
type Signal struct{}

// Name is "ours".
func (Signal) Name() string { return "ours" }

// Options enables the signal with the run's target.
func (Signal) Options(s Setup) []sqsconsumer.Option {
	return []sqsconsumer.Option{sqsconsumer.WithScalingTarget(s.Target)}
}

// Desired implements Policy.
func (Signal) Desired(_ context.Context, v View) (int, error) {
	if len(v.Serving) == 0 {
		return v.Current, nil
	}
	sc := v.Serving[0].Scaling()
	if !sc.Known {
		return v.Current, nil
	}
	return sc.Replicas, nil
}
