package explore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sqskit/sqsconsumer"
)

// call is one running handler call (a single message, or a batch's
// members) in the innermost layer or the recording middleware.
type call struct {
	p      *proc
	msgs   []*sqsconsumer.Message
	recs   []*msgRec
	start  time.Time
	expire []*time.Timer
}

// hasOuter reports whether the recording middleware wraps the handler:
// then it records the outcomes the Consumer sees.
func (r *run) hasOuter() bool { return r.sc.Middleware || r.sc.Idempotent != "" }

// begin records the start of a call in the innermost layer (the handler
// or the batch function) and checks what must hold at a start: Run has
// not returned, no message runs twice at once, a FIFO group runs one call
// at a time and in order, a group limit holds.
func (r *run) begin(p *proc, msgs []*sqsconsumer.Message, batch bool) *call {
	now := time.Now()
	c := &call{p: p, msgs: msgs, start: now}
	limit := 0
	if r.sc.Options.AdaptiveConc != nil && !batch {
		limit = p.c.Stats().ConcurrencyLimit
	}
	r.mu.Lock()
	p.running += len(msgs)
	if conc := r.sc.concurrency(); p.running > conc {
		r.violateLocked(chkLimit, "%s: %d handlers run at once at %v, above WithConcurrency(%d)", p.name(), p.running, r.at(now), conc)
	}
	if limit > 0 && p.running > limit && p.lastThrottle.Before(now) {
		// A handler seated under the limit starts at the same instant;
		// only a Throttled of that instant may have cut the limit since.
		r.violateLocked(chkLimit, "%s: a handler started at %v with %d running, above the adaptive concurrency limit %d (Stats.ConcurrencyLimit)", p.name(), r.at(now), p.running, limit)
	}
	if p.returned {
		r.violateLocked(chkLeak, "%s: a handler started at %v, after Run returned at %v", p.name(), r.at(now), r.at(p.retTime))
	}
	groupsHere := map[string]int{}
	for i, m := range msgs {
		rec := r.msgs[m.ID]
		c.recs = append(c.recs, rec)
		p.inner[m.ID]++
		if !r.hasOuter() && p.inner[m.ID] > 1 {
			r.violateLocked(chkTwice, "%s: message %s runs in two handlers at once (at %v)", p.name(), r.label(m.ID), r.at(now))
		}
		if rec == nil || rec.group == "" {
			continue
		}
		g := rec.group
		if r.fifo {
			if p.groupRunning[g] > 0 && groupsHere[g] == 0 {
				r.violateLocked(chkFIFO, "%s: message %s of group %s started at %v while another message of its group runs", p.name(), r.label(m.ID), g, r.at(now))
			}
			for _, e := range r.groups[g][:rec.groupPos] {
				if slices.ContainsFunc(msgs[:i], func(x *sqsconsumer.Message) bool { return x.ID == e.id }) {
					continue // earlier in this batch
				}
				st, ok := r.srv.Message(r.url, e.id)
				if ok && !st.Deleted && !st.MovedToDLQ {
					cur, _ := r.srv.Message(r.url, m.ID)
					why := ""
					if r.windingDownLocked(p, e.id) {
						why = " (a redelivery of the earlier was released while its previous delivery wound down)"
					}
					r.violateLocked(chkFIFO, "%s: message %s of group %s started at %v before the earlier %s left the queue (in flight %v, %d receives)%s\n    the earlier:\n%s\n    the later:\n%s",
						p.name(), r.label(m.ID), g, r.at(now), r.label(e.id), st.InFlight, len(st.Receives), why, r.storyLocked(p, st, nil), r.storyLocked(p, cur, nil))
					break
				}
			}
			for _, x := range msgs[:i] {
				if xr := r.msgs[x.ID]; xr != nil && xr.group == g && xr.groupPos > rec.groupPos {
					r.violateLocked(chkFIFO, "%s: a batch holds %s of group %s after the later %s", p.name(), r.label(m.ID), g, r.label(x.ID))
				}
			}
		}
		groupsHere[g]++
		p.groupRunning[g]++
		if lim := r.groupLimit(); lim > 0 && p.groupRunning[g] > lim {
			r.violateLocked(chkGroup, "%s: group %s runs %d messages at once (limit %d) at %v", p.name(), g, p.groupRunning[g], lim, r.at(now))
		}
	}
	if batch {
		r.inBatch[p.id]++
		p.batches++
	}
	p.handlers++
	r.mu.Unlock()
	if p.id == 0 {
		r.fireTrigger(trHandler)
		if batch {
			r.fireTrigger(trBatch)
		}
	}
	// Leases the server expires while the call runs.
	if r.sc.ExpireRate > 0 {
		for i, m := range msgs {
			idx := uint64(r.idx(c.recs[i]))
			if r.unit(tagExpire, idx, uint64(m.ReceiveCount), uint64(p.id)) >= r.sc.ExpireRate {
				continue
			}
			in := time.Duration(r.unit(tagExpire, idx, uint64(m.ReceiveCount), uint64(p.id), 1) * float64(2*m.Lease.Length()))
			id := m.ID
			c.expire = append(c.expire, time.AfterFunc(in, func() {
				st, ok := r.srv.Message(r.url, id)
				if !ok || !st.InFlight || len(st.Receives) == 0 {
					return
				}
				h := st.Receives[len(st.Receives)-1].ReceiptHandle
				r.mu.Lock()
				if hr := r.handles[h]; hr != nil {
					hr.faulted = true
				}
				r.mu.Unlock()
				if r.srv.Expire(r.url, id) == nil {
					r.saw("fault:expire")
				}
			}))
		}
	}
	return c
}

