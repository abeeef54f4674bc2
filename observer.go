package sqsconsumer

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Event describes one thing that happened to one message. An event carries
// what an observer needs to measure the message without keeping state of
// its own: the durations since its arrival and since its handler started,
// and (EventDone) the end of its delivery.
//
// EventDone is a Consumer's last event for a delivery, emitted exactly once
// for each EventReceived: when the handler (if it started) has returned and
// the lease is over, the message deleted, released, or left to SQS (lease
// lost or expired, delete failed). Its SinceReceive is the delivery's whole
// time in this process, and Err the handler's error (nil if it succeeded
// or never started). A Lease made with NewLease does not emit it.
type Event struct {
	Kind      EventKind
	QueueURL  string
	MessageID string
	// ReceiveCount is the message's ApproximateReceiveCount at its latest
	// receive (0 if unknown).
	ReceiveCount int
	// GroupID is the message's group on FIFO queues.
	GroupID string
	// Time is when the event happened.
	Time time.Time
	// SinceReceive is Time minus the arrival of the first ReceiveMessage
	// answer in this process that delivered the message: in-process
	// queueing included, the long poll's wait before the message came
	// excluded. (Message.ReceivedAt, the lease clock, may lie up to a
	// second earlier: see HandoverTime.)
	SinceReceive time.Duration
	// SinceStart is Time minus the moment the handler was called, 0 before
	// that (and for a Lease made with NewLease). On EventSucceeded and
	// EventFailed it is the handler's running time, and on EventBatch the
	// BatchHandler's.
	SinceStart time.Duration
	// Visibility is the timeout SQS accepted, for EventRenewed and
	// EventReleased.
	Visibility time.Duration
	// Err is the error, for EventFailed, EventRenewalFailed, EventLeaseLost,
	// EventLeaseExpired, EventCeilingReached and EventDeadLettered.
	Err error
	// Message is the message the event concerns (for a Lease made with
	// NewLease, one built from the received message); nil for EventBatch.
	Message *Message
	// Batch holds the messages of the call, for EventBatch (MessageID
	// and Message are then empty); the slice must not be modified.
	Batch []*Message
}

// Observer is told of every Event. Observe is called synchronously from the
// library's goroutines, often from many at once: it must be safe for
// concurrent use and return quickly (hand slow work to a goroutine of its
// own). A panic in Observe is recovered and logged (WithLogger); the event
// is lost to that observer, and the message's life goes on.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Observers combines several observers into one that calls each in order.
func Observers(obs ...Observer) Observer {
	return ObserverFunc(func(e Event) {
		for _, o := range obs {
			if o != nil {
				o.Observe(e)
			}
		}
	})
}

// eventSink is where the events of one queue's messages go: a Consumer's
// statistics (counted for every event) and the Observer, if any. Its
// methods are the one place an Event is built. It holds no state of its
// own; safe for concurrent use.
type eventSink struct {
	observer Observer
	logger   *slog.Logger   // the Consumer's (WithLogger); nil: nothing is logged
	stats    *statsRecorder // a Consumer's; nil for a lease made with NewLease
	queueURL string
}

// emit tells of one event of message m, received count times: arrived
// is when the answer that delivered it reached this process, started when
// its handler was called (zero: not yet), vis the visibility SQS accepted
// (EventRenewed, EventReleased).
func (s *eventSink) emit(kind EventKind, m *Message, count int, arrived, started time.Time, vis time.Duration, err error) {
	var now time.Time
	if s.stats != nil {
		s.stats.countKind(kind, count)
		switch kind {
		case EventStarted:
			now = time.Now()
			s.stats.started(m, now)
		case EventSucceeded, EventFailed:
			if !started.IsZero() {
				now = time.Now()
				s.stats.handled(now.Sub(started))
			}
		}
	}
	if s.observer == nil {
		return
	}
	if now.IsZero() {
		now = time.Now()
	}
	var sinceStart time.Duration
	if !started.IsZero() {
		sinceStart = now.Sub(started)
	}
	observe(s.observer, s.logger, Event{
		Kind:         kind,
		QueueURL:     s.queueURL,
		MessageID:    m.ID,
		ReceiveCount: count,
		GroupID:      m.GroupID,
		Time:         now,
		SinceReceive: now.Sub(arrived),
		SinceStart:   sinceStart,
		Visibility:   vis,
		Err:          err,
		Message:      m,
	})
}

// emitBatch tells of a BatchHandler's call over msgs, begun at begun,
// that returned err.
func (s *eventSink) emitBatch(msgs []*Message, begun time.Time, err error) {
	if s.observer == nil {
		return
	}
	now := time.Now()
	observe(s.observer, s.logger, Event{Kind: EventBatch, QueueURL: s.queueURL, Time: now, Err: err, Batch: msgs, SinceStart: now.Sub(begun)})
}

// observe calls o with e, recovering a panic: the library's goroutines
// (heartbeats, pollers, workers) must not end the process for a bug in an
// observer. The panic is logged to logger, if any.
func observe(o Observer, logger *slog.Logger, e Event) {
	defer func() {
		if v := recover(); v != nil {
			logSafely(logger, slog.LevelError, "sqsconsumer: an Observer panicked; the event is dropped", "panic", fmt.Sprint(v), "event", e.Kind.String(), "message_id", e.MessageID)
		}
	}()
	o.Observe(e)
}

// logSafely logs to logger (nil: nowhere), recovering a panic in its
// handler: a broken log handler must not take the process down from a
// library goroutine. Such a panic is dropped: there is nowhere left to
// report it.
func logSafely(logger *slog.Logger, level slog.Level, msg string, args ...any) {
	if logger == nil {
		return
	}
	defer func() { _ = recover() }()
	logger.Log(context.Background(), level, msg, args...)
}

// log logs msg at level to the Consumer's logger, if any, with the
// queue's URL.
func (s *eventSink) log(level slog.Level, msg string, args ...any) {
	if s.logger == nil {
		return
	}
	logSafely(s.logger, level, msg, append([]any{"queue_url", s.queueURL}, args...)...)
}
