package explore

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// checkReturn runs on p's Run goroutine as Run returns: how long it took,
// what it returned, the Stats, and what it left hidden.
func (r *run) checkReturn(p *proc) {
	st := p.c.Stats()
	set := p.c.Settings()
	h := p.c.Health()
	msgs := r.srv.Messages(r.url)
	r.mu.Lock()
	defer r.mu.Unlock()
	now := p.retTime
	r.checkAfterRunLocked(p, st, set, h)
	if p.cancelled {
		if took, bound := now.Sub(p.cancelAt), r.returnBound(); took > bound {
			// Whether it held nothing at some instant after the
			// cancellation, within the bound: the shutdown's wait ended
			// then, and what Run waited for after it was not bounded.
			held, idleAt := 0, time.Time{}
			for _, e := range p.events {
				if e.at.After(p.cancelAt) && idleAt.IsZero() && held == 0 {
					idleAt = p.cancelAt // it held nothing when the shutdown began
				}
				switch e.kind {
				case sqsconsumer.EventReceived:
					held++
				case sqsconsumer.EventDone:
					held--
				}
				if held == 0 && idleAt.IsZero() && !e.at.Before(p.cancelAt) && !e.at.After(p.cancelAt.Add(bound)) {
					idleAt = e.at
				}
			}
			if held == 0 && idleAt.IsZero() {
				idleAt = p.cancelAt // nothing at all after the cancellation
			}
			idle := ""
			if !idleAt.IsZero() {
				idle = fmt.Sprintf(" (it held nothing at %v, within the bound: the shutdown's wait ended then, and what Run waited for after it was not bounded)", r.at(idleAt))
			}
			r.violateLocked(chkReturn, "%s: Run returned %v after its context was cancelled, bound %v (shutdown timeout %v + 5s + ignore %v)%s; its last lines:\n%s",
				p.name(), took, bound, r.sc.shutdownTimeout(), bound-r.sc.shutdownTimeout()-5*time.Second, idle, r.tailLocked(p, 40))
		}
	}
	// A Run cancelled before it read the queue, or whose read was
	// faulted, never got to judge the queue.
	noDLQ := r.sc.Options.RequireDLQ != nil && *r.sc.Options.RequireDLQ && r.sc.Options.DLQ == nil &&
		!p.permanentFault && !(p.cancelled && p.receivesSent == 0)
	refusedForDLQ := r.sc.Options.RequireDLQ != nil && *r.sc.Options.RequireDLQ && r.sc.Options.DLQ == nil &&
		errors.Is(p.runErr, sqsconsumer.ErrInvalidOption) && strings.Contains(p.runErr.Error(), "WithRequireDeadLetterQueue")
	switch c, ok := conflicts[r.sc.Conflict]; {
	case ok && c.atRun && p.runErr == nil && !p.queueRead:
		// Cancelled before it read the queue: nothing to judge.
	case ok && c.atRun:
		// New let through what only the queue tells: Run refuses it,
		// before its first receive.
		r.judgeConflictLocked("Run", p.runErr)
		if p.runErr != nil && p.receivesSent > 0 {
			r.violateLocked(chkConflict, "%s: Run refused %s only after %d receives", p.name(), r.sc.Conflict, p.receivesSent)
		}
	case refusedForDLQ:
		r.seen["refused-at-run:require-dlq"] = true
	case noDLQ && p.runErr == nil:
		r.violateLocked(chkConflict, "%s: Run accepted a queue without a dead-letter queue under WithRequireDeadLetterQueue", p.name())
	case noDLQ && !errors.Is(p.runErr, sqsconsumer.ErrInvalidOption):
		r.violateLocked(chkConflict, "%s: under WithRequireDeadLetterQueue Run refused a queue without a dead-letter queue with %v, which does not wrap ErrInvalidOption", p.name(), p.runErr)
	case noDLQ:
		r.violateLocked(chkConflict, "%s: under WithRequireDeadLetterQueue Run refused a queue without a dead-letter queue with %v, which does not name the option", p.name(), p.runErr)
	case p.runErr != nil && !p.permanentFault:
		r.violateLocked(chkRunErr, "%s: Run returned %v with no permanent error injected", p.name(), p.runErr)
	case p.runErr == nil && !p.cancelled:
		r.violateLocked(chkRunErr, "%s: Run returned nil at %v though its context was not cancelled", p.name(), r.at(now))
	}
	if p.runErr != nil {
		r.seen["run:error"] = true
	}
	for id, n := range p.inner {
		if n > 0 {
			r.violateLocked(chkLeak, "%s: Run returned at %v while the handler of %s still runs", p.name(), r.at(now), r.label(id))
		}
	}
	r.checkStatsLocked(p, st)
	r.checkStrandedLocked(p, msgs, now)
}

// checkAfterRunLocked: what Run returned, against the first contact
// drawn; and, once Run has returned, its Health, its byte bound, its
// concurrency limit and its Settings.
func (r *run) checkAfterRunLocked(p *proc, st sqsconsumer.Stats, set sqsconsumer.Settings, h sqsconsumer.Health) {
	if fc := firstContactOf(r.sc.FirstContact); fc != nil && fc.fatal && !p.firstDeciding.IsZero() {
		// A wrong endpoint: Run fails at once, naming the queue.
		bound := time.Second + 2*r.sc.RTT.D()
		if r.sc.SDKRetries {
			bound = time.Minute // the SDK's own retries of what it takes for a connection error
		}
		took := p.retTime.Sub(p.firstDeciding)
		cancelledFirst := p.cancelled && !p.cancelAt.After(p.firstDeciding.Add(bound))
		switch {
		case p.runErr == nil && !cancelledFirst:
			r.violateLocked(chkFirst, "%s: the first contact failed with %s, which cannot succeed, but Run went on and returned nil %v later", p.name(), fc.name, took)
		case p.runErr != nil && !strings.Contains(p.runErr.Error(), "queue "+r.url):
			r.violateLocked(chkFirst, "%s: the first contact failed with %s; Run's error does not name the queue: %v", p.name(), fc.name, p.runErr)
		case p.runErr != nil && took > bound && !cancelledFirst:
			r.violateLocked(chkFirst, "%s: the first contact failed with %s, which cannot succeed; Run failed only %v later (bound %v): %v", p.name(), fc.name, took, bound, p.runErr)
		case p.runErr != nil:
			r.seen["first-contact:failed-run"] = true
		}
	}
	switch {
	case p.runErr != nil && (h.Status != "failed" || h.Healthy):
		r.violateLocked(chkHealth, "%s: Run returned %v, but Health says %q, healthy %v", p.name(), p.runErr, h.Status, h.Healthy)
	case p.runErr == nil && (h.Status != "stopped" || !h.Healthy):
		r.violateLocked(chkHealth, "%s: Run returned nil, but Health says %q, healthy %v %q", p.name(), h.Status, h.Healthy, h.Problems)
	}
	if h.Ready {
		r.violateLocked(chkHealth, "%s: Health is ready after Run returned", p.name())
	}
	// The byte bound.
	b := st.Bytes
	want := int64(sqsconsumer.DefaultMaxBytes)
	if v := r.sc.Options.MaxBytes; v != nil {
		want = *v
	}
	if b.Max != want {
		r.violateLocked(chkBytes, "%s: Stats.Bytes.Max = %d, WithMaxBytes gave %d", p.name(), b.Max, want)
	}
	if b.Held != 0 {
		r.violateLocked(chkBytes, "%s: after Run returned Stats.Bytes.Held = %d, not 0", p.name(), b.Held)
	}
	if bound := r.byteBoundLocked(p, b.Peak); p.minMsg > 0 && b.Peak > bound {
		r.violateLocked(chkBytes, "%s: Stats.Bytes.Peak = %d, above the bound %d allows with messages of %d to %d bytes (%d)", p.name(), b.Peak, b.Max, p.minMsg, p.maxMsg, bound)
	}
	if p.minMsg > 0 && b.Peak > b.Max {
		r.seen["bytes:above-the-bound"] = true
	}
	if b.Limited {
		r.seen["bytes:limited"] = true
	}
	r.checkLimitLocked(p, st)
	if p.queueRead && p.receivesSent > 0 {
		// Run read the queue and ran (a refusal at Run's setup leaves
		// the queue's values pending).
		r.checkSettingsLocked(p, set)
	}
}

