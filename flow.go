package sqsconsumer

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqskit/sqsconsumer/internal/share"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// flow decides when the Consumer receives and how many messages it asks
// for, so that a handler slot that frees never waits for a round trip,
// and it hands out the handler slots.
//
// A message is asked for (by a receive in flight), then waiting (received,
// leased, not started: ready for a slot, or behind its FIFO group), then
// running (it holds a handler slot), and, once its handler succeeded,
// may give its slot back while SQS confirms its delete (settling, at most
// conc + maxAhead at once). The flow counts each, and keeps where each
// message stands in the message's ticket, which only the flow writes; the
// run tells it when a message leaves (leave). The flow keeps, beyond the free slots,
// a read-ahead of messages waiting or on their way: by Little's law, the
// messages handlers finish during one receive round trip, plus at most one full
// receive so that receives stay full (see readAhead). A slot that frees then
// finds a message waiting, while slow handlers (a low completion rate) hold
// almost nothing beyond their slots and leave the queue to other processes.
//
// Pollers are started on demand, up to the limit on calls in flight
// (calls, see inflight.go; maxPollers when fixed), and park on kick when
// there is nothing to ask for or more of them are busy than the limit
// allows; the flow wakes one when a receive is due. All fields but
// settling are guarded by mu.
type flow[T ticketed] struct {
	mu sync.Mutex

	conc       int // handler slots
	size       int // MaxNumberOfMessages of a full receive (WithBatchSize)
	maxAhead   int // hard bound on waiting + asked beyond the slots
	maxPollers int // the most pollers: the limit when calls is nil
	// calls is the limit on calls in flight that follows what the HTTP
	// client sustains (inflight.go); nil when it is fixed at maxPollers
	// (WithPollers). steady is set when the receive nextLocked last found
	// due only keeps a poller's call going (steadyLocked).
	calls  *callLimit
	steady bool

	running int             // handler slots in use
	epoch   time.Time       // when the flow was made: slot times count from it
	starts  []time.Duration // when each slot in use was taken (since epoch), ascending
	waiting int             // received and leased, not started
	asked   int             // asked for by receives in flight
	ready   fairReady[T]    // waiting messages free to start, and which starts next
	rate    rateMeter
	rtt     rttEstimate   // the round trip of a call to SQS (roundtrip.go)
	hold    time.Duration // smoothed time a message holds its handler slot
	// holdHigh follows the longest recent hold times: it jumps to a
	// longer one and creeps back toward shorter ones. A handler is due
	// to finish only once it is that old (less a round trip), so varied
	// handlers are never counted due early, which would leave messages
	// waiting here for slots that stay busy.
	holdHigh time.Duration
	holds    int // hold times measured, up to conc
	stopped  bool
	// quiet is set while the queue looks empty (the latest receive got
	// nothing, or none has answered yet): then one receive at a time
	// waits in its long poll instead of one per receive's worth of free slots. An
	// idle process costs one receive per wait time, and at a shutdown
	// only one poll is in flight to bring back messages that must be
	// released.
	quiet bool

	// Receive failures: while retryAt is ahead no receive is due (one
	// backoff for all pollers), and the timer wakes them after it.
	failures int    // consecutive failed receives
	same     int    // of them, the latest run of identical client errors
	lastErr  string // the error of that run
	retryAt  time.Time

	// paused is the Consumer's paused state (pauseState.on), set between
	// Pause and Resume, which alone write it: no receive is due and no
	// message starts. The flow only reads it (under mu, where it decides).
	paused *atomic.Bool
	// limiter, when set (WithRateLimit), holds back receives the rate
	// does not allow yet: a receive asks only for messages it has tokens
	// for, and gives back those it did not get.
	limiter *tokenBucket
	// In a fleet (member set): the shared slot budget, and the pause
	// after a receive that got nothing, until idleUntil.
	member    *share.Member
	idlePause time.Duration
	idleUntil time.Time
	full      bool      // the latest receive got all it asked for
	sentAt    time.Time // when the latest receive was sent

	// timer wakes the pollers at timerAt, when a backoff, an idle pause
	// or the limiter let the next receive go.
	timer   *time.Timer
	timerAt time.Time

	pollers   int             // poller goroutines started
	idle      int             // pollers parked on kick
	recvSince []time.Duration // when each receive in flight was sent (since epoch)
	// recvEnded is closed once the flow is stopped and no receive is in
	// flight (receivesEnded); nil until asked for.
	recvEnded chan struct{}
	kick      chan struct{}

	// The pollers are the Consumer's lanes: between receives they make its
	// coalesced calls (deletes, visibility changes: jobs), one call at a
	// time each, as a bare receive-and-delete loop does, so that its calls
	// in flight are no more than its busy pollers and stay as steady as
	// theirs: a connection pool then keeps the connections they use
	// instead of closing some and dialling others. A job waits for a
	// poller at most jobWait (all of them may be in long polls); then it
	// runs on a goroutine of its own (overflow). lanesClosed: the
	// shutdown has ended (the pollers are told to quit right after), and
	// jobs run on goroutines of their own.
	jobs        []func()
	jobTimer    *time.Timer
	jobArmed    bool
	lastTake    time.Time // a poller last took work: they make progress
	overflow    func(job func())
	lanesClosed bool
	atLimit     func(limit int) // see flowConfig
	maxJobWait  time.Duration   // see flowConfig
	spawn       func()          // starts one more poller; called with mu held
	peakAhead   int             // most messages waiting + asked beyond the free slots

	// burst is how many slots handlers free at once, when more than one:
	// a Batch handler's size. The read-ahead covers at least that many, so
	// that when a batch returns the next one fills from messages already
	// here instead of gathering over a receive round trip.
	burst int

	// gate, when set, bounds each receive: given the messages held
	// (running + waiting + asked for) it returns the most the next
	// receive may ask for, or -1 for no bound. Called with mu held.
	gate func(held int) int

	// limit, when set, is the back pressure of Throttled
	// (backpressure.go): the slots it lets the flow fill
	// (WithAdaptiveConcurrency's limit: slotsLocked) and the pause in
	// which nothing is received or started (throttledLocked). Asked with
	// mu held.
	limit flowLimit

	// settling counts the succeeded messages whose slot was given back
	// before their delete was confirmed (takeSettling): atomic, not
	// guarded by mu, since every success takes it.
	settling atomic.Int64

	// bytes is the byte bound (WithMaxBytes, bytebound.go): what the
	// messages held weigh, and how many the next receive may ask for.
	bytes byteBudget
}

