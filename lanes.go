package sqsconsumer

import "time"

// The pollers are the Consumer's lanes: each makes one SQS call at a time,
// a receive the flow says is due or a coalesced call (a job) handed to the
// flow, so that the Consumer's calls in flight are no more than its busy
// pollers and rise and fall as theirs do. The flow (flow.go) owns their
// counts and the jobs waiting; this file is how work reaches them, and how
// a call's end comes back to the flow (received, failed, abandoned,
// roundTrip: the round trip, the backoff after failures).

// nudge makes a parked poller look again (the fleet's budget has a slot
// for this flow).
func (f *flow[T]) nudge() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// kicked is where parked pollers wait for a receive to be due (take
// returned 0).
func (f *flow[T]) kicked() <-chan struct{} { return f.kick }

// take gives a poller its next work: a job (a coalesced call to make),
// or the number of messages the receive due asks for, sent from now
// (sent: the receive's send time for received, failed or abandoned,
// which must end it); with neither the poller counts as idle and must
// wait on kick (or for the end) and call unpark.
func (f *flow[T]) take() (job func(), n int, sent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.pollers-f.idle > f.limitLocked(now) {
		// The limit was lowered: this poller waits until it is needed,
		// and a job waiting goes to the busy ones (within jobWait).
		f.idle++
		f.armJobsLocked()
		return nil, 0, now
	}
	f.lastTake = now
	if len(f.jobs) > 0 {
		job = f.jobs[0]
		f.jobs[0] = nil
		f.jobs = f.jobs[1:]
		f.wakeLocked(now) // another job, or a receive, may be waiting too
		return job, 0, now
	}
	n = f.nextLocked(now)
	if n == 0 {
		f.idle++
		return nil, 0, now
	}
	f.recvSince = append(f.recvSince, now.Sub(f.epoch))
	f.asked += n
	f.sentAt = now
	if f.limiter != nil {
		f.limiter.take(now, n)
	}
	if free := f.conc - f.running; f.waiting+f.asked-free > f.peakAhead {
		f.peakAhead = f.waiting + f.asked - free
	}
	f.wakeLocked(now) // another receive may be due as well
	return nil, n, now
}

// endReceiveLocked counts the receive sent at sent as no longer in flight.
func (f *flow[T]) endReceiveLocked(sent time.Time) {
	at := sent.Sub(f.epoch)
	for i, s := range f.recvSince {
		if s == at {
			f.recvSince = append(f.recvSince[:i], f.recvSince[i+1:]...)
			break
		}
	}
	f.endedLocked()
}

// stuckLocked reports whether every poller that may make a call is busy
// in a receive sent jobWait ago or more: long polls, which may go on for
// their whole wait, so a job must not wait for them.
func (f *flow[T]) stuckLocked(now time.Time) bool {
	if busy := f.pollers - f.idle; busy < f.limitLocked(now) || len(f.recvSince) < busy {
		return false
	}
	cut := now.Sub(f.epoch) - f.jobWait()
	for _, s := range f.recvSince {
		if s > cut {
			return false
		}
	}
	return true
}

// submit hands a job (a coalesced call) to the pollers: an idle one takes
// it, or a new one, if the limit on calls in flight lets one more be
// busy; otherwise the first to finish its call (within jobWait, else it
// overflows). It returns false, having done
// nothing, once the lanes are closed (closeLanes): the caller runs job.
func (f *flow[T]) submit(job func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lanesClosed {
		return false
	}
	f.jobs = append(f.jobs, job)
	now := time.Now()
	busy, limit := f.pollers-f.idle, f.limitLocked(now)
	switch {
	case busy < limit && f.idle > 0:
		select {
		case f.kick <- struct{}{}:
		default:
		}
	case busy < limit:
		f.pollers++
		f.spawn()
	case f.stuckLocked(now):
		// Every poller waits in a long poll: run it now, on its own.
		f.jobs = f.jobs[:len(f.jobs)-1]
		f.overflow(job)
	default:
		f.armJobsLocked()
	}
	return true
}

// armJobsLocked makes the jobs waiting run on goroutines of their own if
// no poller takes any work within jobWait (overflowJobs), unless that is
// armed already.
func (f *flow[T]) armJobsLocked() {
	if len(f.jobs) == 0 || f.jobArmed {
		return
	}
	f.jobArmed = true
	if f.jobTimer == nil {
		f.jobTimer = time.AfterFunc(f.jobWait(), f.overflowJobs)
	} else {
		f.jobTimer.Reset(f.jobWait())
	}
}

