package otelsqs

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/sqskit/sqsconsumer"
)

// RegisterConsumer registers observable instruments that read c's Stats
// and Scaling each time the meter provider collects (see the package doc:
// the sqsconsumer.scaling.* gauges, and the sqsconsumer.api.* and
// sqsconsumer.scaling.calls counters). It complements the Observer, which
// sees events but not what the Consumer measured. Only WithMeterProvider
// of opts applies (default: the global meter provider).
//
// Call it once per Consumer, any time after New; before Run, the counters
// read 0 and the scaling gauges are absent. Call Unregister on the
// returned Registration when c is done with (it does not stop c, and c
// does not stop the observation). Two registered Consumers of the same
// queue report under the same attributes, which an OpenTelemetry SDK does
// not add up: register one of them, or use separate meter providers.
//
// It returns an error if c is nil or an instrument or the callback cannot
// be registered. The callback is safe for concurrent use, as Stats and
// Scaling are.
func RegisterConsumer(c *sqsconsumer.Consumer, opts ...Option) (metric.Registration, error) {
	if c == nil {
		return nil, errors.New("otelsqs: RegisterConsumer: nil Consumer")
	}
	cfg := newConfig(opts)
	m := cfg.meterProvider.Meter(ScopeName)
	var errs []error
	gauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		g, err := m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	counter := func(name, desc string) metric.Int64ObservableCounter {
		n, err := m.Int64ObservableCounter(name, metric.WithUnit("{call}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return n
	}
	replicas, err := m.Int64ObservableGauge("sqsconsumer.scaling.replicas", metric.WithUnit("{replica}"),
		metric.WithDescription("Replicas of this service the queue needs to meet the scaling target; absent while the figure is unknown."))
	errs = append(errs, err)
	backlog := gauge("sqsconsumer.scaling.backlog", "{message}", "The queue's visible messages, smoothed, as of the latest successful reading.")
	arrival := gauge("sqsconsumer.scaling.arrival_rate", "{message}/s", "The whole queue's inferred arrival rate.")
	demand := gauge("sqsconsumer.scaling.demand", "{message}/s", "The rate the replicas must finish to keep up and start the backlog within the target.")
	capacity := gauge("sqsconsumer.scaling.capacity_per_replica", "{message}/s", "What one replica's handler slots finish a second when never starved.")
	calls := counter("sqsconsumer.api.calls", "SQS API calls made, by action (rpc.method); retries of one call are not counted.")
	empty := counter("sqsconsumer.api.empty_receives", "ReceiveMessage calls that returned no message.")
	scalingCalls := counter("sqsconsumer.scaling.calls", "GetQueueAttributes calls made for the scaling signal (also counted in sqsconsumer.api.calls).")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	base := queueAttrs(c.QueueURL())
	attrs := metric.WithAttributeSet(attribute.NewSet(base...))
	action := func(name string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(append(base[:len(base):len(base)], semconv.RPCMethod(name))...))
	}
	byAction := []struct {
		opt   metric.ObserveOption
		count func(sqsconsumer.CallCounts) int64
	}{
		{action("ReceiveMessage"), func(n sqsconsumer.CallCounts) int64 { return n.Receive }},
		{action("DeleteMessage"), func(n sqsconsumer.CallCounts) int64 { return n.Delete }},
		{action("DeleteMessageBatch"), func(n sqsconsumer.CallCounts) int64 { return n.DeleteBatch }},
		{action("ChangeMessageVisibility"), func(n sqsconsumer.CallCounts) int64 { return n.ChangeVisibility }},
		{action("ChangeMessageVisibilityBatch"), func(n sqsconsumer.CallCounts) int64 { return n.ChangeVisibilityBatch }},
		{action("GetQueueAttributes"), func(n sqsconsumer.CallCounts) int64 { return n.GetQueueAttributes }},
		{action("SendMessage"), func(n sqsconsumer.CallCounts) int64 { return n.SendMessage }},
	}
	receiveAttrs, attrsCalls := byAction[0].opt, byAction[5].opt // ReceiveMessage, GetQueueAttributes

	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		n := c.Stats().Calls
		for _, a := range byAction {
			o.ObserveInt64(calls, a.count(n), a.opt)
		}
		o.ObserveInt64(empty, n.EmptyReceive, receiveAttrs)
		o.ObserveInt64(scalingCalls, n.ScalingAttributes, attrsCalls)

		s := c.Scaling()
		if !s.At.IsZero() && (s.Known || s.Err == "") {
			// A reading exists and is current: the queue's count stands
			// even while one replica's capacity is not yet measured.
			o.ObserveFloat64(backlog, s.Visible, attrs)
		}
		if s.Known {
			o.ObserveInt64(replicas, int64(s.Replicas), attrs)
			o.ObserveFloat64(arrival, s.ArrivalRate, attrs)
			o.ObserveFloat64(demand, s.Demand, attrs)
		}
		if s.Known && s.CapacityPerReplica > 0 {
			// 0 means not measured (a figure known from an empty queue).
			o.ObserveFloat64(capacity, s.CapacityPerReplica, attrs)
		}
		return nil
	}, replicas, backlog, arrival, demand, capacity, calls, empty, scalingCalls)
}