// flowConfig is what a flow is made with.
type flowConfig struct {
	conc, size, maxAhead, maxPollers int
	spawn                            func()           // starts one more poller; called with the flow's mu held
	overflow                         func(job func()) // runs a job no poller took in time
	atLimit                          func(limit int)  // the flow wanted another poller beyond the limit the HTTP client's pool set (with mu held)
	calls                            *callLimit       // nil: the limit is fixed at maxPollers
	burst                            int              // slots freed at once (a Batch handler's size), 0 for one
	gate                             func(held int) int
	limit                            flowLimit    // Throttled's pause and limit; nil for none
	limiter                          *tokenBucket // WithRateLimit; nil for none
	member                           *share.Member
	fair                             bool         // groups share the slots fairly (see fairReady)
	groupLimit                       int          // WithGroupLimit; 0 for none
	paused                           *atomic.Bool // the Consumer's paused state; nil: never paused
	// maxJobWait bounds how long a job waits for a poller (jobWait): a
	// share of the time a renewal of the shortest lease has left before
	// its deadline (jobWaitBound). 0: no bound.
	maxJobWait time.Duration
	// maxBytes bounds the bytes of the messages held (0: no bound);
	// messageSize is the size of a message to expect before any arrives.
	maxBytes, messageSize int64
}

