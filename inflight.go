package sqsconsumer

import (
	"context"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// How many calls a Consumer keeps in flight: as many as its HTTP client
// sustains without opening new connections, found while running.
//
// Over HTTP/1.1 (as SQS serves its API) each call in flight holds a
// connection. net/http's Transport keeps at most MaxIdleConnsPerHost of
// them idle: a call that ends while that many are idle already has its
// connection closed, and a later call dials a new one (over TLS a full
// handshake). Calls in flight within the idle pool never lose a
// connection; beyond it, connections are lost whenever the calls in flight
// dip by more than the pool below their recent peak. A steady loop of 32
// callers over a pool of 10 loses next to none; a Consumer's calls rise
// and fall with its read-ahead, and lose some at levels a steady loop
// keeps. So the Consumer measures it: every receive and coalesced call
// carries a net/http/httptrace.ClientTrace (on the run's base contexts,
// so no call pays for one of its own) that counts the connections the
// pool hands out, those dialled for the calls, and those it closes after
// a call because its idle pool was full (PutIdleConn fails: a lost
// connection, which a later call dials again). The limit on calls in
// flight (the pollers busy at once, see lanes.go) then moves within
// [lo, hi] (see nextCallLimit): up while the Consumer wants more calls
// than the limit and its calls dial nothing beyond what a rise needs,
// down when they do; hi is what WithConcurrency and the read-ahead need.
// While the limit binds, or while the handlers absorb whatever every
// poller can bring, the flow keeps its pollers busy as a bare loop's
// (flow.steadyLocked), so that the calls in flight neither dip nor wander.
//
// A client whose calls never reach a net/http Transport with the run's
// context (a test double, an HTTP client of another make) cannot be
// traced: the first receive answered without the trace having seen a
// connection says so, and the Consumer keeps the fixed rule
// (fallbackCallLimit). WithPollers fixes the limit too.

// connWatch counts what the HTTP client's connection pool did for the
// calls made with a context it is attached to. Safe for concurrent use
// (atomics): the hooks run on the goroutines making the calls.
type connWatch struct {
	trace *httptrace.ClientTrace
	// got counts the connections handed out to requests, fresh those of
	// them never used before (dialled for the request), lost those the
	// pool closed after a request instead of keeping them idle, dials the
	// connections dialled for a request (the dial carries the request's
	// trace, even when another connection freed first and the request
	// took that one: the dialled one then goes idle unused, or is closed
	// at once when the pool is full).
	got, fresh, lost, dials atomic.Int64
}

func newConnWatch() *connWatch {
	w := &connWatch{}
	w.trace = &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			w.got.Add(1)
			if !info.Reused {
				w.fresh.Add(1)
			}
		},
		// net/http calls it with a nil error when it kept the
		// connection idle, with errTooManyIdleHost (or errTooManyIdle)
		// when its idle pool was full, and with another error when the
		// connection could not be kept (broken): each a connection
		// closed that a later call will have to dial again.
		PutIdleConn: func(err error) {
			if err != nil {
				w.lost.Add(1)
			}
		},
		ConnectDone: func(_, _ string, err error) {
			if err == nil {
				w.dials.Add(1)
			}
		},
	}
	return w
}

// counts is what Stats reports of the client's connections.
func (w *connWatch) counts() ConnCounts {
	got := w.got.Load()
	return ConnCounts{Traced: got > 0, Got: got, New: max(w.dials.Load(), w.fresh.Load()), Lost: w.lost.Load()}
}

// cost is the connections the calls cost so far: those dialled, or, when
// the trace sees no dial (a transport that dials its own way, bypassing
// the dialer's trace), those handed out fresh.
func (w *connWatch) cost() int64 {
	return max(w.dials.Load(), w.fresh.Load())
}

// attach returns ctx carrying w's trace: every call made with it (or a
// context derived from it) is counted.
func (w *connWatch) attach(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, w.trace)
}