// end records the end of a call in the innermost layer; res holds each
// message's outcome (recorded as the Consumer's view unless the recording
// middleware records it).
func (r *run) end(c *call, res []result) {
	for _, t := range c.expire {
		t.Stop()
	}
	now := time.Now()
	p := c.p
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.returned {
		r.violateLocked(chkLeak, "%s: a handler returned at %v, after Run returned at %v (Run did not wait for it)", p.name(), r.at(now), r.at(p.retTime))
	}
	p.running -= len(c.msgs)
	for i, m := range c.msgs {
		p.inner[m.ID]--
		if rec := c.recs[i]; rec != nil && rec.group != "" {
			p.groupRunning[rec.group]--
		}
		if !r.hasOuter() {
			res[i].receiveCount = m.ReceiveCount
			r.recordLocked(p, m.ID, res[i])
		}
	}
	if len(c.msgs) > 0 && r.sc.Handler == "batch" {
		r.inBatch[p.id]--
	}
}

func (r *run) recordLocked(p *proc, id string, res result) {
	res.seq = r.seq.Add(1)
	res.at = time.Now()
	p.results[id] = append(p.results[id], res)
	if res.downstream {
		p.downstream = append(p.downstream, res.at)
	}
	if res.throttled {
		p.lastThrottle = res.at
	}
	r.seen["outcome:"+res.kind] = true
}

func (r *run) groupLimit() int {
	o := r.sc.Options
	if r.sc.Queue != queueGroups || o.GroupLimit == nil || (o.FairDispatch != nil && !*o.FairDispatch) {
		return 0
	}
	return *o.GroupLimit
}

func (r *run) idx(rec *msgRec) int {
	if rec == nil {
		return -1
	}
	return rec.idx
}

// label names a message by its index, for reports.
func (r *run) label(id string) string {
	if m := r.msgs[id]; m != nil {
		return fmt.Sprintf("#%d", m.idx)
	}
	return id
}

// labelOf is label, taking the run's lock.
func (r *run) labelOf(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.label(id)
}

// at is a time as virtual time since the start (0 for the zero time:
// never).
func (r *run) at(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(r.start)
}

// plan is what one message's call does.
type plan struct {
	kind   string
	work   time.Duration
	ignore time.Duration // how long it goes on after its context is cancelled
	retry  time.Duration
	cause  bool // on cancellation return context.Cause (else ctx.Err())
	extend time.Duration
}

func (r *run) planFor(p *proc, m *sqsconsumer.Message, rec *msgRec) plan {
	b := r.sc.Behaviour
	keys := []uint64{uint64(r.idx(rec)), uint64(m.ReceiveCount), uint64(p.id)}
	total := 0
	for _, k := range behaviours {
		total += b.Weights[k]
	}
	pl := plan{kind: bSucceed}
	if total > 0 {
		pick := int(r.draw(tagBehaviour, keys...) % uint64(total))
		for _, k := range behaviours {
			if pick < b.Weights[k] {
				pl.kind = k
				break
			}
			pick -= b.Weights[k]
		}
	}
	u := r.unit(tagWork, keys...)
	lease := m.Lease.Length()
	pl.work = time.Duration(u * float64(b.Work.D()))
	switch pl.kind {
	case bOverrun, bExtend:
		pl.work = lease + time.Duration(u*float64(2*lease))
	case bDrain:
		pl.work = max(b.Work.D(), lease) * time.Duration(2+int(u*3))
	case bIgnore:
		pl.work = max(b.Work.D(), lease) * time.Duration(1+int(u*3))
		pl.ignore = time.Duration(r.unit(tagWork, append(keys, 1)...) * float64(b.Ignore.D()))
	}
	pl.retry = time.Duration(r.unit(tagRetry, keys...) * float64(b.RetryMax.D())).Round(time.Second)
	if pl.kind == bThrottled {
		pl.retry = throttleDelay(b.Throttle, r.unit(tagRetry, append(keys, 2)...), r.unit(tagRetry, append(keys, 3)...))
	}
	pl.cause = r.unit(tagCancel, keys...) < 0.6
	if pl.kind == bExtend {
		pl.extend = max(time.Second, time.Duration(r.unit(tagRetry, append(keys, 1)...)*float64(2*lease)).Round(time.Second))
	}
	return pl
}

