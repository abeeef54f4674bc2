package explore

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Dur is a time.Duration that reads and writes as "1.5s" in a scenario's
// JSON, so that a replay line stays readable.
type Dur time.Duration

func (d Dur) D() time.Duration { return time.Duration(d) }

func (d Dur) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Dur) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Dur(v)
	return err
}

// Queue kinds.
const (
	queueStandard = "standard" // no MessageGroupId
	queueGroups   = "groups"   // a standard queue whose messages carry MessageGroupId (a fair queue)
	queueFIFO     = "fifo"
)

// Handler behaviours: what one handler call does with its message.
const (
	bSucceed   = "succeed"
	bFail      = "fail"      // an ordinary error
	bPermanent = "permanent" // sqsconsumer.Permanent
	bRetry     = "retry"     // sqsconsumer.RetryAfter
	bPanic     = "panic"
	bOverrun   = "overrun"   // works past its lease (the heartbeat keeps it)
	bIgnore    = "ignore"    // long work; ignores its cancelled context for a bounded time
	bRelease   = "release"   // releases its own lease (Lease.Release), returns nil
	bExtend    = "extend"    // extends its own lease (Lease.Extend), then works on
	bDrain     = "drain"     // long work that watches Draining: at the drain it returns RetryAfter(err, 0)
	bThrottled = "throttled" // sqsconsumer.Throttled(err, d): the downstream refuses work for d (0: it did not say)
	bNeutral   = "neutral"   // sqsconsumer.Neutral(err): a failure that says nothing of the downstream
	bRetryNil  = "retry-nil" // sqsconsumer.RetryAfter(nil, d): a retry asked for without an error
)

var behaviours = []string{bSucceed, bFail, bPermanent, bRetry, bPanic, bOverrun, bIgnore, bRelease, bExtend, bDrain, bThrottled, bNeutral, bRetryNil}

// Event kinds.
const (
	evPause    = "pause"
	evResume   = "resume"
	evStart2   = "start2" // a second Consumer on the queue
	evStop2    = "stop2"  // the second Consumer's Run cancelled
	evShutdown = "shutdown"
)

// Event triggers: an event happens At after the start (""), or At after
// the N-th receive sent, batch call, handler call or pause of the first
// Consumer, or At after the shutdown began; "before": a Pause before Run.
const (
	trTime    = ""
	trReceive = "receive"
	trBatch   = "batch"
	trHandler = "handler"
	trPaused  = "paused"
	trBefore  = "before"
	// trShutdown: At after the shutdown began (Run's context cancelled):
	// a Pause or Resume during the drain, or after Run returned.
	trShutdown = "shutdown"
)

// Event is one thing the driver does to the Consumers.
type Event struct {
	Kind    string `json:"kind"`
	At      Dur    `json:"at"`
	Trigger string `json:"trigger,omitempty"`
	N       int    `json:"n,omitempty"`
}

// BreakerOpt is WithBreaker's Breaker; Probe draws a Breaker.Probe that
// fails half the time.
type BreakerOpt struct {
	Failures     int     `json:"failures"`
	Ratio        float64 `json:"ratio,omitempty"`
	Window       int     `json:"window,omitempty"`
	CallFailures int     `json:"call_failures"`
	Pause        Dur     `json:"pause"`
	MaxPause     Dur     `json:"max_pause"`
	Probe        bool    `json:"probe,omitempty"`
}

// RateOpt is WithRateLimit's.
type RateOpt struct {
	Limit float64 `json:"limit"`
	Burst int     `json:"burst"`
}

// DLQOpt is where Permanent failures go: "option" (WithDeadLetterQueue),
// "redrive" (the queue's RedrivePolicy, MaxReceive its maxReceiveCount),
// "source" (WithDeadLetterQueue naming the source queue: a conflict).
type DLQOpt struct {
	Kind       string `json:"kind"`
	MaxReceive int    `json:"max_receive,omitempty"`
}

// ScalingOpt is WithScaling's policy, or WithScalingTarget (Target only);
// Both gives both options (a conflict).
type ScalingOpt struct {
	Target   Dur  `json:"target"`
	Interval Dur  `json:"interval,omitempty"`
	Both     bool `json:"both,omitempty"`
}

// Options are the Consumer's options; nil is "not given" (the default).
// The shrinker resets them one at a time.
type Options struct {
	Concurrency     *int        `json:"concurrency,omitempty"`
	ReceiveSize     *int        `json:"receive_size,omitempty"` // WithBatchSize
	ReadAhead       *int        `json:"read_ahead,omitempty"`
	Pollers         *int        `json:"pollers,omitempty"`
	Visibility      *Dur        `json:"visibility,omitempty"`
	Heartbeat       *Dur        `json:"heartbeat,omitempty"`
	MaxLease        *Dur        `json:"max_lease,omitempty"`
	CeilingGrace    *Dur        `json:"ceiling_grace,omitempty"`
	Adaptive        *[2]Dur     `json:"adaptive,omitempty"`
	Breaker         *BreakerOpt `json:"breaker,omitempty"`
	Rate            *RateOpt    `json:"rate,omitempty"`
	GroupLimit      *int        `json:"group_limit,omitempty"`
	FairDispatch    *bool       `json:"fair_dispatch,omitempty"`
	Backoff         *string     `json:"backoff,omitempty"`
	DLQ             *DLQOpt     `json:"dlq,omitempty"`
	Scaling         *ScalingOpt `json:"scaling,omitempty"`
	HealthLimits    *[2]Dur     `json:"health_limits,omitempty"` // stall, handler
	StartupLimit    *Dur        `json:"startup_limit,omitempty"`
	HandlerTimeout  *Dur        `json:"handler_timeout,omitempty"`
	ShutdownTimeout *Dur        `json:"shutdown_timeout,omitempty"`
	WaitTime        *Dur        `json:"wait_time,omitempty"`
	CancelIdlePolls *bool       `json:"cancel_idle_polls,omitempty"`
	// PanicPolicy is WithPanicPolicy's: "permanent" (the panic becomes
	// Permanent), "retry" (RetryAfter 1 s), "error" (the *PanicError).
	PanicPolicy *string `json:"panic_policy,omitempty"`
	// RequireDLQ is WithRequireDeadLetterQueue: Run refuses a queue
	// without a dead-letter queue.
	RequireDLQ *bool `json:"require_dlq,omitempty"`
	// AdaptiveConc is WithAdaptiveConcurrency's Floor and Initial (0:
	// its default).
	AdaptiveConc *[2]int `json:"adaptive_concurrency,omitempty"`
	// MaxBytes is WithMaxBytes, in bytes.
	MaxBytes *int64 `json:"max_bytes,omitempty"`
}