// ConnCounts is what the HTTP client's connection pool did for a
// Consumer's receives, deletes and visibility changes, as
// net/http/httptrace reports it (see Stats.Conns). All zero when the
// client cannot be traced (Traced false).
type ConnCounts struct {
	// Traced is set once the Consumer has seen its client's connections
	// through httptrace: unless WithPollers fixes them, its calls in
	// flight then follow what the client sustains. False before the first
	// call got a connection, and for a client whose calls do not reach a
	// net/http Transport.
	Traced bool
	// Got counts the connections the client's pool handed to the calls
	// (each attempt of a call gets one); New the connections dialled for
	// them (over TLS, a handshake each; a call may dial one and take
	// another that freed first); Lost those the pool closed after a call
	// instead of keeping them for the next, because its idle connections
	// were at MaxIdleConnsPerHost already (or the connection was broken):
	// each means a new connection later.
	Got, New, Lost int64
}

// The rule's constants.
const (
	// callWindow is how many connections handed out make one window of
	// the rule: the limit rises at most once a window.
	callWindow = 50
	// lossBudget is the share of the calls whose connection the rule
	// lets be lost in the steady state: one in 200, about one new
	// connection per 1,000 messages at 0.2 calls a message.
	lossBudget = 1.0 / 200
	// maxCallHold is the most windows the rule waits below a ceiling
	// (the limit at which connections were lost) before it tries it
	// again: where the client sustains no more, its tries then lose about
	// two connections every 32 windows of at least 50 calls (1,600 calls,
	// 8,000 messages at 0.2 calls a message).
	maxCallHold = 32
)

// callLimit is the limit on the Consumer's calls in flight and the state
// of the rule that moves it. The flow owns it: every field is guarded by
// the flow's mu.
type callLimit struct {
	w        *connWatch
	fallback int        // the limit for a client that cannot be traced
	traced   traceState // whether the client's calls are traced
	rule     callRule
	// The window: the counts at its start (cost0 moved on by what credit
	// took).
	got0, cost0 int64
	// credit is how many of the new connections to come a rise of the
	// limit caused: when it rises by k, k more calls dial connections.
	// costSeen is the cost (connWatch.cost) counted so far.
	credit, costSeen int64
	wantedAt         time.Time // when the flow last wanted more calls than the limit
}

// traceState is whether the connections of a client's calls are traced.
type traceState uint8

const (
	traceUnknown traceState = iota // no receive answered yet
	traceOn                        // the trace saw the client's connections
	traceOff                       // a receive was answered without: the fixed rule
)

// newCallLimit makes the limit of a Consumer whose read-ahead needs up to
// need calls in flight, over a client whose idle pool keeps pool
// connections per host (known: known). With a known pool it starts at the
// pool (within need), where no connection can be lost, and rises from
// there: quickly to twice the pool, then one call at a time.
func newCallLimit(w *connWatch, need, pool int, known bool) *callLimit {
	c := &callLimit{w: w, fallback: fallbackCallLimit(need, pool, known)}
	r := &c.rule
	r.hi, r.backoff = max(need, 1), 2
	if known {
		r.lo = min(r.hi, max(pool, 2))
		r.limit = r.lo
	} else {
		r.lo = min(r.hi, 2)
		r.limit = min(r.hi, lanesPerIdleConn*defaultIdleConns)
	}
	r.fast = min(r.hi, max(lanesPerIdleConn*r.lo, r.limit))
	return c
}

// startCallLimit is the limit a Consumer whose read-ahead needs up to need
// calls in flight starts at, over a client whose idle pool keeps pool
// connections per host (known: known).
func startCallLimit(need, pool int, known bool) int {
	return newCallLimit(nil, need, pool, known).rule.limit
}

// defaultIdleConns is the SDK's default idle pool per host
// (awshttp.DefaultHTTPTransportMaxIdleConnsPerHost): where a traced
// client of an unknown pool starts.
const defaultIdleConns = 10