func newFlow[T ticketed](c flowConfig) *flow[T] {
	f := &flow[T]{conc: c.conc, size: c.size, maxAhead: c.maxAhead, maxPollers: c.maxPollers, calls: c.calls, spawn: c.spawn, overflow: c.overflow, atLimit: c.atLimit,
		burst: c.burst, gate: c.gate, limit: c.limit, limiter: c.limiter, member: c.member, paused: c.paused, maxJobWait: c.maxJobWait,
		kick: make(chan struct{}, 1), quiet: true, full: true, ready: newFairReady[T](c.fair, c.groupLimit, c.conc)}
	if f.paused == nil {
		f.paused = new(atomic.Bool)
	}
	f.bytes.max, f.bytes.est = c.maxBytes, c.messageSize
	f.epoch = time.Now()
	f.rate.start = f.epoch
	if c.member != nil {
		f.idlePause = c.member.IdlePause
	}
	return f
}

func (f *flow[T]) countsLocked(now time.Time) flowCounts {
	conc := f.slotsLocked() // a downstream's limit bounds the receives too
	if f.member != nil {
		// In a fleet, receive for the slots the flow is entitled to.
		share := f.member.Share()
		if f.idleLocked() {
			share = max(share, 1) // an idle queue keeps one poll going to notice traffic
		}
		conc = min(conc, share)
	}
	c := flowCounts{
		conc: conc, size: f.size,
		running: f.running, waiting: f.waiting, asked: f.asked,
		quiet: f.quiet,
	}
	c.cover, c.ahead = readAhead(f.rate.value(now), f.capacity(), max(f.dueLocked(now), f.burst), f.rtt.value(), f.size, f.maxAhead)
	return c
}

// dueLocked counts the running handlers expected to finish within one
// receive round trip: those older than the longest recent hold time less
// the round trip, once the pace is steady.
func (f *flow[T]) dueLocked(now time.Time) int {
	// Only a steady pace is worth a forecast: after a full round of the
	// slots, with the longest handlers close to the mean. Varied handler
	// times spread the completions out anyway, and the rate covers them.
	if f.holds < f.conc || f.holdHigh > f.hold+f.hold/4 {
		return 0
	}
	cut := now.Sub(f.epoch) + f.rtt.value() - f.holdHigh
	return sort.Search(len(f.starts), func(i int) bool { return f.starts[i] > cut })
}

// nextDueLocked returns when the next running handler not yet due (see
// dueLocked) will be, if the pace is steady enough to forecast.
func (f *flow[T]) nextDueLocked(now time.Time) (time.Time, bool) {
	if f.holds < f.conc || f.holdHigh > f.hold+f.hold/4 {
		return time.Time{}, false
	}
	i := f.dueLocked(now)
	if i >= len(f.starts) {
		return time.Time{}, false
	}
	return f.epoch.Add(f.starts[i] + f.holdHigh - f.rtt.value()), true
}

// slot is a handler slot the flow handed out, kept in its holder's
// ticket until the flow takes it back.
type slot struct {
	at    time.Duration // when it was taken, since the flow's epoch (monotonic)
	group string        // its holder's tenant key (fairReady.keyOf)
}

// ticket is a message's place in the flow: where it stands in the flow's
// counts and its handler slot. Only the flow writes it (enqueue, granted,
// settleEarly, leave and the slots they seat); its holder carries it and
// gives it to the flow with itself.
type ticket struct {
	place place
	slot  slot // while place is placeSlot
}

// flowLimit bounds the slots a flow fills and pauses it: the back
// pressure of Throttled (backpressure.go). Its methods are called with the
// flow's mu held and take no lock.
type flowLimit interface {
	slots(conc int) int     // how many of conc slots may be filled now
	pausedUntil() time.Time // when a pause ends (zero or past: none)
}

// ticketed is what the flow hands out: a message with its ticket.
type ticketed interface {
	comparable
	flowTicket() *ticket
	flowGroup() string // its MessageGroupId, "" for none
	flowBytes() int64  // the bytes it holds (messageBytes), for the byte bound
}

// place is where a message stands in the flow's counts.
type place uint8

const (
	placeWaiting  place = iota // received, not started: counted as waiting
	placeSlot                  // holds a handler slot
	placeSettling              // gave its slot back before its delete was confirmed
	placeOut                   // counted nowhere any more
)

// takeSlotLocked counts one more slot as running from now and returns it.
func (f *flow[T]) takeSlotLocked(now time.Time, group string) slot {
	f.running++
	at := now.Sub(f.epoch)
	f.starts = append(f.starts, at) // now is never before the last entry
	f.ready.seated(group)
	return slot{at: at, group: group}
}