// IdemOpt are NewIdempotent's options: WithIdempotencyTTL (TTL, 0:
// default), WithInProgressRetry (Retry, 0: default), WithDuplicateHook
// (Hook: "" none, "delete" returns nil, "fail" returns an error),
// WithPayloadValidation.
type IdemOpt struct {
	TTL      Dur    `json:"ttl,omitempty"`
	Retry    Dur    `json:"retry,omitempty"`
	Hook     string `json:"hook,omitempty"`
	Validate bool   `json:"validate,omitempty"`
}

// Behaviour is what the handler does: each call draws a behaviour by
// weight, and works up to Work (a long behaviour much longer).
type Behaviour struct {
	Profile  string         `json:"profile"`
	Weights  map[string]int `json:"weights"`
	Work     Dur            `json:"work"`
	Ignore   Dur            `json:"ignore,omitempty"`    // the longest a handler ignores its cancelled context
	RetryMax Dur            `json:"retry_max,omitempty"` // RetryAfter's and Release's longest delay
	// Throttle is what delays Throttled says: "zero" (the downstream
	// did not say), "sub-second", "seconds", "minutes" or "mixed".
	Throttle string `json:"throttle,omitempty"`
}

// Scenario is everything a seed draws; JSON, so that a shrunk scenario
// replays from one line (-explore.replay). Seed also keys the draws made
// while it runs (each handler call's behaviour, each call's fault).
type Scenario struct {
	Seed            uint64    `json:"seed"`
	Queue           string    `json:"queue"`
	Messages        int       `json:"messages"`
	Groups          int       `json:"groups,omitempty"`
	Spread          Dur       `json:"spread,omitempty"`    // arrivals spread over this; 0: all at the start
	SameBody        int       `json:"same_body,omitempty"` // messages whose body repeats an earlier one's
	QueueVisibility int       `json:"queue_visibility"`    // the queue's VisibilityTimeout, seconds
	QueueWait       int       `json:"queue_wait,omitempty"`
	Handler         string    `json:"handler"` // "single" or "batch"
	BatchSize       int       `json:"batch_size,omitempty"`
	BatchWindow     Dur       `json:"batch_window,omitempty"`
	Middleware      bool      `json:"middleware,omitempty"`
	Idempotent      string    `json:"idempotent,omitempty"` // "", "id" (key: message ID), "body" (key: body)
	SDKRetries      bool      `json:"sdk_retries,omitempty"`
	Options         Options   `json:"options"`
	Behaviour       Behaviour `json:"behaviour"`
	FaultRate       float64   `json:"fault_rate,omitempty"`
	ExpireRate      float64   `json:"expire_rate,omitempty"`
	Events          []Event   `json:"events"`
	// Conflict names the pair of options drawn to conflict on purpose:
	// New must refuse them naming both.
	Conflict string `json:"conflict,omitempty"`
	// RTT is each call's round trip (virtual time).
	RTT Dur `json:"rtt,omitempty"`
	// Idem are NewIdempotent's options (nil: none given).
	Idem *IdemOpt `json:"idem,omitempty"`
	// BodySize is the size of the messages' bodies in bytes (0: a few);
	// BigShare percent of them are BigBody bytes instead.
	BodySize int `json:"body_size,omitempty"`
	BigBody  int `json:"big_body,omitempty"`
	BigShare int `json:"big_share,omitempty"`
	// Pool, when above 0, makes the wire behave as net/http's connection
	// pool with that many idle connections per host, reported through
	// the request's httptrace.ClientTrace (so the Consumer's calls in
	// flight follow it); PoolKnown: the HTTP client says its
	// MaxIdleConnsPerHost.
	Pool      int  `json:"pool,omitempty"`
	PoolKnown bool `json:"pool_known,omitempty"`
	// FirstContact is an error class the wire answers process 0's calls
	// with until SQS has answered one (firstContactClasses); a class that
	// can heal stops at Heal after the start.
	FirstContact string `json:"first_contact,omitempty"`
	Heal         Dur    `json:"heal,omitempty"`
	// Protect, when above 0, protects the task from scale-in while the
	// Consumer holds a message (WithScaleInProtection, with a Protector
	// of its own over an in-memory ECS agent, whose quiet period it is).
	Protect Dur `json:"protect,omitempty"`
	// Bundle passes the options through Options bundles: 1, a platform
	// bundle (with values the team's options after it override) and the
	// team's; 2, the same nested one level deeper.
	Bundle int `json:"bundle,omitempty"`
}