// fallbackCallLimit is the limit for a client that cannot be traced:
// what the read-ahead needs, at most lanesPerIdleConn times the idle pool
// when it is known.
func fallbackCallLimit(need, pool int, known bool) int {
	if bound := max(lanesPerIdleConn*pool, 2); known && bound < need {
		return bound
	}
	return need
}

// answered tells the rule that a receive was answered: the first one
// says whether the client's calls are traced (a traced call has got its
// connection before it is answered).
func (c *callLimit) answered() {
	if c.traced != traceUnknown {
		return
	}
	if c.w.got.Load() > 0 {
		c.traced = traceOn
		c.got0, c.cost0 = c.w.got.Load(), c.w.cost()
		// The connections of the calls up to the limit are dialled
		// once: that is the start, not a cost of the limit.
		c.costSeen, c.credit = c.cost0, int64(c.rule.limit)
		return
	}
	c.traced, c.rule.limit = traceOff, c.fallback
}

// want records that the flow wanted more calls in flight than the limit
// at now.
func (c *callLimit) want(now time.Time) {
	c.rule.wanted = true
	c.wantedAt = now
}

// binding reports whether the flow wanted more calls in flight than the
// limit within the last while, with a traced client.
func (c *callLimit) binding(now time.Time, while time.Duration) bool {
	return c.traced == traceOn && !c.wantedAt.IsZero() && now.Sub(c.wantedAt) <= while
}

// current is the limit now, having moved it if the window's counts say
// so (see nextCallLimit).
func (c *callLimit) current(now time.Time) int {
	if c.traced != traceOn {
		return c.rule.limit
	}
	got, cost := c.w.got.Load(), c.w.cost()
	if d := cost - c.costSeen; d > 0 && c.credit > 0 {
		// New connections a rise of the limit caused (see credit) are
		// not held against it: the window starts after them.
		own := min(d, c.credit)
		c.credit -= own
		c.cost0 += own
	}
	c.costSeen = cost
	r := c.rule
	r.calls, r.lost = got-c.got0, cost-c.cost0
	// The flow wanted more calls within the last second: the calls in
	// flight dip and rise with its wants, and connections lost in a dip
	// count against the limit that made the peak.
	r.recent = !c.wantedAt.IsZero() && now.Sub(c.wantedAt) < time.Second
	if r.calls < callWindowFor(r.limit) && r.lost < 2 {
		return r.limit // nothing to decide yet
	}
	next := nextCallLimit(r)
	if next.calls == 0 { // the window ended
		c.got0, c.cost0 = got, cost
	}
	if d := next.limit - r.limit; d > 0 {
		c.credit += int64(d)
	}
	c.rule = next
	return next.limit
}

// callWindowFor is how many calls make a window at limit: callWindow, and
// at least two rounds of the pollers, so that the limit rises no faster
// than a change of it shows in the losses.
func callWindowFor(limit int) int64 { return int64(max(callWindow, 2*limit)) }

// limitNow is the limit as it stands, for Stats.
func (c *callLimit) limitNow() int { return c.rule.limit }

// callRule is the rule's state, and the window's counts nextCallLimit
// decides on.
type callRule struct {
	limit, lo, hi int
	// fast is the limit up to which it rises by a quarter a window
	// until connections are first lost: lanesPerIdleConn times the pool
	// (the rule before the Consumer traced its client's connections).
	// Beyond it, or once lowered, it rises by one.
	fast    int
	lowered bool // the limit has been lowered at least once
	// The window: calls (connections handed out) and losses (new
	// connections beyond those a rise made) since it began, and whether
	// the flow wanted more calls in flight than the limit meanwhile.
	calls, lost int64
	wanted      bool
	// recent is set when the flow wanted more calls than the limit within
	// the last second (the window's losses count; only wanted raises).
	recent bool
	// lossRate is the share of the calls that lost their connection,
	// smoothed over about eight windows in which the flow wanted more
	// calls.
	lossRate float64
	// ceiling is the lowest limit not known to hold (0: none, until
	// connections are first lost): the limit at which they were last
	// lost, or one above the last that was tried and held. The limit
	// rises by one a window to just below it, then tries it (probing)
	// once hold windows have passed. A try without a loss keeps backoff
	// and holds that long before the next level (halving it was measured
	// to lose 5.7 connections per 1,000 messages over the SDK's default
	// pool); a try that loses holds backoff windows and doubles it (up to
	// maxCallHold).
	ceiling, hold, backoff int
	probing                bool
}