// giveSlotLocked counts s as no longer running and returns how long it
// was held.
func (f *flow[T]) giveSlotLocked(s slot, now time.Time) time.Duration {
	f.running--
	switch i := sort.Search(len(f.starts), func(i int) bool { return f.starts[i] >= s.at }); {
	case i == 0 && len(f.starts) > 0:
		f.starts = f.starts[1:] // the oldest: most handlers finish in the order they started
	case i < len(f.starts):
		f.starts = append(f.starts[:i], f.starts[i+1:]...)
	}
	held := now.Sub(f.epoch) - s.at
	f.ready.released(s.group, held, now)
	return held
}

// nextLocked is the size of the receive due now, 0 if none. When only
// time stands in the way (a backoff, an idle pause, the rate limit) it
// arms the timer for when it will not (a Throttled's pause wakes it
// itself).
func (f *flow[T]) nextLocked(now time.Time) int {
	if f.stopped || f.paused.Load() && !broken.Is(broken.PauseKeepsReceiving) || f.throttledLocked(now) {
		return 0
	}
	if at := later(f.retryAt, f.idleUntil); now.Before(at) {
		f.armLocked(now, at)
		return 0
	}
	c := f.countsLocked(now)
	n := receiveSize(c)
	f.steady = false
	if n == 0 {
		n = f.steadyLocked(now, c)
		f.steady = n > 0
	}
	if n == 0 && f.ready.blocked() > 0 {
		// Free slots only other groups may take.
		slots := f.slotsLocked()
		free := f.running < slots && !f.ready.eligible()
		var at time.Time
		n, at = probeSize(free, f.asked, slots+f.maxAhead-f.running-f.waiting-f.asked, c.conc-c.running+c.ahead-c.waiting-c.asked,
			f.size, f.ready.probeGap(f.hold, f.rtt.value()), f.sentAt, now)
		if !at.IsZero() {
			f.armLocked(now, at)
		}
	}
	if n == 0 && f.member != nil {
		// In a fleet a slot this flow has nothing ready for goes to
		// another queue: look again when the next running handler is due
		// to finish within a round trip, so its successor is asked for
		// in time even if nothing else happens meanwhile.
		if at, ok := f.nextDueLocked(now); ok {
			f.armLocked(now, at)
		}
	}
	if n > 0 {
		// Within the byte bound: a message that leaves wakes the flow
		// when it gave none room.
		n = f.bytes.capLocked(n, f.asked)
	}
	if n > 0 && f.gate != nil {
		// The gate (the breaker) wakes the flow when it lets receives
		// through again.
		if g := f.gate(f.running + f.waiting + f.asked); g >= 0 {
			n = min(n, g)
		}
	}
	if n > 0 && f.limiter != nil {
		n = min(n, f.limiter.burst)
		if at := f.limiter.readyAt(now, n); at.After(now) {
			f.armLocked(now, at)
			return 0
		}
	}
	return n
}

// wake makes sure a poller looks, if a receive is due (a gate opened).
func (f *flow[T]) wake() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wakeLocked(time.Now())
}

// takeReady returns the ready messages, which will not start (they still
// count as waiting until they leave): at an opening of the breaker
// (receiving goes on, within its gate), a pause (after Pause set the
// paused state) or a shutdown (stop).
func (f *flow[T]) takeReady() []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	ready := f.ready.takeAll()
	if f.member != nil {
		f.member.SetWant(false)
	}
	f.tellLocked()
	return ready
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// armLocked makes the timer wake the pollers at at, unless it will
// already fire sooner (it then looks again and re-arms).
func (f *flow[T]) armLocked(now, at time.Time) {
	if !f.timerAt.IsZero() && !f.timerAt.After(at) {
		return
	}
	f.timerAt = at
	if f.timer == nil {
		f.timer = time.AfterFunc(at.Sub(now), func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.timerAt = time.Time{}
			f.wakeLocked(time.Now())
		})
		return
	}
	f.timer.Reset(at.Sub(now))
}