func (sc Scenario) JSON() string {
	b, err := json.Marshal(sc)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func parseScenario(s string) (Scenario, error) {
	var sc Scenario
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	err := dec.Decode(&sc)
	return sc, err
}

func ptr[T any](v T) *T { return &v }

// lease is the lease length the Consumer starts with.
func (sc *Scenario) lease() time.Duration {
	if v := sc.Options.Visibility; v != nil {
		return v.D()
	}
	return time.Duration(sc.QueueVisibility) * time.Second
}

// shutdownTimeout is the Consumer's (its default when not given).
func (sc *Scenario) shutdownTimeout() time.Duration {
	if v := sc.Options.ShutdownTimeout; v != nil {
		return v.D()
	}
	return 20 * time.Second
}

func (sc *Scenario) concurrency() int {
	if v := sc.Options.Concurrency; v != nil {
		return *v
	}
	return 10
}

// pollWait is the long-poll wait each receive asks for: WithWaitTime's,
// or under WithWaitTime(0) the queue's (0: the queue short-polls), cut to
// the shutdown timeout.
func (sc *Scenario) pollWait() time.Duration {
	w := 20 * time.Second
	if v := sc.Options.WaitTime; v != nil {
		w = v.D()
	}
	if w == 0 {
		w = time.Duration(sc.QueueWait) * time.Second
	}
	if w == 0 {
		return 0
	}
	return max(min(w, sc.shutdownTimeout().Truncate(time.Second)), time.Second)
}

// callTimeout is a receive's call timeout: the stall limit's least
// allows one more than the long-poll wait.
const callTimeout = 10 * time.Second

// newPollWait is the long-poll wait as New judges the stall limit by:
// WithWaitTime's (20 s, SQS's longest, for 0: the queue's), at most the
// shutdown timeout, at least a second.
func (sc *Scenario) newPollWait() time.Duration {
	w := 20 * time.Second
	if v := sc.Options.WaitTime; v != nil && *v > 0 {
		w = v.D()
	}
	return max(min(w, sc.shutdownTimeout().Truncate(time.Second)), time.Second)
}

func (sc *Scenario) shutdownEvent() *Event {
	for i := range sc.Events {
		if sc.Events[i].Kind == evShutdown {
			return &sc.Events[i]
		}
	}
	return nil
}

func (sc *Scenario) has(kind string) bool {
	return slices.ContainsFunc(sc.Events, func(e Event) bool { return e.Kind == kind })
}

// drawScenario draws the scenario of seed.
func drawScenario(seed uint64) Scenario {
	rng := rand.New(rand.NewPCG(seed, 0x5ce7a510))
	p := func(prob float64) bool { return rng.Float64() < prob }
	between := func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) }
	secs := func(lo, hi int) Dur { return Dur(time.Duration(between(lo, hi)) * time.Second) }
	ms := func(lo, hi int) Dur { return Dur(time.Duration(between(lo, hi)) * time.Millisecond) }

	sc := Scenario{Seed: seed}
	switch u := rng.Float64(); {
	case u < 0.4:
		sc.Queue = queueStandard
	case u < 0.65:
		sc.Queue = queueGroups
	default:
		sc.Queue = queueFIFO
	}
	sc.Messages = between(1, 30)
	if p(0.15) {
		sc.Messages = between(30, 100)
	}
	if sc.Queue != queueStandard {
		sc.Groups = between(1, 6)
	}
	if p(0.5) {
		sc.Spread = secs(5, 180)
	}
	sc.QueueVisibility = between(3, 60)
	if p(0.2) {
		sc.QueueWait = between(1, 20)
	}

	o := &sc.Options
	conc := 10
	if p(0.7) {
		conc = between(1, 20)
		o.Concurrency = ptr(conc)
	}
	sc.Handler = "single"
	if p(0.4) {
		sc.Handler = "batch"
		sc.BatchSize = between(1, min(10, conc))
		switch u := rng.Float64(); {
		case u < 0.25:
		case u < 0.9:
			sc.BatchWindow = ms(1, 3000)
		default:
			sc.BatchWindow = secs(3, 30)
		}
	}
	sc.Middleware = p(0.35)
	if p(0.2) {
		sc.Idempotent = "id"
		if p(0.5) {
			sc.Idempotent = "body"
			sc.SameBody = rng.IntN(sc.Messages/3 + 1)
		}
	}
	sc.SDKRetries = p(0.3)

	if p(0.3) {
		o.ReceiveSize = ptr(between(1, 10))
	}
	if p(0.4) {
		o.ReadAhead = ptr(between(0, 50))
		if p(0.25) {
			*o.ReadAhead = 0
		}
	}
	if p(0.1) {
		o.Pollers = ptr(between(1, 5))
	}
	if p(0.4) {
		o.Visibility = ptr(secs(3, 60))
	}
	adaptive := p(0.15)
	if adaptive {
		lo := between(10, 30)
		o.Adaptive = &[2]Dur{secs(lo, lo), secs(lo, lo+90)}
		if v := o.Visibility; v != nil && (*v < o.Adaptive[0] || *v > o.Adaptive[1]) {
			// Where the adaptive lease starts: within its range (outside
			// it New refuses the pair).
			o.Visibility = ptr(secs(lo, int(o.Adaptive[1].D()/time.Second)))
		}
	}
	lease := sc.lease()
	minLease := min(lease, time.Duration(sc.QueueVisibility)*time.Second)
	if !adaptive && p(0.2) && minLease >= 3*time.Second {
		// Whole seconds below half of every lease it may meet (the
		// option's and the queue's).
		o.Heartbeat = ptr(Dur(time.Second + time.Duration(rng.Int64N(int64((minLease-time.Second)/2/time.Second)))*time.Second))
	}
	if p(0.2) {
		// Short enough to reach within the scenario: the ceiling cancels
		// long handlers.
		maxL := max(lease, time.Duration(sc.QueueVisibility)*time.Second)
		if o.Adaptive != nil {
			maxL = max(maxL, o.Adaptive[1].D())
		}
		o.MaxLease = ptr(Dur(maxL + time.Duration(between(0, 5))*maxL))
		if p(0.3) {
			// Whole seconds below the maximum lease.
			o.CeilingGrace = ptr(Dur(time.Duration(rng.Int64N(int64(maxL/time.Second))) * time.Second))
		}
	}
	if p(0.3) {
		b := &BreakerOpt{Failures: between(1, 6), CallFailures: between(1, 5), Pause: secs(1, 60)}
		b.MaxPause = Dur(b.Pause.D() + time.Duration(between(0, 240))*time.Second)
		if p(0.3) {
			b.Ratio = float64(between(3, 9)) / 10
			b.Window = between(2, 20)
		}
		b.Probe = p(0.2)
		o.Breaker = b
	}
	if p(0.2) {
		o.Rate = &RateOpt{Limit: math.Round(float64(between(5, 500))) / 10, Burst: between(1, 20)}
	}
	if sc.Queue == queueGroups && conc > 1 && p(0.3) {
		// Below the concurrency: at it the cap does nothing (refused).
		o.GroupLimit = ptr(between(1, min(4, conc-1)))
	}
	if sc.Queue == queueGroups && p(0.25) {
		o.FairDispatch = ptr(true)
		if o.GroupLimit == nil && p(0.5) {
			*o.FairDispatch = false
		}
	}
	if p(0.4) {
		o.Backoff = ptr([]string{"fixed", "linear", "zero", "long"}[rng.IntN(4)])
	}
	switch u := rng.Float64(); {
	case u < 0.25:
		o.DLQ = &DLQOpt{Kind: "option"}
	case u < 0.4:
		o.DLQ = &DLQOpt{Kind: "redrive", MaxReceive: between(2, 6)}
	}
	if p(0.15) {
		o.Scaling = &ScalingOpt{Target: secs(1, 60)}
		if p(0.5) {
			o.Scaling.Interval = secs(5, 60)
		}
	}
	if p(0.1) {
		o.StartupLimit = ptr(secs(1, 60))
	}
	if p(0.2) {
		hi := 120_000
		if o.MaxLease != nil {
			// Below the maximum lease: the ceiling would cancel first.
			hi = min(hi, int(o.MaxLease.D()/time.Millisecond)-1)
		}
		o.HandlerTimeout = ptr(ms(100, hi))
	}
	if p(0.6) {
		o.ShutdownTimeout = ptr(secs(0, 60))
		if p(0.2) {
			*o.ShutdownTimeout = ms(0, 2000)
		}
	}
	if p(0.4) {
		o.WaitTime = ptr(secs(0, 20))
		if *o.WaitTime == 0 && sc.QueueWait == 0 {
			// Short polls would loop at the round trip's pace: the queue
			// long-polls instead (WithWaitTime(0) takes the queue's wait).
			sc.QueueWait = between(1, 20)
		}
	}
	if p(0.25) {
		// Above the long-poll wait and twice the heartbeat interval, plus
		// a receive's call timeout (a lower stall limit conflicts: an
		// idle Consumer answers one receive a wait, a busy one one
		// renewal an interval).
		interval := max(sc.lease(), time.Duration(sc.QueueVisibility)*time.Second) / 3
		if o.Heartbeat != nil {
			interval = o.Heartbeat.D()
		}
		if o.Adaptive != nil {
			interval = max(interval, o.Adaptive[1].D()/3)
		}
		stall := max(sc.newPollWait(), time.Duration(sc.QueueWait)*time.Second, 2*interval) + callTimeout + time.Duration(between(0, 300))*time.Second
		o.HealthLimits = &[2]Dur{Dur(stall), secs(10, 300)}
		if ht := o.HandlerTimeout; ht != nil && o.HealthLimits[1] <= *ht {
			// Above the handler timeout: a handler within its own time
			// is not stuck.
			o.HealthLimits[1] = *ht + secs(1, 300)
		}
		if p(0.3) {
			o.HealthLimits[1] = 0
		}
	}
	o.CancelIdlePolls = nil
	if p(0.2) {
		o.CancelIdlePolls = ptr(true)
	}
	if p(0.15) {
		o.PanicPolicy = ptr([]string{"permanent", "retry", "error"}[rng.IntN(3)])
	}
	if p(0.1) {
		o.RequireDLQ = ptr(true)
	}
	if conc >= 2 && p(0.15) {
		floor, initial := between(1, conc-1), 0
		if p(0.6) {
			initial = between(floor, conc)
		}
		o.AdaptiveConc = &[2]int{floor, initial}
	}
	if p(0.3) {
		// Bodies of a size, some much larger.
		sc.BodySize = between(10, 2000)
		if p(0.4) {
			sc.BigBody, sc.BigShare = between(2000, 20000), between(5, 30)
		}
	}
	if p(0.2) {
		// A small bound: a few messages' worth, sometimes less than one
		// (a message carries some 300 bytes besides its body).
		unit := max(sc.BodySize, 10) + 300
		o.MaxBytes = ptr(int64(between(unit/2, 20*unit)))
	}
	if o.Pollers == nil && p(0.3) {
		sc.Pool, sc.PoolKnown = between(1, 10), p(0.5)
	}
	if p(0.06) {
		sc.FirstContact = firstContactClasses[rng.IntN(len(firstContactClasses))].name
		sc.Heal = secs(1, 150)
	}
	if p(0.15) {
		sc.Bundle = 1 + rng.IntN(2)
	}
	if p(0.1) {
		sc.Protect = ms(1, 180_000)
	}
	if sc.Idempotent != "" && p(0.5) {
		sc.Idem = &IdemOpt{Validate: p(0.3)}
		if p(0.5) {
			sc.Idem.TTL = secs(1, 600)
		}
		if p(0.5) {
			sc.Idem.Retry = secs(1, 60)
		}
		if p(0.5) {
			sc.Idem.Hook = []string{"delete", "fail"}[rng.IntN(2)]
		}
	}

	if p(0.5) {
		sc.RTT = ms(1, 20)
	}
	sc.Behaviour = drawBehaviour(rng, lease)
	if p(0.5) {
		sc.FaultRate = float64(between(5, 50)) / 1000
	}
	if p(0.3) {
		sc.ExpireRate = float64(between(5, 20)) / 100
	}
	if room, ok := sc.batchWindowRoom(); ok && sc.Handler == "batch" {
		// Below the room the lease ceiling leaves a batch's window (at
		// or above it New refuses the pair), now and then just below
		// when that is within the windows drawn (30 s at most).
		if below := ms(1, 2000).D(); sc.BatchWindow.D() >= room || room <= 30*time.Second && p(0.3) {
			sc.BatchWindow = Dur(max(room-below, 0))
		}
	}
	sc.Events = drawEvents(rng, &sc)
	if p(0.06) {
		drawConflict(rng, &sc)
	}
	return sc
}

