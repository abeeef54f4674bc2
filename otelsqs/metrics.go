package otelsqs

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/sqskit/sqsconsumer"
)

// durationBuckets are the histogram boundaries in seconds: 5 ms to the
// 12-hour ceiling of an SQS lease.
var durationBuckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60,
	120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 43200,
}

// Observer records metrics of the events it observes (see the package
// doc for the instruments). Make one with NewObserver and give it to
// sqsconsumer.WithObserver; the zero value is not usable. Observe is safe
// for concurrent use and keeps no per-message state: each event carries
// what its instruments need (SinceStart for the handler's duration,
// EventDone for the end of a delivery).
type Observer struct {
	received, adopted, processed, failed, deleted, released metric.Int64Counter
	renewals, renewalFailures, lost, expired, ceiling       metric.Int64Counter
	inFlight                                                metric.Int64UpDownCounter
	handlerDur, messageDur                                  metric.Float64Histogram

	attrs sync.Map // queue URL -> metric.MeasurementOption
}

// NewObserver makes an Observer whose instruments come from the meter
// provider (WithMeterProvider; default the global one). It returns an
// error if an instrument cannot be created.
func NewObserver(opts ...Option) (*Observer, error) {
	cfg := newConfig(opts)
	m := cfg.meterProvider.Meter(ScopeName)
	o := &Observer{}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return h
	}
	o.received = counter("sqsconsumer.messages.received", "{message}", "Messages ReceiveMessage returned.")
	o.adopted = counter("sqsconsumer.messages.adopted", "{message}", "Redeliveries of messages still being handled here, adopted by their running lease.")
	o.processed = counter("sqsconsumer.messages.processed", "{message}", "Handler calls that returned, successfully or not.")
	o.failed = counter("sqsconsumer.messages.failed", "{message}", "Handler calls that returned an error or panicked.")
	o.deleted = counter("sqsconsumer.messages.deleted", "{message}", "Messages whose delete SQS confirmed.")
	o.released = counter("sqsconsumer.messages.released", "{message}", "Messages whose visibility was set for a redelivery.")
	o.renewals = counter("sqsconsumer.lease.renewals", "{renewal}", "Visibility extensions SQS confirmed.")
	o.renewalFailures = counter("sqsconsumer.lease.renewal_failures", "{renewal}", "Visibility extensions that failed (transient ones are retried).")
	o.lost = counter("sqsconsumer.lease.lost", "{lease}", "Leases whose receipt handle SQS refused.")
	o.expired = counter("sqsconsumer.lease.expired", "{lease}", "Leases whose deadline passed with no confirmed renewal.")
	o.ceiling = counter("sqsconsumer.lease.ceiling_reached", "{lease}", "Leases that neared their maximum duration.")
	ud, err := m.Int64UpDownCounter("sqsconsumer.messages.in_flight", metric.WithUnit("{message}"),
		metric.WithDescription("Messages a Consumer received whose delivery has not ended (handler returned and lease over)."))
	errs = append(errs, err)
	o.inFlight = ud
	o.handlerDur = hist("sqsconsumer.handler.duration", "Handler calls, from start to return.")
	o.messageDur = hist("sqsconsumer.message.duration", "Deliveries from the receive's answer to their end (handler returned and lease over), in-process queueing included.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Observer) attrsFor(queueURL string) metric.MeasurementOption {
	if a, ok := o.attrs.Load(queueURL); ok {
		return a.(metric.MeasurementOption)
	}
	a, _ := o.attrs.LoadOrStore(queueURL, metric.WithAttributeSet(attribute.NewSet(queueAttrs(queueURL)...)))
	return a.(metric.MeasurementOption)
}

// queueAttrs are the attributes every instrument of a queue's carries:
// messaging.system, and messaging.destination.name when the URL is known.
func queueAttrs(queueURL string) []attribute.KeyValue {
	kv := []attribute.KeyValue{semconv.MessagingSystemAWSSQS}
	if queueURL != "" {
		kv = append(kv, semconv.MessagingDestinationName(queueName(queueURL)))
	}
	return kv
}

// Observe implements sqsconsumer.Observer.
func (o *Observer) Observe(e sqsconsumer.Event) {
	ctx := context.Background()
	attrs := o.attrsFor(e.QueueURL)
	switch e.Kind {
	case sqsconsumer.EventReceived:
		o.received.Add(ctx, 1, attrs)
		o.inFlight.Add(ctx, 1, attrs)
	case sqsconsumer.EventAdopted:
		o.adopted.Add(ctx, 1, attrs)
	case sqsconsumer.EventSucceeded, sqsconsumer.EventFailed:
		o.processed.Add(ctx, 1, attrs)
		o.handlerDur.Record(ctx, e.SinceStart.Seconds(), attrs)
		if e.Kind == sqsconsumer.EventFailed {
			o.failed.Add(ctx, 1, attrs)
		}
	case sqsconsumer.EventDeleted:
		o.deleted.Add(ctx, 1, attrs)
	case sqsconsumer.EventReleased:
		o.released.Add(ctx, 1, attrs)
	case sqsconsumer.EventRenewed:
		o.renewals.Add(ctx, 1, attrs)
	case sqsconsumer.EventRenewalFailed:
		o.renewalFailures.Add(ctx, 1, attrs)
	case sqsconsumer.EventLeaseLost:
		o.lost.Add(ctx, 1, attrs)
	case sqsconsumer.EventLeaseExpired:
		o.expired.Add(ctx, 1, attrs)
	case sqsconsumer.EventCeilingReached:
		o.ceiling.Add(ctx, 1, attrs)
	case sqsconsumer.EventDone:
		o.inFlight.Add(ctx, -1, attrs)
		o.messageDur.Record(ctx, e.SinceReceive.Seconds(), attrs)
	}
}
