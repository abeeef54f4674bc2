package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// ceilingMargin keeps a clipped renewal this far inside the maximum lease
// duration, so a renewal that waits to be coalesced or on the network still
// reaches SQS before the ceiling it was computed against.
const ceilingMargin = 2 * time.Second

// lateCallTimeout bounds the first call of a lease that is already past
// its estimated deadline (see Lease.asked).
const lateCallTimeout = 5 * time.Second

// leaseConfig is the validated lease part of the options.
type leaseConfig struct {
	lease    time.Duration // visibility each renewal asks for
	interval time.Duration // renew when lease-interval remains... i.e. every interval
	maxLease time.Duration // ceiling, from the latest receive
	grace    time.Duration // cancel the handler this long before the ceiling
	events   eventSink     // where the leases' events go (a Consumer's counts them too)
	calls    sqsCalls      // how the leases reach SQS
	// settleCtx bounds the calls a lease makes on its own after an
	// asynchronous delete's first attempt (a Consumer cancels it at its
	// hard stop); nil means context.Background.
	settleCtx context.Context
}

func (s *settings) leaseConfig(lease time.Duration) (leaseConfig, error) {
	c := leaseConfig{lease: lease, interval: heartbeatInterval(lease, s.heartbeat), maxLease: s.maxLease,
		events: eventSink{observer: s.observer, logger: s.logger, stats: s.stats}}
	var errs []error
	if 2*c.interval >= lease {
		errs = append(errs, fmt.Errorf("%w: WithHeartbeatInterval(%v) must be less than half the lease (%v)", ErrInvalidOption, c.interval, lease))
	}
	if lease > c.maxLease {
		errs = append(errs, fmt.Errorf("%w: WithVisibilityTimeout(%v) exceeds WithMaxLeaseDuration(%v)", ErrInvalidOption, lease, c.maxLease))
	}
	c.grace = ceilingGrace(c.interval, s.ceilingGrace, s.ceilingGraceSet)
	if c.grace >= c.maxLease {
		errs = append(errs, fmt.Errorf("%w: WithCeilingGrace(%v) must be less than WithMaxLeaseDuration(%v)", ErrInvalidOption, c.grace, c.maxLease))
	}
	return c, errors.Join(errs...)
}

type leaseState uint8

const (
	leaseActive   leaseState = iota
	leaseDeleted             // Delete confirmed
	leaseReleased            // Release confirmed
	leaseLost                // SQS refused the handle
	leaseExpired             // the deadline passed unrenewed
)

// A Lease owns the visibility of one received message: every
// ChangeMessageVisibility and the DeleteMessage for it go through the Lease,
// always with the newest receipt handle, so a heartbeat can never undo a
// visibility the handler asked for.
//
// Its life: NewLease (or a Consumer) makes it at receipt; Start begins the
// heartbeat, which renews visibility to the lease length every heartbeat
// interval (a third of the lease by default) and cancels the returned
// context with a cause when the lease is gone — ErrLeaseLost when SQS
// refuses the handle, ErrLeaseCeiling shortly before the maximum lease
// duration, ErrLeaseExpired when no renewal was confirmed in time. The work
// ends with Delete (success) or Release (retry later); Stop then ends the
// heartbeat goroutine.
//
// All methods are safe for concurrent use. Delete, Release and Extend may
// be called more than once; after a Delete or Release succeeded they
// return ErrLeaseSettled without calling SQS.
type Lease struct {
	cfg *leaseConfig // shared by the leases of one receive; read-only
	// msg is the leased message, allocated with the lease. Its ID,
	// GroupID and ReceivedAt (the first receive in this process) never
	// change.
	msg *Message
	// arrived is when the first answer that delivered the message reached
	// this process: events and statistics count from it (the best
	// estimate of the hand-over, where msg.ReceivedAt is the safe one).
	arrived time.Time
	// holder, when set, is what holds the lease beyond its own state (a
	// Consumer's delivery): it tells when the work under the lease began,
	// for the SinceStart of the lease's events. Set when it is made; nil
	// for a lease made with NewLease.
	holder leaseHolder

	// hbWG counts the heartbeat while its timer is armed or its goroutine
	// runs; Stop waits for it.
	hbWG sync.WaitGroup

	mu sync.Mutex // guards the fields below
	// callFreed wakes the callers waiting for the call token (calling).
	callFreed wakeup

	handle    string
	handleGen uint32 // counts adopted handles
	state     leaseState
	// calling is the call token, set while an SQS call of this lease is
	// in flight: one call at a time, so each answer is judged knowing
	// every earlier one (a renewal refused because our own delete landed
	// first must not read as a lost lease, and a refused renewal must
	// stop a delete). (The flags sit together, with asked, so that a
	// delivery fits its allocation size class.)
	calling      bool
	settling     bool // a Delete or Release is in flight
	deleting     bool // of them, a delete: renewals go on beside it
	noRenew      bool // SQS refused to go further: the ceiling is reached
	ceilingFired bool
	started      bool
	stopped      bool
	hbRunning    bool // the heartbeat goroutine has begun
	// asked is set once a visibility call or delete was sent since the
	// latest receive: until then the deadline is only an estimate, and a
	// lease past it asks SQS (renews) instead of declaring itself expired.
	asked        bool
	receivedAt   time.Time // latest receive's hand-over estimate: the ceiling counts from it
	deadline     time.Time // confirmed (or, before any call, estimated) end of visibility
	nextRenew    time.Time
	receiveCount int32
	renewals     int32       // confirmed renewals and extensions
	hb           *time.Timer // starts the heartbeat when it first has work
	deleteSent   string      // the pending delete's latest handle, "" before one is sent

	// Made by the heartbeat goroutine when it begins (most leases never
	// need them): kick wakes it when the schedule changed; cancelling bg
	// stops it and cancels its call in flight.
	kick     chan struct{}
	bgCancel context.CancelFunc
	ctx      context.Context
	cancel   context.CancelCauseFunc
	watchers *[]*func(time.Time) // made by the first OnDeadline
	// parent is ctx's parent: Start's context, answering Value(ctxKey{})
	// with the lease (Logger). Set by start, under mu, once.
	parent leaseCtx
}