// demandLocked is how many slots of a fleet's budget the flow could use
// now: none while paused, stopped, held by the gate (an open breaker) or
// by a Throttled's pause, or while the queue looks idle (see below); all
// its own otherwise (under WithAdaptiveConcurrency, its limit).
func (f *flow[T]) demandLocked() int {
	switch {
	case f.stopped || f.paused.Load(), f.gate != nil && f.gate(0) == 0, f.throttledLocked(time.Now()):
		return 0
	case f.idleLocked():
		// An idle queue claims no share of the budget: its one long poll
		// runs anyway (see countsLocked), and a message it brings gets a
		// slot in its turn. A share of 1 would keep a slot from the queues
		// with work for as long as it stays idle.
		return 0
	}
	return f.slotsLocked()
}

// idleLocked reports whether the flow holds no message. A full last
// receive is no proof of a backlog: the queue may have just drained, and
// the long poll in flight may wait out its whole wait time.
func (f *flow[T]) idleLocked() bool {
	return f.running == 0 && f.waiting == 0
}

// tellLocked tells the fleet's budget, if any, what the flow could use
// and whether messages are on their way: a receive in flight, or received
// and not ready yet, from a queue that has messages.
func (f *flow[T]) tellLocked() {
	if f.member == nil {
		return
	}
	var until time.Time
	if f.full && (f.asked > 0 || f.waiting > f.ready.len()) {
		until = f.sentAt.Add(2 * max(f.rtt.value(), 5*time.Millisecond))
	}
	f.member.SetDemand(f.demandLocked(), until)
}

// handOut lets the fleet's budget, if any, hand out slots kept for this
// flow's messages on their way, after a receive's messages were
// dispatched (or it failed). Call it with no lock held.
func (f *flow[T]) handOut() {
	if f.member != nil {
		f.member.Dispatch()
	}
}

// wakeLocked makes sure a poller will look, if a receive is due.
func (f *flow[T]) wakeLocked(now time.Time) {
	f.tellLocked()
	if len(f.jobs) == 0 && f.nextLocked(now) == 0 {
		return
	}
	if f.pollers-f.idle >= f.limitLocked(now) {
		if len(f.jobs) > 0 || !f.steady {
			f.wantedLocked(now) // every poller the limit allows is busy
		}
		return
	}
	if f.idle == 0 {
		f.pollers++
		f.spawn()
		return
	}
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// drop takes n waiting messages of bytes bytes out: messages that never
// became deliveries (adopted by a running lease, invalid, handed back raw)
// or a waiting delivery that leaves.
func (f *flow[T]) drop(n int, bytes int64) {
	if n == 0 {
		return
	}
	f.bytes.release(bytes)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waiting -= n
	f.wakeLocked(time.Now())
}

// What enqueue tells its caller to do with the message.
const (
	enqueued    = iota // it starts when a slot frees (slotDone)
	startNow           // a slot was free and nothing older ready: it holds it now; start it
	notStarting        // receiving has stopped or is paused: hand it back
)

// enqueue makes a waiting message ready to start: it joins the ready
// messages, or takes a free slot at once (startNow).
func (f *flow[T]) enqueue(d T) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	switch {
	case f.stopped || f.paused.Load():
		return notStarting
	case f.mayStartLocked(now) && !f.ready.eligible() && f.ready.mayStart(f.ready.keyOf(d)) && (f.member == nil || f.member.Acquire()):
		// In a fleet a slot of the shared budget too; without one, the
		// member now waits for one (Acquire), granted through granted.
		// (A free slot with ready messages left means they are all of
		// groups at their limit: d goes first.)
		f.waiting--
		f.seatLocked(d, now)
		return startNow
	}
	f.ready.push(d)
	f.tellLocked()
	return enqueued
}

// granted seats the next ready message (see fairReady) in a slot of the fleet's budget
// given to this flow, and returns it to start; ok false (the slot goes
// back) if none can start.
func (f *flow[T]) granted() (next T, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.stopped || f.paused.Load() || !f.ready.eligible() || !f.mayStartLocked(now) {
		f.member.SetWant(false)
		return next, false
	}
	next = f.popReadyLocked()
	f.seatLocked(next, now)
	if !f.ready.eligible() || !f.mayStartLocked(now) {
		f.member.SetWant(false)
	}
	f.wakeLocked(now)
	return next, true
}

