package latency

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBucketLayout(t *testing.T) {
	t.Parallel()
	require.Equal(t, 528, NumBuckets)
	prevLo := uint64(0)
	for i := range NumBuckets {
		lo, w := bucketRange(i)
		if i > 0 {
			require.Equal(t, prevLo, lo-bucketWidthBefore(i), "bucket %d does not start where %d ended", i, i-1)
		}
		require.Equal(t, i, bucketOf(lo), "first value of bucket %d", i)
		require.Equal(t, i, bucketOf(lo+w-1), "last value of bucket %d", i)
		if lo >= SubBuckets {
			require.LessOrEqual(t, float64(w)/float64(lo), 1.0/SubBuckets, "bucket %d too wide", i)
		}
		prevLo = lo
	}
	require.Equal(t, NumBuckets-1, bucketOf(math.MaxUint64))
	require.Equal(t, NumBuckets-1, bucketOf(maxValue))
	require.Equal(t, 0, bucketOf(micros(-time.Second)))
}

func bucketWidthBefore(i int) uint64 {
	_, w := bucketRange(i - 1)
	return w
}

// exactQuantile is the nearest-rank q-quantile of sorted, truncated to the
// microsecond as the histogram stores it.
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	rank := max(int(math.Ceil(q*float64(len(sorted)))), 1)
	return sorted[rank-1].Truncate(time.Microsecond)
}

func TestQuantileRelativeError(t *testing.T) {
	t.Parallel()
	logUniform := func(r *rand.Rand) time.Duration { // 1 ms .. 12 h
		return time.Duration(math.Exp(math.Log(1e6) + r.Float64()*(math.Log(float64(12*time.Hour))-math.Log(1e6))))
	}
	tests := []struct {
		name string
		n    int
		gen  func(r *rand.Rand) time.Duration
	}{
		{"one sample", 1, func(*rand.Rand) time.Duration { return 1234 * time.Millisecond }},
		{"constant", 1000, func(*rand.Rand) time.Duration { return 7 * time.Second }},
		{"log-uniform 1ms..12h", 100_000, logUniform},
		{"exponential mean 2s", 50_000, func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * 2e9) }},
		{"lognormal around 22s", 50_000, func(r *rand.Rand) time.Duration { return time.Duration(22e9 * math.Exp(1.2*r.NormFloat64())) }},
		{"bimodal 5ms and 9min", 20_000, func(r *rand.Rand) time.Duration {
			if r.IntN(100) < 97 {
				return time.Duration(5e6 * (1 + r.Float64()))
			}
			return time.Duration(540e9 * (1 + 0.1*r.Float64()))
		}},
		{"sub-millisecond", 10_000, func(r *rand.Rand) time.Duration { return time.Duration(r.IntN(1000)) * time.Microsecond }},
	}
	qs := []float64{0, 0.001, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(i), 42))
			var h Histogram
			samples := make([]time.Duration, tt.n)
			for j := range samples {
				samples[j] = tt.gen(r)
				h.Record(samples[j])
			}
			slices.Sort(samples)
			s := h.Snapshot()
			require.Equal(t, uint64(tt.n), s.Count())
			require.Equal(t, samples[len(samples)-1].Truncate(time.Microsecond), s.Max())
			for _, q := range qs {
				got, want := s.Quantile(q), exactQuantile(samples, q)
				diff := math.Abs(float64(got - want))
				require.LessOrEqual(t, diff, float64(want)*RelativeError,
					"q=%v: got %v, want %v (±%.1f%%)", q, got, want, 100*RelativeError)
			}
		})
	}
}

func TestEmptyAndEdges(t *testing.T) {
	t.Parallel()
	var h Histogram
	require.Zero(t, h.Quantile(0.99))
	require.Zero(t, h.Count())
	s := h.Snapshot()
	require.Zero(t, s.Mean())
	require.Zero(t, s.Max())
	require.Zero(t, s.ShareAbove(time.Second))

	h.Record(-5 * time.Second)
	require.Zero(t, h.Quantile(0.5), "negative durations count as 0")

	h.Reset()
	h.Record(30 * time.Hour) // beyond the last bucket's start
	h.Record(20 * time.Hour)
	s = h.Snapshot()
	require.Equal(t, 30*time.Hour, s.Max())
	require.Equal(t, 30*time.Hour, s.Quantile(0.5), "the unbounded bucket reports its upper end")
	require.Equal(t, 25*time.Hour, s.Mean())

	require.Equal(t, s.Quantile(0), s.Quantile(-1), "q below 0 is 0")
	require.Equal(t, s.Max(), s.Quantile(2), "q above 1 is 1")
	require.Equal(t, s.Quantile(0), s.Quantile(math.NaN()))
}