// ctxKey is the key under which the library's own contexts answer Value
// with what they concern: a lease's context (Start, and so a Consumer's
// handler's) with its *Lease, a BatchHandler's call's with its
// *batchCtx. Logger reads it.
type ctxKey struct{}

// leaseCtx is the parent of a lease's context: the context given to
// Start, answering Value(ctxKey{}) with the lease itself. It lives in
// the Lease, so it costs no allocation; its Done is its parent's, so a
// lease started on context.Background takes no lock to be cancelled.
type leaseCtx struct {
	context.Context
	l *Lease
}

// Value answers ctxKey with the lease, and asks the parent otherwise.
func (c *leaseCtx) Value(key any) any {
	if _, ok := key.(ctxKey); ok {
		return c.l
	}
	return c.Context.Value(key)
}

// NewLease makes a Lease for m, received from queueURL, that makes one SQS
// call per request (a Consumer's leases share batch calls instead).
//
// The lease assumes m was received with a visibility timeout equal to the
// lease length (WithVisibilityTimeout, default 30 s),
// counted from WithReceivedAt (default: one second before NewLease, the
// estimate HandoverTime makes for an answer that just arrived). NewLease returns an error
// wrapping ErrInvalidOption for a nil client, an empty queue URL, a message
// without a receipt handle, or an option out of range.
func NewLease(c Client, queueURL string, m types.Message, opts ...LeaseOption) (*Lease, error) {
	s, errs := settingsFor(c, queueURL, opts)
	if aws.ToString(m.ReceiptHandle) == "" {
		errs = append(errs, fmt.Errorf("%w: message has no receipt handle", ErrInvalidOption))
	}
	errs = append(errs, s.errs...)
	lease := s.visibility
	if lease == 0 {
		lease = defaultVisibilityTimeout
	}
	cfg, err := s.leaseConfig(lease)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	now := time.Now()
	at := s.receivedAt
	if at.IsZero() {
		at = now.Add(-handoverSlack)
	}
	// The lease, its message, its configuration and its calls in one
	// allocation: a Lambda invocation makes a lease per record.
	own := &ownLease{cfg: cfg, calls: singleCalls{client: c, queueURL: queueURL}}
	own.cfg.calls, own.cfg.events.queueURL = &own.calls, queueURL
	initLease(&own.lease, &own.msg, m, at, now, &own.cfg, nil)
	return &own.lease, nil
}

// leasedMessage puts a lease and its message in one allocation.
type leasedMessage struct {
	lease Lease
	msg   Message
}

