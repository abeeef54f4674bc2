package sqsconsumer

import (
	"encoding/json"

	"fmt"
	"sort"
	"time"

	"github.com/sqskit/sqsconsumer/internal/broken"
	healthprobe "github.com/sqskit/sqsconsumer/internal/probe"
	"github.com/sqskit/sqsconsumer/internal/share"
)

// Health is a Consumer's health judged from its progress, for liveness,
// readiness and startup checks (Consumer.Health returns it,
// Consumer.HealthHandler and Consumer.ReadyHandler serve it). A process can
// be up and consume nothing: a receive that keeps failing (expired
// credentials, a deleted queue, a network partition), a handler stuck on a
// call that never returns. Health says so from what the Consumer last
// completed.
//
// It is unhealthy when, while Run runs:
//   - Run has not started running within the startup limit since it
//     began: SQS answered no call (Run's first long poll, while within
//     its wait and call timeout, is progress: an idle queue answers it
//     only at its end), or a check of Run's start (the dead-letter
//     queue's) has not returned (WithStartupLimit, default 30 s: the
//     report says "starting" until then, then "running"), unless it is
//     paused;
//   - no ReceiveMessage, visibility change or delete call was answered by
//     SQS for longer than the stall limit (while the breaker is closed:
//     an open breaker pauses receiving on purpose, and so does a
//     Throttled, whose pause counts from its end; and while not paused,
//     or paused with handlers running, whose leases must be renewed: a
//     Pause sends nothing else, on purpose, however long it lasts; and
//     unless it holds messages none of whose leases is overdue for a
//     renewal and its latest receive did not fail: busy with long
//     leases, its slots and read-ahead taken, it asks SQS nothing
//     until a renewal is due);
//   - a handler has run longer than the handler limit;
//   - a running handler's lease is within its ceiling grace of the
//     maximum lease duration (its context is cancelled with
//     ErrLeaseCeiling and the message will be delivered again);
//
// and when Run has returned an error. It is healthy while Run drains (its
// context is cancelled and handlers finish, as an orchestrator that sent
// SIGTERM expects), and after Run returned nil. Before Run it is
// unhealthy. WithHealthLimits sets the stall and handler limits.
//
// Ready is narrower: the Consumer takes messages now. Each state, its
// verdicts, and the HTTP status the handlers answer with:
//
//	Status       Healthy  Ready  HealthHandler  ReadyHandler
//	not started  no       no     503            503
//	starting     yes (1)  no     200 (1)        503
//	running      yes (2)  yes    200 (2)        200 (2)
//	paused       yes (3)  no     200 (3)        503
//	draining     yes      no     200            503
//	stopped      yes      no     200            503
//	failed       no       no     503            503
//
// (1) until the startup limit passes without an answer from SQS, then no
// and 503; (2) while no problem above holds, else no and 503 for both;
// (3) however long the pause, unless a running handler is past its limit,
// near its lease ceiling, or its renewals go unanswered for the stall
// limit. So HealthHandler suits a liveness probe (it restarts a process
// that is stuck, not one that is starting, paused or draining: a restart
// would undo the pause), ReadyHandler a readiness probe (it takes a
// process out of rotation while it does not consume, paused included)
// and a startup probe (it succeeds once SQS has answered: give the probe
// at least the startup limit, period x failureThreshold).
type Health struct {
	// Healthy is false when Problems is not empty.
	Healthy bool `json:"healthy"`
	// Ready is true while Run runs, SQS has answered a call, it is not
	// paused, and nothing makes it unhealthy: the Consumer takes
	// messages.
	Ready bool `json:"ready"`
	// Status is "not started" (Run was not called), "starting" (Run
	// began and does not run yet: SQS has not answered a call, or Run
	// still checks the queues), "running", "paused" (Run
	// runs, and Pause was called without a Resume since), "draining"
	// (Run's context was cancelled), "stopped" (Run returned nil) or
	// "failed" (Run returned an error).
	Status string `json:"status"`
	// Paused is set between Pause and Resume, whatever the Status (a
	// Consumer may be paused before Run, and while it drains).
	Paused bool `json:"paused,omitempty"`
	// Problems says, one sentence each, why Healthy is false.
	Problems []string `json:"problems,omitempty"`
	// Retrying is, while Run runs and its calls to SQS fail with an
	// error that can heal (a refused connection, a timeout, a 5xx,
	// throttling), the latest such error: the receives (at Run's start,
	// without WithVisibilityTimeout, the read of the queue's attributes)
	// are retried with backoff until SQS answers, and Retrying is ""
	// again. It is set at once, before the startup or stall limit makes
	// the Consumer unhealthy. (An error that cannot succeed at Run's
	// first contact ends Run instead: see Consumer.Run.)
	Retrying string `json:"retrying,omitempty"`
	// Warnings says, one sentence each, what deserves attention without
	// making the Consumer unhealthy, since a restart would not help: the
	// queue at SQS's in-flight quota (InFlightQuota), where receives come
	// back empty, without an error, while messages wait visible. To
	// notice it the Consumer reads the queue's counts after 3 empty
	// receives in a row, at most once every 5 minutes (with WithScaling
	// it uses the scaling signal's readings instead, and adds no call).
	Warnings []string `json:"warnings,omitempty"`
	// Breaker is the breaker's state ("closed", "open" or "half-open");
	// "" without WithBreaker.
	Breaker string `json:"breaker,omitempty"`
	// LastReceive, LastRenewal and LastDelete are when SQS last answered
	// a ReceiveMessage (with messages or none), a visibility change (a
	// renewal or a release) and a delete; zero when none was.
	LastReceive time.Time `json:"last_receive,omitzero"`
	LastRenewal time.Time `json:"last_renewal,omitzero"`
	LastDelete  time.Time `json:"last_delete,omitzero"`
	// Running is the number of handlers running now; LongestHandler how
	// long the oldest of them has run.
	Running        int           `json:"running"`
	LongestHandler time.Duration `json:"-"`
	// Err is the error Run returned, if any.
	Err error `json:"-"`
}

