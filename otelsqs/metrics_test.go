package otelsqs

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testQueue = "https://sqs.us-east-1.amazonaws.com/123456789012/work"

// meters is an Observer wired to an in-memory reader.
type meters struct {
	obs    *Observer
	reader *sdkmetric.ManualReader
}

func newMeters(t *testing.T) meters {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	obs, err := NewObserver(WithMeterProvider(mp))
	require.NoError(t, err)
	return meters{obs: obs, reader: reader}
}

// collect returns the metrics by name.
func (m meters) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, m.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, ScopeName, sm.Scope.Name)
		for _, mt := range sm.Metrics {
			out[mt.Name] = mt
		}
	}
	return out
}

// sum returns a counter's total over all attribute sets (0 if absent).
func sum(t *testing.T, ms map[string]metricdata.Metrics, name string) int64 {
	t.Helper()
	mt, ok := ms[name]
	if !ok {
		return 0
	}
	s, ok := mt.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T", name, mt.Data)
	var n int64
	for _, dp := range s.DataPoints {
		n += dp.Value
	}
	return n
}

func hist(t *testing.T, ms map[string]metricdata.Metrics, name string) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	h, ok := ms[name].Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T", name, ms[name].Data)
	require.Len(t, h.DataPoints, 1)
	return h.DataPoints[0]
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ev(kind sqsconsumer.EventKind, id string, since time.Duration) sqsconsumer.Event {
	return sqsconsumer.Event{Kind: kind, QueueURL: testQueue, MessageID: id, ReceiveCount: 1, Time: t0.Add(since), SinceReceive: since}
}

func TestObserverCountsALifeOfMessages(t *testing.T) {
	t.Parallel()
	m := newMeters(t)
	s := time.Second
	for _, e := range []sqsconsumer.Event{
		ev(sqsconsumer.EventReceived, "a", 0), ev(sqsconsumer.EventReceived, "b", 0), ev(sqsconsumer.EventReceived, "c", 0),
		ev(sqsconsumer.EventStarted, "a", 1*s), ev(sqsconsumer.EventStarted, "b", 1*s), ev(sqsconsumer.EventStarted, "c", 1*s),
		ev(sqsconsumer.EventRenewed, "a", 10*s), ev(sqsconsumer.EventRenewalFailed, "a", 20*s), ev(sqsconsumer.EventRenewed, "a", 21*s),
		ev(sqsconsumer.EventAdopted, "b", 3*s),
	} {
		m.obs.Observe(e)
	}
	ms := m.collect(t)
	require.Equal(t, int64(3), sum(t, ms, "sqsconsumer.messages.in_flight"), "three messages held")

	for _, e := range []sqsconsumer.Event{
		ev(sqsconsumer.EventSucceeded, "a", 26*s), ev(sqsconsumer.EventDeleted, "a", 27*s), // handler 25 s, held 27 s
		ev(sqsconsumer.EventFailed, "b", 5*s), ev(sqsconsumer.EventReleased, "b", 6*s), // handler 4 s, held 6 s
		ev(sqsconsumer.EventLeaseLost, "c", 30*s), ev(sqsconsumer.EventCeilingReached, "c", 31*s),
		ev(sqsconsumer.EventFailed, "c", 41*s), // handler 40 s, held until the loss at 30 s
	} {
		m.obs.Observe(e)
	}
	ms = m.collect(t)
	for name, want := range map[string]int64{
		"sqsconsumer.messages.received":      3,
		"sqsconsumer.messages.adopted":       1,
		"sqsconsumer.messages.processed":     3,
		"sqsconsumer.messages.failed":        2,
		"sqsconsumer.messages.deleted":       1,
		"sqsconsumer.messages.released":      1,
		"sqsconsumer.messages.in_flight":     0,
		"sqsconsumer.lease.renewals":         2,
		"sqsconsumer.lease.renewal_failures": 1,
		"sqsconsumer.lease.lost":             1,
		"sqsconsumer.lease.expired":          0,
		"sqsconsumer.lease.ceiling_reached":  1,
	} {
		require.Equal(t, want, sum(t, ms, name), name)
	}

	h := hist(t, ms, "sqsconsumer.handler.duration")
	require.Equal(t, uint64(3), h.Count)
	require.InDelta(t, 25+4+40, h.Sum, 1e-9)
	require.Equal(t, durationBuckets, h.Bounds)
	require.Equal(t, "s", ms["sqsconsumer.handler.duration"].Unit)

	h = hist(t, ms, "sqsconsumer.message.duration")
	require.Equal(t, uint64(3), h.Count, "each message once")
	require.InDelta(t, 27+6+30, h.Sum, 1e-9)

	sys, _ := h.Attributes.Value("messaging.system")
	require.Equal(t, "aws_sqs", sys.AsString())
	dest, _ := h.Attributes.Value("messaging.destination.name")
	require.Equal(t, "work", dest.AsString())

	m.obs.mu.Lock()
	defer m.obs.mu.Unlock()
	require.Empty(t, m.obs.msgs, "no state left behind")
}

