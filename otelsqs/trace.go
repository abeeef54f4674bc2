package otelsqs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqskit/sqsconsumer"
)

// AWSTraceHeaderAttribute is the system attribute that carries an X-Ray
// trace header (SQS returns it when asked for All system attributes, as
// sqsconsumer does).
const AWSTraceHeaderAttribute = "AWSTraceHeader"

// Attributes this package adds beyond the semantic conventions.
const (
	// ReceiveCountKey is the message's ApproximateReceiveCount.
	ReceiveCountKey = attribute.Key("sqsconsumer.message.receive_count")
	// GroupIDKey is the MessageGroupId of a FIFO (or fair) queue's message.
	GroupIDKey = attribute.Key("sqsconsumer.message.group_id")
	// CauseKey, on the "context cancelled" span event, is
	// context.Cause of the handler's context (a lost lease, shutdown).
	CauseKey = attribute.Key("sqsconsumer.cancel.cause")
)

// Middleware returns a sqsconsumer.Middleware that runs each handler call
// in a span (see the package doc). Options: WithTracerProvider,
// WithPropagator, WithQueueURL, WithLinks. The middleware is safe for
// concurrent use.
func Middleware(opts ...Option) sqsconsumer.Middleware {
	cfg := newConfig(opts)
	tracer := cfg.tracerProvider.Tracer(ScopeName)
	name := "process"
	base := []attribute.KeyValue{
		semconv.MessagingSystemAWSSQS,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
	}
	if cfg.queueURL != "" {
		q := queueName(cfg.queueURL)
		name += " " + q
		base = append(base, semconv.MessagingDestinationName(q), semconv.AWSSQSQueueURL(cfg.queueURL))
	}
	return func(next sqsconsumer.Handler) sqsconsumer.Handler {
		return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) (err error) {
			attrs := append(base[:len(base):len(base)],
				semconv.MessagingMessageID(m.ID),
				semconv.MessagingMessageBodySize(len(m.Body)),
				ReceiveCountKey.Int(m.ReceiveCount),
			)
			if m.GroupID != "" {
				attrs = append(attrs, GroupIDKey.String(m.GroupID))
			}
			startOpts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
			parent := ctx
			if sc := producerContext(ctx, cfg, m); sc.IsValid() {
				if cfg.links {
					startOpts = append(startOpts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc}))
				} else {
					parent = trace.ContextWithRemoteSpanContext(ctx, sc)
				}
			}
			ctx, span := tracer.Start(parent, name, startOpts...)
			defer func() {
				if v := recover(); v != nil {
					perr := fmt.Errorf("panic: %v", v)
					span.RecordError(perr, trace.WithStackTrace(true))
					span.SetStatus(codes.Error, perr.Error())
					span.End()
					panic(v)
				}
				end(ctx, span, err)
			}()
			return next.HandleMessage(ctx, m)
		})
	}
}

// end records the handler's outcome and ends the span.
func end(ctx context.Context, span trace.Span, err error) {
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		span.AddEvent("context cancelled", trace.WithAttributes(CauseKey.String(cause.Error())))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
	}
	span.End()
}

// errorTypes name the errors a handler commonly returns, for error.type.
var errorTypes = []struct {
	err  error
	name string
}{
	{sqsconsumer.ErrLeaseLost, "lease_lost"},
	{sqsconsumer.ErrLeaseCeiling, "lease_ceiling"},
	{sqsconsumer.ErrLeaseExpired, "lease_expired"},
	{sqsconsumer.ErrShutdown, "shutdown"},
	{context.DeadlineExceeded, "deadline_exceeded"},
	{context.Canceled, "canceled"},
}

// errorType names an error for error.type with low cardinality: the
// library's sentinel or a context error when err wraps one, else its Go
// type.
func errorType(err error) string {
	for _, t := range errorTypes {
		if errors.Is(err, t.err) {
			return t.name
		}
	}
	var pe *sqsconsumer.PanicError
	if errors.As(err, &pe) {
		return "panic"
	}
	return fmt.Sprintf("%T", err)
}

// producerContext returns the span context the producer sent with m: from
// the message attributes through the propagator, else from the
// AWSTraceHeader system attribute. The result is invalid when there is
// none.
func producerContext(ctx context.Context, cfg config, m *sqsconsumer.Message) trace.SpanContext {
	if len(m.MessageAttributes) > 0 {
		got := cfg.propagator.Extract(context.Background(), attributeCarrier(m.MessageAttributes))
		if sc := trace.SpanContextFromContext(got); sc.IsValid() {
			return sc
		}
	}
	if h := m.Attributes[AWSTraceHeaderAttribute]; h != "" {
		if sc, ok := ParseXRayHeader(h); ok {
			return sc
		}
	}
	return trace.SpanContext{}
}

// attributeCarrier reads a propagator's fields from String (and Number)
// message attributes, matching names case-insensitively when no exact
// match exists. It is read-only: Set does nothing.
type attributeCarrier map[string]types.MessageAttributeValue

func (c attributeCarrier) Get(key string) string {
	v, ok := c[key]
	if !ok {
		for k, kv := range c {
			if strings.EqualFold(k, key) {
				v, ok = kv, true
				break
			}
		}
	}
	if !ok || v.StringValue == nil {
		return ""
	}
	if dt := aws.ToString(v.DataType); dt != "" && !strings.HasPrefix(dt, "String") && !strings.HasPrefix(dt, "Number") {
		return ""
	}
	return aws.ToString(v.StringValue)
}

func (c attributeCarrier) Set(string, string) {}

func (c attributeCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
