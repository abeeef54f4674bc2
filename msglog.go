package sqsconsumer

import (
	"context"
	"log/slog"
)

// discardLogger is what Logger gives where there is nothing to log to.
var discardLogger = slog.New(slog.DiscardHandler)

// Logger returns the logger for a handler's own lines about its message:
// the Consumer's logger (WithLogger) with the message's fields, under the
// keys the library's own lines use, so that one query finds both:
//
//	queue_url      the queue's URL (unique across accounts and regions)
//	message_id     Message.ID
//	receive_count  Message.ReceiveCount
//	group_id       Message.GroupID, only when the message has one
//
// ctx is the handler's context, or any context derived from it (in
// middleware too). In a BatchHandler, ctx is the call's: its logger
// carries queue_url and batch_size (the number of messages in the call),
// and Message.Logger gives each message's. The context a Lease made with
// NewLease returns from Start carries the lease's (WithLogger among its
// options) the same way.
//
// Where there is nothing to log to (no WithLogger, or a context that is
// not the library's) Logger returns a logger that discards every line:
// never nil, so a handler may log unconditionally, and a handler tested
// with context.Background logs nowhere. Logger costs nothing unless
// called; each call with a logger makes a new one (slog.Logger.With):
// call it once per handler and keep it. Safe for concurrent use.
func Logger(ctx context.Context) *slog.Logger {
	if ctx == nil {
		return discardLogger
	}
	switch v := ctx.Value(ctxKey{}).(type) {
	case *Lease:
		return v.msg.Logger()
	case *batchCtx:
		if v.ev == nil || v.ev.logger == nil {
			return discardLogger
		}
		return v.ev.logger.With("queue_url", v.ev.queueURL, "batch_size", v.size)
	}
	return discardLogger
}

// Logger returns the logger for lines about m: its Consumer's (or its
// Lease's) logger with queue_url, message_id, receive_count and group_id
// (when m has one), as Logger(ctx) gives a handler. It is how a
// BatchHandler logs about one message of its batch. For a Message the
// library did not make (m.Lease nil, as in a handler's unit test), or
// without WithLogger, it returns a logger that discards every line; never
// nil. Each call makes a new logger. Safe for concurrent use.
func (m *Message) Logger() *slog.Logger {
	if m == nil || m.Lease == nil || m.Lease.cfg == nil {
		return discardLogger
	}
	ev := &m.Lease.cfg.events
	if ev.logger == nil {
		return discardLogger
	}
	if m.GroupID != "" {
		return ev.logger.With("queue_url", ev.queueURL, "message_id", m.ID, "receive_count", m.ReceiveCount, "group_id", m.GroupID)
	}
	return ev.logger.With("queue_url", ev.queueURL, "message_id", m.ID, "receive_count", m.ReceiveCount)
}