func TestMergeEqualsCombinedRecord(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 7))
	var a, b, both Histogram
	for i := range 5000 {
		d := time.Duration(r.Int64N(int64(10 * time.Minute)))
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
		both.Record(d)
	}
	sa, sb := a.Snapshot(), b.Snapshot()
	sa.Merge(&sb)
	require.Equal(t, both.Snapshot(), sa)
}

func TestShareAbove(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 9))
	var h Histogram
	samples := make([]time.Duration, 20_000)
	for i := range samples {
		samples[i] = time.Duration(r.Int64N(int64(10 * time.Minute)))
		h.Record(samples[i])
	}
	s := h.Snapshot()
	for _, d := range []time.Duration{0, time.Second, 30 * time.Second, 5 * time.Minute, 9*time.Minute + 59*time.Second, time.Hour} {
		var exact int
		for _, x := range samples {
			if x > d {
				exact++
			}
		}
		want := float64(exact) / float64(len(samples))
		require.InDelta(t, want, s.ShareAbove(d), 0.01, "share above %v", d)
	}
}

func TestConcurrentRecord(t *testing.T) {
	t.Parallel()
	const goroutines, each = 8, 20_000
	var h Histogram
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				h.Record(time.Duration(g*each+i) * time.Millisecond)
				if i%1000 == 0 {
					s := h.Snapshot() // readers alongside writers
					_ = s.Quantile(0.99)
				}
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	require.Equal(t, uint64(goroutines*each), h.Count())
	require.Equal(t, uint64(goroutines*each), s.Count())
	require.Equal(t, time.Duration(goroutines*each-1)*time.Millisecond, s.Max())
}

func TestWindowFollowsShift(t *testing.T) {
	t.Parallel()
	const size = 100
	w := NewWindow(size)
	for range 1000 {
		w.Record(time.Second)
	}
	require.Equal(t, uint64(2*size), w.Count(), "window holds at most 2*size")
	p99 := func() time.Duration { s := w.Snapshot(); return s.Quantile(0.99) }
	require.InEpsilon(t, time.Second, p99(), RelativeError)

	// Shift to slow work: p99 must rise once more than 1 % of the window is slow.
	rose := -1
	for i := range 4 * size {
		w.Record(time.Minute)
		if p99() >= 58*time.Second {
			rose = i + 1
			break
		}
	}
	require.Positive(t, rose)
	require.LessOrEqual(t, rose, 2*size/100+1, "p99 rose after %d slow records", rose)

	// Shift back to fast work: the slow durations leave within 2*size records.
	fell := -1
	for i := range 4 * size {
		w.Record(time.Second)
		if p99() < 2*time.Second {
			fell = i + 1
			break
		}
	}
	require.Positive(t, fell)
	require.LessOrEqual(t, fell, 2*size, "p99 fell after %d fast records", fell)
}

func TestWindowConcurrent(t *testing.T) {
	t.Parallel()
	w := NewWindow(50)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 5000 {
				w.Record(time.Duration(i) * time.Millisecond)
				if i%100 == 0 {
					s := w.Snapshot()
					require.LessOrEqual(t, s.Count(), uint64(100))
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, uint64(100), w.Count())
	require.Equal(t, uint64(1), NewWindow(0).size, "size below 1 means 1")
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	d := 1500 * time.Millisecond
	for i := 0; b.Loop(); i++ {
		h.Record(d + time.Duration(i&1023)*time.Millisecond)
	}
}

func BenchmarkRecordParallel(b *testing.B) {
	var h Histogram
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			h.Record(time.Duration(i&4095) * time.Millisecond)
			i++
		}
	})
}

func BenchmarkQuantile(b *testing.B) {
	var h Histogram
	for i := range 100_000 {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	s := h.Snapshot()
	for b.Loop() {
		_ = s.Quantile(0.99)
	}
}

func BenchmarkWindowRecord(b *testing.B) {
	w := NewWindow(256)
	for i := 0; b.Loop(); i++ {
		w.Record(time.Duration(i&1023) * time.Millisecond)
	}
}
