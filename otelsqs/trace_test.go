package otelsqs

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqskit/sqsconsumer"
)

// tracing is a tracer provider that keeps every span in memory.
type tracing struct {
	tp  *sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
}

func newTracing(t *testing.T) tracing {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return tracing{tp: tp, rec: rec}
}

func (tr tracing) only(t *testing.T) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := tr.rec.Ended()
	require.Len(t, spans, 1)
	return spans[0]
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func str(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

const (
	w3cTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	w3cParent = "00f067aa0ba902b7"
	xrayRoot  = "1-5759e988-bd862e3fe1be46a994272793"
	xrayTrace = "5759e988bd862e3fe1be46a994272793"
	xrayPar   = "53995c3f42cd8ad8"
)

var ok = sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil })

func TestMiddlewareContinuesTheProducersTrace(t *testing.T) {
	t.Parallel()
	traceparent := "00-" + w3cTrace + "-" + w3cParent + "-01"
	xray := "Root=" + xrayRoot + ";Parent=" + xrayPar + ";Sampled=1"
	tests := []struct {
		name             string
		msg              sqsconsumer.Message
		wantTrace, wantP string // "" = a new root
	}{
		{"traceparent attribute", sqsconsumer.Message{MessageAttributes: map[string]types.MessageAttributeValue{"traceparent": str(traceparent)}},
			w3cTrace, w3cParent},
		{"traceparent in another case", sqsconsumer.Message{MessageAttributes: map[string]types.MessageAttributeValue{"TraceParent": str(traceparent)}},
			w3cTrace, w3cParent},
		{"AWSTraceHeader system attribute", sqsconsumer.Message{Attributes: map[string]string{"AWSTraceHeader": xray}},
			xrayTrace, xrayPar},
		{"traceparent wins over AWSTraceHeader", sqsconsumer.Message{
			Attributes:        map[string]string{"AWSTraceHeader": xray},
			MessageAttributes: map[string]types.MessageAttributeValue{"traceparent": str(traceparent)}},
			w3cTrace, w3cParent},
		{"a bad traceparent falls back to AWSTraceHeader", sqsconsumer.Message{
			Attributes:        map[string]string{"AWSTraceHeader": xray},
			MessageAttributes: map[string]types.MessageAttributeValue{"traceparent": str("00-zz-yy-01")}},
			xrayTrace, xrayPar},
		{"a binary traceparent is ignored", sqsconsumer.Message{MessageAttributes: map[string]types.MessageAttributeValue{
			"traceparent": {DataType: aws.String("Binary"), BinaryValue: []byte(traceparent), StringValue: aws.String(traceparent)}}},
			"", ""},
		{"no context: a new root", sqsconsumer.Message{MessageAttributes: map[string]types.MessageAttributeValue{"other": str("x")}}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newTracing(t)
			var inner trace.SpanContext
			h := Middleware(WithTracerProvider(tr.tp), WithQueueURL(testQueue))(sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
				inner = trace.SpanContextFromContext(ctx)
				return nil
			}))
			m := tt.msg
			m.ID, m.Body, m.ReceiveCount = "m-1", "hello", 2
			require.NoError(t, h.HandleMessage(context.Background(), &m))

			s := tr.only(t)
			require.Equal(t, s.SpanContext(), inner, "the handler runs inside the span")
			require.Equal(t, "process work", s.Name())
			require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
			if tt.wantTrace == "" {
				require.False(t, s.Parent().IsValid(), "a new root")
			} else {
				require.Equal(t, tt.wantTrace, s.SpanContext().TraceID().String())
				require.Equal(t, tt.wantP, s.Parent().SpanID().String())
				require.True(t, s.Parent().IsRemote())
			}
			a := attrs(s)
			require.Equal(t, "aws_sqs", a["messaging.system"].AsString())
			require.Equal(t, "process", a["messaging.operation.type"].AsString())
			require.Equal(t, "work", a["messaging.destination.name"].AsString())
			require.Equal(t, testQueue, a["aws.sqs.queue.url"].AsString())
			require.Equal(t, "m-1", a["messaging.message.id"].AsString())
			require.Equal(t, int64(5), a["messaging.message.body.size"].AsInt64())
			require.Equal(t, int64(2), a[ReceiveCountKey].AsInt64())
			require.Equal(t, codes.Unset, s.Status().Code)
		})
	}
}

