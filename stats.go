package sqsconsumer

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqskit/sqsconsumer/ecsprotect"

	"github.com/sqskit/sqsconsumer/internal/latency"
)

// MinAdaptiveVisibility is the shortest lease AdaptiveVisibility ever
// chooses, whatever the work's p99. The heartbeat renews when a third of
// the lease has passed, so two thirds of it must absorb a renewal's round
// trip, the batching window, an SDK retry and a stalled process. At 10 s a
// renewal has about 6.7 s to land, time for a first call and a retry even
// when one call stalls for 3 s. Shorter leases recover crashes a few
// seconds sooner at a real risk of overrun; SQS also counts visibility in
// whole seconds, so rounding alone costs a 3 s lease up to a third of its
// length.
const MinAdaptiveVisibility = 10 * time.Second

const (
	// recentHalf is the size of each half of the recent window behind
	// adaptive leases: its p99 covers the last 256 to 512 settled messages.
	recentHalf = 256
	// adaptiveMinSamples is how many recent settled messages adaptive
	// leases need before they leave their fallback.
	adaptiveMinSamples = 20
	// maxReceiveCountKey is the largest key of Stats.ReceiveCounts; higher
	// counts are counted under it (SQS's maxReceiveCount is at most 1000).
	maxReceiveCountKey = 1000
)

// AdaptiveVisibility returns the lease to ask for when recent work has the
// given p99 receive-to-settle time: twice the p99, rounded up to whole
// seconds, clamped to [lo, hi]. The lower bound is never below
// MinAdaptiveVisibility (10 s), the upper never above MaxVisibilityTimeout
// (12 h); if hi is below the lower bound, the lower bound wins. A p99 of 0
// or less (no data) gives the lower bound. The function is pure and safe
// for concurrent use.
func AdaptiveVisibility(p99, lo, hi time.Duration) time.Duration {
	lo = ceilSecond(max(lo, MinAdaptiveVisibility))
	hi = min(hi, MaxVisibilityTimeout).Truncate(time.Second)
	if hi < lo {
		hi = lo
	}
	p99 = min(p99, MaxVisibilityTimeout) // 2*p99 cannot overflow
	if p99 <= 0 {
		return lo
	}
	return min(max(ceilSecond(2*p99), lo), hi)
}

// ceilSecond rounds d up to a whole second.
func ceilSecond(d time.Duration) time.Duration {
	if t := d.Truncate(time.Second); t != d {
		return t + time.Second
	}
	return d
}

// statsRecorder measures a Consumer's work: counters for every event, and
// the durations of settled messages in a histogram (all of them) and a
// recent window (behind adaptive leases). The Consumer reports each
// settlement itself (settled, unstarted), so no per-message state is kept.
// Safe for concurrent use: counters are atomics, the histogram and the
// window have their own locks.
type statsRecorder struct {
	all     latency.Histogram // every recorded duration
	recent  *latency.Window   // the latest 256..512 durations
	hidden  hiddenWindow      // time not visible, for the scaling signal
	handler latency.Histogram // handler calls, start to return
	wait    latency.Histogram // send (SentTimestamp) to handler start
	calls   callCounter       // SQS calls by action

	kinds             [len(eventNames)]atomic.Int64 // by EventKind
	receiveCounts     [maxReceiveCountKey + 1]atomic.Int64
	processed         atomic.Int64
	renewalsSettled   atomic.Int64 // renewals of the processed messages
	renewedSettled    atomic.Int64 // processed messages renewed at least once
	releasedUnstarted atomic.Int64
}

func newStatsRecorder() *statsRecorder {
	return &statsRecorder{recent: latency.NewWindow(recentHalf)}
}

// countKind counts one event.
func (r *statsRecorder) countKind(kind EventKind, receiveCount int) {
	if kind <= 0 || int(kind) >= len(r.kinds) {
		return
	}
	r.kinds[kind].Add(1)
	if kind == EventReceived {
		r.receiveCounts[min(max(receiveCount, 0), maxReceiveCountKey)].Add(1)
	}
}

// settled records one message whose work ended d after its arrival,
// having been renewed renewals times.
func (r *statsRecorder) settled(d time.Duration, renewals int) {
	r.processed.Add(1)
	if renewals > 0 {
		r.renewalsSettled.Add(int64(renewals))
		r.renewedSettled.Add(1)
	}
	r.all.Record(d)
	r.recent.Record(d)
}

