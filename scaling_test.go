package sqsconsumer

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// produce sends a message every 1/rate seconds until ctx is done, on a
// goroutine the returned func waits for.
func produce(t *testing.T, b bundle, ctx context.Context, rate float64) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() {
		every := time.Duration(float64(time.Second) / rate)
		for ctx.Err() == nil {
			if _, err := b.srv.Send(b.url, "x"); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(every)
		}
	})
	return wg.Wait
}

func sleepHandler(d time.Duration) Handler {
	return HandlerFunc(func(ctx context.Context, _ *Message) error {
		time.Sleep(d)
		return nil
	})
}

// One replica of capacity 10 msg/s (10 slots, 1 s a message): the queue
// needs 1 at 6 msg/s (6 / 9 = 0.7); at 20 msg/s it needs 20 / 9 =
// 2.2, so 3, and more for the backlog that grew meanwhile (some 1,500
// messages after 3 minutes), which must start within the target: (20 +
// 1,500/30) / 9 = 7.8. The arrival rate is inferred from SQS's counts
// alone (its departures are smoothed over some minutes, hence the runs'
// lengths).
func TestScalingSignalFollowsTheLoad(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rate     float64
		min, max int
		run      time.Duration
		readings int64 // one at Run's start, then one each 30 s
	}{
		{6, 1, 1, 5 * time.Minute, 11}, // the smoothed departures need some minutes
		{20, 5, 12, 3 * time.Minute, 7},
	} {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			c, err := New(b.client, b.url, sleepHandler(time.Second), WithConcurrency(10),
				WithVisibilityTimeout(30*time.Second), WithScaling(ScalingPolicy{Target: 30 * time.Second, ScaleInAfter: -1}))
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			waitProducer := produce(t, b, ctx, tt.rate)
			stop := running(t, c)
			time.Sleep(tt.run)
			f := c.Scaling()
			cancel()
			waitProducer()
			require.NoError(t, stop())

			require.True(t, f.Known, f.Reason)
			require.InDelta(t, 10, f.CapacityPerReplica, 0.5)
			require.InEpsilon(t, tt.rate, f.ArrivalRate, 0.25, "%+v", f)
			require.GreaterOrEqual(t, f.Replicas, tt.min, "%+v", f)
			require.LessOrEqual(t, f.Replicas, tt.max, "%+v", f)
			require.Equal(t, time.Second, f.SlotTime.Round(100*time.Millisecond))
			st := c.Stats()
			require.Equal(t, tt.readings, st.Calls.ScalingAttributes)
		})
	}
}

func TestScalingHandler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		c, err := New(b.client, b.url, sleepHandler(time.Second), WithVisibilityTimeout(30*time.Second), WithScalingTarget(time.Minute))
		require.NoError(t, err)
		get := func() (int, map[string]any) {
			rec := httptest.NewRecorder()
			c.ScalingHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/scaling", nil))
			var body map[string]any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			return rec.Code, body
		}
		code, body := get()
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, false, body["known"])
		require.Contains(t, body["reason"], "not read the queue's counts yet")

		b.send(t, 50)
		stop := running(t, c)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		code, body = get()
		require.Equal(t, http.StatusServiceUnavailable, code, "messages, but no completion measured yet")
		require.Contains(t, body["reason"], "no completions measured yet")

		time.Sleep(time.Minute)
		code, body = get()
		require.Equal(t, http.StatusOK, code, "%v", body)
		require.Equal(t, true, body["known"])
		require.EqualValues(t, 1, body["replicas"]) // 50 messages, 10 a second: drained
		require.EqualValues(t, 60, body["target_seconds"])
		require.NoError(t, stop())
	})
}

func TestScalingOffByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c, err := New(b.client, b.url, sleepHandler(0))
	require.NoError(t, err)
	f := c.Scaling()
	require.False(t, f.Known)
	require.Contains(t, f.Reason, "WithScalingTarget")
}