// ownLease is a NewLease's lease with what it does not share.
type ownLease struct {
	leasedMessage
	cfg   leaseConfig
	calls singleCalls
}

// leaseHolder is what holds a lease beyond its own state: a Consumer's
// delivery.
type leaseHolder interface {
	// workStarted is when the work on the message began (a Consumer's
	// handler was called); zero before.
	workStarted() time.Time
}

// initLease makes l, the lease of raw, and m, its Message; both must be
// zero. receivedAt is the conservative estimate of when SQS handed the
// message over (see HandoverTime): the lease clock starts there. arrived
// is when the answer reached this process: statistics and events count
// from it. cfg must not change afterwards (leases share it).
func initLease(l *Lease, m *Message, raw types.Message, receivedAt, arrived time.Time, cfg *leaseConfig, holder leaseHolder) {
	count, _ := strconv.ParseInt(raw.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)], 10, 32)
	*m = Message{
		ID:                aws.ToString(raw.MessageId),
		Body:              aws.ToString(raw.Body),
		Attributes:        raw.Attributes,
		MessageAttributes: raw.MessageAttributes,
		ReceiveCount:      int(count),
		GroupID:           raw.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
		ReceivedAt:        receivedAt,
		Lease:             l,
	}
	l.cfg, l.msg, l.arrived, l.holder = cfg, m, arrived, holder
	l.handle, l.receivedAt = aws.ToString(raw.ReceiptHandle), receivedAt
	l.receiveCount = int32(count)
	l.deadline = receivedAt.Add(min(cfg.lease, cfg.maxLease))
	l.nextRenew = l.deadline.Add(-(cfg.lease - cfg.interval))
}

// Start begins heartbeating and returns a context derived from ctx that is
// cancelled, with a cause context.Cause reports, when the lease is lost
// (ErrLeaseLost), nears its ceiling (ErrLeaseCeiling), expires
// (ErrLeaseExpired) or is stopped (ErrLeaseSettled). The heartbeat itself
// does not stop when ctx is cancelled: only Stop, a settlement or the end of
// the lease stop it. Calls after the first return the first call's context.
// A nil ctx is taken as context.Background(). The context carries ctx's
// values, and the lease for Logger: Logger(ctx) gives the lease's logger
// (WithLogger) with the message's fields.
func (l *Lease) Start(ctx context.Context) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return l.start(ctx)
}

// start is Start without the nil check.
func (l *Lease) start(ctx context.Context) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return l.ctx
	}
	l.started = true
	l.parent = leaseCtx{Context: ctx, l: l}
	l.ctx, l.cancel = context.WithCancelCause(&l.parent)
	// Most messages are settled before their first renewal is due, so the
	// heartbeat goroutine starts only then, from a timer: starting it here
	// doubled a Consumer's CPU per message (BenchmarkConsumerOverhead).
	l.hbWG.Add(1)
	l.hb = time.AfterFunc(l.firstWakeLocked(time.Now()), l.heartbeat)
	return l.ctx
}

// Stop ends the lease: it ends the heartbeat and waits for its goroutine to
// return, cancels the context Start returned (cause ErrLeaseSettled) and
// any SQS call the heartbeat has in flight. It does not delete or release
// the message, which SQS delivers again when its visibility runs out (at
// Deadline); Delete, Release and Extend called after Stop return
// ErrLeaseSettled without calling SQS. A Delete or Release already in
// flight completes. Safe to call more than once and before Start. Call it
// when the work is over, after Delete or Release (defer l.Stop()).
func (l *Lease) Stop() {
	l.mu.Lock()
	l.stopped = true
	if l.bgCancel != nil {
		l.bgCancel() // a renewal in flight must not hold Stop up
	}
	started := l.started
	l.cancelPendingLocked()
	l.mu.Unlock()
	l.hbWG.Wait()
	if started {
		l.cancel(ErrLeaseSettled)
	}
}

func (l *Lease) renewalCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.renewals)
}