// byteBoundLocked is the most bytes p may hold when it holds held (Stats
// .Bytes): the bound, and as much more as the spread of its messages'
// sizes allows (a receive is sized at an estimate between them), or one
// message alone, however large.
func (r *run) byteBoundLocked(p *proc, held int64) int64 {
	n := int64(sqsconsumer.DefaultMaxBytes)
	if v := r.sc.Options.MaxBytes; v != nil {
		n = *v
	}
	if p.minMsg == 0 {
		return n
	}
	return max(n+(p.maxMsg-p.minMsg)*(held/p.minMsg+1), p.maxMsg)
}

// checkLimitLocked: Stats.ConcurrencyLimit stays within
// WithAdaptiveConcurrency's range, and is the concurrency without it.
func (r *run) checkLimitLocked(p *proc, st sqsconsumer.Stats) {
	conc := r.sc.concurrency()
	if st.Concurrency != conc {
		r.violateLocked(chkLimit, "%s: Stats.Concurrency = %d, WithConcurrency gave %d", p.name(), st.Concurrency, conc)
	}
	if ac := r.sc.Options.AdaptiveConc; ac != nil {
		if st.ConcurrencyLimit < ac[0] || st.ConcurrencyLimit > conc {
			r.violateLocked(chkLimit, "%s: Stats.ConcurrencyLimit = %d, outside [Floor %d, WithConcurrency %d]", p.name(), st.ConcurrencyLimit, ac[0], conc)
		}
		if st.ConcurrencyLimit < conc {
			r.seen["adaptive-concurrency:below-concurrency"] = true
		}
	} else if st.ConcurrencyLimit != conc {
		r.violateLocked(chkLimit, "%s: Stats.ConcurrencyLimit = %d without WithAdaptiveConcurrency, not WithConcurrency(%d)", p.name(), st.ConcurrencyLimit, conc)
	}
	if st.Throttled > 0 {
		r.seen["throttled:counted"] = true
	}
}

// checkSettingsLocked: once Run has read the queue, Settings holds every
// value final (Pending empty), and each option the scenario gave (through
// bundles too: the later value wins) shows as given.
func (r *run) checkSettingsLocked(p *proc, set sqsconsumer.Settings) {
	o := r.sc.Options
	var bad []string
	expect := func(name string, got, want any) {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			bad = append(bad, fmt.Sprintf("%s = %v, want %v", name, got, want))
		}
	}
	if len(set.Pending) > 0 {
		bad = append(bad, fmt.Sprintf("Pending %v after Run read the queue", set.Pending))
	}
	expect("Concurrency", set.Concurrency, r.sc.concurrency())
	if v := o.ReceiveSize; v != nil {
		expect("BatchSize", set.BatchSize, *v)
	}
	if v := o.ReadAhead; v != nil {
		expect("MaxReadAhead", set.MaxReadAhead, *v)
	}
	if v := o.Pollers; v != nil {
		expect("Pollers", set.Pollers, *v)
	}
	expect("PollersAdaptive", set.PollersAdaptive, o.Pollers == nil)
	switch {
	case o.Visibility != nil:
		expect("VisibilityTimeout", set.VisibilityTimeout, o.Visibility.D())
		expect("VisibilitySource", set.VisibilitySource, "option")
	case o.Adaptive == nil:
		expect("VisibilityTimeout", set.VisibilityTimeout, time.Duration(r.sc.QueueVisibility)*time.Second)
		expect("VisibilitySource", set.VisibilitySource, "queue")
	}
	if v := o.Heartbeat; v != nil {
		expect("HeartbeatInterval", set.HeartbeatInterval, v.D())
	}
	if v := o.MaxLease; v != nil {
		expect("MaxLeaseDuration", set.MaxLeaseDuration, v.D())
	}
	if v := o.CeilingGrace; v != nil {
		expect("CeilingGrace", set.CeilingGrace, v.D())
	}
	if v := o.Adaptive; v != nil {
		expect("AdaptiveVisibility", [2]time.Duration{set.AdaptiveVisibilityMin, set.AdaptiveVisibilityMax}, [2]time.Duration{v[0].D(), v[1].D()})
	}
	if v := o.Rate; v != nil {
		expect("Rate", [2]any{set.RateLimit, set.RateBurst}, [2]any{v.Limit, v.Burst})
	}
	if v := o.GroupLimit; v != nil {
		expect("GroupLimit", set.GroupLimit, *v)
	}
	if v := o.FairDispatch; v != nil {
		expect("FairDispatch", set.FairDispatch, *v)
	}
	if v := o.HandlerTimeout; v != nil {
		expect("HandlerTimeout", set.HandlerTimeout, v.D())
	}
	expect("ShutdownTimeout", set.ShutdownTimeout, r.sc.shutdownTimeout())
	want := int64(sqsconsumer.DefaultMaxBytes)
	if v := o.MaxBytes; v != nil {
		want = *v
	}
	expect("MaxBytes", set.MaxBytes, want)
	if v := o.AdaptiveConc; v != nil {
		if set.AdaptiveConcurrency == nil {
			bad = append(bad, "AdaptiveConcurrency nil")
		} else {
			expect("AdaptiveConcurrency.Floor", set.AdaptiveConcurrency.Floor, v[0])
			if v[1] > 0 {
				expect("AdaptiveConcurrency.Initial", set.AdaptiveConcurrency.Initial, v[1])
			}
		}
	} else if set.AdaptiveConcurrency != nil {
		bad = append(bad, fmt.Sprintf("AdaptiveConcurrency %+v without the option", *set.AdaptiveConcurrency))
	}
	if v := o.Breaker; v != nil {
		if set.Breaker == nil {
			bad = append(bad, "Breaker nil")
		} else {
			expect("Breaker", [4]any{set.Breaker.Failures, set.Breaker.CallFailures, set.Breaker.Pause, set.Breaker.MaxPause},
				[4]any{v.Failures, v.CallFailures, v.Pause.D(), v.MaxPause.D()})
		}
	} else if set.Breaker != nil {
		bad = append(bad, "Breaker set without the option")
	}
	expect("RequireDeadLetterQueue", set.RequireDeadLetterQueue, o.RequireDLQ != nil && *o.RequireDLQ)
	expect("CancelIdlePollsAtShutdown", set.CancelIdlePollsAtShutdown, o.CancelIdlePolls != nil && *o.CancelIdlePolls)
	if d := o.DLQ; d != nil && d.Kind == "option" {
		expect("DeadLetterQueue", set.DeadLetterQueue, r.dlqURL)
		expect("DeadLetterSource", set.DeadLetterSource, "option")
	}
	if v := o.Backoff; v != nil {
		expect("Backoff", set.Backoff, "set")
	}
	if o.PanicPolicy != nil {
		expect("PanicPolicy", set.PanicPolicy, "set")
	}
	if v := o.StartupLimit; v != nil {
		expect("StartupLimit", set.StartupLimit, v.D())
	}
	if v := o.HealthLimits; v != nil && v[0] > 0 {
		expect("StallLimit", set.StallLimit, v[0].D())
	}
	if v := o.Scaling; v != nil && set.Scaling != nil {
		expect("Scaling.Target", set.Scaling.Target, v.Target.D())
	} else if v != nil {
		bad = append(bad, "Scaling nil")
	}
	if len(bad) > 0 {
		r.violateLocked(chkSettings, "%s: after Run, Settings disagrees with the options given (bundle %d): %s", p.name(), r.sc.Bundle, strings.Join(bad, "; "))
	}
	if r.sc.Bundle > 0 {
		r.seen["settings:bundle-checked"] = true
	}
}

