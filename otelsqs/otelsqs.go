// Package otelsqs connects sqsconsumer to OpenTelemetry: an Observer that
// records metrics of every message's life, RegisterConsumer for what a
// Consumer measured (its scaling signal and its SQS calls), and a
// Middleware that wraps each handler call in a span continuing the
// producer's trace.
//
// The root package imports no OpenTelemetry code; this package does, so
// only programs that want telemetry pay for it.
//
//	obs, err := otelsqs.NewObserver()
//	...
//	c, err := sqsconsumer.New(client, queueURL, handler,
//		sqsconsumer.WithObserver(obs),
//		sqsconsumer.WithMiddleware(otelsqs.Middleware(otelsqs.WithQueueURL(queueURL))),
//		sqsconsumer.WithScalingTarget(30*time.Second))
//	...
//	reg, err := otelsqs.RegisterConsumer(c)
//	...
//	defer reg.Unregister()
//
// # Metrics
//
// Every instrument carries messaging.system=aws_sqs and
// messaging.destination.name (the queue's name, from its URL).
//
//	sqsconsumer.messages.received          counter    {message}  ReceiveMessage returned the message
//	sqsconsumer.messages.adopted           counter    {message}  a redelivery of a message still being handled here
//	sqsconsumer.messages.processed         counter    {message}  the handler returned (succeeded or failed)
//	sqsconsumer.messages.failed            counter    {message}  the handler returned an error or panicked
//	sqsconsumer.messages.deleted           counter    {message}  SQS confirmed the delete
//	sqsconsumer.messages.released          counter    {message}  visibility set for a redelivery
//	sqsconsumer.messages.in_flight         up/down    {message}  received and the delivery not yet done
//	sqsconsumer.lease.renewals             counter    {renewal}  SQS confirmed a visibility extension
//	sqsconsumer.lease.renewal_failures     counter    {renewal}  a renewal attempt failed
//	sqsconsumer.lease.lost                 counter    {lease}    SQS refused the receipt handle
//	sqsconsumer.lease.expired              counter    {lease}    the deadline passed with no confirmed renewal
//	sqsconsumer.lease.ceiling_reached      counter    {lease}    the lease neared its maximum duration
//	sqsconsumer.handler.duration           histogram  s          handler call, start to return
//	sqsconsumer.message.duration           histogram  s          receive to the delivery's end, in-process queueing included:
//	                                                             what the visibility timeout must cover
//
// RegisterConsumer adds observable instruments, read from the Consumer's
// Scaling and Stats at each collection:
//
//	sqsconsumer.scaling.replicas              gauge    {replica}    the scaling signal: replicas the queue needs
//	sqsconsumer.scaling.backlog               gauge    {message}    visible messages, smoothed
//	sqsconsumer.scaling.arrival_rate          gauge    {message}/s  the whole queue's inferred arrival rate
//	sqsconsumer.scaling.demand                gauge    {message}/s  rate to finish: arrivals plus the backlog within the target
//	sqsconsumer.scaling.capacity_per_replica  gauge    {message}/s  what one replica's slots finish when never starved
//	sqsconsumer.api.calls                     counter  {call}       SQS API calls, by rpc.method
//	sqsconsumer.api.empty_receives            counter  {call}       ReceiveMessage calls that returned no message
//	sqsconsumer.scaling.calls                 counter  {call}       GetQueueAttributes calls made for the signal
//
// The scaling gauges are observed only while Consumer.Scaling is Known
// (without sqsconsumer.WithScalingTarget or WithScaling, never), so an
// unknown figure is a gap, not a 0; the backlog also while one replica's
// capacity is not yet measured, as long as the latest reading succeeded.
//
// The call counters carry rpc.method, the SQS action as the AWS SDK's
// semantic conventions name it (ReceiveMessage, DeleteMessage,
// DeleteMessageBatch, ChangeMessageVisibility,
// ChangeMessageVisibilityBatch, GetQueueAttributes, SendMessage), so they
// line up with the SDK's client instrumentation; the empty receives and
// the signal's calls are subsets of sqsconsumer.api.calls, counted apart
// and carrying the rpc.method of their action. The series of
// sqsconsumer.api.calls add up to Stats.Calls.Total. Each call counts
// once, however many attempts the SDK's retryer made. Calls per message
// is a division left to the query, rate(sqsconsumer.api.calls) over
// rate(sqsconsumer.messages.processed) (the Observer's), which, unlike a
// ratio gauge, still adds up across replicas; Stats.CallsPerMessage is
// the same figure for one Consumer since it started.
//
// The in-flight count and the message durations come from a Consumer's
// EventReceived and EventDone; a Lease made with NewLease emits neither, so
// its messages show in the counters and the handler duration only.
//
// The histograms' bucket boundaries run from 5 ms to 12 hours.
//
// # Traces
//
// Middleware starts a span of kind consumer named "process QUEUE" for each
// handler call, with the messaging semantic-convention attributes. Its
// parent is the producer's span when the message carries one: the
// traceparent (and tracestate) message attribute, read with the
// configured propagator (W3C Trace Context by default), or else the
// AWSTraceHeader system attribute that AWS X-Ray instrumentation and AWS
// services set (Root=1-…;Parent=…;Sampled=1). Without either the span is
// a child of the handler's context (usually a new root). WithLinks makes
// every message a new trace linked to the producer's span instead.
//
// A handler error is recorded on the span and sets its status to Error; a
// panic is recorded and re-raised. When the handler's context was
// cancelled (a lost lease, shutdown), the cause is recorded as an event.
package otelsqs

import (
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/sqskit/sqsconsumer/otelsqs"

type config struct {
	meterProvider  metric.MeterProvider
	tracerProvider trace.TracerProvider
	propagator     propagation.TextMapPropagator
	queueURL       string
	links          bool
}

func newConfig(opts []Option) config {
	c := config{}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	if c.tracerProvider == nil {
		c.tracerProvider = otel.GetTracerProvider()
	}
	if c.propagator == nil {
		c.propagator = propagation.TraceContext{}
	}
	return c
}

// Option configures NewObserver and Middleware.
type Option func(*config)

// WithMeterProvider sets where NewObserver's instruments come from.
// Default: the global otel.GetMeterProvider() at the time of the call.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithTracerProvider sets where Middleware's tracer comes from. Default:
// the global otel.GetTracerProvider() at the time of the call.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithPropagator sets how Middleware reads a trace context from the
// message attributes. Default: propagation.TraceContext{} (the W3C
// traceparent and tracestate attributes). It is not the global
// propagator, which often carries baggage a queue should not trust.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// WithQueueURL tells Middleware which queue its messages come from, for
// the span name and the messaging.destination.name and aws.sqs.queue.url
// attributes. Default: none (the span is named "process"). The Observer
// reads the queue from each event instead.
func WithQueueURL(url string) Option {
	return func(c *config) { c.queueURL = url }
}

// WithLinks makes Middleware start a new trace for every message and link
// the producer's span, instead of continuing the producer's trace. Useful
// when one producer trace would otherwise collect the work of thousands of
// messages. Default: continue the producer's trace.
func WithLinks() Option {
	return func(c *config) { c.links = true }
}

// queueName returns the last path segment of a queue URL.
func queueName(url string) string {
	url = strings.TrimRight(url, "/")
	return url[strings.LastIndexByte(url, '/')+1:]
}