// The EMF lines go to their own writer, not through the logger: a logger
// at Warn, a text handler, a grouped logger or none at all must not lose
// the metric.
func TestScalingEMFLine(t *testing.T) {
	t.Parallel()
	for name, logger := range map[string]*slog.Logger{
		"no logger":      nil,
		"warn":           slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})),
		"text, grouped":  slog.New(slog.NewTextHandler(io.Discard, nil)).WithGroup("app"),
		"json, as given": slog.New(slog.NewJSONHandler(io.Discard, nil)),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				var mu sync.Mutex
				var buf bytes.Buffer
				opts := []Option{WithVisibilityTimeout(30 * time.Second),
					WithScaling(ScalingPolicy{Target: 30 * time.Second, EMFNamespace: "Orders/Workers", EMFWriter: &lockedWriter{mu: &mu, w: &buf}})}
				if logger != nil {
					opts = append(opts, WithLogger(logger))
				}
				c, err := New(b.client, b.url, sleepHandler(100*time.Millisecond), opts...)
				require.NoError(t, err)
				b.send(t, 20)
				stop := running(t, c)
				time.Sleep(31 * time.Second)
				require.NoError(t, stop())

				mu.Lock()
				defer mu.Unlock()
				lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
				require.Len(t, lines, 1, "one known reading (at 30 s; the one at 0 s knew no capacity):\n%s", buf.String())
				var line map[string]any
				require.NoError(t, json.Unmarshal(lines[0], &line))
				aws := line["_aws"].(map[string]any)
				require.EqualValues(t, time.Now().Add(-time.Second).Truncate(30*time.Second).UnixMilli(), aws["Timestamp"])
				d := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
				require.Equal(t, "Orders/Workers", d["Namespace"])
				require.Equal(t, []any{[]any{"QueueName"}}, d["Dimensions"])
				names := []string{}
				for _, m := range d["Metrics"].([]any) {
					name := m.(map[string]any)["Name"].(string)
					names = append(names, name)
					require.Contains(t, line, name, "every metric has its value at the root")
				}
				require.Equal(t, []string{"DesiredReplicas", "Backlog", "ArrivalRate"}, names)
				require.Equal(t, "q", line["QueueName"])
				require.EqualValues(t, 1, line["DesiredReplicas"])
			})
		})
	}
}

// badCounts answers GetQueueAttributes for the scaling signal with a
// count that is not a number.
type badCounts struct {
	Client
}

func (b badCounts) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	out, err := b.Client.GetQueueAttributes(ctx, in, optFns...)
	if err == nil {
		if _, ok := out.Attributes["ApproximateNumberOfMessages"]; ok {
			out.Attributes["ApproximateNumberOfMessages"] = "lots"
		}
	}
	return out, err
}

func TestScalingMalformedCounts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		c, err := New(badCounts{b.client}, b.url, sleepHandler(0), WithVisibilityTimeout(30*time.Second),
			WithScaling(ScalingPolicy{Target: 30 * time.Second, Interval: 10 * time.Second}))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Second)
		f := c.Scaling()
		require.Contains(t, f.Err, `ApproximateNumberOfMessages "lots", not a count`)
		require.Contains(t, f.Reason, "not read the queue's counts yet")
		time.Sleep(25 * time.Second) // three failures in a row
		f = c.Scaling()
		require.False(t, f.Known)
		require.Contains(t, f.Reason, "the last 3 readings of the queue's counts failed")
		require.NoError(t, stop())
	})
}

func TestScalingOptionsValidate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tt := range []struct {
		p    ScalingPolicy
		want string
	}{
		{ScalingPolicy{}, "Target 0s out of range"},
		{ScalingPolicy{Target: 13 * time.Hour}, "Target 13h0m0s out of range"},
		{ScalingPolicy{Target: time.Minute, Interval: time.Second}, "Interval 1s out of range [5s, 15m0s]"},
		{ScalingPolicy{Target: time.Minute, ScaleInAfter: 2 * time.Hour}, "ScaleInAfter 2h0m0s above 1h"},
		{ScalingPolicy{Target: time.Minute, Utilization: 1.2}, "Utilization 1.2: must be in (0, 1]"},
		{ScalingPolicy{Target: time.Minute, MinReplicas: 4, MaxReplicas: 2}, "Min 4 above Max 2"},
		{ScalingPolicy{Target: time.Minute, MinReplicas: -1}, "must not be negative"},
		{ScalingPolicy{Target: time.Minute, EMFNamespace: "AWS/SQS"}, `EMFNamespace "AWS/SQS" starts with "AWS/", which CloudWatch reserves`},
		{ScalingPolicy{Target: time.Minute, EMFNamespace: strings.Repeat("n", 256)}, "EMFNamespace is 256 characters, CloudWatch allows 255"},
		{ScalingPolicy{Target: time.Minute, EMFNamespace: ":Orders"}, "starts with a colon"},
		{ScalingPolicy{Target: time.Minute, EMFNamespace: "Orders\tWorker"}, `EMFNamespace "Orders\tWorker" has '\t', which CloudWatch does not allow`},
	} {
		_, err := New(b.client, b.url, sleepHandler(0), WithScaling(tt.p))
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, tt.want)
		require.ErrorContains(t, err, "WithScaling: ")
	}
	for _, ns := range []string{"Orders/Worker", "AWSome/Orders", "Team #1: orders_worker-2.b"} {
		_, err := New(b.client, b.url, sleepHandler(0), WithScaling(ScalingPolicy{Target: time.Minute, EMFNamespace: ns}))
		require.NoError(t, err, ns)
	}
}