// batchWindowRoom is the longest Batch window the lease ceiling leaves
// room for, as New (or Run) judges it (conflicts.go): the maximum lease
// less the ceiling grace (WithCeilingGrace, else one heartbeat interval)
// less a second of hand-over slack; ok false without WithMaxLeaseDuration
// (12 hours leave room for any window).
func (sc *Scenario) batchWindowRoom() (room time.Duration, ok bool) {
	o := &sc.Options
	if o.MaxLease == nil {
		return 0, false
	}
	grace := sc.lease() / 3
	switch {
	case o.CeilingGrace != nil:
		grace = o.CeilingGrace.D()
	case o.Heartbeat != nil:
		grace = o.Heartbeat.D()
	}
	return o.MaxLease.D() - grace - time.Second, true
}

func drawBehaviour(rng *rand.Rand, lease time.Duration) Behaviour {
	b := Behaviour{Weights: map[string]int{}}
	profiles := []string{"calm", "mixed", "failing", "permanent", "slow", "random", "throttled"}
	b.Profile = profiles[rng.IntN(len(profiles))]
	w := b.Weights
	switch b.Profile {
	case "calm":
		w[bSucceed], w[bFail] = 95, 5
	case "mixed":
		for _, k := range behaviours {
			w[k] = 3
		}
		w[bSucceed] = 30
	case "failing":
		w[bSucceed], w[bFail], w[bRetry], w[bPanic] = 25, 50, 15, 10
	case "permanent":
		w[bSucceed], w[bPermanent], w[bFail] = 35, 60, 5
	case "slow":
		w[bSucceed], w[bOverrun], w[bIgnore], w[bExtend], w[bDrain] = 50, 25, 15, 10, 10
	case "throttled":
		// A downstream that pushes back, and outcomes that say nothing
		// of it.
		w[bSucceed], w[bThrottled], w[bNeutral], w[bRetryNil], w[bFail] = 50, 25, 10, 10, 5
	case "random":
		for _, k := range behaviours {
			if rng.IntN(2) == 0 {
				w[k] = rng.IntN(10)
			}
		}
		w[bSucceed] += 1 + rng.IntN(10)
	}
	for k, v := range w {
		if v == 0 {
			delete(w, k)
		}
	}
	b.Work = []Dur{Dur(10 * time.Millisecond), Dur(500 * time.Millisecond), Dur(3 * time.Second), Dur(20 * time.Second)}[rng.IntN(4)]
	if w[bIgnore] > 0 {
		b.Ignore = Dur(time.Duration(1+rng.IntN(30)) * time.Second)
	}
	if w[bRetry] > 0 || w[bRelease] > 0 || w[bRetryNil] > 0 {
		b.RetryMax = []Dur{0, Dur(5 * time.Second), Dur(time.Minute), Dur(10 * time.Minute)}[rng.IntN(4)]
	}
	if w[bThrottled] > 0 {
		b.Throttle = []string{"zero", "sub-second", "seconds", "minutes", "mixed"}[rng.IntN(5)]
	}
	return b
}

