package scalesim

import "time"

// hist counts waits: by millisecond up to fineLimit, by second up to coarseLimit,
// and everything longer in the last bucket. The zero value is empty. Not safe for
// concurrent use (the sim's mutex guards it).
type hist struct {
	fine   []int64
	coarse []int64
	n      int64
}

const (
	fineLimit   = 120 * time.Second
	coarseLimit = 12 * time.Hour
)

func (h *hist) record(d time.Duration) {
	if h.fine == nil {
		h.fine = make([]int64, fineLimit/time.Millisecond)
		h.coarse = make([]int64, coarseLimit/time.Second+1)
	}
	h.n++
	d = max(d, 0)
	if d < fineLimit {
		h.fine[d/time.Millisecond]++
		return
	}
	h.coarse[min(d/time.Second, coarseLimit/time.Second)]++
}

// quantile returns the q-quantile by nearest rank, as the bucket's upper edge
// (a wait of 12 ms reads as 13 ms at most); 0 when empty.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen int64
	for i, c := range h.fine {
		if seen += c; seen >= rank {
			return time.Duration(i+1) * time.Millisecond
		}
	}
	for i, c := range h.coarse {
		if seen += c; seen >= rank {
			return time.Duration(i+1) * time.Second
		}
	}
	return coarseLimit
}