// nextCallLimit is the rule's state after the window's counts in r. Its
// "losses" are the new connections the calls dialled beyond those a rise
// of the limit made (callLimit's credit): each replaces one the pool
// closed. A window ends (calls and lost back to 0, wanted and recent
// false) once callWindowFor(limit) calls have got a connection, or early
// on a burst: two losses in it while the flow wants more calls than the
// limit, or did within the last second (recent). At the end of a window
// in which the flow wanted more or did recently:
//   - its losses go into the smoothed loss rate; on a burst or a loss
//     rate above lossBudget the limit goes down (not below lo): by an
//     eighth (at least one) on a burst unless it was trying its ceiling,
//     by one otherwise, and the limit it had becomes the ceiling; a try
//     that lost holds backoff windows and doubles it;
//   - otherwise, if the flow wanted more in this window and the loss rate
//     is below half the budget, it goes up (not above hi): by a quarter
//     up to fast until it is first lowered, by one below the ceiling, and
//     to the ceiling (a try) once the hold has passed; a try that held
//     makes the next level the ceiling, after as long a hold.
//
// A window in which the flow neither wanted more nor did within the last
// second moves nothing: the calls fell with the work, and connections
// lost then say nothing of the limit. It is pure, for table tests.
func nextCallLimit(r callRule) callRule {
	ended := r.calls >= callWindowFor(r.limit)
	busy := r.wanted || r.recent
	burst := busy && r.lost >= 2
	if !ended && !burst {
		return r
	}
	n := r
	n.calls, n.lost, n.wanted, n.recent = 0, 0, false, false
	if !busy {
		return n // a try of the ceiling stays a try until judged
	}
	n.probing = false
	if ended {
		n.lossRate += (float64(r.lost)/float64(r.calls) - n.lossRate) / 8
	}
	if burst || n.lossRate > lossBudget {
		cut := 1 // the rate: one step at a time
		switch {
		case r.probing:
			// Below the ceiling it held, for longer each time.
			n.hold, n.backoff = r.backoff, min(2*r.backoff, maxCallHold)
		case burst:
			cut = max(1, r.limit/8)
		}
		n.limit = max(r.lo, r.limit-cut)
		n.ceiling, n.lowered = r.limit, true
		// The losses that lowered it are accounted for: the rate starts
		// again at the edge, where the limit neither rises nor falls
		// until it has decayed.
		n.lossRate = lossBudget / 2
		return n
	}
	if n.hold > 0 {
		n.hold--
	}
	if r.probing {
		// The ceiling held: the next level up is the next to try, after
		// as long a hold.
		n.ceiling, n.hold = r.limit+1, r.backoff
	}
	switch {
	case !r.wanted || n.lossRate > lossBudget/2 || r.limit >= r.hi:
	case !r.lowered && r.limit < r.fast:
		n.limit = min(r.fast, r.limit+max(1, r.limit/4))
	case n.ceiling == 0 || r.limit+1 < n.ceiling:
		n.limit = r.limit + 1
	case n.hold == 0:
		n.limit, n.probing = r.limit+1, true
	}
	return n
}

// poolBound reports whether the limit stands below what the read-ahead
// needs because of the HTTP client's pool: it was lowered after lost
// connections, or the pool bounds a client that cannot be traced.
func (c *callLimit) poolBound() bool {
	switch c.traced {
	case traceOn:
		return c.rule.lowered && c.rule.limit < c.rule.hi
	case traceOff:
		return c.fallback < c.rule.hi
	}
	return false
}