// started records the wait of a message whose handler starts at now:
// from its SentTimestamp (epoch milliseconds, as SQS sends it), when it
// has one that parses and is not in the future.
func (r *statsRecorder) started(m *Message, now time.Time) {
	sent := m.Attributes["SentTimestamp"]
	if sent == "" {
		return // not asked for, or not sent (a parse error would allocate)
	}
	ms, err := strconv.ParseInt(sent, 10, 64)
	if err != nil || ms <= 0 {
		return
	}
	if d := now.Sub(time.UnixMilli(ms)); d >= 0 {
		r.wait.Record(d)
	}
}

// handled records a handler call's running time.
func (r *statsRecorder) handled(d time.Duration) { r.handler.Record(d) }

// notVisible records that a message was not visible for d because of
// this Consumer, its handler run or not.
func (r *statsRecorder) notVisible(d time.Duration, ran bool) { r.hidden.record(d, ran) }

// meanNotVisible is the time SQS counts messages as not visible per
// handler run, recently (0 before any run): with SQS's in-flight count,
// Little's law gives the rate of runs (see hiddenWindow).
func (r *statsRecorder) meanNotVisible() time.Duration { return r.hidden.perRun() }

// hiddenWindow sums the recent times messages were not visible in SQS
// because of this Consumer: from the receive's answer to the answer of
// the call that ended it (delete, release), plus the retry visibility a
// release asked for, for every message, run or not, in two halves of
// recentHalf messages used in turn (as latency.Window). Over handler
// runs, not messages: SQS's in-flight count is the rate of runs times the
// time hidden per run, messages handed back unstarted (received again
// later) included, so the count over it is the rate of messages that
// take a handler slot. The zero value is ready; safe for concurrent use.
type hiddenWindow struct {
	mu   sync.Mutex // guards the fields below
	cur  int        // the half records go to
	half [2]hiddenHalf
}

type hiddenHalf struct {
	sum     time.Duration
	n, runs int
}

func (w *hiddenWindow) record(d time.Duration, ran bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.half[w.cur].n == recentHalf {
		w.cur = 1 - w.cur
		w.half[w.cur] = hiddenHalf{}
	}
	h := &w.half[w.cur]
	h.sum += d
	h.n++
	if ran {
		h.runs++
	}
}

// perRun is the time hidden per handler run over both halves (0 before a
// run).
func (w *hiddenWindow) perRun() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, b := w.half[0], w.half[1]
	if runs := a.runs + b.runs; runs > 0 {
		return (a.sum + b.sum) / time.Duration(runs)
	}
	return 0
}

// unstarted counts a message handed back before its handler started.
func (r *statsRecorder) unstarted() { r.releasedUnstarted.Add(1) }

// Stats returns the figures so far.
func (r *statsRecorder) Stats() Stats {
	var s Stats
	k := &r.kinds
	s.Received, s.Adopted, s.Started = k[EventReceived].Load(), k[EventAdopted].Load(), k[EventStarted].Load()
	s.Succeeded, s.Failed, s.Renewals = k[EventSucceeded].Load(), k[EventFailed].Load(), k[EventRenewed].Load()
	s.RenewalFailures, s.CeilingHits = k[EventRenewalFailed].Load(), k[EventCeilingReached].Load()
	s.LeasesLost, s.LeasesExpired = k[EventLeaseLost].Load(), k[EventLeaseExpired].Load()
	s.Deleted, s.Released = k[EventDeleted].Load(), k[EventReleased].Load()
	s.Processed, s.ReleasedUnstarted = r.processed.Load(), r.releasedUnstarted.Load()
	s.ReceiveCounts = map[int]int64{}
	for i := range r.receiveCounts {
		if n := r.receiveCounts[i].Load(); n > 0 {
			s.ReceiveCounts[i] = n
		}
	}
	if s.Processed > 0 {
		s.RenewalsPerMessage = float64(r.renewalsSettled.Load()) / float64(s.Processed)
		s.RenewedShare = float64(r.renewedSettled.Load()) / float64(s.Processed)
	}
	snap := r.all.Snapshot()
	s.dist = &snap
	s.P50, s.P90, s.P99, s.P999 = snap.Quantile(0.50), snap.Quantile(0.90), snap.Quantile(0.99), snap.Quantile(0.999)
	s.Max, s.Mean = snap.Max(), snap.Mean()
	recent := r.recent.Snapshot()
	s.RecentP99, s.RecentCount = recent.Quantile(0.99), int(recent.Count())
	h := r.handler.Snapshot()
	s.HandlerP50, s.HandlerP99, s.HandlerMean = h.Quantile(0.50), h.Quantile(0.99), h.Mean()
	w := r.wait.Snapshot()
	s.WaitP50, s.WaitP99 = w.Quantile(0.50), w.Quantile(0.99)
	s.Calls = r.calls.counts()
	if s.Processed > 0 {
		s.CallsPerMessage = float64(s.Calls.Total()) / float64(s.Processed)
	}
	return s
}