// abort cancels the context Start returned with cause, leaving the lease
// itself alone (the Consumer's shutdown uses it).
func (l *Lease) abort(cause error) {
	l.mu.Lock()
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// firstWakeLocked is how long until the heartbeat has anything to do.
func (l *Lease) firstWakeLocked(now time.Time) time.Duration {
	p := plan(now, l.schedLocked())
	if p.renewNow || p.expired || p.fireCeiling {
		return 0
	}
	return p.wake.Sub(now)
}

// cancelPendingLocked stops a heartbeat that has not started yet and marks
// it done. It does nothing once the heartbeat runs.
func (l *Lease) cancelPendingLocked() {
	if l.hb != nil && !l.hbRunning && l.hb.Stop() {
		l.hb = nil
		l.hbWG.Done()
	}
}

// settleState reports, in one look, whether a Delete or Release already
// succeeded (settled) and why the lease ended or is ending, if it is:
// ErrLeaseLost or ErrLeaseExpired once it ended (Err), ErrLeaseCeiling
// once its holder was told to stop at the ceiling while the lease still
// holds (its handle is good until the deadline, which the ceiling caps).
func (l *Lease) settleState() (settled bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	err = l.stateErrLocked(false)
	if err == nil && l.state == leaseActive && l.ceilingFired {
		err = ErrLeaseCeiling
	}
	return l.state == leaseDeleted || l.state == leaseReleased, err
}

// settled reports whether a Delete or Release already succeeded.
func (l *Lease) settled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == leaseDeleted || l.state == leaseReleased
}

// ReceiptHandle returns the newest receipt handle.
func (l *Lease) ReceiptHandle() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handle
}

// Deadline returns when the message becomes visible again unless renewed:
// the end of the last visibility SQS confirmed, counted (conservatively)
// from when that request was sent.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Length returns the lease length: the visibility timeout each renewal asks
// for (WithVisibilityTimeout, the queue's, or the adaptive lease of the
// receive). Renewals come every third of it unless WithHeartbeatInterval
// says otherwise. It never changes; safe for concurrent use.
func (l *Lease) Length() time.Duration { return l.cfg.lease }

// Err reports why the lease ended: nil while it is active or after a
// successful Delete or Release; an error matching ErrLeaseLost or
// ErrLeaseExpired otherwise.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stateErrLocked(false)
}

// stateErrLocked returns the error a settle call gets in the current state.
func (l *Lease) stateErrLocked(settledIsErr bool) error {
	switch l.state {
	case leaseLost:
		return ErrLeaseLost
	case leaseExpired:
		return ErrLeaseExpired
	case leaseDeleted, leaseReleased:
		if settledIsErr {
			return ErrLeaseSettled
		}
	}
	if settledIsErr && l.stopped {
		return fmt.Errorf("%w: Stop was called; the message is left to SQS", ErrLeaseSettled)
	}
	return nil
}

// OnDeadline registers fn to be called after every confirmed change of the
// deadline (a renewal, an Extend, an Adopt), with the new deadline. fn runs
// on the lease's goroutines and must return quickly. The returned function
// unregisters it.
func (l *Lease) OnDeadline(fn func(deadline time.Time)) (remove func()) {
	p := &fn
	l.mu.Lock()
	if l.watchers == nil {
		l.watchers = new([]*func(time.Time))
	}
	*l.watchers = append(*l.watchers, p)
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		ws := *l.watchers
		for i, w := range ws {
			if w == p {
				// A new slice: notify may be ranging over the old one.
				*l.watchers = append(ws[:i:i], ws[i+1:]...)
				return
			}
		}
	}
}

// Adopt takes over a newer receive of the same message (SQS redelivered it
// while this lease still held it, e.g. after a missed renewal). From then on
// renewals, Delete and Release use receiptHandle, and the deadline and the
// ceiling count from receivedAt: when SQS handed the message over to the
// newer ReceiveMessage request (HandoverTime; the request's sending is
// always safe), which is assumed to have asked for the lease length. A
// lease that is already lost, expired or settled ignores Adopt.
func (l *Lease) Adopt(receiptHandle string, receivedAt time.Time) {
	l.adopt(receiptHandle, receivedAt, 0, l.cfg.lease)
}

// adopt is Adopt for a receive that asked for visibility vis.
func (l *Lease) adopt(receiptHandle string, receivedAt time.Time, receiveCount int, vis time.Duration) bool {
	l.mu.Lock()
	if l.state != leaseActive || receiptHandle == "" {
		l.mu.Unlock()
		return false
	}
	l.handle = receiptHandle
	l.handleGen++
	l.receivedAt = receivedAt
	if receiveCount > 0 {
		l.receiveCount = int32(min(receiveCount, math.MaxInt32))
	}
	l.noRenew, l.asked = false, false
	l.deadline = receivedAt.Add(min(vis, l.cfg.maxLease))
	l.nextRenew = l.deadline.Add(-(l.cfg.lease - l.cfg.interval))
	watchers, deadline := l.watcherList(), l.deadline
	l.mu.Unlock()
	l.wake()
	notify(watchers, deadline)
	return true
}