// Stats counts what the Consumer paid for: calls by action, empty
// receives, calls per message; and the handler and wait percentiles the
// capacity plan reads.
func TestStatsCountCallsAndTimes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		c, err := New(b.client, b.url, sleepHandler(200*time.Millisecond), WithConcurrency(5), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		b.send(t, 30)
		time.Sleep(3 * time.Second) // the messages wait 3 s before Run
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		st := c.Stats()
		require.EqualValues(t, 30, st.Processed)
		n := st.Calls
		require.EqualValues(t, 1, n.GetQueueAttributes, "Run's start; no scaling signal")
		require.Zero(t, n.ScalingAttributes)
		require.Positive(t, n.Receive)
		require.Positive(t, n.EmptyReceive, "a minute of idle long polls after the drain")
		require.Less(t, n.EmptyReceive, n.Receive)
		require.Zero(t, n.Delete, "deletes go in batches")
		require.GreaterOrEqual(t, n.DeleteBatch, int64(3)) // 30 messages, 10 a call at most
		require.Zero(t, n.ChangeVisibility+n.ChangeVisibilityBatch, "0.2 s handlers need no renewal")
		require.Equal(t, n.Receive+n.DeleteBatch+n.GetQueueAttributes, n.Total())
		require.InDelta(t, float64(n.Total())/30, st.CallsPerMessage, 1e-9)
		require.Equal(t, 5, st.Concurrency)

		require.InEpsilon(t, 200*time.Millisecond, st.HandlerP50, 0.05)
		require.InEpsilon(t, 200*time.Millisecond, st.HandlerMean, 0.05)
		// The first 5 start after 3 s; the last after 3 s + 5 × 0.2 s.
		require.GreaterOrEqual(t, st.WaitP50, 3*time.Second)
		require.InEpsilon(t, 4*time.Second, st.WaitP99, 0.06)
	})
}

// docsFailureThreshold is the ScaledObject's fallback.failureThreshold in
// docs/scaling.md: KEDA applies the fallback after that many failed polls
// in a row.
const docsFailureThreshold = 3

// A replica that has just started behind the Service answers /scaling
// within one handler's time: Run reads the counts at once and the first
// completion figures that reading, without waiting for the next (30 s
// later). Even if every poll of KEDA landed on the fresh replica, once a
// second (the HPA asks every 15 s), fewer than docsFailureThreshold fail
// in a row, so KEDA does not fall back; and the fresh figure is the one
// the two running replicas give.
func TestScalingFreshReplicaDoesNotMakeKEDAFallBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		replica := func() *Consumer {
			c, err := New(b.client, b.url, sleepHandler(time.Second), WithConcurrency(10),
				WithVisibilityTimeout(30*time.Second), WithScalingTarget(30*time.Second))
			require.NoError(t, err)
			return c
		}
		ctx, cancel := context.WithCancel(context.Background())
		waitProducer := produce(t, b, ctx, 20)
		old := []*Consumer{replica(), replica()}
		var stops []func() error
		for _, c := range old {
			stops = append(stops, running(t, c))
		}
		time.Sleep(time.Minute)

		fresh := replica()
		stops = append(stops, running(t, fresh))
		poll := func() (int, Scaling) {
			rec := httptest.NewRecorder()
			fresh.ScalingHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/scaling", nil))
			return rec.Code, fresh.Scaling()
		}
		failed, f := 0, Scaling{}
		for {
			synctest.Wait()
			code, fig := poll()
			if code == http.StatusOK {
				f = fig
				break
			}
			failed++
			require.Less(t, failed, docsFailureThreshold, "the fresh replica still answers %d: %s", code, fig.Reason)
			time.Sleep(time.Second)
		}
		require.Equal(t, int64(1), fresh.Stats().Calls.ScalingAttributes, "figured from Run's first reading, no extra call")
		for _, c := range old {
			require.InDelta(t, c.Scaling().Replicas, f.Replicas, 1, "fresh %+v, running %+v", f, c.Scaling())
		}

		cancel()
		waitProducer()
		for _, stop := range stops {
			require.NoError(t, stop())
		}
	})
}