// adaptiveVisibility is the lease for the next receive under
// WithAdaptiveVisibility(lo, hi): AdaptiveVisibility of the recent p99 once
// the recent window holds adaptiveMinSamples messages, fallback (clamped
// the same way) before that.
func (r *statsRecorder) adaptiveVisibility(lo, hi, fallback time.Duration) time.Duration {
	recent := r.recent.Snapshot()
	if recent.Count() < adaptiveMinSamples {
		return min(max(fallback, AdaptiveVisibility(0, lo, hi)), AdaptiveVisibility(MaxVisibilityTimeout, lo, hi))
	}
	return AdaptiveVisibility(recent.Quantile(0.99), lo, hi)
}

// Stats is what a Consumer measured of its work (Consumer.Stats). Each
// message's duration runs from the arrival of the ReceiveMessage answer
// that delivered it to its settlement: in-process queueing included, the
// long poll's wait before the message came excluded. A message's duration
// is recorded once, when its handler has returned and its lease has ended
// (deleted, released, lost or expired); a message released at shutdown
// before its handler started is only counted (ReleasedUnstarted).
// Percentiles are within about 3 % (nearest rank).
// A Stats is a snapshot: it does not change after it is returned, and may
// be read from many goroutines. The zero value holds no data.
type Stats struct {
	// Counts of events since the Consumer was made, one field per kind:
	// Received counts EventReceived, Adopted EventAdopted, and so on.
	Received, Adopted, Started, Succeeded, Failed int64
	Deleted, Released                             int64
	// ReleasedUnstarted counts releases of messages whose handler never
	// started (shutdown); they are not in the percentiles.
	ReleasedUnstarted         int64
	Renewals, RenewalFailures int64
	LeasesLost, LeasesExpired int64
	CeilingHits               int64

	// Processed is how many messages' durations are in the percentiles.
	Processed int64
	// Percentiles, maximum and mean of the receive-to-settle durations.
	P50, P90, P99, P999, Max, Mean time.Duration
	// RecentP99 is the p99 of the latest RecentCount (256 to 512)
	// durations: what adaptive leases follow.
	RecentP99   time.Duration
	RecentCount int

	// HandlerP50, HandlerP99 and HandlerMean are of the handler calls'
	// running times, from start to return (a Batch handler's messages
	// each count its call's time).
	HandlerP50, HandlerP99, HandlerMean time.Duration
	// WaitP50 and WaitP99 are of the waits from a message's send
	// (SentTimestamp, SQS's clock, to the millisecond) to its handler's
	// start (this host's clock: a skew between the two shifts them):
	// what the scaling signal's target (WithScalingTarget) bounds.
	WaitP50, WaitP99 time.Duration

	// Calls counts the SQS API calls made, by action; CallsPerMessage is
	// their total over Processed (0 before anything was processed): with
	// the price per million requests, what a message costs.
	Calls           CallCounts
	CallsPerMessage float64

	// ReceiveCounts maps ApproximateReceiveCount at each receive to how
	// many receives had it (counts above 1000 are counted under 1000;
	// 0 means SQS did not say). "All 1" is healthy; a few 2s are the
	// earliest sign that work outruns its lease.
	ReceiveCounts map[int]int64
	// RenewalsPerMessage is the mean number of confirmed renewals of a
	// processed message; RenewedShare the fraction (0 to 1) of processed
	// messages renewed at least once.
	RenewalsPerMessage float64
	RenewedShare       float64

	// What the Consumer holds now:
	// Running handlers; Waiting messages received and leased but not yet
	// started (the read-ahead, and FIFO messages behind their group);
	// Asked, messages asked for by receives in flight.
	Running, Waiting, Asked int

	// Concurrency is WithConcurrency: the handlers that may run at once.
	Concurrency int

	// The message groups holding the most handler slot time in this
	// Consumer (a fair queue's tenants, or a FIFO queue's groups), over
	// about the last minute or two (slot time decays with a time constant
	// of one minute; see GroupSlotTime): TopGroups names the five holding
	// the most, most first; NoisyGroups counts the groups above a tenth
	// of all the slot time held (messages without a group included), the
	// Consumer's own view of SQS's noisy tenants (at most 9), which fair
	// dispatch makes leave headroom for the others (WithFairDispatch); OtherGroups
	// is how many more groups it follows beyond the five, and
	// OtherGroupsSlotTime the slot time of everything not named (messages
	// without a group included). Memory is bounded whatever the number of
	// groups: 32 groups are followed at once, and any group above a 32nd
	// of the slot time is among them. Empty until a group's handler has
	// returned. The scaling signal does not read them.
	TopGroups           []GroupSlotTime
	NoisyGroups         int
	OtherGroups         int
	OtherGroupsSlotTime time.Duration

	// How the Consumer reaches SQS: MaxCallsInFlight is the most calls
	// (receives, deletes, visibility changes) it makes at once
	// (WithPollers, or its default); IdleConnsPerHost the idle connections
	// its HTTP client keeps for reuse (0 when the Consumer cannot tell);
	// LimitedByPool is set once the Consumer wanted more calls in flight
	// than that pool lets it make without opening new connections (see
	// New): a larger pool would let it go faster.
	MaxCallsInFlight int
	IdleConnsPerHost int
	LimitedByPool    bool

	// ScaleInProtection is the ECS task scale-in protection's state and
	// calls (WithScaleInProtection): whether the task is protected now,
	// the agent calls made and failed, the latest error. Zero when off.
	ScaleInProtection ecsprotect.Stats

	dist *latency.Snapshot
}