// MarshalJSON writes h with LongestHandler as a duration string ("1m30s")
// and Err as its text.
func (h Health) MarshalJSON() ([]byte, error) {
	type plain Health
	out := struct {
		plain
		LongestHandler string `json:"longest_handler,omitempty"`
		Err            string `json:"error,omitempty"`
	}{plain: plain(h)}
	if h.LongestHandler > 0 {
		out.LongestHandler = h.LongestHandler.String()
	}
	if h.Err != nil {
		out.Err = h.Err.Error()
	}
	return json.Marshal(out)
}

// HTTPStatus is the status HealthHandler answers with for h: 200 when
// healthy, 503 when not (see Health for each state).
func (h Health) HTTPStatus() int { return healthprobe.Status(h.Healthy) }

// ReadyHTTPStatus is the status ReadyHandler answers with for h: 200 when
// ready, 503 when not (see Health for each state).
func (h Health) ReadyHTTPStatus() int { return healthprobe.Status(h.Ready) }

// Health limits' defaults.
const (
	defaultStallLimit = 2 * time.Minute
	// DefaultStartupLimit is how long after Run began SQS may take to
	// answer a first call before Health turns unhealthy (WithStartupLimit).
	DefaultStartupLimit = 30 * time.Second
	// handlerLimitSlack is added to WithHandlerTimeout for the default
	// handler limit: a handler still running that long after its context
	// was cancelled ignores it.
	handlerLimitSlack = time.Minute
)

// WithHealthLimits sets what Consumer.Health counts as a stall: stall is
// the longest time without any ReceiveMessage, visibility change or
// delete answered by SQS (default 0: 2 minutes, or twice the heartbeat
// interval when that is longer, since a Consumer busy with long handlers
// may only renew); handler is the longest a handler may run (default 0:
// WithHandlerTimeout plus a minute when that is set, else no limit).
// Range of each: 0 (the default) or 1 s to 24 h.
//
// A stall limit must leave room for the quietest healthy Consumer: an
// idle one hears from SQS once per long poll (WithWaitTime, 20 s by
// default, or the queue's own wait for 0, cut to the shutdown timeout),
// and one whose handler slots are all busy with long handlers once per
// heartbeat interval; either answer may take a receive's call timeout (10
// s) more. So New refuses a stall limit below the longer of the two plus
// 10 s (30 s with the defaults), naming both options; Run does the same
// once the queue's VisibilityTimeout sets the interval, and fleet.Add
// adds the fleet's idle pause. (With WithAdaptiveVisibility the interval
// follows the lease, up to hi / 3: choose a stall limit above that if
// handlers may run that long.) A handler limit must be above
// WithHandlerTimeout, else a handler within its own time counts as stuck.
func WithHealthLimits(stall, handler time.Duration) Option {
	return option(func(s *settings) {
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"stall", stall}, {"handler", handler}} {
			if d.v != 0 && (d.v < time.Second || d.v > 24*time.Hour) {
				s.fail("WithHealthLimits: %s limit %v must be 0 (the default) or from 1s to 24h", d.name, d.v)
			}
		}
		s.stallLimit, s.handlerLimit = stall, handler
	})
}