// overflowJobs runs the jobs waiting on goroutines of their own when no
// poller took any work for jobWait (all of them wait in long polls);
// while they make progress, the jobs wait their turn.
func (f *flow[T]) overflowJobs() {
	f.mu.Lock()
	if len(f.jobs) == 0 {
		f.jobArmed = false
		f.mu.Unlock()
		return
	}
	if since := time.Since(f.lastTake); since < f.jobWait() {
		f.jobTimer.Reset(f.jobWait() - since)
		f.mu.Unlock()
		return
	}
	f.jobArmed = false
	f.overflowLocked()
}

// closeLanes records that the pollers take no more jobs (Run tells them
// to quit next: the shutdown has ended), and runs the jobs
// still waiting on goroutines of their own; from now on submit refuses.
func (f *flow[T]) closeLanes() {
	f.mu.Lock()
	f.lanesClosed = true
	if f.jobTimer != nil {
		f.jobTimer.Stop()
	}
	f.overflowLocked()
}

// overflowLocked takes the jobs waiting, unlocks f.mu and runs them on
// goroutines of their own.
func (f *flow[T]) overflowLocked() {
	jobs := f.jobs
	f.jobs = nil
	f.mu.Unlock()
	for _, job := range jobs {
		f.overflow(job)
	}
}

// unpark counts a poller that take left idle as busy again.
func (f *flow[T]) unpark() {
	f.mu.Lock()
	f.idle--
	f.mu.Unlock()
}

// receivesInFlight is how many receives are in flight now.
func (f *flow[T]) receivesInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.recvSince)
}

// failed records a receive for asked messages that failed with err and
// returns how many receives in a row failed with this same client error
// (persistent: see persistentClientError), and the backoff before the
// next receive, which it arms for every poller.
func (f *flow[T]) failed(asked int, sent time.Time, err error, persistent bool) (same int, backoff time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.asked -= asked
	f.endReceiveLocked(sent)
	if f.limiter != nil {
		f.limiter.giveBack(now, asked)
	}
	switch msg := errorIdentity(err); {
	case !persistent:
		f.same, f.lastErr = 0, ""
	case msg == f.lastErr:
		f.same++
	default:
		f.same, f.lastErr = 1, msg
	}
	backoff = receiveBackoff(f.failures)
	f.failures++
	f.retryAt = now.Add(backoff)
	f.armLocked(now, f.retryAt)
	return f.same, backoff
}

// abandoned records a receive for asked messages that was cancelled at
// shutdown (it got nothing this process will see).
func (f *flow[T]) abandoned(asked int, sent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked -= asked
	f.endReceiveLocked(sent)
}

// received records a receive that asked for asked messages and got got,
// of bytes bytes (the largest of them largest), after took; the got
// messages are waiting until dispatched.
func (f *flow[T]) received(asked, got int, bytes, largest int64, sent time.Time, took time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.failures, f.same, f.lastErr = 0, 0, ""
	f.asked -= asked
	f.endReceiveLocked(sent)
	f.bytes.receivedLocked(got, bytes, largest)
	if f.calls != nil {
		f.calls.answered()
	}
	f.waiting += got
	f.quiet = got == 0
	f.full = got == asked
	if f.limiter != nil {
		f.limiter.giveBack(now, asked-got)
	}
	if got == 0 && f.idlePause > 0 {
		f.idleUntil = now.Add(f.idlePause)
	} else {
		f.idleUntil = time.Time{}
	}
	// A receive may have waited in its long poll for its messages (see
	// rttEstimate): only one that brought messages sooner than the
	// estimate is a round trip.
	if got > 0 && took < f.rtt.value() {
		f.rtt.add(now, took)
	}
	f.wakeLocked(now)
}

// roundTrip takes took, the time a coalesced batch call took when SQS
// answered its first attempt (it never waits in a long poll: it is a round
// trip), into the round trip estimate.
func (f *flow[T]) roundTrip(took time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rtt.add(time.Now(), took)
}

// receiveBackoff is the pause after the n-th consecutive receive failure:
// 100 ms doubling to 10 s, jittered.
func receiveBackoff(n int) time.Duration {
	d := backoffDelay(n, 100*time.Millisecond, 10*time.Second)
	return between(d/2, d)
}

// callLimitNow is the limit on calls in flight now, for Stats.
func (f *flow[T]) callLimitNow() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		return f.maxPollers
	}
	return f.calls.limitNow()
}