// checkStatsLocked: the Stats agree with the events seen, and balance once
// Run has returned.
func (r *run) checkStatsLocked(p *proc, st sqsconsumer.Stats) {
	n := map[sqsconsumer.EventKind]int64{}
	for _, e := range p.events {
		n[e.kind]++
	}
	for _, c := range []struct {
		name string
		got  int64
		kind sqsconsumer.EventKind
	}{
		{"Received", st.Received, sqsconsumer.EventReceived}, {"Adopted", st.Adopted, sqsconsumer.EventAdopted},
		{"Started", st.Started, sqsconsumer.EventStarted}, {"Succeeded", st.Succeeded, sqsconsumer.EventSucceeded},
		{"Failed", st.Failed, sqsconsumer.EventFailed}, {"Deleted", st.Deleted, sqsconsumer.EventDeleted},
		{"Released", st.Released, sqsconsumer.EventReleased}, {"Renewals", st.Renewals, sqsconsumer.EventRenewed},
		{"RenewalFailures", st.RenewalFailures, sqsconsumer.EventRenewalFailed}, {"LeasesLost", st.LeasesLost, sqsconsumer.EventLeaseLost},
		{"LeasesExpired", st.LeasesExpired, sqsconsumer.EventLeaseExpired}, {"CeilingHits", st.CeilingHits, sqsconsumer.EventCeilingReached},
	} {
		if c.got != n[c.kind] {
			r.violateLocked(chkStats, "%s: Stats.%s = %d, the observer saw %d %s events", p.name(), c.name, c.got, n[c.kind], c.kind)
		}
	}
	if st.Received != st.Processed+st.ReleasedUnstarted {
		r.violateLocked(chkStats, "%s: after Run, Stats.Received %d != Processed %d + ReleasedUnstarted %d", p.name(), st.Received, st.Processed, st.ReleasedUnstarted)
	}
	if st.Started != st.Succeeded+st.Failed {
		r.violateLocked(chkStats, "%s: after Run, Stats.Started %d != Succeeded %d + Failed %d", p.name(), st.Started, st.Succeeded, st.Failed)
	}
	if d := n[sqsconsumer.EventDone]; d != st.Received {
		r.violateLocked(chkStats, "%s: %d EventDone for %d EventReceived", p.name(), d, st.Received)
	}
	if st.Running != 0 || st.Waiting != 0 || st.Asked != 0 {
		r.violateLocked(chkStats, "%s: after Run, Stats holds running %d, waiting %d, asked %d", p.name(), st.Running, st.Waiting, st.Asked)
	}
	if !r.sc.SDKRetries {
		for _, c := range []struct {
			name   string
			stats  int64
			action string
		}{
			{"Receive", st.Calls.Receive, "ReceiveMessage"}, {"DeleteBatch", st.Calls.DeleteBatch, "DeleteMessageBatch"},
			{"Delete", st.Calls.Delete, "DeleteMessage"}, {"ChangeVisibilityBatch", st.Calls.ChangeVisibilityBatch, "ChangeMessageVisibilityBatch"},
			{"ChangeVisibility", st.Calls.ChangeVisibility, "ChangeMessageVisibility"}, {"SendMessage", st.Calls.SendMessage, "SendMessage"},
			{"GetQueueAttributes", st.Calls.GetQueueAttributes, "GetQueueAttributes"},
		} {
			if w := int64(p.calls[c.action]); w > c.stats {
				r.violateLocked(chkStats, "%s: Stats.Calls.%s = %d, but the process made %d %s calls", p.name(), c.name, c.stats, w, c.action)
			}
		}
	}
	// Each delivery ends once; each started handler ends once.
	open := map[string]int{}
	started := map[string]int{}
	for _, e := range p.events {
		switch e.kind {
		case sqsconsumer.EventReceived:
			open[e.msg]++
		case sqsconsumer.EventDone:
			open[e.msg]--
		case sqsconsumer.EventStarted:
			started[e.msg]++
		case sqsconsumer.EventSucceeded, sqsconsumer.EventFailed:
			started[e.msg]--
		}
	}
	for id, k := range open {
		if k != 0 {
			r.violateLocked(chkStats, "%s: message %s has %+d EventReceived without EventDone", p.name(), r.label(id), k)
		}
	}
	for id, k := range started {
		if k != 0 {
			r.violateLocked(chkStats, "%s: message %s has %+d EventStarted without EventSucceeded or EventFailed", p.name(), r.label(id), k)
		}
	}
}