// WithStartupLimit sets how long after Run began SQS may take to answer a
// first call (the queue's attributes, a receive, a renewal or a delete)
// before Consumer.Health turns unhealthy, naming the latest error; until
// then it reports "starting", healthy but not ready. Range 1 s to 24 h;
// default DefaultStartupLimit (30 s), well below the stall limit.
func WithStartupLimit(d time.Duration) Option {
	return option(func(s *settings) {
		if d < time.Second || d > 24*time.Hour {
			s.fail("WithStartupLimit(%v): must be from 1s to 24h", d)
			return
		}
		s.startupLimit = d
	})
}

// health is Consumer.Health: the Consumer's health now, judged from its
// settings, its progress, its fleet membership, its run (nil before Run
// set it up) and what Run returned (read only once Run has stopped). It
// takes the registry's lock, which the run takes for every message, and
// walks the messages held, so call it every few seconds, not in a loop.
func health(s *settings, p *progress, member *share.Member, r *run, paused bool, runErr func() error) Health {
	now := time.Now()
	lim := healthLimits{s: s, member: member}
	if r != nil {
		lim.interval, lim.pollWait = r.cfg.interval, r.pollWait
	}
	h := Health{
		Paused:      paused,
		LastReceive: timeOf(&p.receive),
		LastRenewal: timeOf(&p.renewal),
		LastDelete:  timeOf(&p.delete),
	}
	stage := p.stage.Load()
	if r == nil && (stage == runRunning || stage == runDraining) {
		stage = runStarting // read between the run's publication and its stage
	}
	if e := p.recvErr.Load(); e != nil && (stage == runStarting || stage == runRunning) {
		h.Retrying = *e
	}
	// Starting until Run runs, even once SQS answered a call (it may
	// still check the dead-letter queue); and while it runs before SQS
	// answered anything (a Pause before Run).
	answered := p.answered.Load() != 0
	starting := stage == runStarting || stage == runRunning && !answered
	switch {
	case stage == runNotStarted:
		h.Status = "not started"
		h.Problems = append(h.Problems, "Run has not been called")
	case starting && paused:
		// Paused before SQS answered (a Pause before Run, with the
		// queue's attributes unread): nothing is asked of SQS until
		// Resume, so the startup limit waits for it too.
		h.Status = "paused"
		h.Healthy = true
		return h
	case starting:
		h.Status = "starting"
		// Run's first long poll, still within its wait (and its call
		// timeout), is progress: an idle queue answers it only then.
		first := p.firstPoll.Load()
		waiting := first > 0 && now.Sub(time.Unix(0, first)) <= receiveTimeout(lim.pollWait)
		if waited := now.Sub(time.Unix(0, p.begun.Load())); waited > lim.startup() && !waiting {
			msg := fmt.Sprintf("SQS has answered no call in the %v since Run began (startup limit %v)", waited.Round(time.Second), lim.startup())
			if answered {
				msg = fmt.Sprintf("Run has not finished starting in the %v since it began (startup limit %v), though SQS has answered", waited.Round(time.Second), lim.startup())
			}
			if e := p.recvErr.Load(); e != nil {
				msg += "; the latest error: " + *e
			}
			h.Problems = append(h.Problems, msg)
		}
		h.Healthy = len(h.Problems) == 0
		return h
	}
	switch stage {
	case runRunning:
		h.Status = "running"
		if paused {
			h.Status = "paused"
		}
	case runDraining:
		h.Status = "draining"
	case runStopped:
		h.Err = runErr()
		h.Status = "stopped"
		if h.Err != nil {
			h.Status = "failed"
			h.Problems = append(h.Problems, fmt.Sprintf("Run returned an error: %v", h.Err))
		}
	}
	closed := true
	if stage >= runRunning && r != nil && r.br != nil {
		state, _, _ := r.br.status()
		h.Breaker = state.String()
		closed = state == breakerClosed
	}
	var nearCeiling []string
	if stage >= runRunning && stage < runStopped {
		h.Running, h.LongestHandler, nearCeiling = r.runningHandlers(now)
	}
	if stage != runRunning {
		h.Healthy = len(h.Problems) == 0
		return h
	}

	// Paused, a Consumer hears from SQS only while it renews running
	// handlers' leases: without any, silence is the pause, not a stall.
	last := max(p.receive.Load(), p.renewal.Load(), p.delete.Load(), p.resumed.Load())
	if broken.Is(broken.HealthIgnoresReceives) {
		last = max(p.renewal.Load(), p.delete.Load(), p.resumed.Load())
	}
	if idle := now.Sub(time.Unix(0, last)); closed && (!paused || h.Running > 0) && idle > lim.stall() && !r.owesNothing(now) {
		msg := fmt.Sprintf("no ReceiveMessage, visibility change or delete was answered by SQS for %v (limit %v)", idle.Round(time.Second), lim.stall())
		if e := p.recvErr.Load(); e != nil {
			msg += "; the latest receive failed: " + *e
		}
		h.Problems = append(h.Problems, msg)
	}
	if w := r.quota.warning(now); w != "" {
		h.Warnings = append(h.Warnings, w)
	}
	if lim := lim.handler(); lim > 0 && h.LongestHandler > lim {
		h.Problems = append(h.Problems, fmt.Sprintf("a handler has run for %v (limit %v)", h.LongestHandler.Round(time.Second), lim))
	}
	if len(nearCeiling) > 0 {
		h.Problems = append(h.Problems, fmt.Sprintf("%d running handler(s) near the lease ceiling, their messages about to be delivered again: %v", len(nearCeiling), nearCeiling))
	}
	h.Healthy = len(h.Problems) == 0
	h.Ready = h.Healthy && !paused
	return h
}

