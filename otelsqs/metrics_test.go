package otelsqs

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
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

// evs makes an event of a handler that started at start (0: not started).
func evs(kind sqsconsumer.EventKind, id string, since, start time.Duration) sqsconsumer.Event {
	e := ev(kind, id, since)
	if start > 0 {
		e.SinceStart = since - start
	}
	return e
}

func TestObserverCountsALifeOfMessages(t *testing.T) {
	t.Parallel()
	m := newMeters(t)
	s := time.Second
	for _, e := range []sqsconsumer.Event{
		ev(sqsconsumer.EventReceived, "a", 0), ev(sqsconsumer.EventReceived, "b", 0), ev(sqsconsumer.EventReceived, "c", 0),
		evs(sqsconsumer.EventStarted, "a", 1*s, 1*s), evs(sqsconsumer.EventStarted, "b", 1*s, 1*s), evs(sqsconsumer.EventStarted, "c", 1*s, 1*s),
		evs(sqsconsumer.EventRenewed, "a", 10*s, 1*s), evs(sqsconsumer.EventRenewalFailed, "a", 20*s, 1*s), evs(sqsconsumer.EventRenewed, "a", 21*s, 1*s),
		evs(sqsconsumer.EventAdopted, "b", 3*s, 1*s),
	} {
		m.obs.Observe(e)
	}
	ms := m.collect(t)
	require.Equal(t, int64(3), sum(t, ms, "sqsconsumer.messages.in_flight"), "three messages held")

	for _, e := range []sqsconsumer.Event{
		evs(sqsconsumer.EventSucceeded, "a", 26*s, 1*s), evs(sqsconsumer.EventDeleted, "a", 27*s, 1*s), evs(sqsconsumer.EventDone, "a", 27*s, 1*s), // handler 25 s, held 27 s
		evs(sqsconsumer.EventFailed, "b", 5*s, 1*s), evs(sqsconsumer.EventReleased, "b", 6*s, 1*s), evs(sqsconsumer.EventDone, "b", 6*s, 1*s), // handler 4 s, held 6 s
		evs(sqsconsumer.EventLeaseLost, "c", 30*s, 1*s), evs(sqsconsumer.EventCeilingReached, "c", 31*s, 1*s),
		evs(sqsconsumer.EventFailed, "c", 41*s, 1*s), evs(sqsconsumer.EventDone, "c", 41*s, 1*s), // handler 40 s, held until it returned
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
	require.Equal(t, uint64(3), h.Count, "each delivery once")
	require.InDelta(t, 27+6+41, h.Sum, 1e-9)

	sys, _ := h.Attributes.Value("messaging.system")
	require.Equal(t, "aws_sqs", sys.AsString())
	dest, _ := h.Attributes.Value("messaging.destination.name")
	require.Equal(t, "work", dest.AsString())
}

// Through a real Consumer on sqstest: what the instruments show matches
// what the handlers did, with no state kept between events.
func TestObserverUnderAConsumer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := newMeters(t)
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("work", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		const n = 20
		for i := range n {
			_, err := srv.Send(url, strconv.Itoa(i))
			require.NoError(t, err)
		}
		c, err := sqsconsumer.New(srv.Client(), url, sqsconsumer.HandlerFunc(func(ctx context.Context, msg *sqsconsumer.Message) error {
			time.Sleep(40 * time.Second) // renewed once or twice
			return nil
		}), sqsconsumer.WithObserver(m.obs), sqsconsumer.WithConcurrency(n))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		require.Equal(t, int64(n), sum(t, m.collect(t), "sqsconsumer.messages.in_flight"), "all held mid-way")
		time.Sleep(40 * time.Second)
		cancel()
		require.NoError(t, <-done)
		ms := m.collect(t)
		require.Equal(t, int64(n), sum(t, ms, "sqsconsumer.messages.deleted"))
		require.Equal(t, int64(0), sum(t, ms, "sqsconsumer.messages.in_flight"))
		h := hist(t, ms, "sqsconsumer.handler.duration")
		require.Equal(t, uint64(n), h.Count)
		require.InDelta(t, 40*n, h.Sum, 1e-6, "each handler ran 40 s")
		h = hist(t, ms, "sqsconsumer.message.duration")
		require.Equal(t, uint64(n), h.Count)
		require.GreaterOrEqual(t, h.Sum, 40.0*n)
	})
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
					sqsconsumer.EventSucceeded, sqsconsumer.EventDeleted, sqsconsumer.EventDone} {
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

// BenchmarkObserver measures the Observer's cost per message (six events)
// with the SDK's manual reader behind it.
func BenchmarkObserver(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	obs, err := NewObserver(WithMeterProvider(mp))
	require.NoError(b, err)
	kinds := []sqsconsumer.EventKind{sqsconsumer.EventReceived, sqsconsumer.EventStarted, sqsconsumer.EventRenewed,
		sqsconsumer.EventSucceeded, sqsconsumer.EventDeleted, sqsconsumer.EventDone}
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