// watcherList returns the OnDeadline functions; the caller holds l.mu.
func (l *Lease) watcherList() []*func(time.Time) {
	if l.watchers == nil {
		return nil
	}
	return *l.watchers
}

func notify(watchers []*func(time.Time), d time.Time) {
	for _, w := range watchers {
		(*w)(d)
	}
}

func (l *Lease) wake() {
	l.mu.Lock()
	if l.hb != nil && !l.hbRunning {
		// Not started yet: move (or cancel) the timer instead. Stop
		// returning false means it fired and the heartbeat is starting;
		// it will read the new state itself.
		if l.state != leaseActive {
			l.cancelPendingLocked()
		} else if l.hb.Stop() {
			l.hb.Reset(l.firstWakeLocked(time.Now()))
		}
		l.mu.Unlock()
		return
	}
	kick := l.kick
	l.mu.Unlock()
	if kick != nil {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// visibilityForLocked clips a visibility request made at now to the ceiling;
// the caller holds l.mu.
// It returns 0 when no visibility at all fits.
func (l *Lease) visibilityForLocked(now time.Time, want time.Duration) time.Duration {
	left := l.receivedAt.Add(l.cfg.maxLease).Sub(now) - ceilingMargin
	if want > left {
		want = left
	}
	if want < 0 {
		return 0
	}
	return want.Truncate(time.Second)
}

// Delete deletes the message with the newest receipt handle. The heartbeat
// keeps running until SQS confirms. Transient errors are retried while the
// lease is valid and ctx allows. It refuses (without calling SQS) once the
// lease is lost or expired — a delete with a stale handle can succeed
// without deleting, so the library never tries one — and returns
// ErrLeaseSettled after a Delete or Release succeeded or while another is
// in flight.
func (l *Lease) Delete(ctx context.Context) error {
	if ctx == nil {
		return errNilContext("Delete")
	}
	if err := l.beginSettle(true); err != nil {
		return err
	}
	return l.settleWithRetry(ctx, "DeleteMessage", l.deleteCall, nil, leaseDeleted, EventDeleted, nil)
}

// Release sets the message's visibility to after (0 = visible at once, at
// most 12 h; clipped to the ceiling) so it is delivered again, and ends the
// lease. Errors and refusals are as for Delete.
func (l *Lease) Release(ctx context.Context, after time.Duration) error {
	if ctx == nil {
		return errNilContext("Release")
	}
	if after < 0 || after > MaxVisibilityTimeout {
		return fmt.Errorf("sqsconsumer: Release(%v): must be from 0 to %v", after, MaxVisibilityTimeout)
	}
	if err := l.beginSettle(false); err != nil {
		return err
	}
	if broken.Is(broken.ReleaseReportedEarly) {
		l.emit(EventReleased, after, nil)
	}
	var set time.Duration
	return l.settleWithRetry(ctx, "ChangeMessageVisibility", func(cctx context.Context, handle string) error {
		l.mu.Lock()
		set = l.visibilityForLocked(time.Now(), after.Round(time.Second))
		l.mu.Unlock()
		return l.cfg.calls.changeVisibility(cctx, handle, int32(set/time.Second))
	}, nil, leaseReleased, EventReleased, func() time.Duration { return set })
}

// Extend sets the message's visibility to d from now (whole seconds, 1 s to
// 12 h, clipped to the ceiling) in one call, for a handler that knows it
// needs longer; the heartbeat resumes its schedule from the new deadline.
// It returns ErrLeaseCeiling when the ceiling leaves no room.
func (l *Lease) Extend(ctx context.Context, d time.Duration) error {
	if ctx == nil {
		return errNilContext("Extend")
	}
	if d < time.Second || d > MaxVisibilityTimeout {
		return fmt.Errorf("sqsconsumer: Extend(%v): must be from 1s to %v", d, MaxVisibilityTimeout)
	}
	l.mu.Lock()
	if err := l.stateErrLocked(true); err != nil {
		l.mu.Unlock()
		return err
	}
	l.mu.Unlock()
	var sent time.Time
	var set time.Duration
	err := l.callWithRetry(ctx, "ChangeMessageVisibility", func(cctx context.Context, handle string) error {
		sent = time.Now()
		l.mu.Lock()
		set = l.visibilityForLocked(sent, d.Round(time.Second))
		l.mu.Unlock()
		if set < time.Second {
			return ErrLeaseCeiling
		}
		return l.cfg.calls.changeVisibility(cctx, handle, int32(set/time.Second))
	})
	if err != nil {
		return err
	}
	l.confirmVisibility(sent, set)
	return nil
}

func errNilContext(op string) error {
	return fmt.Errorf("sqsconsumer: Lease.%s(nil, ...): a context is required", op)
}

// lose marks the lease lost and cancels the handler's context.
func (l *Lease) lose(err error) {
	l.mu.Lock()
	if l.state != leaseActive {
		l.mu.Unlock()
		return
	}
	l.state = leaseLost
	cancel := l.cancel
	l.mu.Unlock()
	cause := fmt.Errorf("%w: %w", ErrLeaseLost, err)
	if cancel != nil {
		cancel(cause)
	}
	l.wake()
	l.emit(EventLeaseLost, 0, cause)
	l.log(slog.LevelWarn, "sqsconsumer: lease lost; the message will not be deleted", "error", err)
}

// expire marks the lease expired if its deadline (as given) still stands.
func (l *Lease) expire(deadline time.Time) {
	l.mu.Lock()
	if l.state != leaseActive || !l.deadline.Equal(deadline) {
		l.mu.Unlock()
		return
	}
	l.state = leaseExpired
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel(ErrLeaseExpired)
	}
	l.wake()
	l.emit(EventLeaseExpired, 0, ErrLeaseExpired)
	l.log(slog.LevelWarn, "sqsconsumer: lease expired before a renewal was confirmed; the message may be delivered again")
}

// emit tells the lease's event sink of kind.
func (l *Lease) emit(kind EventKind, vis time.Duration, err error) {
	var started time.Time
	if l.holder != nil {
		started = l.holder.workStarted()
	}
	l.cfg.events.emit(kind, l.msg, l.count(), l.arrived, started, vis, err)
}

// holderOf returns what holds the lease (a Consumer's delivery), nil for
// a lease made with NewLease.
func (l *Lease) holderOf() leaseHolder { return l.holder }

// arrivedAt is when the first answer that delivered the message reached
// this process. It never changes.
func (l *Lease) arrivedAt() time.Time { return l.arrived }

// count is the message's receive count at its latest receive.
func (l *Lease) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.receiveCount)
}