func drawEvents(rng *rand.Rand, sc *Scenario) []Event {
	p := func(prob float64) bool { return rng.Float64() < prob }
	at := func(maxSecs int) Dur {
		return Dur(time.Duration(rng.Int64N(int64(maxSecs) * int64(time.Second))).Round(time.Millisecond))
	}
	var evs []Event
	pauses := 0
	if p(0.3) {
		pauses = 1 + rng.IntN(3)
	}
	t := Dur(0)
	for i := range pauses {
		switch {
		case i == 0 && p(0.15):
			evs = append(evs, Event{Kind: evPause, Trigger: trBefore})
		case p(0.2):
			evs = append(evs, Event{Kind: evPause, At: t + at(60), Trigger: trHandler, N: 1 + rng.IntN(5)})
		default:
			t += at(90)
			evs = append(evs, Event{Kind: evPause, At: t})
		}
		var d Dur
		switch {
		case p(0.1):
			d = 0 // Resume at the same instant as the Pause: they race
		case p(0.3):
			d = Dur(time.Duration(150+rng.IntN(90)) * time.Second) // past the default stall limit
		default:
			d = at(60)
		}
		if evs[len(evs)-1].Trigger == trTime {
			t += d
			evs = append(evs, Event{Kind: evResume, At: t})
		} else {
			evs = append(evs, Event{Kind: evResume, At: d, Trigger: trPaused, N: i + 1})
		}
	}
	if p(0.15) {
		// Pause and Resume during the shutdown's drain, or after Run
		// returned; at one instant they race.
		first := Event{Kind: evPause, At: Dur(time.Duration(rng.IntN(8000)) * time.Millisecond), Trigger: trShutdown}
		if p(0.3) {
			first.Kind = evResume
		}
		evs = append(evs, first)
		if p(0.6) {
			second := Event{Kind: evResume, At: first.At, Trigger: trShutdown}
			if first.Kind == evResume {
				second.Kind = evPause
			}
			if p(0.5) {
				second.At += Dur(time.Duration(rng.IntN(5000)) * time.Millisecond)
			}
			evs = append(evs, second)
		}
	}
	if p(0.2) {
		start := at(120)
		evs = append(evs, Event{Kind: evStart2, At: start})
		if p(0.6) {
			evs = append(evs, Event{Kind: evStop2, At: start + at(180)})
		}
	}
	shut := Event{Kind: evShutdown}
	switch u := rng.Float64(); {
	case u < 0.1:
		shut.At = Dur(time.Duration(rng.IntN(200)) * time.Millisecond)
	case u < 0.55:
		shut.At = at(240)
	case u < 0.7:
		shut.Trigger, shut.N, shut.At = trReceive, 1+rng.IntN(6), 0
	case u < 0.85 && sc.Handler == "batch":
		shut.Trigger, shut.N, shut.At = trBatch, 1+rng.IntN(4), Dur(time.Duration(rng.IntN(3000))*time.Millisecond)
	case u < 0.85 || pauses == 0:
		shut.Trigger, shut.N, shut.At = trHandler, 1+rng.IntN(10), Dur(time.Duration(rng.IntN(3000))*time.Millisecond)
	default:
		shut.Trigger, shut.N, shut.At = trPaused, 1, Dur(time.Duration(rng.IntN(5000))*time.Millisecond)
	}
	evs = append(evs, shut)
	return evs
}