// waitDrain works for d, or until ctx ends or drain closes (drained);
// then, if ctx ended and ignore > 0, it goes on for up to ignore more (a
// handler that ignores its cancelled context). It reports whether ctx
// ended first, and whether it was ignored.
func (r *run) waitDrain(ctx context.Context, d, ignore time.Duration, drain <-chan struct{}) (cancelled, ignored, drained bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	begun := time.Now()
	select {
	case <-t.C:
		return false, false, false
	case <-drain:
		return false, false, true
	case <-r.abort:
		return true, false, false
	case <-ctx.Done():
	}
	if ignore <= 0 {
		return true, false, false
	}
	rest := min(d-time.Since(begun), ignore)
	t2 := time.NewTimer(max(rest, 0))
	defer t2.Stop()
	select {
	case <-t2.C:
	case <-r.abort:
	}
	return true, true, false
}

// throttleDelay is the delay a Throttled says, of the kind drawn (u, v:
// uniform draws).
func throttleDelay(kind string, u, v float64) time.Duration {
	if kind == "mixed" {
		kind = []string{"zero", "sub-second", "seconds", "minutes"}[int(v*4)]
	}
	switch kind {
	case "sub-second":
		return 100*time.Millisecond + time.Duration(u*float64(800*time.Millisecond)).Round(time.Millisecond)
	case "seconds":
		return time.Second + time.Duration(u*float64(29*time.Second)).Round(time.Millisecond)
	case "minutes":
		return time.Minute + time.Duration(u*float64(4*time.Minute)).Round(time.Second)
	}
	return 0
}

var errDrained = errors.New("the explorer's handler saw the drain and checkpointed")

// errDownstream is what a throttling downstream said.
var errDownstream = errors.New("the explorer's downstream: 429 Too Many Requests")

// drained records that p's handler of message id returned RetryAfter(err,
// 0) at the drain: its message must be visible at once.
func (r *run) drained(p *proc, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.drainedAt[id] = r.seq.Add(1)
	r.seen["did:drained"] = true
}

var errExplorer = errors.New("the explorer's handler failed")

// handleOne is the single-message handler.
func (r *run) handleOne(p *proc, ctx context.Context, m *sqsconsumer.Message) (err error) {
	c := r.begin(p, []*sqsconsumer.Message{m}, false)
	res := result{}
	panicked := true
	defer func() {
		if panicked {
			res = r.panicOutcome(ctx)
		}
		r.end(c, []result{res})
	}()
	pl := r.planFor(p, m, c.recs[0])
	r.saw("did:" + pl.kind)
	if pl.kind == bExtend {
		if e := m.Lease.Extend(ctx, pl.extend); e == nil {
			r.saw("did:extended-its-lease")
		}
	}
	var drain <-chan struct{}
	if pl.kind == bDrain {
		drain = sqsconsumer.Draining(ctx)
	}
	cancelled, ignored, drained := r.waitDrain(ctx, pl.work, pl.ignore, drain)
	res.ignored = ignored
	if ignored {
		r.saw("did:ignored-its-cancelled-context")
	}
	if drained {
		r.drained(p, m.ID)
		err = sqsconsumer.RetryAfter(errDrained, 0)
		res = outcomeOf(ctx, err, false)
		res.kind = "retry"
		panicked = false
		return err
	}
	if cancelled {
		err = context.Cause(ctx)
		if !pl.cause || err == nil {
			err = ctx.Err()
		}
		if err == nil {
			err = errors.New("the explorer aborted the handler")
		}
		res = outcomeOf(ctx, err, ignored)
		panicked = false
		return err
	}
	switch pl.kind {
	case bFail:
		err = errExplorer
	case bPermanent:
		err = sqsconsumer.Permanent(errExplorer)
	case bRetry:
		var inner error
		if r.unit(tagRetry, uint64(r.idx(c.recs[0])), 7) < 0.7 {
			inner = errExplorer
		}
		err = sqsconsumer.RetryAfter(inner, pl.retry)
	case bPanic:
		panic(fmt.Sprintf("the explorer's handler panics on %s", r.labelOf(m.ID)))
	case bRelease:
		if e := m.Lease.Release(context.Background(), pl.retry); e != nil {
			err = e
		} else {
			r.ownRelease(p, m.ID, pl.retry)
		}
	case bThrottled:
		err = sqsconsumer.Throttled(errDownstream, pl.retry)
	case bNeutral:
		err = sqsconsumer.Neutral(errExplorer)
	case bRetryNil:
		err = sqsconsumer.RetryAfter(nil, pl.retry)
	}
	res = outcomeOf(ctx, err, ignored)
	if pl.kind == bRelease && err == nil {
		res.kind, res.retry = "released", pl.retry
	}
	if pl.kind == bRetry {
		res.retry = pl.retry
	}
	panicked = false
	return err
}

