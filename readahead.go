package sqsconsumer

import (
	"math"
	"time"
)

// The read-ahead rule: how many messages the flow keeps waiting or on
// their way beyond the free handler slots (readAhead), and how many the
// next receive asks for (receiveSize). Both are pure, for table tests; the
// flow (flow.go) feeds them its measurements: the completion rate
// (rateMeter), the slots' capacity and the round trip (rttEstimate).

// receiveGather is how much work, in time at the current completion rate,
// the read-ahead may hold beyond one round trip so that receives ask for
// full receives of 10 (capped at one receive's size). Below saturation it trades a little
// waiting in the process for calls: at 100 completions a second, receives
// of 10 instead of 1.
const receiveGather = 100 * time.Millisecond

// rateTau is the time constant of the completion-rate estimate.
const rateTau = 250 * time.Millisecond

// readAhead is how many messages the flow keeps waiting or on their way
// beyond the free handler slots. cover is what the handlers finish during
// one receive round trip (Little's law): with less than that waiting or
// asked for, a slot will wait for a receive. ahead adds ceil(rate x
// receiveGather), up to one full receive (size), so that receives stay
// full. due is how
// many running handlers are expected to finish within the round trip (from
// their age and the longest recent handler times): handlers that started
// together finish together, and an average rate would not see the burst
// coming.
//
// rate is the measured completion rate (per second) and capacity what the
// slots could finish if never starved (concurrency / mean handler time).
// The round trip is covered at min(capacity, 2 x rate): below capacity the
// consumer may be starved by its own read-ahead, and asking for twice what
// it achieves doubles the rate every few time constants until the handlers
// (or the CPU) are the limit; at capacity it is the handlers' own pace, so
// slow handlers hold almost nothing beyond their slots. Both are capped at
// limit. It is pure, for table tests.
func readAhead(rate, capacity float64, due int, rtt time.Duration, size, limit int) (cover, ahead int) {
	if rate <= 0 {
		return 0, 0
	}
	c := max(math.Ceil(min(capacity, 2*rate)*rtt.Seconds()), float64(due))
	a := c + min(float64(size), math.Ceil(rate*receiveGather.Seconds()))
	return int(min(c, float64(limit))), int(min(a, float64(limit)))
}

// flowCounts is the state receiveSize decides on.
type flowCounts struct {
	conc, size       int // slots, and the size of a full receive
	running, waiting int
	asked            int
	cover, ahead     int  // from readAhead
	quiet            bool // the queue looks empty: one receive at a time
}

// receiveSize is how many messages the next receive should ask for, 0 for
// none yet. The flow wants the free slots plus the read-ahead covered by
// messages waiting or asked for. It asks for a full receive whenever that
// much is missing, and for less only when what is waiting or coming no
// longer covers the free slots and one round trip of completions: so
// receives stay full at saturation, and a slot never waits for a receive
// that could have been sent. While the queue looks empty only one receive
// is in flight. It is pure, for table tests.
func receiveSize(c flowCounts) int {
	if c.quiet && c.asked > 0 {
		return 0
	}
	free := c.conc - c.running
	have := c.waiting + c.asked
	want := free + c.ahead - have
	if want <= 0 {
		return 0
	}
	if want >= c.size || free+c.cover-have > 0 {
		return min(c.size, want)
	}
	return 0
}

// rateMeter estimates events per second as an exponentially decaying count
// with time constant rateTau, counted from start. Early on the count has
// not built up yet; value divides by the share it has built, so a young
// meter reads the average rate since start rather than too little, and a
// consumer that starts on a backlog reads ahead from its first
// completions. The zero value counts from the first event.
type rateMeter struct {
	r     float64 // decayed count / rateTau at at
	at    time.Time
	start time.Time
}

func (m *rateMeter) add(now time.Time) {
	if m.start.IsZero() {
		m.start = now
	}
	m.r = m.decayed(now) + 1/rateTau.Seconds()
	m.at = now
}

func (m *rateMeter) decayed(now time.Time) float64 {
	if m.at.IsZero() {
		return 0
	}
	return m.r * math.Exp(-now.Sub(m.at).Seconds()/rateTau.Seconds())
}

func (m *rateMeter) value(now time.Time) float64 {
	age := now.Sub(m.start)
	if age >= 20*rateTau {
		return m.decayed(now) // fully built
	}
	built := 1 - math.Exp(-age.Seconds()/rateTau.Seconds())
	if built <= 0 {
		return m.decayed(now)
	}
	return m.decayed(now) / built
}