// ShareAbove returns the fraction (0 to 1) of processed messages held
// longer than d, interpolated within the histogram's buckets.
func (s Stats) ShareAbove(d time.Duration) float64 {
	if s.dist == nil {
		return 0
	}
	return s.dist.ShareAbove(d)
}

// Quantile returns the q-quantile (0 to 1) of the receive-to-settle
// durations, 0 when nothing was processed.
func (s Stats) Quantile(q float64) time.Duration {
	if s.dist == nil {
		return 0
	}
	return s.dist.Quantile(q)
}

// Redeliveries returns how many receives were of a message received before:
// ApproximateReceiveCount of 2 or more, plus adoptions (a redelivery of a
// message still leased here).
func (s Stats) Redeliveries() int64 {
	n := s.Adopted
	for k, v := range s.ReceiveCounts {
		if k >= 2 {
			n += v
		}
	}
	return n
}

// LogValue makes a Stats log as a group of its main figures, readable by
// any slog handler: durations are strings in time.Duration's format
// ("1.234s", "250ms", "3m10.5s"; time.ParseDuration reads them back),
// rounded to the millisecond (to the microsecond below a millisecond),
// rather than the integer nanoseconds slog.JSONHandler would write for a
// time.Duration; ratios are rounded to two decimals. Leases lost (a
// renewal refused: another receive took the message) and leases expired
// (no renewal landed in time) are logged apart, since they have different
// causes.
func (s Stats) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int64("processed", s.Processed),
		logDur("p50", s.P50), logDur("p90", s.P90), logDur("p99", s.P99), logDur("p999", s.P999),
		logDur("max", s.Max), logDur("mean", s.Mean),
		slog.Int64("received", s.Received), slog.Int64("redeliveries", s.Redeliveries()),
		slog.Int64("deleted", s.Deleted), slog.Int64("released", s.Released), slog.Int64("failed", s.Failed),
		slog.Int64("renewals", s.Renewals), slog.Int64("renewal_failures", s.RenewalFailures),
		slog.Float64("renewals_per_message", round2(s.RenewalsPerMessage)), slog.Float64("renewed_share", round2(s.RenewedShare)),
		slog.Int64("leases_lost", s.LeasesLost), slog.Int64("leases_expired", s.LeasesExpired),
		slog.Int64("ceiling_hits", s.CeilingHits),
	)
}

// String summarises s on one line: what LogValue logs, as key=value
// pairs. It is also what fmt's %v and %+v print.
func (s Stats) String() string {
	var b strings.Builder
	for i, a := range s.LogValue().Group() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%v", a.Key, a.Value)
	}
	fmt.Fprintf(&b, " running=%d waiting=%d asked=%d", s.Running, s.Waiting, s.Asked)
	return b.String()
}

// logDur is a duration attribute as a string, rounded to the millisecond
// (the microsecond below a millisecond).
func logDur(key string, d time.Duration) slog.Attr {
	if d > -time.Millisecond && d < time.Millisecond {
		return slog.String(key, d.Round(time.Microsecond).String())
	}
	return slog.String(key, d.Round(time.Millisecond).String())
}

// round2 rounds f to two decimals.
func round2(f float64) float64 { return math.Round(f*100) / 100 }