// checkStrandedLocked: when p's Run returns (now), no message whose
// latest receive was p's is hidden beyond a second, unless it waits out a
// retry visibility its handler asked for, or an injected fault, a lost
// answer or a lost lease explains it.
func (r *run) checkStrandedLocked(p *proc, msgs []sqstest.MessageState, now time.Time) {
	stopAt := p.cancelAt // the shutdown began: Run's context cancelled, or a permanent receive error
	if !p.cancelled || !p.permanentAt.IsZero() && p.permanentAt.Before(stopAt) {
		stopAt = p.permanentAt
	}
	stopped := !stopAt.IsZero()
	hardStop := stopAt.Add(r.sc.shutdownTimeout() + 5*time.Second)
	for _, st := range msgs {
		if !st.InFlight || !st.VisibleAt.After(now.Add(time.Second)) || len(st.Receives) == 0 {
			continue
		}
		last := st.Receives[len(st.Receives)-1]
		h := r.handles[last.ReceiptHandle]
		if h == nil {
			continue // another process's receive, still in flight: p's calls have all returned
		}
		if h.proc != p.id || h.lost || h.faulted {
			continue
		}
		if r.leaseEndedLocked(p, st.ID, h.seq) || r.windingDownLocked(p, st.ID) {
			continue
		}
		got := slices.ContainsFunc(p.events, func(e obs) bool {
			return e.handle == h.handle && (e.kind == sqsconsumer.EventReceived || e.kind == sqsconsumer.EventAdopted)
		})
		if !got && stopped && (r.sc.Options.CancelIdlePolls != nil || !h.at.Before(hardStop)) {
			continue // an idle poll the shutdown cancelled, or an answer after the hard stop
		}
		// The visibility change that hides it, if any.
		var hide *sqstest.VisibilityChange
		for i := range st.VisibilityChanges {
			c := &st.VisibilityChanges[i]
			if c.ReceiptHandle == h.handle && c.Err == "" && !c.At.Before(last.At) {
				hide = c
			}
		}
		hidden := st.VisibleAt.Sub(now).Round(time.Millisecond)
		story := r.storyLocked(p, st, h)
		if stopped && slices.ContainsFunc(p.logs, func(l logRec) bool {
			return l.attrs["message_id"] == st.ID && strings.HasPrefix(l.msg, "sqsconsumer: could not") && strings.Contains(l.attrs["error"], "context canceled") &&
				!l.at.Before(hardStop)
		}) {
			// Its settling call was cut by the hard stop: it waited in
			// the Consumer (no fault touched its handle) until then.
			story = "    (its settling call waited until the hard stop)\n" + story
		}
		if !got {
			r.violateLocked(chkStranded, "%s: message %s hidden %v after Run returned: a receive answer reached the process, but the Consumer never reported it received\n%s", p.name(), r.label(st.ID), hidden, story)
			continue
		}
		// The delivery began at its receive; a handle adopted later
		// belongs to the same delivery.
		from := h.seq
		if slices.ContainsFunc(p.events, func(e obs) bool { return e.kind == sqsconsumer.EventAdopted && e.handle == h.handle }) {
			for _, e := range p.events {
				if e.msg == st.ID && e.kind == sqsconsumer.EventReceived && e.seq < h.seq {
					from = e.seq
				}
			}
		}
		res := lastResultAfter(p.results[st.ID], from)
		if res == nil {
			// A Batch member that failed before its batch was sent (its
			// handler timeout ran out): the Consumer's own outcome.
			for _, e := range p.events {
				if e.msg == st.ID && e.seq > from && e.kind == sqsconsumer.EventFailed {
					res = &result{seq: e.seq, at: e.at, kind: "fail", shutdown: errors.Is(e.err, sqsconsumer.ErrShutdown)}
				}
			}
		}
		if res != nil && stopped && res.at.After(hardStop.Add(-time.Second)) {
			r.seen["shutdown:late-handler"] = true
			r.violateLocked(chkStranded, "%s: message %s hidden %v after Run returned: its handler returned %v after the hard stop (it ignored its cancelled context), and its message was not released\n%s",
				p.name(), r.label(st.ID), hidden, res.at.Sub(hardStop), story)
			continue
		}
		if hide != nil && slices.ContainsFunc(p.ownReleases[st.ID], func(d time.Duration) bool { return hide.Timeout <= d }) {
			continue // its handler released it itself for that long (or less: the ceiling clips it)
		}
		if hide != nil && p.drainedAt[st.ID] > from && r.releasedLocked(p, st.ID, hide.Timeout, from) {
			r.violateLocked(chkStranded, "%s: message %s hidden %v after Run returned: released for %v, though its handler returned RetryAfter(err, 0) at the drain\n%s", p.name(), r.label(st.ID), hidden, hide.Timeout, story)
			continue
		}
		switch {
		case hide == nil:
			r.violateLocked(chkStranded, "%s: message %s hidden %v after Run returned by the receive's own visibility: never released\n%s", p.name(), r.label(st.ID), hidden, story)
		case res == nil:
			r.violateLocked(chkStranded, "%s: message %s hidden %v after Run returned by a visibility change of %v, though no handler of it returned\n%s", p.name(), r.label(st.ID), hidden, hide.Timeout, story)
		case res.kind == "success":
			r.violateLocked(chkStranded, "%s: message %s hidden %v after Run returned by a visibility change of %v after its handler succeeded (not deleted)\n%s", p.name(), r.label(st.ID), hidden, hide.Timeout, story)
		case res.shutdown && !r.releasedLocked(p, st.ID, hide.Timeout, h.seq):
			r.violateLocked(chkStranded, "%s: message %s hidden %v after Run returned by a renewal (%v), though the shutdown cancelled its handler at %v: it was not released\n%s", p.name(), r.label(st.ID), hidden, hide.Timeout, r.at(res.at), story)
		case res.shutdown:
			r.violateLocked(chkStranded, "%s: message %s hidden %v after Run returned: released for %v, though the shutdown cancelled its handler: a shutdown releases at once\n%s", p.name(), r.label(st.ID), hidden, hide.Timeout, story)
		}
	}
}

// leaseEndedLocked reports whether p saw its lease of message id end on
// its own (lost, expired, ceiling) after the receive at seq.
func (r *run) leaseEndedLocked(p *proc, id string, seq uint64) bool {
	return slices.ContainsFunc(p.events, func(e obs) bool {
		return e.msg == id && e.seq > seq && (e.kind == sqsconsumer.EventLeaseLost || e.kind == sqsconsumer.EventLeaseExpired || e.kind == sqsconsumer.EventCeilingReached)
	})
}

// windingDownLocked reports whether p released a redelivery of id with a
// backoff because an earlier delivery was still winding down.
func (r *run) windingDownLocked(p *proc, id string) bool {
	return slices.ContainsFunc(p.logs, func(l logRec) bool {
		return l.attrs["message_id"] == id && strings.Contains(l.msg, "winding down")
	})
}

// lastResultAfter is the latest outcome recorded after seq (nil: none).
func lastResultAfter(rs []result, seq uint64) *result {
	if len(rs) == 0 || rs[len(rs)-1].seq <= seq {
		return nil
	}
	return &rs[len(rs)-1]
}

// lastResultBefore is the latest outcome recorded before seq.
func lastResultBefore(rs []result, seq uint64) *result {
	var last *result
	for i := range rs {
		if rs[i].seq < seq {
			last = &rs[i]
		}
	}
	return last
}

