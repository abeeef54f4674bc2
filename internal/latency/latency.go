// Package latency records durations in a small, fixed-size histogram whose
// quantiles carry a bounded relative error, from tens of microseconds to
// beyond SQS's 12-hour visibility ceiling.
//
// # Layout
//
// Durations are counted in whole microseconds and placed in log-linear
// buckets, the layout HdrHistogram made popular: each power of two is split
// into [SubBuckets] equal slices, so a bucket is never wider than 1/16 of its
// lower bound. Values below 16 µs get a bucket each; values of 2^36 µs
// (about 19 hours) and more share the last bucket. That is [NumBuckets]
// (528) counters, 4.2 KiB per [Histogram].
//
// A quantile is reported as the midpoint of the bucket holding the sample of
// that rank, clamped to the largest value recorded, so it lies within
// [RelativeError] (1/32, about 3.1 %) of the exact order statistic
// truncated to the microsecond. The truncation adds at most 0.1 % at 1 ms
// and less above. In the last bucket (2^36 µs and more) the largest value
// recorded is reported: an upper bound, the safe side for sizing a lease.
// The test suite checks the bound against sorted random samples.
//
// # Why not a library
//
// HdrHistogram-go and DataDog's sketches-go (DDSketch) were considered.
// Both are fine sketches, but neither is safe for concurrent use, both need
// more memory than this for the range at a similar error, and each would
// become a dependency of the root package, which promises to pull in
// nothing beyond the AWS SDK. The layout needs about a hundred lines.
//
// # Concurrency
//
// [Histogram.Record] is lock-free (atomic adds) and safe from any number of
// goroutines. A [Snapshot] taken while records are in flight may hold some
// of them and not others, but it is internally consistent: its count is the
// sum of its buckets. [Window] keeps a recent view for adaptive leases and
// takes a mutex.
package latency

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

const (
	// subBits is log2 of SubBuckets.
	subBits = 4
	// SubBuckets is how many buckets split each power of two.
	SubBuckets = 1 << subBits
	// maxExp is one past the highest power of two with buckets of its own:
	// values from 2^maxExp µs (about 19 h) up share the last bucket.
	maxExp = 36
	// NumBuckets is the number of counters in a Histogram.
	NumBuckets = (maxExp - subBits + 1) * SubBuckets
	// RelativeError bounds |Quantile - exact| / exact, where exact is the
	// order statistic truncated to the microsecond, for values below
	// 2^36 µs.
	RelativeError = 1.0 / (2 * SubBuckets)
	// maxValue is the largest value, in µs, with a bucket of its own.
	maxValue = 1<<maxExp - 1
)

// bucketOf returns the index of the bucket that counts v microseconds.
func bucketOf(v uint64) int {
	if v < SubBuckets {
		return int(v)
	}
	if v > maxValue {
		v = maxValue
	}
	exp := bits.Len64(v) - 1 // v's top bit; subBits..maxExp-1
	shift := exp - subBits
	sub := int(v>>shift) - SubBuckets // the next subBits bits
	return (shift+1)*SubBuckets + sub
}

// bucketRange returns the first value of bucket i and its width, in µs.
func bucketRange(i int) (lo, width uint64) {
	if i < SubBuckets {
		return uint64(i), 1
	}
	shift := i/SubBuckets - 1
	sub := uint64(i % SubBuckets)
	return (SubBuckets + sub) << shift, 1 << shift
}

// micros converts d to whole microseconds, negative durations to 0.
func micros(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64(d / time.Microsecond)
}

// Histogram counts durations. The zero value is an empty histogram ready to
// use; it must not be copied after first use. All methods are safe for
// concurrent use.
type Histogram struct {
	buckets [NumBuckets]atomic.Uint64
	count   atomic.Uint64
	sum     atomic.Uint64 // µs; wraps after 584,000 years of total time
	max     atomic.Uint64 // µs
}

// Record adds one duration. Negative durations count as 0; durations of
// 2^36 µs (about 19 h) and more count in the last bucket, and Max still
// reports them exactly.
func (h *Histogram) Record(d time.Duration) {
	v := micros(d)
	h.buckets[bucketOf(v)].Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
	h.count.Add(1)
}