// conflict is a pair of options the library must refuse, naming both
// (the names its error must contain): at New, or, when only the queue
// can tell (atRun), at Run, before its first receive.
type conflict struct {
	names [2]string
	atRun bool
	// options are the Options fields (optionNames) the conflict is made
	// of: the shrinker leaves them as drawn, or the scenario would lose
	// its conflict and still be judged as one.
	options []string
}

// The conflicts a seed may draw on purpose.
var conflicts = map[string]conflict{
	"heartbeat+adaptive":           {names: [2]string{"WithHeartbeatInterval", "WithAdaptiveVisibility"}, options: []string{"Heartbeat", "Adaptive"}},
	"batch>concurrency":            {names: [2]string{"Batch", "WithConcurrency"}, options: []string{"Concurrency"}},
	"grouplimit+fifo":              {names: [2]string{"WithGroupLimit", "FIFO"}, options: []string{"GroupLimit"}},
	"fairdispatch+fifo":            {names: [2]string{"WithFairDispatch", "FIFO"}, options: []string{"FairDispatch"}},
	"grouplimit+fairdispatch-off":  {names: [2]string{"WithGroupLimit", "WithFairDispatch"}, options: []string{"GroupLimit", "FairDispatch"}},
	"grouplimit>=concurrency":      {names: [2]string{"WithGroupLimit", "WithConcurrency"}, options: []string{"Concurrency", "GroupLimit"}},
	"scaling+scalingtarget":        {names: [2]string{"WithScaling", "WithScalingTarget"}, options: []string{"Scaling"}},
	"ceilinggrace>maxlease":        {names: [2]string{"WithCeilingGrace", "WithMaxLeaseDuration"}, options: []string{"MaxLease", "CeilingGrace"}},
	"stall<waittime":               {names: [2]string{"WithHealthLimits", "WithWaitTime"}, options: []string{"WaitTime", "HealthLimits"}},
	"stall<heartbeat":              {names: [2]string{"WithHealthLimits", "WithHeartbeatInterval"}, options: []string{"Visibility", "Heartbeat", "WaitTime", "HealthLimits"}},
	"stall<queue-heartbeat":        {names: [2]string{"WithHealthLimits", "the queue's VisibilityTimeout"}, atRun: true, options: []string{"HealthLimits"}},
	"dlq=source":                   {names: [2]string{"WithDeadLetterQueue", "queue"}, options: []string{"DLQ"}},
	"dlq=source-by-arn":            {names: [2]string{"WithDeadLetterQueue", "the queue the Consumer reads"}, atRun: true, options: []string{"DLQ"}},
	"visibility-outside-adaptive":  {names: [2]string{"WithVisibilityTimeout", "WithAdaptiveVisibility"}, options: []string{"Visibility", "Adaptive"}},
	"adaptive>maxlease":            {names: [2]string{"WithAdaptiveVisibility", "WithMaxLeaseDuration"}, options: []string{"Adaptive", "MaxLease"}},
	"handlertimeout>=maxlease":     {names: [2]string{"WithHandlerTimeout", "WithMaxLeaseDuration"}, options: []string{"MaxLease", "HandlerTimeout"}},
	"handlerlimit<=handlertimeout": {names: [2]string{"WithHealthLimits", "WithHandlerTimeout"}, options: []string{"HandlerTimeout", "HealthLimits"}},
	"adaptive-floor>=concurrency":  {names: [2]string{"WithAdaptiveConcurrency", "WithConcurrency"}, options: []string{"Concurrency", "AdaptiveConc"}},
	"adaptive-initial>concurrency": {names: [2]string{"WithAdaptiveConcurrency", "WithConcurrency"}, options: []string{"Concurrency", "AdaptiveConc"}},
	"batchwindow>=ceiling":         {names: [2]string{"Batch window", "WithMaxLeaseDuration"}, options: []string{"Visibility", "MaxLease"}},
}

