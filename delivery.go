package sqsconsumer

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// A delivery is one message a run holds, from the receive that brought
// it to its settlement: the run's one record of it. It owns the message's
// Lease and Message (one allocation for the three), its times, and its
// ticket (its place in the flow and its handler slot, written only by the
// flow); the registry keeps it by message ID and in its FIFO group's
// order, and the batcher its place in a batch (bm).
//
// A delivery moves forward through the run's files, one goroutine
// holding it at a time: received and dispatched by a poller
// (receive.go), started by a worker (worker.go) or joined to a batch
// (batch.go), settled through the one door (settle.go). It passes between
// goroutines only through a lock (the flow's, the registry's, the
// batcher's) or a channel, so its plain fields need no lock of their own:
// each is written only by the goroutine that holds the delivery. What
// other goroutines read at any time (Health, the lease's events) is
// atomic.
type delivery struct {
	lease Lease
	msg   Message
	// ctx is the handler's context: the lease's, from Start at dispatch.
	ctx context.Context

	ticket ticket // its place in the flow: written only by the flow

	// started is when its handler was called (unix nanoseconds; 0
	// before); inHandler is set while the handler (or its batch) runs.
	started   atomic.Int64
	inHandler atomic.Bool

	// parked is set while it waits behind an older delivery of its own
	// message that winds down (its lease gone, its handler not returned):
	// it holds no handler slot, not even with a Batch handler, until that
	// one leaves and hands it on (finish), or it is handed back.
	parked atomic.Bool

	// retryAfter is the visibility its release asked for (a failure's
	// backoff), for the time SQS keeps it hidden; written and read by the
	// goroutine that settles it.
	retryAfter time.Duration

	// bm is its place in the batcher (Batch handlers), nil otherwise;
	// guarded by the batcher's mu.
	bm *member

	// size is the bytes it holds (messageBytes of the raw message), set
	// when it is made: what it weighs in the byte bound.
	size int64
}

// flowTicket gives the flow d's ticket.
func (d *delivery) flowTicket() *ticket { return &d.ticket }

// flowGroup gives the flow d's group, its tenant on a fair queue.
func (d *delivery) flowGroup() string { return d.msg.GroupID }

// flowBytes gives the flow d's size, for the byte bound.
func (d *delivery) flowBytes() int64 { return d.size }

// newDelivery makes the delivery of raw with its lease and message, in one
// allocation: handedOver is the receive's conservative hand-over estimate
// (the lease clock), arrived when its answer came; cfg is shared by the
// leases of the receive and must not change.
func newDelivery(raw types.Message, handedOver, arrived time.Time, cfg *leaseConfig) *delivery {
	d := &delivery{size: messageBytes(raw)}
	initLease(&d.lease, &d.msg, raw, handedOver, arrived, cfg, d)
	return d
}

// workStarted is when the handler was called, zero before (the lease's
// events' SinceStart).
func (d *delivery) workStarted() time.Time {
	if n := d.started.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// handlerStarts marks the call of its handler at now.
func (d *delivery) handlerStarts(now time.Time) {
	d.started.Store(now.UnixNano())
	d.inHandler.Store(true)
}

// running reports whether its handler runs, and since when.
func (d *delivery) running() (since time.Time, ok bool) {
	if !d.inHandler.Load() {
		return time.Time{}, false
	}
	return d.workStarted(), true
}
