package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/payload"
)

// priceChange is the published message.
type priceChange struct {
	SKU      string `json:"sku"`
	OldCents int64  `json:"old_cents"`
	NewCents int64  `json:"new_cents"`
}

// pricer handles price changes. Replace handle's body with your own work.
type pricer struct{ log *slog.Logger }

// handle is called with the price change already decoded; a body that did
// not decode never gets here (payload.Handle fails it permanently).
func (p pricer) handle(ctx context.Context, m *sqsconsumer.Message, c priceChange) error {
	if c.SKU == "" {
		// Valid JSON, but not a price change: no retry will fix it.
		return sqsconsumer.Permanent(errors.New("price change without a sku"))
	}
	attrs := []slog.Attr{
		slog.String("sku", c.SKU),
		slog.Int64("old_cents", c.OldCents),
		slog.Int64("new_cents", c.NewCents),
		slog.String("message_id", m.ID),
	}
	// The publisher's attribute, whether raw delivery is on or off.
	if a, ok := m.MessageAttributes["store"]; ok && a.StringValue != nil {
		attrs = append(attrs, slog.String("store", *a.StringValue))
	}
	// The envelope, when there was one (raw delivery has none).
	if n := payload.FromContext(ctx).SNS; n != nil {
		attrs = append(attrs,
			slog.String("topic_arn", n.TopicARN),
			slog.String("subject", n.Subject),
			slog.String("sns_message_id", n.MessageID))
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "price changed", attrs...)
	return nil
}

// failureLog logs each failed message with whether retrying can help.
type failureLog struct{ log *slog.Logger }

// Observe logs failures.
func (f failureLog) Observe(e sqsconsumer.Event) {
	if e.Kind != sqsconsumer.EventFailed {
		return
	}
	f.log.Warn("message failed", "message_id", e.MessageID, "receive_count", e.ReceiveCount,
		"permanent", sqsconsumer.IsPermanent(e.Err), "error", e.Err.Error())
}