func drawConflict(rng *rand.Rand, sc *Scenario) {
	names := make([]string, 0, len(conflicts))
	for k := range conflicts {
		names = append(names, k)
	}
	slices.Sort(names)
	sc.Conflict = names[rng.IntN(len(names))]
	// The refusal alone is judged: no fault may hide it (a dead-letter
	// queue whose check fails is let through, on purpose).
	sc.FaultRate, sc.FirstContact, sc.Heal = 0, "", 0
	o := &sc.Options
	switch sc.Conflict {
	case "heartbeat+adaptive":
		o.Heartbeat, o.Adaptive = ptr(Dur(time.Second)), &[2]Dur{Dur(10 * time.Second), Dur(20 * time.Second)}
	case "batch>concurrency":
		sc.Handler, sc.BatchSize, o.Concurrency = "batch", 5, ptr(2)
	case "grouplimit+fifo":
		sc.Queue, sc.Groups, o.GroupLimit = queueFIFO, max(sc.Groups, 1), ptr(2)
	case "fairdispatch+fifo":
		sc.Queue, sc.Groups, o.FairDispatch = queueFIFO, max(sc.Groups, 1), ptr(true)
	case "grouplimit+fairdispatch-off":
		sc.Queue, sc.Groups, o.GroupLimit, o.FairDispatch = queueGroups, max(sc.Groups, 1), ptr(2), ptr(false)
	case "grouplimit>=concurrency":
		sc.Queue, sc.Groups, o.Concurrency, o.GroupLimit, o.FairDispatch = queueGroups, max(sc.Groups, 1), ptr(3), ptr(3+rng.IntN(2)), nil
	case "scaling+scalingtarget":
		o.Scaling = &ScalingOpt{Target: Dur(10 * time.Second), Interval: Dur(30 * time.Second), Both: true}
	case "ceilinggrace>maxlease":
		o.MaxLease = ptr(Dur(max(sc.lease(), time.Duration(sc.QueueVisibility)*time.Second) * 2))
		o.CeilingGrace = ptr(*o.MaxLease + Dur(time.Minute))
	case "stall<waittime":
		// No heartbeat option: one above the wait would be the conflict
		// New names instead (a lease's third is at most 20 s here).
		o.WaitTime, o.ShutdownTimeout, o.Heartbeat = ptr(Dur(20*time.Second)), ptr(Dur(30*time.Second)), nil
		o.HealthLimits = &[2]Dur{Dur(10 * time.Second), 0}
	case "stall<heartbeat":
		o.Visibility, o.Heartbeat, o.Adaptive, o.MaxLease, o.CeilingGrace = ptr(Dur(60*time.Second)), ptr(Dur(20*time.Second)), nil, nil, nil
		o.WaitTime, o.HealthLimits = ptr(Dur(time.Second)), &[2]Dur{Dur(10 * time.Second), 0}
	case "stall<queue-heartbeat":
		// The queue's 5 minutes renew every 100 s: only Run can tell.
		sc.QueueVisibility = 300
		o.Visibility, o.Heartbeat, o.Adaptive, o.MaxLease, o.CeilingGrace = nil, nil, nil, nil, nil
		o.WaitTime, o.ShutdownTimeout, o.HealthLimits = nil, nil, &[2]Dur{Dur(60 * time.Second), 0}
		o.HandlerTimeout = nil
	case "dlq=source":
		o.DLQ = &DLQOpt{Kind: "source"}
	case "dlq=source-by-arn":
		// The source queue under another host: only its ARN tells. The
		// queue's attributes must be read (no WithVisibilityTimeout).
		o.DLQ = &DLQOpt{Kind: "source-by-arn"}
		o.Visibility, o.Adaptive = nil, nil
	case "visibility-outside-adaptive":
		o.Adaptive, o.Visibility = &[2]Dur{Dur(10 * time.Second), Dur(20 * time.Second)}, ptr(Dur(60*time.Second))
		o.Heartbeat, o.MaxLease, o.CeilingGrace = nil, nil, nil
	case "adaptive>maxlease":
		o.Adaptive, o.MaxLease = &[2]Dur{Dur(10 * time.Second), Dur(2 * time.Minute)}, ptr(Dur(time.Minute))
		o.Visibility, o.Heartbeat, o.CeilingGrace, o.HandlerTimeout = nil, nil, nil, nil
	case "handlertimeout>=maxlease":
		o.MaxLease = ptr(Dur(max(sc.lease(), time.Duration(sc.QueueVisibility)*time.Second) * 2))
		o.HandlerTimeout, o.CeilingGrace = ptr(*o.MaxLease+Dur(time.Duration(rng.IntN(2))*time.Second)), nil
	case "handlerlimit<=handlertimeout":
		o.MaxLease, o.CeilingGrace, o.HandlerTimeout = nil, nil, ptr(Dur(time.Minute))
		o.HealthLimits = &[2]Dur{0, Dur(time.Duration(30+rng.IntN(31)) * time.Second)}
	case "adaptive-floor>=concurrency":
		o.Concurrency, o.AdaptiveConc, o.GroupLimit = ptr(4), &[2]int{4 + rng.IntN(2), 0}, nil
		sc.BatchSize = min(sc.BatchSize, 4)
	case "adaptive-initial>concurrency":
		o.Concurrency, o.AdaptiveConc, o.GroupLimit = ptr(4), &[2]int{1, 5}, nil
		sc.BatchSize = min(sc.BatchSize, 4)
	case "batchwindow>=ceiling":
		// A 6 s lease renews every 2 s, its grace: the room is the
		// maximum lease less 3 s; the window at it or up to 2 s past.
		if sc.Handler != "batch" {
			sc.Handler, sc.BatchSize = "batch", 1+rng.IntN(min(10, sc.concurrency()))
		}
		o.Visibility, o.Heartbeat, o.Adaptive, o.CeilingGrace, o.HandlerTimeout = ptr(Dur(6*time.Second)), nil, nil, nil, nil
		o.MaxLease = ptr(Dur(time.Duration(10+rng.IntN(50)) * time.Second))
		room, _ := sc.batchWindowRoom()
		sc.BatchWindow = Dur(room + time.Duration(rng.IntN(2000))*time.Millisecond)
	}
	if room, ok := sc.batchWindowRoom(); ok && sc.Handler == "batch" && sc.Conflict != "batchwindow>=ceiling" && sc.BatchWindow.D() >= room {
		sc.BatchWindow = Dur(max(room-500*time.Millisecond, 0)) // the window's conflict is not this one
	}
	// Nothing else New refuses first.
	switch c := sc.concurrency(); {
	case o.GroupLimit == nil || *o.GroupLimit < c || sc.Conflict == "grouplimit>=concurrency":
	case strings.HasPrefix(sc.Conflict, "grouplimit"):
		o.Concurrency = ptr(*o.GroupLimit + 1) // the cap is the conflict's
	default:
		o.GroupLimit = nil
	}
	if c, ac := sc.concurrency(), o.AdaptiveConc; !strings.HasPrefix(sc.Conflict, "adaptive-") && ac != nil && (ac[0] >= c || ac[1] > c) {
		o.AdaptiveConc = nil
	}
	if conflicts[sc.Conflict].atRun {
		// Run reads the queue first: a shutdown that comes before cannot
		// tell.
		sc.Events = slices.DeleteFunc(sc.Events, func(e Event) bool { return e.Kind != evShutdown })
		o.RequireDLQ = nil // another refusal at Run
		*sc.shutdownEvent() = Event{Kind: evShutdown, At: Dur(time.Minute)}
	}
}