// produceJittered sends the n-th message at (n + u)/rate seconds, u
// uniform in [0, 1) and seeded: the rate is exact over any span, but no
// send is phase-locked to the readings (every 30 s) as produce's are,
// which would make SQS's in-flight count, read at those instants, off by
// about one message for the whole run.
func produceJittered(t *testing.T, b bundle, ctx context.Context, rate float64) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(30, 2))
		start := time.Now()
		for n := 0; ctx.Err() == nil; n++ {
			at := start.Add(time.Duration((float64(n) + rng.Float64()) / rate * float64(time.Second)))
			time.Sleep(time.Until(at))
			if _, err := b.srv.Send(b.url, "x"); err != nil {
				t.Error(err)
				return
			}
		}
	})
	return wg.Wait
}

// The signal's arrival rate is the whole queue's in-flight count over the
// time a message is not visible per handler run, receive to the answer of
// the call that ended it (read-ahead, handler and settling; hand-backs
// and retry visibility included); in steady load it is the true rate within 3 %, and the
// figure the fewest replicas that meet the target at 0.9 utilization:
// four replicas of 10 slots with 1 s handlers at 30 msg/s (30 / 9 = 3.3,
// so 4); three of 4 slots with 200 ms handlers at 50 msg/s (50 / 18 =
// 2.8, so 3). The rate is the mean of every replica's readings from
// minute 3 to 4:30 (past the smoothing's start, and the start's readings
// out of a 1-minute scale-in window).
func TestScalingArrivalRateUnbiased(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name           string
		replicas, conc int
		handler        time.Duration
		rate           float64
		want           int
	}{
		{"4x10 slots, 1s, 30 msg/s", 4, 10, time.Second, 30, 4},
		{"3x4 slots, 200ms, 50 msg/s", 3, 4, 200 * time.Millisecond, 50, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				ctx, cancel := context.WithCancel(context.Background())
				waitProducer := produceJittered(t, b, ctx, tt.rate)
				var cs []*Consumer
				var stops []func() error
				for range tt.replicas {
					c, err := New(b.client, b.url, sleepHandler(tt.handler), WithConcurrency(tt.conc),
						WithVisibilityTimeout(30*time.Second), WithScaling(ScalingPolicy{Target: 30 * time.Second, ScaleInAfter: time.Minute}))
					require.NoError(t, err)
					cs = append(cs, c)
					stops = append(stops, running(t, c))
				}
				time.Sleep(3*time.Minute - time.Second)
				var sum float64
				var n int
				for range 4 { // the readings at 3:00, 3:30, 4:00 and 4:30
					time.Sleep(30 * time.Second)
					for _, c := range cs {
						f := c.Scaling()
						require.True(t, f.Known, f.Reason)
						require.Equal(t, tt.want, f.Replicas, "%+v", f)
						sum += f.ArrivalRate
						n++
					}
				}
				mean := sum / float64(n)
				t.Logf("%s: ArrivalRate %.2f msg/s against the true %.0f (%+.1f %%)", tt.name, mean, tt.rate, 100*(mean/tt.rate-1))
				require.InEpsilon(t, tt.rate, mean, 0.03)
				cancel()
				waitProducer()
				for _, stop := range stops {
					require.NoError(t, stop())
				}
			})
		})
	}
}