// handleBatch is the Batch handler's function.
func (r *run) handleBatch(p *proc, ctx context.Context, msgs []*sqsconsumer.Message) error {
	c := r.begin(p, msgs, true)
	res := make([]result, len(msgs))
	done := false
	defer func() {
		if !done { // panicked: every member failed
			for i := range res {
				res[i] = r.panicOutcome(ctx)
			}
		}
		r.end(c, res)
	}()
	plans := make([]plan, len(msgs))
	work, ignore := time.Duration(0), time.Duration(0)
	for i, m := range msgs {
		plans[i] = r.planFor(p, m, c.recs[i])
		r.saw("did:" + plans[i].kind)
		work, ignore = max(work, plans[i].work), max(ignore, plans[i].ignore)
		if plans[i].kind == bExtend {
			_ = m.Lease.Extend(ctx, plans[i].extend)
		}
	}
	var drain <-chan struct{}
	if slices.ContainsFunc(plans, func(pl plan) bool { return pl.kind == bDrain }) {
		drain = sqsconsumer.Draining(ctx)
	}
	cancelled, ignored, drained := r.waitDrain(ctx, work, ignore, drain)
	if ignored {
		r.saw("did:ignored-its-cancelled-context")
	}
	if drained {
		err := sqsconsumer.RetryAfter(errDrained, 0)
		for i, m := range msgs {
			r.drained(p, m.ID)
			res[i] = outcomeOf(ctx, err, false)
			res[i].kind = "retry"
		}
		done = true
		return err
	}
	if cancelled {
		err := context.Cause(ctx)
		if !plans[0].cause || err == nil {
			err = ctx.Err()
		}
		if err == nil {
			err = errors.New("the explorer aborted the batch")
		}
		for i := range res {
			res[i] = outcomeOf(ctx, err, ignored)
		}
		done = true
		return err
	}
	failures := sqsconsumer.BatchFailures{}
	allFail := true
	for i, m := range msgs {
		pl := plans[i]
		var err error
		switch pl.kind {
		case bFail:
			err = errExplorer
		case bPermanent:
			err = sqsconsumer.Permanent(errExplorer)
		case bRetry:
			err = sqsconsumer.RetryAfter(errExplorer, pl.retry)
		case bPanic:
			if r.unit(tagBatchPanic, uint64(r.idx(c.recs[i])), uint64(m.ReceiveCount)) < 0.5 {
				panic(fmt.Sprintf("the explorer's batch panics on %s", r.labelOf(m.ID)))
			}
			err = errExplorer
		case bRelease:
			if e := m.Lease.Release(context.Background(), pl.retry); e != nil {
				err = e
			} else {
				r.ownRelease(p, m.ID, pl.retry)
			}
		case bThrottled:
			err = sqsconsumer.Throttled(errDownstream, pl.retry)
		case bNeutral:
			err = sqsconsumer.Neutral(errExplorer)
		case bRetryNil:
			err = sqsconsumer.RetryAfter(nil, pl.retry)
		}
		res[i] = outcomeOf(ctx, err, ignored)
		if pl.kind == bRelease && err == nil {
			res[i].kind, res[i].retry = "released", pl.retry
		}
		if err != nil {
			failures[m.ID] = err
		} else {
			allFail = false
		}
	}
	done = true
	if len(failures) == 0 {
		return nil
	}
	if allFail && r.unit(tagBatchPanic, uint64(r.idx(c.recs[0])), 9) < 0.3 {
		// The whole batch failed; every member gets the error.
		for i := range res {
			res[i] = outcomeOf(ctx, errExplorer, ignored)
		}
		return errExplorer
	}
	return failures
}