// storyLocked tells what p saw of message st and what the server did, for
// a report.
func (r *run) storyLocked(p *proc, st sqstest.MessageState, h *handleRec) string {
	var b strings.Builder
	type line struct {
		at  time.Time
		seq uint64
		s   string
	}
	var lines []line
	for _, e := range p.events {
		if e.msg == st.ID {
			s := fmt.Sprintf("p%d event %s", p.id, e.kind)
			if e.vis > 0 {
				s += fmt.Sprintf(" vis %v", e.vis)
			}
			if e.err != nil {
				s += fmt.Sprintf(" (%v)", e.err)
			}
			if e.handle != "" && (e.kind == sqsconsumer.EventReceived || e.kind == sqsconsumer.EventAdopted) {
				s += " " + tail8(e.handle)
			}
			lines = append(lines, line{e.at, e.seq, s})
		}
	}
	for _, res := range p.results[st.ID] {
		lines = append(lines, line{res.at, res.seq, fmt.Sprintf("p%d handler returned %s (shutdown %v, retry %v)", p.id, res.kind, res.shutdown, res.retry)})
	}
	for _, rc := range st.Receives {
		who := "?"
		if hr := r.handles[rc.ReceiptHandle]; hr != nil {
			who = fmt.Sprintf("p%d", hr.proc)
			if hr.lost {
				who += " (answer lost)"
			}
			if hr.faulted {
				who += " (faults)"
			}
		}
		lines = append(lines, line{rc.At, 0, fmt.Sprintf("server receive %s by %s for %v", tail8(rc.ReceiptHandle), who, rc.VisibilityTimeout)})
	}
	for _, c := range st.VisibilityChanges {
		lines = append(lines, line{c.At, 0, fmt.Sprintf("server visibility %s to %v %s", tail8(c.ReceiptHandle), c.Timeout, c.Err)})
	}
	for _, l := range p.logs {
		if l.attrs["message_id"] == st.ID {
			extra := ""
			if e := l.attrs["error"]; e != "" {
				extra = " error=" + e
			}
			lines = append(lines, line{l.at, l.seq, fmt.Sprintf("p%d log %q%s", p.id, l.msg, extra)})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	for _, l := range lines[max(0, len(lines)-storyLines):] {
		fmt.Fprintf(&b, "      %10v %s\n", r.at(l.at).Round(time.Millisecond), l.s)
	}
	if p.cancelled {
		fmt.Fprintf(&b, "      (Run's context cancelled at %v, Run returned at %v)", r.at(p.cancelAt), r.at(p.retTime))
	} else if p.returned {
		fmt.Fprintf(&b, "      (Run returned at %v: %v)", r.at(p.retTime), p.runErr)
	}
	return b.String()
}

func tail8(h string) string { return h[max(0, len(h)-8):] }

// finalChecks runs once every Run has returned: the events against the
// calls, the deletes against the handlers' outcomes.
func (r *run) finalChecks() {
	r.mu.Lock()
	defer r.mu.Unlock()
	byMsg := map[string][]*handleRec{}
	for _, h := range r.handles {
		byMsg[h.msg] = append(byMsg[h.msg], h)
	}
	for _, hs := range byMsg {
		slices.SortFunc(hs, func(a, b *handleRec) int { return int(a.seq) - int(b.seq) })
	}
	for _, p := range r.procs {
		r.checkEventsLocked(p, byMsg)
		r.checkDeletesLocked(p, byMsg)
		r.checkThrottlePausesLocked(p)
		r.checkReleasesLocked(p)
	}
}

// throttleLog is the line the Consumer logs as a Throttled's pause begins.
const throttleLog = "sqsconsumer: a handler returned Throttled: receiving and starting paused"

// checkThrottlePausesLocked: between a Throttled and the end of the pause
// it begins, p sends no receive and starts no message. The pauses are
// those p logged (with their length), and, without
// WithAdaptiveConcurrency (which pauses only at its floor), each Throttled
// with a delay its handler returned with its lease alive (the delay, in
// whole seconds, from the result).
func (r *run) checkThrottlePausesLocked(p *proc) {
	type pause struct {
		from, until time.Time
		what        string
	}
	var pauses []pause
	for _, l := range p.logs {
		if l.msg != throttleLog {
			continue
		}
		d, err := time.ParseDuration(l.attrs["for"])
		if err != nil {
			r.violateLocked(chkThrottle, "%s: the pause's log line at %v has no duration: %v", p.name(), r.at(l.at), l.attrs)
			continue
		}
		pauses = append(pauses, pause{l.at, l.at.Add(d), "logged for " + d.String()})
		r.seen["throttle:paused"] = true
	}
	if r.sc.Options.AdaptiveConc == nil {
		for id, rs := range p.results {
			for _, res := range rs {
				// The pause begins as the Consumer settles the message (a
				// Batch's members settle one after another), with its
				// EventFailed.
				if e := r.tookAsLocked(p, id, res); res.throttled && res.hasAsked && res.asked > 0 && e != nil {
					d := roundUp(res.asked)
					pauses = append(pauses, pause{e.at, e.at.Add(d), fmt.Sprintf("Throttled(err, %v) of %s", res.asked, r.label(id))})
				}
			}
		}
	}
	for _, pa := range pauses {
		inside := func(t time.Time) bool { return t.After(pa.from) && t.Before(pa.until) }
		for _, t := range p.receiveTimes {
			if inside(t) {
				r.violateLocked(chkThrottle, "%s: a receive sent at %v, within the pause of a Throttled from %v to %v (%s)", p.name(), r.at(t), r.at(pa.from), r.at(pa.until), pa.what)
				break
			}
		}
		for _, e := range p.events {
			if e.kind == sqsconsumer.EventStarted && inside(e.at) {
				r.violateLocked(chkThrottle, "%s: %s started at %v, within the pause of a Throttled from %v to %v (%s)\n%s", p.name(), r.label(e.msg), r.at(e.at), r.at(pa.from), r.at(pa.until), pa.what, r.eventStoryLocked(p, e.msg))
				break
			}
		}
	}
}

// tookAsLocked returns the EventFailed by which the Consumer took res, an
// outcome p's handler returned for message id, as that outcome (nil if
// it did not): the next EventFailed of id, carrying the same delay asked,
// Throttled as res was (a Batch member behind a failed one of its FIFO
// group fails without its own result), its lease alive.
func (r *run) tookAsLocked(p *proc, id string, res result) *obs {
	ended := false // the delivery's lease ended: its outcome says nothing (a Batch's context does not tell)
	for i := range p.events {
		e := &p.events[i]
		if e.msg != id {
			continue
		}
		switch e.kind {
		case sqsconsumer.EventReceived:
			ended = false
		case sqsconsumer.EventLeaseLost, sqsconsumer.EventLeaseExpired, sqsconsumer.EventCeilingReached:
			ended = true
		}
		if e.seq <= res.seq {
			continue
		}
		switch e.kind {
		case sqsconsumer.EventFailed:
			if e.err == nil || ended {
				return nil
			}
			if d, ok := sqsconsumer.RetryDelay(e.err); d != res.asked || ok != res.hasAsked || sqsconsumer.IsThrottled(e.err) != (res.kind == "throttled") {
				return nil
			}
			return e
		case sqsconsumer.EventSucceeded, sqsconsumer.EventReceived, sqsconsumer.EventAdopted:
			return nil
		}
	}
	return nil
}

// roundUp is d in whole seconds, rounded up, at most 12 hours: the
// visibility a release for d sets.
func roundUp(d time.Duration) time.Duration {
	d = min(d, sqsconsumer.MaxVisibilityTimeout)
	if d%time.Second != 0 {
		d = d.Truncate(time.Second) + time.Second
	}
	return d
}

// checkReleasesLocked: a message whose handler asked for a delay
// (RetryAfter, Throttled, NewIdempotent's duplicate in progress) is
// released for that delay, in whole seconds (less when the lease ceiling
// clips it, more when the breaker holds a failure back, at once when the
// shutdown cancelled it); a Throttled without a delay for its backoff, at
// least a second.
func (r *run) checkReleasesLocked(p *proc) {
	o := r.sc.Options
	for id, rs := range p.results {
		for _, res := range rs {
			if res.shutdown || res.leaseEnded || res.kind == "permanent" || res.kind == "cancelled" || !res.hasAsked && res.kind != "throttled" {
				continue
			}
			if r.tookAsLocked(p, id, res) == nil {
				continue
			}
			var rel *obs
			for i := range p.events {
				e := &p.events[i]
				if e.msg != id || e.seq <= res.seq {
					continue
				}
				if e.kind == sqsconsumer.EventReleased {
					rel = e
				}
				if e.kind == sqsconsumer.EventReleased || e.kind == sqsconsumer.EventReceived || e.kind == sqsconsumer.EventAdopted || e.kind == sqsconsumer.EventDeleted {
					break
				}
			}
			if rel == nil {
				continue
			}
			vis := rel.vis.Round(time.Second)
			want := roundUp(res.asked)
			ok := vis == want
			if !res.hasAsked {
				// Throttled without a delay: its backoff, at least a
				// second (DefaultBackoff's is jittered).
				want, ok = time.Second, vis >= time.Second
				if b := o.Backoff; b != nil && res.receiveCount > 0 {
					want = roundUp(max(backoffFunc(*b)(res.receiveCount), time.Second))
					ok = vis == want
				}
			}
			switch {
			case ok:
			case vis < want && o.MaxLease != nil:
				ok = true // the ceiling clips it
			case vis > want && res.downstream && o.Breaker != nil:
				ok = true // the breaker holds a failure back longer
			case vis == 0 && p.cancelled && !p.cancelAt.After(res.at):
				ok = true // the shutdown cancelled it as it returned
			}
			if res.throttled || res.kind == "throttled" {
				r.seen["throttle:released"] = true
			}
			if !ok {
				r.violateLocked(chkRelease, "%s: %s released for %v after its handler returned %s asking %v at %v (want %v)\n%s",
					p.name(), r.label(id), rel.vis, res.kind, res.asked, r.at(res.at), want, r.eventStoryLocked(p, id))
			}
		}
	}
}

// checkEventsLocked: every Deleted, Released and Renewed event of p
// matches a call of p that SQS answered with success before the event
// (and that the server recorded), each call one event.
func (r *run) checkEventsLocked(p *proc, byMsg map[string][]*handleRec) {
	for _, e := range p.events {
		var match func(*handleRec) []*callRec
		switch e.kind {
		case sqsconsumer.EventDeleted:
			match = func(h *handleRec) []*callRec { return h.deletes }
		case sqsconsumer.EventReleased, sqsconsumer.EventRenewed:
			match = func(h *handleRec) []*callRec { return h.changes }
		default:
			continue
		}
		// A call on the event's own handle first (several deliveries of
		// one message may settle at one instant), then on another of
		// the message's (a lease that adopted a newer handle).
		var found *callRec
		for _, own := range []bool{true, false} {
			for _, h := range byMsg[e.msg] {
				if h.proc != p.id || (h.handle == e.handle) != own {
					continue
				}
				for _, c := range match(h) {
					if c.ok && !c.used && c.answered < e.seq && (e.kind == sqsconsumer.EventDeleted || c.timeout == e.vis.Round(time.Second)) {
						found = c
						break
					}
				}
				if found != nil {
					break
				}
			}
			if found != nil {
				break
			}
		}
		if found == nil {
			var calls []string
			for _, h := range byMsg[e.msg] {
				for _, c := range append(slices.Clone(h.deletes), h.changes...) {
					calls = append(calls, fmt.Sprintf("p%d %s %v ok=%v used=%v sent#%d answered#%d", h.proc, tail8(h.handle), c.timeout, c.ok, c.used, c.sent, c.answered))
				}
			}
			r.violateLocked(chkEvents, "%s: %s of %s (visibility %v, handle %s, #%d) at %v matches no call SQS answered with success before it; the calls: %v\n%s",
				p.name(), e.kind, r.label(e.msg), e.vis, tail8(e.handle), e.seq, r.at(e.at), calls, r.eventStoryLocked(p, e.msg))
			continue
		}
		found.used = true
		if e.kind == sqsconsumer.EventDeleted {
			// The server deleted it by then, unless the handle deleted
			// with had been superseded by a newer receive (SQS answers
			// such a delete with success and deletes nothing).
			st, ok := r.srv.Message(r.url, e.msg)
			superseded := ok && slices.ContainsFunc(st.Receives, func(rc sqstest.Receive) bool {
				return rc.ReceiptHandle != e.handle && !rc.At.After(e.at) && rc.At.After(found.at.Add(-time.Hour)) && r.handles[rc.ReceiptHandle] != nil &&
					r.handles[rc.ReceiptHandle].seq > r.handleSeq(e.handle)
			})
			if ok && !(st.Deleted && !st.DeletedAt.After(e.at)) && !(st.MovedToDLQ && !st.MovedAt.After(e.at)) && !superseded {
				r.violateLocked(chkEvents, "%s: deleted of %s at %v, but the server has not deleted it (deleted %v at %v)", p.name(), r.label(e.msg), r.at(e.at), st.Deleted, r.at(st.DeletedAt))
			}
		}
		if e.kind != sqsconsumer.EventDeleted {
			st, ok := r.srv.Message(r.url, e.msg)
			if !ok || !slices.ContainsFunc(st.VisibilityChanges, func(c sqstest.VisibilityChange) bool {
				return c.Err == "" && c.Timeout == e.vis.Round(time.Second)
			}) {
				r.violateLocked(chkEvents, "%s: %s of %s (visibility %v) is not in the server's history", p.name(), e.kind, r.label(e.msg), e.vis)
			}
		}
	}
}

func (r *run) eventStoryLocked(p *proc, id string) string {
	st, ok := r.srv.Message(r.url, id)
	if !ok {
		return ""
	}
	return r.storyLocked(p, st, nil)
}

// checkDeletesLocked: each delete of p that SQS answered with success
// follows, among p's outcomes of its message, a success (or a Permanent
// error whose message p moved to the dead-letter queue).
func (r *run) checkDeletesLocked(p *proc, byMsg map[string][]*handleRec) {
	for id, hs := range byMsg {
		for _, h := range hs {
			if h.proc != p.id {
				continue
			}
			for _, c := range h.deletes {
				if !c.ok {
					continue
				}
				res := lastResultBefore(p.results[id], c.sent)
				switch {
				case res != nil && res.kind == "success":
				case res != nil && res.kind == "permanent" && r.movedLocked(p, id, c.sent):
				default:
					kind := "no outcome"
					if res != nil {
						kind = res.kind
					}
					r.violateLocked(chkDelete, "%s: deleted %s (delete sent at %v) after its handler's outcome %q\n%s", p.name(), r.label(id), r.at(c.at), kind, r.eventStoryLocked(p, id))
				}
				break
			}
		}
	}
}

// movedLocked reports whether p sent message id's body to the dead-letter
// queue before seq.
func (r *run) movedLocked(p *proc, id string, seq uint64) bool {
	m := r.msgs[id]
	if m == nil {
		return false
	}
	for i, s := range p.dlqSends {
		if s < seq && p.dlqBodies[i] == m.body {
			return true
		}
	}
	return false
}

var reInARow = regexp.MustCompile(`^(\d+) handler failures in a row`)
var reOfLast = regexp.MustCompile(`^(\d+) of the last (\d+) handlers failed`)

// checkBreakerOpenLocked: the breaker of p opened (logged at at) for
// reason; the downstream failures p's handlers returned since its last
// opening must account for it.
func (r *run) checkBreakerOpenLocked(p *proc, reason string, at time.Time) {
	r.seen["breaker:opened"] = true
	b := r.sc.Options.Breaker
	since := p.lastBreakerOpen
	p.lastBreakerOpen = at
	count := 0
	for _, t := range p.downstream {
		if !t.Before(since) {
			count++
		}
	}
	calls := 0
	for _, t := range p.handleCallFaults {
		if !t.Before(since) {
			calls++
		}
	}
	need, what := 0, ""
	switch {
	case b == nil:
		r.violateLocked(chkBreaker, "%s: a breaker opened without WithBreaker: %s", p.name(), reason)
		return
	case reInARow.MatchString(reason):
		need, what = b.Failures, "in a row"
	case reOfLast.MatchString(reason):
		need, what = int(math.Ceil(b.Ratio*float64(b.Window)-1e-9)), "of the window"
	case strings.HasPrefix(reason, "a probe failed"):
		need, what = 1, "as a probe"
	case strings.HasPrefix(reason, "the probe failed"):
		if !b.Probe {
			r.violateLocked(chkBreaker, "%s: the breaker reopened on a probe without Breaker.Probe: %s", p.name(), reason)
		}
		return
	case strings.Contains(reason, "renewal or delete calls in a row failed"):
		if calls < b.CallFailures {
			r.violateLocked(chkBreaker, "%s: the breaker opened at %v (%s) after %d injected failures of renewal or delete calls, fewer than CallFailures %d", p.name(), r.at(at), reason, calls, b.CallFailures)
		}
		return
	default:
		r.violateLocked(chkBreaker, "%s: the breaker opened for a reason the explorer does not know: %s", p.name(), reason)
		return
	}
	if count < need {
		r.violateLocked(chkBreaker, "%s: the breaker opened at %v (%s) after %d downstream failures since its last opening, fewer than the %d %s it needs: it counted outcomes that say nothing of the downstream\n%s",
			p.name(), r.at(at), reason, count, need, what, r.outcomesSinceLocked(p, since))
	}
}

// outcomesSinceLocked lists p's outcomes since t, for a report.
func (r *run) outcomesSinceLocked(p *proc, t time.Time) string {
	kinds := map[string]int{}
	for _, rs := range p.results {
		for _, res := range rs {
			if !res.at.Before(t) {
				k := res.kind
				if res.downstream {
					k += "(downstream)"
				}
				if res.cause != "" {
					k += "[" + res.cause + "]"
				}
				kinds[k]++
			}
		}
	}
	// The Consumer's own failures too: a Batch member that failed before
	// its batch ran reaches no handler of the explorer's.
	failed := map[string]int{}
	for _, e := range p.events {
		if e.kind == sqsconsumer.EventFailed && !e.at.Before(t) && e.err != nil {
			msg := e.err.Error()
			if len(msg) > 80 {
				msg = msg[:80]
			}
			failed[msg]++
		}
	}
	return fmt.Sprintf("      outcomes since %v: %v; the Consumer's EventFailed since: %v", r.at(t), kinds, failed)
}

// healthEvery is how often the driver reads each Consumer's Health.
const healthEvery = 5 * time.Second

// watchHealth reads p's Health every few seconds while its Run runs and
// checks each problem it reports against what the run knows; and that a
// Consumer that is not paused keeps receiving.
func (r *run) watchHealth(p *proc) {
	defer r.wg.Done()
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		stop := p.cancelled || p.returned
		r.mu.Unlock()
		if stop {
			return
		}
		h := p.c.Health()
		st := p.c.Stats()
		r.judgeHealth(p, h, st)
	}
}

var reStall = regexp.MustCompile(`for (\S+) \(limit (\S+)\)`)

func (r *run) judgeHealth(p *proc, h sqsconsumer.Health, st sqsconsumer.Stats) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.cancelled || p.returned {
		return
	}
	paused := p.paused || h.Paused
	if paused {
		r.seen["health:while-paused"] = true
	}
	r.judgeFiguresLocked(p, h, st, now)
	// The Consumer's handlers running: from their EventStarted (a Batch
	// member starts as it joins its batch), and since their receive.
	longest, oldest := time.Duration(0), time.Duration(0)
	for id, s := range p.startedAt {
		longest = max(longest, now.Sub(s))
		for _, h := range r.handles {
			if h.msg == id && h.proc == p.id {
				oldest = max(oldest, now.Sub(h.at))
			}
		}
	}
	faultSince := func(t time.Time) bool {
		return slices.ContainsFunc(p.faultTimes, func(f time.Time) bool { return !f.Before(t) })
	}
	for _, prob := range h.Problems {
		switch {
		case strings.HasPrefix(prob, "SQS has answered no call"):
			if !p.firstAnswer.IsZero() {
				r.violateLocked(chkHealth, "%s: at %v Health says %q, though SQS answered a call at %v", p.name(), r.at(now), prob, r.at(p.firstAnswer))
			}
		case strings.HasPrefix(prob, "Run has not finished starting"):
			// SQS answered (the queue's attributes) and Run still
			// starts (the dead-letter queue's check): no receive yet.
			if p.firstAnswer.IsZero() || p.receivesSent > 0 {
				r.violateLocked(chkHealth, "%s: at %v Health says %q, though SQS answered no call yet or a receive went out (%d)", p.name(), r.at(now), prob, p.receivesSent)
			}
		case strings.HasPrefix(prob, "no ReceiveMessage"):
			limit := time.Duration(0)
			if m := reStall.FindStringSubmatch(prob); m != nil {
				limit, _ = time.ParseDuration(m[2])
			}
			switch {
			case paused && h.Running == 0:
				// Paused, a Consumer without handlers asks nothing of SQS.
				r.violateLocked(chkHealth, "%s: at %v, paused since %v, Health is unhealthy: %s", p.name(), r.at(now), r.at(p.pauseChanged), prob)
			case !p.lastAnswer.IsZero() && now.Sub(p.lastAnswer) < limit:
				r.violateLocked(chkHealth, "%s: at %v Health says %q, though SQS answered at %v", p.name(), r.at(now), prob, r.at(p.lastAnswer))
			case !faultSince(now.Add(-limit - r.sc.pollWait() - 10*time.Second)):
				resumed := ""
				if p.pauses > 0 && now.Sub(p.pauseChanged) < limit {
					resumed = fmt.Sprintf(" (resumed %v ago after a pause)", now.Sub(p.pauseChanged))
				}
				if st.ThrottledUntil.After(now) {
					resumed += fmt.Sprintf(" (a Throttled's pause holds until %v)", r.at(st.ThrottledUntil))
				}
				r.violateLocked(chkHealth, "%s: at %v Health says %q with no fault injected in that time%s (last answer at %v, last receive sent at %v, %d running; receives ended %v)",
					p.name(), r.at(now), prob, resumed, r.at(p.lastAnswer), r.at(p.lastReceive), st.Running, p.recvLog)
			}
		case strings.HasPrefix(prob, "a handler has run for"):
			limit := time.Duration(0)
			if m := reStall.FindStringSubmatch(prob); m != nil {
				limit, _ = time.ParseDuration(m[2])
			}
			if longest < limit-time.Second {
				r.violateLocked(chkHealth, "%s: at %v Health says %q, but the longest handler running has run %v", p.name(), r.at(now), prob, longest)
			}
		case strings.Contains(prob, "near the lease ceiling"):
			if near := r.nearCeiling(); near == 0 || oldest < near {
				r.violateLocked(chkHealth, "%s: at %v Health says %q, but the oldest receive of a message whose handler runs was %v ago (the ceiling nears %v after a receive)", p.name(), r.at(now), prob, oldest, near)
			}
		default:
			r.violateLocked(chkHealth, "%s: at %v Health reports a problem the explorer does not know: %q", p.name(), r.at(now), prob)
		}
	}
	if h.Healthy != (len(h.Problems) == 0) {
		r.violateLocked(chkHealth, "%s: Health.Healthy %v with problems %q", p.name(), h.Healthy, h.Problems)
	}
	// Not paused, the breaker closed, room for more, and nothing received
	// for a long while: receiving has stopped.
	idle := 60*time.Second + r.sc.pollWait() + time.Duration(r.sc.QueueWait)*time.Second
	// Room is judged at two polls in a row (a slot that frees at this
	// very instant has not had its receive sent yet), and no receive went
	// out since the first of them.
	// (Not held back by a Throttled's pause, recent or not, nor by the
	// byte bound.)
	if st.ThrottledUntil.After(p.throttledUntil) {
		p.throttledUntil = st.ThrottledUntil
	}
	bytesRoom := st.Bytes.Held == 0 || st.Bytes.Max-st.Bytes.Held >= max(st.Bytes.Estimate, 1)
	room := !h.Paused && !p.permanentFault && (h.Breaker == "" || h.Breaker == "closed") &&
		st.Running+st.Waiting+st.Asked < st.ConcurrencyLimit && bytesRoom && now.Sub(p.throttledUntil) > idle
	roomSince := p.roomSince
	if !room {
		p.roomSince = time.Time{}
	} else if p.roomSince.IsZero() {
		p.roomSince = now
	}
	if room && !roomSince.IsZero() && p.lastReceive.Before(roomSince) && now.Sub(p.pauseChanged) > idle &&
		now.Sub(p.started) > idle && now.Sub(p.lastReceive) > idle && r.receiving[p.id] == 0 && !faultSince(now.Add(-idle)) {
		r.violateLocked(chkReceiving, "%s: at %v not paused, breaker %q, %d running, %d waiting and %d asked for of %d slots, but no receive sent since %v (Paused() = %v; receives ended %v)",
			p.name(), r.at(now), h.Breaker, st.Running, st.Waiting, st.Asked, r.sc.concurrency(), r.at(p.lastReceive), p.c.Paused(), p.recvLog)
	}
	_ = strconv.Itoa
}

