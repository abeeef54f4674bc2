package latency

import (
	"sync"
	"time"
)

// Window keeps the most recent durations in two histograms used in turn:
// records go to the current one; when it holds size durations the other is
// emptied and becomes current. A snapshot merges both, so it always covers
// the latest size to 2*size durations and forgets older ones. A change in
// the workload therefore shows in the window's quantiles within a bounded
// number of records: an upper quantile q rises as soon as more than
// (1-q)*2*size of the recent durations are larger, and falls back once
// 2*size newer records have pushed the old ones out.
//
// Make one with NewWindow; the zero value is not usable. All methods are
// safe for concurrent use.
type Window struct {
	size uint64

	mu   sync.Mutex // guards the fields below
	cur  *Histogram
	prev *Histogram
	n    uint64 // records in cur
	a, b Histogram
}

// NewWindow returns a Window whose halves hold size durations each (at
// least 1).
func NewWindow(size int) *Window {
	w := &Window{size: uint64(max(size, 1))}
	w.cur, w.prev = &w.a, &w.b
	return w
}

// Record adds one duration to the window.
func (w *Window) Record(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == w.size {
		w.prev.Reset()
		w.cur, w.prev = w.prev, w.cur
		w.n = 0
	}
	w.cur.Record(d)
	w.n++
}

// Snapshot returns the durations the window holds now, merged.
func (w *Window) Snapshot() Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.cur.Snapshot()
	p := w.prev.Snapshot()
	s.Merge(&p)
	return s
}

// Count returns how many durations the window holds now (at most 2*size).
func (w *Window) Count() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur.Count() + w.prev.Count()
}