// popReadyLocked takes the ready message a free slot goes to (see
// fairReady); call it only when one is eligible.
func (f *flow[T]) popReadyLocked() T {
	f.waiting--
	return f.ready.pop()
}

// seatLocked gives d, counted as waiting until now, a handler slot taken
// at now.
func (f *flow[T]) seatLocked(d T, now time.Time) {
	t := d.flowTicket()
	t.place, t.slot = placeSlot, f.takeSlotLocked(now, d.flowGroup())
}

// takeSettling reserves room for one more message that gives its handler
// slot back before its delete is confirmed; false when conc + maxAhead
// already do (the slot then stays taken until SQS answers).
func (f *flow[T]) takeSettling() bool {
	bound := int64(f.conc + f.maxAhead)
	for {
		n := f.settling.Load()
		if n >= bound {
			return false
		}
		if f.settling.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// settleEarly gives back the handler slot of d, whose handler succeeded,
// before SQS confirms its delete, if room is left for one more such
// message (takeSettling): d then counts as settling until it leaves. It
// returns the next ready message, seated in the freed slot, to start (ok
// false: none, or d keeps its slot until it leaves).
func (f *flow[T]) settleEarly(d T) (next T, ok bool) {
	t := d.flowTicket()
	if t.place != placeSlot || !f.takeSettling() {
		return next, false
	}
	next, ok = f.slotDone(t.slot, true)
	t.place = placeSettling
	return next, ok
}

// leave takes d out of the flow's counts, wherever it stands: a waiting
// message that leaves without starting (handed back, or its lease ended
// while it waited), one in a slot (ran: its handler returned, which counts
// in the completion rate and the mean hold time), or one settling. It
// returns the next ready message, seated in a slot d freed, to start (ok
// false: none).
func (f *flow[T]) leave(d T, ran bool) (next T, ok bool) {
	t := d.flowTicket()
	switch t.place {
	case placeWaiting:
		f.drop(1, d.flowBytes())
	case placeSlot:
		f.bytes.release(d.flowBytes()) // before slotDone looks for a receive due
		next, ok = f.slotDone(t.slot, ran)
	case placeSettling:
		f.settling.Add(-1)
		if f.bytes.release(d.flowBytes()) {
			f.wake() // a receive waited for these bytes
		}
	}
	t.place = placeOut
	return next, ok
}

// capacity is how many messages a second the handler slots could finish
// if never starved: concurrency / mean slot hold time (+Inf before any
// measurement).
func (f *flow[T]) capacity() float64 {
	if f.hold <= 0 {
		return math.Inf(1)
	}
	return float64(f.conc) / f.hold.Seconds()
}

// slotDone gives back s, a handler slot whose handler returned (done; it
// counts in the completion rate and the mean hold time) or that is given
// up without a handler (a message that leaves unstarted), and returns the
// next ready message, seated in the slot it takes instead, if any (ok).
func (f *flow[T]) slotDone(s slot, done bool) (next T, ok bool) {
	f.mu.Lock()
	next, ok = f.slotDoneLocked(s, done)
	f.mu.Unlock()
	if f.member != nil {
		// The fleet's budget decides who gets the slot, this flow or
		// another (through granted).
		f.member.Release()
	}
	return next, ok
}

func (f *flow[T]) slotDoneLocked(s slot, done bool) (next T, ok bool) {
	now := time.Now()
	held := f.giveSlotLocked(s, now)
	if done {
		f.rate.add(now)
		if f.hold == 0 {
			f.hold = held
		} else {
			f.hold += (held - f.hold) / 16
		}
		f.holds = min(f.holds+1, f.conc)
		if held >= f.holdHigh {
			f.holdHigh = held
		} else {
			f.holdHigh += (held - f.holdHigh) / 64
		}
	}
	switch {
	case !f.ready.eligible() || f.stopped || f.paused.Load() || !f.mayStartLocked(now):
	case f.member != nil:
		f.member.SetWant(true) // Release follows
	default:
		next, ok = f.popReadyLocked(), true
		f.seatLocked(next, now)
	}
	f.wakeLocked(now)
	return next, ok
}

// begin starts the first poller; it starts the others as they are due.
func (f *flow[T]) begin() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wakeLocked(time.Now())
}

// stop ends receiving and returns the ready messages, which will not
// start (they count as waiting until they leave).
func (f *flow[T]) stop() []T {
	f.mu.Lock()
	f.stopped = true
	f.endedLocked()
	if f.timer != nil {
		f.timer.Stop()
	}
	f.mu.Unlock()
	return f.takeReady()
}

// receivesEnded returns a channel that is closed once the flow is stopped
// (no receive starts any more) and no receive is in flight: from then on
// none of the Consumer's receives can take a message it hands back.
func (f *flow[T]) receivesEnded() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.recvEnded == nil {
		f.recvEnded = make(chan struct{})
		f.endedLocked()
	}
	return f.recvEnded
}