// judgeFiguresLocked checks the figures one Health poll reads while Run
// runs: the adaptive concurrency limit, the calls in flight, the byte
// bound, the paused state against Health and the receives, and Health's
// Retrying during a first contact that can heal.
func (r *run) judgeFiguresLocked(p *proc, h sqsconsumer.Health, st sqsconsumer.Stats, now time.Time) {
	r.checkLimitLocked(p, st)
	r.judgeProtectionLocked(p, st, now)
	if n := st.MaxCallsInFlight; n < 1 || p.pollersBound > 0 && n > p.pollersBound {
		r.violateLocked(chkCalls, "%s: at %v Stats.MaxCallsInFlight = %d, outside [1, Settings().Pollers %d]", p.name(), r.at(now), n, p.pollersBound)
	}
	if v := r.sc.Options.Pollers; v != nil && st.MaxCallsInFlight != *v {
		r.violateLocked(chkCalls, "%s: at %v Stats.MaxCallsInFlight = %d, though WithPollers(%d) fixes it", p.name(), r.at(now), st.MaxCallsInFlight, *v)
	}
	if r.sc.Pool > 0 && st.Conns.Traced {
		r.seen["calls:traced"] = true
	}
	if st.MaxCallsInFlight < p.pollersBound {
		r.seen["calls:below-the-need"] = true
	}
	b := st.Bytes
	if b.Peak < b.Held {
		r.violateLocked(chkBytes, "%s: at %v Stats.Bytes.Peak %d < Held %d", p.name(), r.at(now), b.Peak, b.Held)
	}
	if bound := r.byteBoundLocked(p, b.Held); p.minMsg > 0 && b.Held > bound {
		r.violateLocked(chkBytes, "%s: at %v Stats.Bytes.Held = %d, above the bound %d allows with messages of %d to %d bytes (%d)", p.name(), r.at(now), b.Held, b.Max, p.minMsg, p.maxMsg, bound)
	}
	// Paused: Health says so, healthy and not ready.
	switch {
	case h.Paused && h.Status != "paused" && h.Status != "draining" && h.Status != "failed" && h.Status != "stopped":
		r.violateLocked(chkPaused, "%s: at %v Health.Paused, but Status %q", p.name(), r.at(now), h.Status)
	case !h.Paused && h.Status == "paused":
		r.violateLocked(chkPaused, "%s: at %v Health.Status %q, but not Health.Paused", p.name(), r.at(now), h.Status)
	case h.Paused && h.Ready:
		r.violateLocked(chkPaused, "%s: at %v Health is ready while paused", p.name(), r.at(now))
	}
	// Paused at two polls in a row, with no Pause or Resume between:
	// no receive went out between them.
	switch {
	case !h.Paused || !p.pauseChanged.Before(now):
		p.pausedPoll = time.Time{}
	case p.pausedPoll.IsZero() || !p.pauseChanged.Before(p.pausedPoll):
		p.pausedPoll = now
	default:
		for _, t := range p.receiveTimes {
			if t.After(p.pausedPoll) && !t.After(now) {
				r.violateLocked(chkPaused, "%s: a receive sent at %v, though Paused() held from %v to %v with no Pause or Resume between", p.name(), r.at(t), r.at(p.pausedPoll), r.at(now))
				break
			}
		}
		r.seen["paused:judged"] = true
		p.pausedPoll = now
	}
	// A first contact that can heal: Health says why it retries.
	if fc := firstContactOf(r.sc.FirstContact); fc != nil && !fc.fatal && p.id == 0 && p.firstContactFails > 0 && p.firstAnswer.IsZero() {
		settle := time.Second
		if r.sc.SDKRetries {
			settle = time.Minute
		}
		if now.Sub(p.firstCall) > settle && r.since() < r.sc.Heal.D() && !h.Paused && !p.paused {
			r.seen["first-contact:retrying-judged"] = true
			if h.Retrying == "" {
				r.violateLocked(chkFirst, "%s: at %v its calls have failed with %s since %v, and Health.Retrying is empty (status %q)", p.name(), r.at(now), fc.name, r.at(p.firstCall), h.Status)
			}
		}
	}
}

