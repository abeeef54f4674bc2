package sqsconsumer

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Message is one received SQS message as the handler sees it. The Consumer
// builds it; handlers may read every field and must not modify the maps.
type Message struct {
	// ID is the MessageId SQS assigned when the message was sent.
	ID string
	// Body is the message body as received.
	Body string
	// Attributes holds the system attributes as received (SentTimestamp,
	// ApproximateReceiveCount, ...). Values are SQS's strings.
	Attributes map[string]string
	// MessageAttributes holds the user attributes as received.
	MessageAttributes map[string]types.MessageAttributeValue
	// ReceiveCount is ApproximateReceiveCount: 1 on the first delivery.
	// 0 when SQS did not return it.
	ReceiveCount int
	// GroupID is the MessageGroupId of a message from a FIFO (or fair)
	// queue, "" otherwise.
	GroupID string
	// ReceivedAt is the conservative estimate of when SQS handed the
	// message over, where its visibility timeout started: never later than
	// SQS's real moment, and never earlier than the sending of the
	// ReceiveMessage request. On a long poll that is about a second
	// before the answer arrived, not when the poll was sent (see
	// HandoverTime). The lease's deadline and ceiling count from it.
	ReceivedAt time.Time
	// Lease owns the message's visibility from receipt to settlement.
	// It is never nil for a message handed to a handler by a Consumer.
	Lease *Lease
}

// Handler processes one message. Returning nil means the message was
// handled and may be deleted; an error means it should be retried later
// (see RetryAfter to choose when). The context is cancelled, with a cause
// that context.Cause reports, when the lease is lost (ErrLeaseLost), nears its
// ceiling (ErrLeaseCeiling), expires (ErrLeaseExpired) or the consumer stops
// waiting for it at shutdown (ErrShutdown). Draining(ctx) tells it earlier,
// at the shutdown's start, that it may hand its message back.
//
// HandleMessage is called from many goroutines at once.
type Handler interface {
	HandleMessage(ctx context.Context, m *Message) error
}

// HandlerFunc adapts an ordinary function to a Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// HandleMessage calls f(ctx, m).
func (f HandlerFunc) HandleMessage(ctx context.Context, m *Message) error { return f(ctx, m) }

// Middleware wraps a Handler with behaviour of its own, like net/http
// middleware. The first middleware given to WithMiddleware is the outermost.
type Middleware func(Handler) Handler

// Chain applies mws to h so that mws[0] is the outermost handler.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}