// endedLocked closes recvEnded, once, when it is due.
func (f *flow[T]) endedLocked() {
	if f.recvEnded == nil || !f.stopped || len(f.recvSince) > 0 {
		return
	}
	select {
	case <-f.recvEnded:
	default:
		close(f.recvEnded)
	}
}

// capacityNow is capacity under the flow's lock, for the scaling signal.
func (f *flow[T]) capacityNow() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.capacity()
}

// receiveFailing reports whether the latest receive failed (the flow
// backs off before the next): Health's stall clock then waits on SQS.
func (f *flow[T]) receiveFailing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failures > 0
}

// snapshot returns the flow's counts for Stats.
func (f *flow[T]) snapshot() (running, waiting, asked, peakAhead int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running, f.waiting, f.asked, f.peakAhead
}

// groups returns the groups' slot time figures (Stats.TopGroups).
func (f *flow[T]) groups() groupFigures {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready.slots.figures(time.Now())
}

// slotsLocked is how many handler slots the flow may fill now: all of
// them, or WithAdaptiveConcurrency's limit.
func (f *flow[T]) slotsLocked() int {
	if f.limit == nil {
		return f.conc
	}
	return f.limit.slots(f.conc)
}

// throttledLocked reports whether a Throttled's pause holds at now: no
// receive is due and no message starts.
func (f *flow[T]) throttledLocked(now time.Time) bool {
	return f.limit != nil && now.Before(f.limit.pausedUntil())
}

// mayStartLocked reports whether a ready message may take a slot now: one
// is free under the limit, and no pause holds.
func (f *flow[T]) mayStartLocked(now time.Time) bool {
	return f.running < f.slotsLocked() && !f.throttledLocked(now)
}

// fill seats ready messages in the slots the limit gives back
// (the limit rose, a pause ended) and returns them to start; in a fleet
// the budget's grants start them instead. It wakes a poller if a receive
// is due.
func (f *flow[T]) fill() []T {
	f.mu.Lock()
	now := time.Now()
	var out []T
	if !f.stopped && !f.paused.Load() {
		if f.member != nil {
			if f.ready.eligible() && f.mayStartLocked(now) {
				f.member.SetWant(true) // Dispatch follows
			}
		} else {
			for f.ready.eligible() && f.mayStartLocked(now) {
				next := f.popReadyLocked()
				f.seatLocked(next, now)
				out = append(out, next)
			}
		}
	}
	f.wakeLocked(now)
	f.mu.Unlock()
	if f.member != nil {
		f.member.Dispatch()
	}
	return out
}

// runningNow is the handler slots in use now.
func (f *flow[T]) runningNow() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

// limitLocked is how many pollers may be busy at once: the calls in
// flight the HTTP client sustains (callLimit), or maxPollers when fixed.
func (f *flow[T]) limitLocked(now time.Time) int {
	if f.calls == nil || broken.Is(broken.CallLimitIgnored) {
		return f.maxPollers
	}
	return f.calls.current(now)
}

// wantedLocked records that the flow wanted one more call in flight than
// the limit allows, and tells atLimit when the limit is below what the
// read-ahead needs because of the HTTP client's pool.
func (f *flow[T]) wantedLocked(now time.Time) {
	if f.calls == nil {
		return
	}
	f.calls.want(now)
	if f.atLimit != nil && f.calls.poolBound() {
		f.atLimit(f.calls.limitNow())
	}
}