// storyLines is how many lines of a message's story a report shows.
var storyLines = 30

// nearCeiling is how long after its receive a lease may be reported near
// its ceiling, at the earliest (0: never, without WithMaxLeaseDuration):
// the maximum lease less its grace, less a lease for the receive's own
// estimate.
func (r *run) nearCeiling() time.Duration {
	o := r.sc.Options
	if o.MaxLease == nil {
		return 0
	}
	lease := max(r.sc.lease(), time.Duration(r.sc.QueueVisibility)*time.Second)
	if o.Adaptive != nil {
		lease = max(lease, o.Adaptive[1].D())
	}
	grace := lease / 3
	if o.Heartbeat != nil {
		grace = o.Heartbeat.D()
	}
	if o.CeilingGrace != nil {
		grace = o.CeilingGrace.D()
	}
	return max(o.MaxLease.D()-grace-lease, time.Millisecond)
}

// tailLocked is the last n events and log lines of p, for a report.
func (r *run) tailLocked(p *proc, n int) string {
	type line struct {
		seq uint64
		s   string
	}
	var lines []line
	for _, e := range p.events {
		lines = append(lines, line{e.seq, fmt.Sprintf("%10v event %s %s %v", r.at(e.at).Round(time.Millisecond), e.kind, r.label(e.msg), e.err)})
	}
	for _, l := range p.logs {
		lines = append(lines, line{l.seq, fmt.Sprintf("%10v log %q %v", r.at(l.at).Round(time.Millisecond), l.msg, l.attrs)})
	}
	slices.SortFunc(lines, func(a, b line) int { return int(a.seq) - int(b.seq) })
	var b strings.Builder
	for _, l := range lines[max(0, len(lines)-n):] {
		b.WriteString("      " + l.s + "\n")
	}
	return b.String()
}

// releasedLocked reports whether p reported message id released for vis
// after seq.
func (r *run) releasedLocked(p *proc, id string, vis time.Duration, seq uint64) bool {
	return slices.ContainsFunc(p.events, func(e obs) bool {
		return e.msg == id && e.seq > seq && e.kind == sqsconsumer.EventReleased && e.vis.Round(time.Second) == vis
	})
}

// handleSeq is when a handle's receive answered (0: unknown).
func (r *run) handleSeq(h string) uint64 {
	if hr := r.handles[h]; hr != nil {
		return hr.seq
	}
	return 0
}