// Count returns how many durations were recorded.
func (h *Histogram) Count() uint64 { return h.count.Load() }

// Quantile is h.Snapshot().Quantile(q).
func (h *Histogram) Quantile(q float64) time.Duration {
	s := h.Snapshot()
	return s.Quantile(q)
}

// Snapshot copies the histogram's current counts.
func (h *Histogram) Snapshot() Snapshot {
	var s Snapshot
	h.snapshotInto(&s)
	return s
}

func (h *Histogram) snapshotInto(s *Snapshot) {
	*s = Snapshot{}
	for i := range h.buckets {
		c := h.buckets[i].Load()
		s.Buckets[i] = c
		s.count += c
	}
	s.sum = h.sum.Load()
	s.max = h.max.Load()
}

// Reset empties the histogram. Records that run concurrently with Reset
// may survive it in part.
func (h *Histogram) Reset() {
	for i := range h.buckets {
		h.buckets[i].Store(0)
	}
	h.count.Store(0)
	h.sum.Store(0)
	h.max.Store(0)
}

// Snapshot is a copy of a Histogram's counts, for reading quantiles or
// merging. The zero value is empty. A Snapshot is a plain value (4.2 KiB):
// not safe for concurrent mutation, safe to read from many goroutines.
type Snapshot struct {
	// Buckets holds the count of each bucket, in increasing order of value.
	Buckets [NumBuckets]uint64
	count   uint64
	sum     uint64 // µs
	max     uint64 // µs
}

// Count returns how many durations the snapshot holds.
func (s *Snapshot) Count() uint64 { return s.count }

// Max returns the largest duration recorded, to the microsecond (0 if
// empty).
func (s *Snapshot) Max() time.Duration { return time.Duration(s.max) * time.Microsecond }

// Mean returns the arithmetic mean, to the microsecond (0 if empty).
func (s *Snapshot) Mean() time.Duration {
	if s.count == 0 {
		return 0
	}
	return time.Duration(s.sum/s.count) * time.Microsecond
}

// Merge adds o's counts to s.
func (s *Snapshot) Merge(o *Snapshot) {
	for i, c := range o.Buckets {
		s.Buckets[i] += c
	}
	s.count += o.count
	s.sum += o.sum
	s.max = max(s.max, o.max)
}

// Quantile returns the q-quantile (q from 0 to 1, clamped) by the
// nearest-rank method: the value of the ceil(q*n)-th smallest duration,
// approximated as described in the package doc. It returns 0 when the
// snapshot is empty. Quantile(1) is Max.
func (s *Snapshot) Quantile(q float64) time.Duration {
	if s.count == 0 {
		return 0
	}
	if math.IsNaN(q) || q < 0 {
		q = 0
	}
	rank := uint64(math.Ceil(q * float64(s.count)))
	rank = max(rank, 1)
	if rank >= s.count {
		return s.Max()
	}
	var seen uint64
	for i, c := range s.Buckets {
		seen += c
		if seen >= rank {
			if i == NumBuckets-1 {
				return s.Max() // unbounded bucket: report its upper end
			}
			lo, w := bucketRange(i)
			mid := lo + w/2
			if w == 1 {
				mid = lo // exact below 32 µs
			}
			return time.Duration(min(mid, s.max)) * time.Microsecond
		}
	}
	return s.Max()
}

// ShareAbove returns the fraction of durations (0 to 1) greater than d, as
// far as buckets tell: a bucket straddling d counts in proportion to the
// part of it above d.
func (s *Snapshot) ShareAbove(d time.Duration) float64 {
	if s.count == 0 {
		return 0
	}
	v := micros(d)
	if v >= s.max {
		return 0
	}
	var above float64
	for i, c := range s.Buckets {
		if c == 0 {
			continue
		}
		lo, w := bucketRange(i)
		hi := lo + w // exclusive
		if i == NumBuckets-1 {
			hi = max(hi, s.max+1)
		}
		switch {
		case lo > v:
			above += float64(c)
		case hi > v+1:
			above += float64(c) * float64(hi-(v+1)) / float64(hi-lo)
		}
	}
	return min(above/float64(s.count), 1)
}