// String is the scenario in a few lines, for a report.
func (sc Scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s queue, %d messages", sc.Seed, sc.Queue, sc.Messages)
	if sc.Groups > 0 {
		fmt.Fprintf(&b, " in %d groups", sc.Groups)
	}
	if sc.Spread > 0 {
		fmt.Fprintf(&b, " over %v", sc.Spread.D())
	}
	fmt.Fprintf(&b, ", queue visibility %ds", sc.QueueVisibility)
	if sc.QueueWait > 0 {
		fmt.Fprintf(&b, " wait %ds", sc.QueueWait)
	}
	fmt.Fprintf(&b, "\n  handler %s", sc.Handler)
	if sc.Handler == "batch" {
		fmt.Fprintf(&b, "(size %d, window %v)", sc.BatchSize, sc.BatchWindow.D())
	}
	if sc.Middleware {
		b.WriteString(" with middleware")
	}
	if sc.Idempotent != "" {
		fmt.Fprintf(&b, " behind NewIdempotent (key %s, %d same bodies)", sc.Idempotent, sc.SameBody)
	}
	fmt.Fprintf(&b, "; behaviour %s %v work<=%v", sc.Behaviour.Profile, sc.Behaviour.Weights, sc.Behaviour.Work.D())
	if sc.Behaviour.Ignore > 0 {
		fmt.Fprintf(&b, " ignore<=%v", sc.Behaviour.Ignore.D())
	}
	if sc.Behaviour.RetryMax > 0 {
		fmt.Fprintf(&b, " retry<=%v", sc.Behaviour.RetryMax.D())
	}
	fmt.Fprintf(&b, "\n  options %s", sc.Options.describe())
	if sc.FaultRate > 0 || sc.ExpireRate > 0 || sc.SDKRetries {
		fmt.Fprintf(&b, "\n  faults %.1f%% of calls, expiries %.0f%% of handler calls, SDK retries %v", 100*sc.FaultRate, 100*sc.ExpireRate, sc.SDKRetries)
	}
	b.WriteString("\n  events")
	for _, e := range sc.Events {
		b.WriteString(" ")
		b.WriteString(e.String())
	}
	if sc.Conflict != "" {
		fmt.Fprintf(&b, "\n  conflict drawn: %s", sc.Conflict)
	}
	return b.String()
}

func (e Event) String() string {
	switch e.Trigger {
	case trTime:
		return fmt.Sprintf("%s@%v", e.Kind, e.At.D())
	case trBefore:
		return e.Kind + "@before-run"
	}
	return fmt.Sprintf("%s@%v-after-%s#%d", e.Kind, e.At.D(), e.Trigger, e.N)
}

// describe lists the options given, as name=value.
func (o Options) describe() string {
	var parts []string
	v := reflect.ValueOf(o)
	for i := range v.NumField() {
		f := v.Field(i)
		if f.IsNil() {
			continue
		}
		val := f.Elem().Interface()
		if d, ok := val.(Dur); ok {
			val = d.D()
		}
		if d, ok := val.([2]Dur); ok {
			val = [2]time.Duration{d[0].D(), d[1].D()}
		}
		if bp, ok := val.(BreakerOpt); ok {
			val = fmt.Sprintf("{failures %d ratio %v/%d calls %d pause %v..%v probe %v}", bp.Failures, bp.Ratio, bp.Window, bp.CallFailures, bp.Pause.D(), bp.MaxPause.D(), bp.Probe)
		}
		parts = append(parts, fmt.Sprintf("%s=%v", v.Type().Field(i).Name, val))
	}
	if len(parts) == 0 {
		return "(defaults)"
	}
	return strings.Join(parts, " ")
}

// optionNames are the names of the options given, for the coverage table.
func (o Options) optionNames() []string {
	var names []string
	v := reflect.ValueOf(o)
	for i := range v.NumField() {
		if !v.Field(i).IsNil() {
			names = append(names, v.Type().Field(i).Name)
		}
	}
	return names
}