func TestMiddlewareChildOfTheHandlersContext(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	ctx, outer := tr.tp.Tracer("test").Start(context.Background(), "poll")
	h := Middleware(WithTracerProvider(tr.tp))(ok)
	require.NoError(t, h.HandleMessage(ctx, &sqsconsumer.Message{ID: "m", GroupID: "g1"}))
	outer.End()
	var span sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.Name() == "process" {
			span = s
		}
	}
	require.NotNil(t, span, "a span named process without a queue URL")
	require.Equal(t, outer.SpanContext().SpanID(), span.Parent().SpanID())
	require.Equal(t, "g1", attrs(span)[GroupIDKey].AsString())
	_, hasDest := attrs(span)["messaging.destination.name"]
	require.False(t, hasDest)
}

func TestMiddlewareWithLinks(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	h := Middleware(WithTracerProvider(tr.tp), WithLinks())(ok)
	m := &sqsconsumer.Message{ID: "m", Attributes: map[string]string{"AWSTraceHeader": "Root=" + xrayRoot + ";Parent=" + xrayPar + ";Sampled=1"}}
	require.NoError(t, h.HandleMessage(context.Background(), m))
	s := tr.only(t)
	require.False(t, s.Parent().IsValid(), "a new trace")
	require.NotEqual(t, xrayTrace, s.SpanContext().TraceID().String())
	require.Len(t, s.Links(), 1)
	require.Equal(t, xrayTrace, s.Links()[0].SpanContext.TraceID().String())
	require.Equal(t, xrayPar, s.Links()[0].SpanContext.SpanID().String())
}

func TestMiddlewareCustomPropagator(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	// Baggage alone carries no span: the message starts a new root.
	h := Middleware(WithTracerProvider(tr.tp), WithPropagator(propagation.Baggage{}))(ok)
	m := &sqsconsumer.Message{ID: "m", MessageAttributes: map[string]types.MessageAttributeValue{
		"traceparent": str("00-" + w3cTrace + "-" + w3cParent + "-01")}}
	require.NoError(t, h.HandleMessage(context.Background(), m))
	require.False(t, tr.only(t).Parent().IsValid())
}

func TestMiddlewareRecordsTheOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		err       error
		cancel    error // cause to cancel the handler's context with
		wantType  string
		wantEvent string
	}{
		{"plain error", errors.New("boom"), nil, "*errors.errorString", "exception"},
		{"retry after", sqsconsumer.RetryAfter(errors.New("busy"), 30e9), nil, "*sqsconsumer.retryAfterError", "exception"},
		{"lease lost", fmt.Errorf("gave up: %w", sqsconsumer.ErrLeaseLost), sqsconsumer.ErrLeaseLost, "lease_lost", "context cancelled"},
		{"shutdown", context.Canceled, sqsconsumer.ErrShutdown, "canceled", "context cancelled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newTracing(t)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			h := Middleware(WithTracerProvider(tr.tp))(sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error {
				if tt.cancel != nil {
					cancel(tt.cancel)
				}
				return tt.err
			}))
			require.ErrorIs(t, h.HandleMessage(ctx, &sqsconsumer.Message{ID: "m"}), tt.err, "the error passes through")
			s := tr.only(t)
			require.Equal(t, codes.Error, s.Status().Code)
			require.Equal(t, tt.err.Error(), s.Status().Description)
			require.Equal(t, tt.wantType, attrs(s)["error.type"].AsString())
			var names []string
			for _, e := range s.Events() {
				names = append(names, e.Name)
				if e.Name == "context cancelled" {
					require.Equal(t, tt.cancel.Error(), e.Attributes[0].Value.AsString())
				}
			}
			require.Contains(t, names, tt.wantEvent)
		})
	}
}