func (l *Lease) log(level slog.Level, msg string, args ...any) {
	if l.cfg.events.logger == nil {
		return
	}
	logSafely(l.cfg.events.logger, level, msg, append([]any{"message_id", l.msg.ID, "queue_url", l.cfg.events.queueURL}, args...)...)
}

// nearCeiling reports whether the lease is within its ceiling grace of the
// maximum lease duration at now (its holder's context is, or is about to
// be, cancelled with ErrLeaseCeiling).
func (l *Lease) nearCeiling(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ceilingFired || l.receivedAt.Add(l.cfg.maxLease).Sub(now) <= l.cfg.grace
}

// renewalOverdue reports whether SQS owes the lease a renewal: it is
// active, may still renew, and the renewal its deadline called for (one
// heartbeat interval into the visibility SQS last confirmed, or the
// receive's) was due more than slack before now; or it expired, no
// renewal confirmed in time. A renewal SQS does not confirm leaves the
// deadline where it was, however the retries are scheduled.
func (l *Lease) renewalOverdue(now time.Time, slack time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == leaseExpired {
		return true
	}
	if l.state != leaseActive || l.noRenew || l.deadline.IsZero() {
		return false
	}
	due := l.deadline.Add(-(l.cfg.lease - l.cfg.interval))
	return now.After(due.Add(slack))
}

// deleted reports whether SQS confirmed the message's delete.
func (l *Lease) deleted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == leaseDeleted
}

// callInFlight reports whether a call of the lease is in flight (it holds the
// call token): a Delete now waits for its answer.
func (l *Lease) callInFlight() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calling
}

// undone reports whether the message can no longer be deleted under this
// lease: it was released, or the lease was lost or expired.
func (l *Lease) undone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == leaseReleased || l.state == leaseLost || l.state == leaseExpired
}
