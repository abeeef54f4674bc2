package otelsqs

import (
	"context"
	"errors"
	"sync"
	"time"

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

// Bounds of the Observer's per-message state.
const (
	maxTracked = 1 << 16
	// staleAfter: no lease outlives SQS's 12-hour ceiling, so a message
	// unseen this long was stopped without settlement.
	staleAfter = sqsconsumer.MaxVisibilityTimeout + time.Hour
)

// Observer records metrics of the events it observes (see the package
// doc for the instruments). Make one with NewObserver and give it to
// sqsconsumer.WithObserver; the zero value is not usable. Observe is safe
// for concurrent use: it takes one short mutex per event and keeps at
// most 65,536 messages' state, which it needs for the in-flight count and
// the handler duration.
type Observer struct {
	received, adopted, processed, failed, deleted, released metric.Int64Counter
	renewals, renewalFailures, lost, expired, ceiling       metric.Int64Counter
	inFlight                                                metric.Int64UpDownCounter
	handlerDur, messageDur                                  metric.Float64Histogram

	attrs sync.Map // queue URL -> metric.MeasurementOption

	mu     sync.Mutex // guards msgs and events
	msgs   map[msgKey]*msgState
	events uint64
}

type msgKey struct{ queue, id string }

type msgState struct {
	queue    string
	inFlight bool          // counted in in_flight
	started  time.Duration // SinceReceive at EventStarted; -1 when no handler runs
	ended    bool          // settled, lost or expired; waiting for the handler to return
	lastSeen time.Time
}

// NewObserver makes an Observer whose instruments come from the meter
// provider (WithMeterProvider; default the global one). It returns an
// error if an instrument cannot be created.
func NewObserver(opts ...Option) (*Observer, error) {
	cfg := newConfig(opts)
	m := cfg.meterProvider.Meter(ScopeName)
	o := &Observer{msgs: map[msgKey]*msgState{}}
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
		metric.WithDescription("Messages received and not yet settled (deleted, released, lost or expired)."))
	errs = append(errs, err)
	o.inFlight = ud
	o.handlerDur = hist("sqsconsumer.handler.duration", "Handler calls, from start to return.")
	o.messageDur = hist("sqsconsumer.message.duration", "Messages from the receive to their settlement, in-process queueing included.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Observer) attrsFor(queueURL string) metric.MeasurementOption {
	if a, ok := o.attrs.Load(queueURL); ok {
		return a.(metric.MeasurementOption)
	}
	kv := []attribute.KeyValue{semconv.MessagingSystemAWSSQS}
	if queueURL != "" {
		kv = append(kv, semconv.MessagingDestinationName(queueName(queueURL)))
	}
	a, _ := o.attrs.LoadOrStore(queueURL, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return a.(metric.MeasurementOption)
}

// Observe implements sqsconsumer.Observer.
func (o *Observer) Observe(e sqsconsumer.Event) {
	ctx := context.Background()
	attrs := o.attrsFor(e.QueueURL)
	switch e.Kind {
	case sqsconsumer.EventReceived:
		o.received.Add(ctx, 1, attrs)
	case sqsconsumer.EventAdopted:
		o.adopted.Add(ctx, 1, attrs)
	case sqsconsumer.EventSucceeded, sqsconsumer.EventFailed:
		o.processed.Add(ctx, 1, attrs)
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
	}
	o.track(ctx, e, attrs)
}

// track keeps the per-message state behind in_flight and the durations.
func (o *Observer) track(ctx context.Context, e sqsconsumer.Event, attrs metric.MeasurementOption) {
	var (
		inFlight   int64
		handlerDur = time.Duration(-1)
		settled    bool
		stale      []string // queues of forgotten in-flight messages
	)
	key := msgKey{e.QueueURL, e.MessageID}
	o.mu.Lock()
	st := o.msgs[key]
	if st == nil && startsState(e.Kind) {
		if len(o.msgs) >= maxTracked {
			stale = o.pruneLocked(e.Time, stale)
		}
		if len(o.msgs) < maxTracked {
			st = &msgState{queue: e.QueueURL, started: -1}
			o.msgs[key] = st
		}
	}
	if st != nil {
		st.lastSeen = e.Time
	}
	switch e.Kind {
	case sqsconsumer.EventReceived:
		if st != nil && !st.inFlight {
			st.inFlight = true
			inFlight = 1
		}
	case sqsconsumer.EventStarted:
		if st != nil {
			st.started = e.SinceReceive
		}
	case sqsconsumer.EventSucceeded, sqsconsumer.EventFailed:
		if st != nil && st.started >= 0 {
			handlerDur = e.SinceReceive - st.started
			st.started = -1
			if st.ended {
				delete(o.msgs, key)
			}
		}
	case sqsconsumer.EventDeleted, sqsconsumer.EventReleased, sqsconsumer.EventLeaseLost, sqsconsumer.EventLeaseExpired:
		switch {
		case st == nil:
			settled = true
		case st.ended:
			// settled before; not counted twice
		default:
			settled = true
			st.ended = true
			if st.inFlight {
				st.inFlight = false
				inFlight = -1
			}
			if st.started < 0 {
				delete(o.msgs, key)
			} // else the handler still runs (its lease was lost): keep its start
		}
	}
	o.events++
	if o.events%4096 == 0 {
		stale = o.pruneLocked(e.Time, stale)
	}
	o.mu.Unlock()

	if inFlight != 0 {
		o.inFlight.Add(ctx, inFlight, attrs)
	}
	for _, q := range stale {
		o.inFlight.Add(ctx, -1, o.attrsFor(q))
	}
	if handlerDur >= 0 {
		o.handlerDur.Record(ctx, handlerDur.Seconds(), attrs)
	}
	if settled {
		o.messageDur.Record(ctx, e.SinceReceive.Seconds(), attrs)
	}
}

// startsState reports whether an event of kind k, for a message without
// state, should create it.
func startsState(k sqsconsumer.EventKind) bool {
	switch k {
	case sqsconsumer.EventReceived, sqsconsumer.EventAdopted, sqsconsumer.EventStarted, sqsconsumer.EventRenewed:
		return true
	}
	return false
}

// pruneLocked forgets messages unseen for staleAfter and returns, appended
// to stale, the queues of those still counted in flight.
func (o *Observer) pruneLocked(now time.Time, stale []string) []string {
	cutoff := now.Add(-staleAfter)
	for k, st := range o.msgs {
		if st.lastSeen.Before(cutoff) {
			if st.inFlight {
				stale = append(stale, st.queue)
			}
			delete(o.msgs, k)
		}
	}
	return stale
}
