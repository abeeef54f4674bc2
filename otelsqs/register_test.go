package otelsqs

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

var scalingGauges = []string{
	"sqsconsumer.scaling.replicas", "sqsconsumer.scaling.backlog", "sqsconsumer.scaling.arrival_rate",
	"sqsconsumer.scaling.demand", "sqsconsumer.scaling.capacity_per_replica",
}

// reading is one collection: each instrument's points, keyed by the
// rpc.method attribute ("" when absent).
type reading map[string]map[string]float64

func collectPoints(t *testing.T, r *sdkmetric.ManualReader) reading {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := reading{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			pts := map[string]float64{}
			add := func(set attribute.Set, v float64) {
				require.Equal(t, "aws_sqs", get(set, semconv.MessagingSystemKey), mt.Name)
				require.Equal(t, "orders", get(set, semconv.MessagingDestinationNameKey), mt.Name)
				k := get(set, semconv.RPCMethodKey)
				_, dup := pts[k]
				require.False(t, dup, "%s: two points for %q", mt.Name, k)
				pts[k] = v
			}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				require.True(t, d.IsMonotonic, mt.Name)
				require.Equal(t, metricdata.CumulativeTemporality, d.Temporality, mt.Name)
				for _, dp := range d.DataPoints {
					add(dp.Attributes, float64(dp.Value))
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes, float64(dp.Value))
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes, dp.Value)
				}
			default:
				t.Fatalf("%s is a %T", mt.Name, mt.Data)
			}
			if len(pts) > 0 {
				out[mt.Name] = pts
			}
		}
	}
	return out
}

func get(set attribute.Set, k attribute.Key) string {
	v, _ := set.Value(k)
	return v.AsString()
}

// wantCalls is what the call counters must read for n.
func wantCalls(n sqsconsumer.CallCounts) reading {
	return reading{
		"sqsconsumer.api.calls": {
			"ReceiveMessage": float64(n.Receive), "DeleteMessage": float64(n.Delete), "DeleteMessageBatch": float64(n.DeleteBatch),
			"ChangeMessageVisibility": float64(n.ChangeVisibility), "ChangeMessageVisibilityBatch": float64(n.ChangeVisibilityBatch),
			"GetQueueAttributes": float64(n.GetQueueAttributes), "SendMessage": float64(n.SendMessage),
		},
		"sqsconsumer.api.empty_receives": {"ReceiveMessage": float64(n.EmptyReceive)},
		"sqsconsumer.scaling.calls":      {"GetQueueAttributes": float64(n.ScalingAttributes)},
	}
}

// TestRegisterConsumer runs a Consumer with the scaling signal against
// the in-memory SQS under synctest, 5 messages a second for handlers of
// 1 s on 10 slots, and collects at chosen instants: the counters match
// Stats, the scaling gauges are absent while the figure is unknown (and
// the backlog while the latest reading failed) and match Scaling once it
// is known, and Unregister ends the observation.
func TestRegisterConsumer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("orders", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		client := srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })
		c, err := sqsconsumer.New(client, url, sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error {
			time.Sleep(time.Second)
			return nil
		}), sqsconsumer.WithConcurrency(10), sqsconsumer.WithVisibilityTimeout(30*time.Second),
			sqsconsumer.WithScalingTarget(30*time.Second))
		require.NoError(t, err)

		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
		reg, err := RegisterConsumer(c, WithMeterProvider(mp))
		require.NoError(t, err)

		// Before Run: every counter reads 0, no gauge is there.
		require.Equal(t, wantCalls(sqsconsumer.CallCounts{}), collectPoints(t, reader))

		// Messages are there before Run's first reading: a reading of an
		// empty queue would be known at once (the floor of 1).
		for range 5 {
			_, err := srv.Send(url, "x")
			require.NoError(t, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := srv.Send(url, "x")
				require.NoError(t, err)
				time.Sleep(200 * time.Millisecond)
			}
		})
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()

		// Run's first reading (at once) found the queue, but no handler
		// has finished: the backlog is there, the figure is not.
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		s := c.Scaling()
		require.False(t, s.Known, "%+v", s)
		require.False(t, s.At.IsZero(), "%+v", s)
		got := collectPoints(t, reader)
		require.Equal(t, map[string]float64{"": s.Visible}, got["sqsconsumer.scaling.backlog"])
		for _, name := range scalingGauges[:1] {
			require.NotContains(t, got, name)
		}
		for _, name := range scalingGauges[2:] {
			require.NotContains(t, got, name)
		}

		// The first completion (at 1 s) figures Run's first reading: known.
		time.Sleep(time.Second)
		synctest.Wait()
		require.True(t, c.Scaling().Known, "%+v", c.Scaling())

		// The readings at 30, 60 and 90 s fail: unknown after the third,
		// and the backlog is stale, so every gauge goes.
		srv.FailNext("GetQueueAttributes", 3, sqstest.FaultInternalError)
		time.Sleep(90 * time.Second)
		synctest.Wait()
		s = c.Scaling()
		require.False(t, s.Known)
		require.NotEmpty(t, s.Err)
		got = collectPoints(t, reader)
		for _, name := range scalingGauges {
			require.NotContains(t, got, name)
		}

		// From the reading at 120 s on the figure is known again.
		time.Sleep(30 * time.Second)
		synctest.Wait()
		s, st := c.Scaling(), c.Stats()
		require.True(t, s.Known, s.Reason)
		require.Equal(t, 1, s.Replicas, "5 msg/s on a replica of 10 msg/s: %+v", s)
		require.InDelta(t, 10, s.CapacityPerReplica, 0.5)
		want := wantCalls(st.Calls)
		want["sqsconsumer.scaling.replicas"] = map[string]float64{"": float64(s.Replicas)}
		want["sqsconsumer.scaling.backlog"] = map[string]float64{"": s.Visible}
		want["sqsconsumer.scaling.arrival_rate"] = map[string]float64{"": s.ArrivalRate}
		want["sqsconsumer.scaling.demand"] = map[string]float64{"": s.Demand}
		want["sqsconsumer.scaling.capacity_per_replica"] = map[string]float64{"": s.CapacityPerReplica}
		require.Equal(t, want, collectPoints(t, reader))
		// Readings at 0, 30, 60, 90 (failed) and 120 s; Run's own check
		// of the queue is the one other GetQueueAttributes.
		require.Equal(t, int64(5), st.Calls.ScalingAttributes)
		require.Equal(t, int64(6), st.Calls.GetQueueAttributes)
		require.Positive(t, st.Calls.Receive)
		require.Positive(t, st.Calls.DeleteBatch)

		cancel()
		wg.Wait()
		require.NoError(t, <-done)
		require.NoError(t, reg.Unregister())
		require.Empty(t, collectPoints(t, reader), "nothing is observed after Unregister")
	})
}

func TestRegisterConsumerNil(t *testing.T) {
	t.Parallel()
	_, err := RegisterConsumer(nil)
	require.ErrorContains(t, err, "nil Consumer")
}
