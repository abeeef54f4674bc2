package sqsconsumer

import "time"

// rttEstimate is the flow's estimate of the round trip of a call to SQS:
// what the read-ahead covers (readAhead), how long a coalesced call waits
// for a busy poller (jobWait), when a running handler is due to finish.
//
// Only a call that cannot have waited in a long poll is a sample (add):
// a coalesced batch call (DeleteMessageBatch, ChangeMessageVisibilityBatch,
// which never wait) that SQS answered at its first attempt, or a receive
// that brought messages sooner than the estimate (see flow.received). A
// receive may wait up to its whole long poll for messages to become
// visible, and a full answer after a long wait is common (a FIFO group
// unlocking, a burst of sends, releases or expiries make many visible at
// once): taken for a round trip, it made jobs wait seconds for a poller.
//
// The estimate (value) is the samples' smoothed mean, but at least the
// least sample of the last 10 to 20 s (least) and at most twice that:
// calls that wait a little for a busy CPU are covered; a saturated CPU,
// whose waits grow with every call added, does not make the read-ahead
// grow with them; and one slow call (a retry inside the network, a pause)
// moves it only until the next quick one. The zero value has no sample;
// its value is 0. Not safe for concurrent use: the flow guards it.
type rttEstimate struct {
	smooth    time.Duration // the samples' exponentially smoothed mean (1/8)
	sampled   bool          // a sample was taken
	cur, prev time.Duration // the least sample of the current window, and of the previous one
	curSet    bool          // cur holds a sample
	prevSet   bool          // prev holds a sample
	window    time.Time     // when the current window began
}

// rttWindowLength is the length of the windows of rttEstimate's least
// sample.
const rttWindowLength = 10 * time.Second

// add takes the round trip d, measured at now.
func (e *rttEstimate) add(now time.Time, d time.Duration) {
	if !e.sampled {
		e.smooth, e.sampled = d, true
	} else {
		e.smooth += (d - e.smooth) / 8
	}
	if now.Sub(e.window) >= rttWindowLength {
		e.prev, e.prevSet = e.cur, e.curSet
		e.curSet, e.window = false, now
	}
	if !e.curSet || d < e.cur {
		e.cur, e.curSet = d, true
	}
}

// least is the shortest sample of the current and the previous window:
// the network's round trip, without the time calls waited for a CPU.
func (e *rttEstimate) least() time.Duration {
	if e.prevSet && e.prev < e.cur {
		return e.prev
	}
	return e.cur
}

// value is the estimate: 0 before any sample.
func (e *rttEstimate) value() time.Duration {
	if !e.sampled {
		return 0
	}
	m := e.least()
	return min(max(e.smooth, m), 2*m)
}