// steadyLocked is the size of a receive due only to keep the calls in
// flight steady, given the flow's counts c (receiveSize found none due):
// a full receive while the queue has a backlog (the latest receive was
// full), the handlers keep up (no more waiting than the free slots and a
// round trip's completions) and either the limit on calls in flight has
// bound within the last jobWait or the handlers absorb whatever every
// poller can bring (absorbsLocked); 0 otherwise, and always for a
// Consumer in a fleet or whose limit is fixed (WithPollers) or cannot be
// traced.
//
// While the limit binds, the read-ahead wants about as many calls as the
// limit allows, and its wants rise and fall by a few receives at a time:
// pollers park and their connections go back to the client's idle pool,
// which closes those beyond its MaxIdleConnsPerHost; a moment later the
// pollers are busy again and dial new ones. A bare receive-and-delete
// loop, whose pollers never park, keeps its connections. So, while the
// limit binds, a poller with nothing due receives anyway, within the
// read-ahead's bound (WithMaxReadAhead): as a bare loop does.
//
// Below the limit (a pool larger than the work needs), the wants wander:
// each is twice the rate over the round trip, and against a server short
// of CPU the round trip grows with the calls in flight, so the wants drift
// up and down with nothing to pull them back, and each new peak dials
// connections (measured over HTTPS with a pool of 256: 2 to 7 new
// connections per 1,000 messages after a drain's first 1,000). When the
// handlers finish a full round of every poller's receives within a round
// trip, more calls in flight cannot leave messages waiting for slots, so
// the pollers receive up to the limit as soon as the queue shows a
// backlog, as a bare loop's do: the connections are dialled once, at the
// start. Slower handlers keep the read-ahead's wants.
func (f *flow[T]) steadyLocked(now time.Time, c flowCounts) int {
	if f.calls == nil || f.member != nil || c.quiet || !f.full {
		return 0
	}
	if !f.calls.binding(now, f.jobWait()) && !(f.calls.traced == traceOn && f.absorbsLocked(f.calls.limitNow(), c.size)) {
		return 0
	}
	if free := c.conc - c.running; c.waiting > free+c.cover || c.conc+f.maxAhead-c.running-c.waiting-c.asked < c.size {
		return 0
	}
	return c.size
}

// absorbsLocked reports whether the handlers finish within one round trip
// every message that limit full receives of size bring: a handler has
// returned (the hold time is measured) and the slots' capacity times the
// round trip estimate is at least limit x size.
func (f *flow[T]) absorbsLocked(limit, size int) bool {
	return f.holds > 0 && f.capacity()*f.rtt.value().Seconds() >= float64(limit*size)
}

// jobWait is how long a job may wait for a poller to be free before it
// runs on a goroutine of its own (see jobWaitFor).
func (f *flow[T]) jobWait() time.Duration { return jobWaitFor(f.rtt.value(), f.maxJobWait) }

// jobWaitFor is how long a job may wait for a poller, given the round
// trip estimate rtt and the bound limit (0: none): about two round trips,
// the time a busy poller takes to finish its call (a receive that finds
// messages answers in one), at least 20 ms, and at most limit, so that a
// slow network never makes a renewal wait for a poller most of the time
// its lease has left. It is pure, for table tests.
func jobWaitFor(rtt, limit time.Duration) time.Duration {
	w := max(2*rtt, 20*time.Millisecond)
	if limit > 0 {
		w = min(w, limit)
	}
	return w
}

// jobWaitShare is the share of a renewal's slack (the time between the
// renewal and its lease's deadline) a job may wait for a poller: the rest
// is for the call itself and its retries.
const jobWaitShare = 8

// jobWaitBound is the bound on jobWait for leases of at least lease
// renewed every interval: a jobWaitShare-th of the time a renewal has
// before the deadline.
func jobWaitBound(lease, interval time.Duration) time.Duration {
	return (lease - interval) / jobWaitShare
}

// bytesNow is the byte bound's figures, for Stats.
func (f *flow[T]) bytesNow() ByteCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bytes.countsLocked()
}
