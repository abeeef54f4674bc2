package fleet_test

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/fleet"
)

// Two queues under a budget of 10 slots, 4 msg/s each, handlers of 1 s.
// Each queue alone would fit one replica (4 / (10 × 0.9) = 0.44), but
// together they keep 8 slots busy, and with a third queue of the same load
// 12: the process needs ceil(12 / 9) = 2 replicas, which no queue's own
// figure says.
func TestFleetScalingAddsUpTheQueues(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "a", "b", "c")
		f, err := fleet.New(10)
		require.NoError(t, err)
		for q := range 3 {
			require.NoError(t, f.Add(b.consumer(t, q, b.handler(q, time.Second), sqsconsumer.WithConcurrency(10),
				sqsconsumer.WithScaling(sqsconsumer.ScalingPolicy{Target: time.Minute, ScaleInAfter: -1}))))
		}
		s := f.Scaling()
		require.False(t, s.Known)
		require.Contains(t, s.Reason, "not read the queue's counts yet")

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for q := range 2 {
			wg.Go(func() {
				for ctx.Err() == nil {
					b.fill(t, q, 1)
					time.Sleep(250 * time.Millisecond)
				}
			})
		}
		stop := start(t, f)
		time.Sleep(4 * time.Minute)
		s = f.Scaling()
		require.True(t, s.Known, s.Reason)
		require.Equal(t, 10, s.Budget)
		require.Len(t, s.Queues, 3)
		for _, q := range s.Queues[:2] {
			require.True(t, q.Scaling.Known)
			require.Equal(t, 1, q.Scaling.Replicas, "%+v", q.Scaling)
		}
		require.InDelta(t, 8, s.SlotsNeeded, 1.6, "two queues of 4 msg/s × 1 s")
		require.Equal(t, 1, s.Replicas)

		wg.Go(func() { // the third queue's load
			for ctx.Err() == nil {
				b.fill(t, 2, 1)
				time.Sleep(250 * time.Millisecond)
			}
		})
		time.Sleep(4 * time.Minute)
		s = f.Scaling()
		for _, q := range s.Queues {
			require.Equal(t, 1, q.Scaling.Replicas, "%s: %+v", q.Queue, q.Scaling)
		}
		require.GreaterOrEqual(t, s.SlotsNeeded, 10.0)
		require.GreaterOrEqual(t, s.Replicas, 2)
		// One process is short of slots, so a backlog grew meanwhile and
		// the queues' demand is above their arrivals: the figure is the
		// slots over the budget's 9 (10 × 0.9), whatever they came to.
		require.Equal(t, int(math.Ceil(s.SlotsNeeded/9)), s.Replicas, "slots %.1f", s.SlotsNeeded)

		rec := httptest.NewRecorder()
		f.ScalingHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/scaling", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		var body struct {
			Replicas int `json:"replicas"`
			Queues   []struct {
				Queue   string `json:"queue"`
				Scaling struct {
					Replicas int `json:"replicas"`
				} `json:"scaling"`
			} `json:"queues"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		require.Equal(t, s.Replicas, body.Replicas)
		require.Len(t, body.Queues, 3)
		cancel()
		wg.Wait()
		require.NoError(t, stop())
	})
}

func TestFleetScalingOff(t *testing.T) {
	t.Parallel()
	b := newBed(t, 0, "a")
	f, err := fleet.New(4)
	require.NoError(t, err)
	require.NoError(t, f.Add(b.consumer(t, 0, b.handler(0, 0))))
	s := f.Scaling()
	require.False(t, s.Known)
	require.Contains(t, s.Reason, "no queue has the scaling signal on")
	rec := httptest.NewRecorder()
	f.ScalingHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/scaling", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
}

// Two fleet replicas of 20 slots each consume two queues of 15 and 10
// msg/s with 1 s handlers: 25 slots of work over 2 × 18 (0.9 of 20), so
// the process figure is 2, and each queue's arrival rate, the mean of
// both replicas' readings from minute 4 to 8, is the true rate within
// 3 %. Sends are jittered so that none is phase-locked to the readings.
func TestFleetArrivalRateUnbiased(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "a", "b")
		rates := []float64{15, 10}
		var fleets []*fleet.Fleet
		var stops []func() error
		for range 2 {
			f, err := fleet.New(20)
			require.NoError(t, err)
			for q := range rates {
				require.NoError(t, f.Add(b.consumer(t, q, b.handler(q, time.Second), sqsconsumer.WithConcurrency(20),
					sqsconsumer.WithScaling(sqsconsumer.ScalingPolicy{Target: time.Minute, ScaleInAfter: 2 * time.Minute}))))
			}
			fleets = append(fleets, f)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for q, rate := range rates {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(30, uint64(q)))
				start := time.Now()
				for n := 0; ctx.Err() == nil; n++ {
					time.Sleep(time.Until(start.Add(time.Duration((float64(n) + rng.Float64()) / rate * float64(time.Second)))))
					b.fill(t, q, 1)
				}
			})
		}
		for _, f := range fleets {
			stops = append(stops, start(t, f))
		}
		time.Sleep(4*time.Minute - time.Second)
		sums := make([]float64, len(rates))
		n := 0
		for range 8 {
			time.Sleep(30 * time.Second)
			for _, f := range fleets {
				s := f.Scaling()
				require.True(t, s.Known, s.Reason)
				require.Equal(t, 2, s.Replicas, "%+v", s)
				for q := range rates {
					sums[q] += s.Queues[q].Scaling.ArrivalRate
				}
			}
			n++
		}
		for q, rate := range rates {
			mean := sums[q] / float64(n*len(fleets))
			t.Logf("queue %d: ArrivalRate %.2f msg/s against the true %.0f (%+.1f %%)", q, mean, rate, 100*(mean/rate-1))
			require.InEpsilon(t, rate, mean, 0.03)
		}
		cancel()
		wg.Wait()
		for _, stop := range stops {
			require.NoError(t, stop())
		}
	})
}