// owesNothing reports whether the run, holding messages, waits on SQS for
// nothing overdue: its latest receive did not fail (one in flight answers
// or fails within its wait and call timeout; a busy Consumer, its slots
// and read-ahead taken, sends none), and no held message's lease is
// overdue for a renewal (by a receive's call timeout). A busy Consumer
// whose leases are long renews only every third of them, and is silent
// meanwhile on purpose: that is no stall, whatever the stall limit.
func (r *run) owesNothing(now time.Time) bool {
	if r.fl.receiveFailing() {
		return false
	}
	held := r.reg.all()
	for _, d := range held {
		if d.lease.renewalOverdue(now, receiveCallTimeout) {
			return false
		}
	}
	return len(held) > 0
}

// healthLimits are the limits Health judges by: the settings', or their
// defaults, which follow the run's heartbeat and long-poll wait.
type healthLimits struct {
	s                  *settings
	member             *share.Member
	interval, pollWait time.Duration
}

// startup is WithStartupLimit's, or DefaultStartupLimit.
func (l healthLimits) startup() time.Duration {
	if l.s.startupLimit > 0 {
		return l.s.startupLimit
	}
	return DefaultStartupLimit
}

// stall is WithHealthLimits' stall limit, or its default: at least
// twice the heartbeat interval, since a Consumer busy with long handlers
// may only renew.
func (l healthLimits) stall() time.Duration {
	if l.s.stallLimit > 0 {
		return l.s.stallLimit
	}
	interval := l.interval
	if l.s.adaptiveMax > 0 {
		interval = max(interval, heartbeatInterval(l.s.adaptiveMax, 0))
	}
	limit := max(defaultStallLimit, 2*interval)
	if m := l.member; m != nil {
		// An idle queue in a fleet pauses between receives: a pause and
		// a long poll may pass without any answer.
		limit = max(limit, 2*(m.IdlePause+l.pollWait))
	}
	return limit
}

// handler is WithHealthLimits' handler limit, or its default (0:
// none).
func (l healthLimits) handler() time.Duration {
	switch {
	case l.s.handlerLimit > 0:
		return l.s.handlerLimit
	case l.s.handlerTimeout > 0:
		return l.s.handlerTimeout + handlerLimitSlack
	}
	return 0
}

// runningHandlers looks at the deliveries whose handler runs now: how
// many, how long the oldest has run, and the IDs of those whose lease is
// within its ceiling grace of the maximum lease duration, sorted.
func (r *run) runningHandlers(now time.Time) (running int, longest time.Duration, nearCeiling []string) {
	for _, d := range r.reg.all() {
		since, ok := d.running()
		if !ok {
			continue
		}
		running++
		if !since.IsZero() {
			longest = max(longest, now.Sub(since))
		}
		if d.lease.nearCeiling(now) {
			nearCeiling = append(nearCeiling, d.msg.ID)
		}
	}
	sort.Strings(nearCeiling)
	return running, longest, nearCeiling
}
