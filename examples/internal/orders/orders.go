// Package orders is the handler the examples share: examples/worker runs it
// in a Consumer, examples/lambda in AWS Lambda, unchanged.
package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sqskit/sqsconsumer"
)

// Order is the example message body, one JSON object:
//
//	{"order_id": "o-1001", "amount_cents": 2599}
//
// OrderID is required; other fields are ignored.
type Order struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// ErrMalformed marks a message that no retry will fix.
var ErrMalformed = errors.New("malformed order")

// Parse decodes a message body. Its errors wrap ErrMalformed.
func Parse(body string) (Order, error) {
	var o Order
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		return Order{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if o.OrderID == "" {
		return Order{}, fmt.Errorf("%w: no order_id", ErrMalformed)
	}
	return o, nil
}

// Key is the idempotency key of a message: its order ID, so that two
// messages about the same order (a redelivery, or a producer that sent the
// order twice) are processed once. The prefix keeps the keys apart from
// other kinds of work in a shared store. A malformed body fails the
// message before the handler runs.
func Key(m *sqsconsumer.Message) (string, error) {
	o, err := Parse(m.Body)
	if err != nil {
		return "", err
	}
	return "order:" + o.OrderID, nil
}

// Handler is the example handler: it decodes an order and "processes"
// it (waits Work). Replace it with your own.
//
// What it shows:
//   - A body that can never be processed is failed, not deleted: the
//     queue's redrive policy moves it to the dead-letter queue after
//     maxReceiveCount receives, where someone can look at it. (Without a
//     redrive policy it is retried with backoff until the retention period
//     ends.)
//   - The context is honoured: it is cancelled when the lease is lost or
//     the shutdown budget runs out, and context.Cause says which.
//   - It runs inside the NewIdempotent middleware (examples/worker's runWith, examples/lambda's newHandler), keyed on the
//     order ID: an order already processed is skipped, so a redelivery or a
//     second message about the same order does not process it again. The
//     work itself should still tolerate a repeat: a handler cut off by
//     SIGKILL after its effect and before the completion was recorded runs
//     again elsewhere.
type Handler struct {
	Log  *slog.Logger  // where processed and duplicate orders are logged
	Work time.Duration // the stand-in for real work: how long each order takes
}

// HandleMessage processes one order.
func (h Handler) HandleMessage(ctx context.Context, m *sqsconsumer.Message) error {
	o, err := Parse(m.Body)
	if err != nil {
		return err
	}

	// The real work goes here: call services with ctx so that they stop
	// when it is cancelled.
	t := time.NewTimer(h.Work)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return fmt.Errorf("order %s: %w", o.OrderID, context.Cause(ctx))
	}

	h.Log.LogAttrs(ctx, slog.LevelInfo, "order processed",
		slog.String("order_id", o.OrderID),
		slog.Int64("amount_cents", o.AmountCents),
		slog.String("message_id", m.ID),
		slog.Int("receive_count", m.ReceiveCount))
	return nil
}

// LogDuplicate is the NewIdempotent middleware's duplicate hook: it logs an
// order skipped because it was already processed. The message is then
// deleted.
func (h Handler) LogDuplicate(ctx context.Context, m *sqsconsumer.Message, _ []byte) error {
	o, err := Parse(m.Body)
	if err != nil {
		return err // cannot happen: the key was derived from this body
	}
	h.Log.LogAttrs(ctx, slog.LevelInfo, "duplicate order skipped",
		slog.String("order_id", o.OrderID),
		slog.String("message_id", m.ID),
		slog.Int("receive_count", m.ReceiveCount))
	return nil
}

// Observer logs each message's outcome: failures at warn, deletes at
// debug, with the time since the message was received; the rest of a
// message's life at debug. Problems with the lease itself are logged by the
// library through WithLogger.
type Observer struct{ Log *slog.Logger }

// Observe logs e.
func (o Observer) Observe(e sqsconsumer.Event) {
	level := slog.LevelDebug
	if e.Kind == sqsconsumer.EventFailed {
		level = slog.LevelWarn
	}
	if !o.Log.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("event", e.Kind.String()),
		slog.String("message_id", e.MessageID),
		slog.Int("receive_count", e.ReceiveCount),
		slog.Int64("since_receive_ms", e.SinceReceive.Milliseconds()),
	}
	if e.GroupID != "" {
		attrs = append(attrs, slog.String("group_id", e.GroupID))
	}
	if e.Visibility > 0 {
		attrs = append(attrs, slog.Int64("visibility_s", int64(e.Visibility/time.Second)))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	o.Log.LogAttrs(context.Background(), level, "message "+e.Kind.String(), attrs...)
}