func TestMiddlewarePanic(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	h := Middleware(WithTracerProvider(tr.tp))(sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error {
		panic("kaboom")
	}))
	require.PanicsWithValue(t, "kaboom", func() { _ = h.HandleMessage(context.Background(), &sqsconsumer.Message{ID: "m"}) })
	s := tr.only(t)
	require.Equal(t, codes.Error, s.Status().Code)
	require.Equal(t, "panic: kaboom", s.Status().Description)
	require.NotEmpty(t, s.Events())
	require.Equal(t, "exception", s.Events()[0].Name)
}

func TestErrorType(t *testing.T) {
	t.Parallel()
	require.Equal(t, "panic", errorType(&sqsconsumer.PanicError{Value: 1}))
	require.Equal(t, "lease_ceiling", errorType(sqsconsumer.ErrLeaseCeiling))
	require.Equal(t, "lease_expired", errorType(fmt.Errorf("x: %w", sqsconsumer.ErrLeaseExpired)))
	require.Equal(t, "deadline_exceeded", errorType(context.DeadlineExceeded))
}

func TestParseXRayHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		ok      bool
		sampled bool
	}{
		{"sampled", "Root=" + xrayRoot + ";Parent=" + xrayPar + ";Sampled=1", true, true},
		{"not sampled", "Root=" + xrayRoot + ";Parent=" + xrayPar + ";Sampled=0", true, false},
		{"deferred", "Root=" + xrayRoot + ";Parent=" + xrayPar + ";Sampled=?", true, false},
		{"no Sampled", "Root=" + xrayRoot + ";Parent=" + xrayPar, true, false},
		{"any order, spaces, extra fields", " Sampled=1 ; Lineage=a87bd80c:1|68fd508a:5 ;Parent=" + xrayPar + "; Root=" + xrayRoot + " ;Self=1-x", true, true},
		{"no Parent", "Root=" + xrayRoot + ";Sampled=1", false, false},
		{"no Root", "Parent=" + xrayPar, false, false},
		{"wrong version", "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=" + xrayPar, false, false},
		{"short root", "Root=1-5759e98-bd862e3fe1be46a994272793;Parent=" + xrayPar, false, false},
		{"not hex", "Root=1-5759e98g-bd862e3fe1be46a994272793;Parent=" + xrayPar, false, false},
		{"short parent", "Root=" + xrayRoot + ";Parent=53995c3f42cd8ad", false, false},
		{"zero ids", "Root=1-00000000-000000000000000000000000;Parent=0000000000000000", false, false},
		{"empty", "", false, false},
		{"garbage", ";;==;Root;Parent", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sc, ok := ParseXRayHeader(tt.in)
			require.Equal(t, tt.ok, ok)
			if !ok {
				require.False(t, sc.IsValid())
				return
			}
			require.Equal(t, xrayTrace, sc.TraceID().String())
			require.Equal(t, xrayPar, sc.SpanID().String())
			require.Equal(t, tt.sampled, sc.IsSampled())
			require.True(t, sc.IsRemote())
			back, ok := ParseXRayHeader(FormatXRayHeader(sc))
			require.True(t, ok)
			require.Equal(t, sc, back, "FormatXRayHeader round-trips")
		})
	}
}

func FuzzParseXRayHeader(f *testing.F) {
	f.Add("Root=" + xrayRoot + ";Parent=" + xrayPar + ";Sampled=1")
	f.Add("Root=1-;Parent=;Sampled=")
	f.Add(";;=;")
	f.Fuzz(func(t *testing.T, h string) {
		sc, ok := ParseXRayHeader(h)
		if !ok {
			return
		}
		require.True(t, sc.IsValid())
		back, ok := ParseXRayHeader(FormatXRayHeader(sc))
		require.True(t, ok)
		require.Equal(t, sc, back)
	})
}