// recorder is the outermost middleware when the scenario has any: it
// records the outcome the Consumer sees for each message, and checks that
// no message runs in two chains of one process at once.
func (r *run) recorder(p *proc) sqsconsumer.Middleware {
	return func(next sqsconsumer.Handler) sqsconsumer.Handler {
		return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) (err error) {
			now := time.Now()
			r.mu.Lock()
			p.outer[m.ID]++
			if p.outer[m.ID] > 1 {
				r.violateLocked(chkTwice, "%s: message %s runs in two handlers at once (at %v)", p.name(), r.label(m.ID), r.at(now))
			}
			r.mu.Unlock()
			panicked := true
			defer func() {
				r.mu.Lock()
				defer r.mu.Unlock()
				p.outer[m.ID]--
				if panicked {
					r.recordLocked(p, m.ID, r.panicOutcome(ctx))
				}
			}()
			err = next.HandleMessage(ctx, m)
			panicked = false
			res := outcomeOf(ctx, err, false)
			res.receiveCount = m.ReceiveCount
			r.mu.Lock()
			r.recordLocked(p, m.ID, res)
			r.mu.Unlock()
			return err
		})
	}
}

// panicOutcome is the outcome of a handler that panicked: what the
// scenario's panic policy (WithPanicPolicy) makes of it, or a failure.
func (r *run) panicOutcome(ctx context.Context) result {
	res := result{kind: "panic", downstream: true, shutdown: isShutdown(ctx)}
	if pp := r.sc.Options.PanicPolicy; pp != nil && *pp == "permanent" {
		res.kind, res.downstream = "permanent", false
	}
	return res
}

func isShutdown(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), sqsconsumer.ErrShutdown)
}

// outcomeOf sorts an outcome: its kind, whether the shutdown had cancelled
// its context, and whether it is a failure of the downstream (what a
// breaker may count: not a Permanent error, an idempotency duplicate in
// progress, an earlier FIFO failure, Throttled, Neutral, RetryAfter(nil),
// or a failure caused by a lost, expired or ceilinged lease or by the
// shutdown), in the order the library sorts them.
func outcomeOf(ctx context.Context, err error, ignored bool) result {
	res := result{ignored: ignored, shutdown: isShutdown(ctx)}
	cause := context.Cause(ctx)
	if cause != nil {
		res.cause = cause.Error()
	}
	res.leaseEnded = errors.Is(cause, sqsconsumer.ErrLeaseLost) || errors.Is(cause, sqsconsumer.ErrLeaseExpired) ||
		errors.Is(cause, sqsconsumer.ErrLeaseCeiling)
	leaseEnded := res.leaseEnded || errors.Is(cause, sqsconsumer.ErrShutdown)
	if err != nil {
		res.asked, res.hasAsked = sqsconsumer.RetryDelay(err)
	}
	switch {
	case err == nil:
		res.kind = "success"
	case sqsconsumer.IsPermanent(err):
		res.kind = "permanent"
	case errors.Is(err, sqsconsumer.ErrInProgress):
		res.kind = "inprogress"
	case strings.Contains(err.Error(), "an earlier message of its FIFO group failed"):
		res.kind = "earlier-failed"
	case errors.Is(err, sqsconsumer.ErrShutdown):
		res.kind, res.shutdown = "cancelled", true
	case ctx.Err() != nil && leaseEnded:
		res.kind = "cancelled"
	case sqsconsumer.IsNeutral(err):
		res.kind = "neutral"
	case sqsconsumer.IsThrottled(err):
		res.kind = "throttled"
		res.throttled = !res.shutdown && !res.leaseEnded
	case strings.HasPrefix(err.Error(), "retry requested (retry after"):
		res.kind = "retry-nil" // RetryAfter(nil, d): no failure
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, cause)):
		res.kind, res.downstream = "cancelled", true // a handler timeout, say
	default:
		var pe *sqsconsumer.PanicError
		if errors.As(err, &pe) {
			res.kind = "panic"
		} else {
			res.kind = "fail"
		}
		res.downstream = true
	}
	if res.kind == "cancelled" && leaseEnded {
		res.downstream = false
	}
	return res
}

// ownRelease records that p's handler released message id itself, for
// after.
func (r *run) ownRelease(p *proc, id string, after time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.ownReleases[id] = append(p.ownReleases[id], after)
	r.seen["did:released-its-lease"] = true
}