func TestObserverWithoutReceiveEvents(t *testing.T) {
	t.Parallel()
	// A Lease made with NewLease emits no EventReceived: in_flight must not
	// go negative, and the duration is still recorded once.
	m := newMeters(t)
	m.obs.Observe(ev(sqsconsumer.EventRenewed, "a", 10*time.Second))
	m.obs.Observe(ev(sqsconsumer.EventDeleted, "a", 12*time.Second))
	m.obs.Observe(ev(sqsconsumer.EventDeleted, "b", 2*time.Second))
	ms := m.collect(t)
	require.Equal(t, int64(0), sum(t, ms, "sqsconsumer.messages.in_flight"))
	require.Equal(t, uint64(2), hist(t, ms, "sqsconsumer.message.duration").Count)
	_, ok := ms["sqsconsumer.handler.duration"]
	require.False(t, ok, "no handler ran")
}

func TestObserverForgetsStaleMessages(t *testing.T) {
	t.Parallel()
	m := newMeters(t)
	m.obs.Observe(ev(sqsconsumer.EventReceived, "stuck", 0)) // its lease stops without settlement
	for i := range 4096 {
		m.obs.Observe(ev(sqsconsumer.EventRenewed, "later-"+strconv.Itoa(i%4), 14*time.Hour))
	}
	ms := m.collect(t)
	require.Equal(t, int64(0), sum(t, ms, "sqsconsumer.messages.in_flight"), "the stale message no longer counts")
}

func TestObserverQueuesAreSeparate(t *testing.T) {
	t.Parallel()
	m := newMeters(t)
	other := "https://sqs.us-east-1.amazonaws.com/123456789012/other"
	m.obs.Observe(ev(sqsconsumer.EventReceived, "a", 0))
	e := ev(sqsconsumer.EventReceived, "a", 0)
	e.QueueURL = other
	m.obs.Observe(e)
	e.Kind = sqsconsumer.EventReceived
	e.QueueURL = ""
	m.obs.Observe(e)
	ms := m.collect(t)
	s := ms["sqsconsumer.messages.received"].Data.(metricdata.Sum[int64])
	names := map[string]bool{}
	for _, dp := range s.DataPoints {
		v, _ := dp.Attributes.Value(attribute.Key("messaging.destination.name"))
		names[v.AsString()] = true
	}
	require.Equal(t, map[string]bool{"work": true, "other": true, "": true}, names)
	require.Equal(t, int64(3), sum(t, ms, "sqsconsumer.messages.in_flight"))
}

func TestObserverConcurrent(t *testing.T) {
	t.Parallel()
	m := newMeters(t)
	const workers, each = 8, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := strconv.Itoa(w*each + i)
				for _, k := range []sqsconsumer.EventKind{sqsconsumer.EventReceived, sqsconsumer.EventStarted, sqsconsumer.EventRenewed,
					sqsconsumer.EventSucceeded, sqsconsumer.EventDeleted} {
					m.obs.Observe(ev(k, id, time.Duration(i)*time.Millisecond))
				}
			}
		})
	}
	wg.Wait()
	ms := m.collect(t)
	require.Equal(t, int64(workers*each), sum(t, ms, "sqsconsumer.messages.deleted"))
	require.Equal(t, int64(0), sum(t, ms, "sqsconsumer.messages.in_flight"))
	require.Equal(t, uint64(workers*each), hist(t, ms, "sqsconsumer.handler.duration").Count)
}

// BenchmarkObserver measures the Observer's cost per message (five events)
// with the SDK's manual reader behind it.
func BenchmarkObserver(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	obs, err := NewObserver(WithMeterProvider(mp))
	require.NoError(b, err)
	kinds := []sqsconsumer.EventKind{sqsconsumer.EventReceived, sqsconsumer.EventStarted, sqsconsumer.EventRenewed,
		sqsconsumer.EventSucceeded, sqsconsumer.EventDeleted}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)]
		for _, k := range kinds {
			obs.Observe(ev(k, id, time.Duration(i%5000)*time.Millisecond))
		}
		i++
	}
}
