package sqsconsumer

import (
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// The byte bound (WithMaxBytes): how many bytes of messages a Consumer
// holds, and how many messages the next receive may ask for so that it
// stays within them.
//
// A message is held from the answer of the receive that brought it until
// the Consumer lets go of it (it leaves the flow): read ahead, waiting for
// a slot or behind its FIFO group, running, and settling (its handler
// succeeded, its delete not yet confirmed: the Message the handler was
// given is still the Consumer's). SQS does not say how big the messages
// of a receive will be before it answers, so the bound acts on the
// receive's size: a receive asks for no more messages than fit beside the
// bytes held and those the receives in flight may bring, each counted at
// an estimate of a message's size. The estimate starts at the queue's
// MaximumMessageSize (read at Run; 1 MiB, SQS's largest, if it cannot be
// read), becomes the largest message of the first answer with any, jumps
// to any larger message received later, and otherwise comes down toward
// the receives' mean size (by a 64th of the gap a message). With
// messages of one size the bound is never exceeded; a message larger than
// the estimate can exceed it by the difference, for the receives in
// flight when it arrives. When nothing is held or asked for, one receive
// of one message is always let through, however large, so a message
// larger than the bound is still handled, alone.

// DefaultMaxBytes is the default WithMaxBytes: 64 MiB of messages held, 64
// messages of SQS's largest size (1 MiB), tens of thousands of typical
// ones (a few KB).
const DefaultMaxBytes = 64 << 20

// MaxBytesLimit is the largest WithMaxBytes: 1 TiB, no bound in practice.
const MaxBytesLimit = 1 << 40

// maxMessageBytes is SQS's largest message (body and message attributes),
// 1 MiB since August 2025: the estimate of a message's size before the
// queue's own MaximumMessageSize is known.
const maxMessageBytes = 1 << 20

// messageBytes is the bytes the Consumer holds for m: its body, its
// message attributes (names, types and values), its system attributes, its
// receipt handle and ID.
func messageBytes(m types.Message) int64 {
	n := len(deref(m.Body)) + len(deref(m.ReceiptHandle)) + len(deref(m.MessageId))
	for k, v := range m.Attributes {
		n += len(k) + len(v)
	}
	for k, v := range m.MessageAttributes {
		n += len(k) + len(deref(v.DataType)) + len(deref(v.StringValue)) + len(v.BinaryValue)
		for _, s := range v.StringListValues {
			n += len(s)
		}
		for _, b := range v.BinaryListValues {
			n += len(b)
		}
	}
	return int64(n)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// byteBudget is the byte bound's state. The flow owns it: held, starved
// and limited are atomic (a message's bytes are let go without the flow's
// lock); the rest is guarded by the flow's mu. max 0: no bound.
type byteBudget struct {
	max  int64
	held atomic.Int64 // bytes of the messages held now
	peak int64        // the most held at once
	est  int64        // the estimate of a message's size for the next receive
	seen bool         // a message has been received: est follows them
	// starved is set while a receive that is due waits for bytes to be
	// let go: then letting go of bytes wakes the flow. limited is set
	// once the bound made a receive ask for fewer messages.
	starved, limited atomic.Bool
}

// capLocked is how many of want messages the next receive may ask for,
// with asked messages asked for by the receives in flight: as many as fit
// beside the bytes held and asked at the estimate each; one when nothing
// is held or asked; 0 (starved) when none fits.
func (b *byteBudget) capLocked(want, asked int) int {
	if b.max <= 0 || broken.Is(broken.ByteBoundIgnored) {
		return want
	}
	// Starved first, then the bytes held: a message that lets go of its
	// bytes meanwhile (release, without the flow's lock) either is seen
	// here or sees starved and wakes the flow.
	b.starved.Store(true)
	held := b.held.Load()
	est := max(b.est, 1)
	fit := want
	if room := b.max - held - int64(asked)*est; room < int64(want)*est {
		fit = int(max(room, 0) / est)
	}
	if fit == 0 && held == 0 && asked == 0 {
		fit = 1 // one message alone, however large
	}
	if fit < want {
		b.limited.Store(true)
	}
	b.starved.Store(fit == 0)
	return fit
}

// receivedLocked counts the n messages of a receive's answer, of total
// bytes, the largest of them largest bytes, as held, and moves the
// estimate.
func (b *byteBudget) receivedLocked(n int, total, largest int64) {
	if n == 0 {
		return
	}
	if held := b.held.Add(total); held > b.peak {
		b.peak = held
	}
	if largest >= b.est || !b.seen {
		b.est, b.seen = largest, true // the first messages replace the queue's maximum
		return
	}
	mean := total / int64(n)
	b.est -= (b.est - mean) * int64(min(n, 64)) / 64
}

// release lets go of the bytes of a message that left, and reports
// whether a receive was waiting for them (the caller wakes the flow).
func (b *byteBudget) release(bytes int64) (wake bool) {
	b.held.Add(-bytes)
	return b.starved.Load()
}

// ByteCounts is what a Consumer's byte bound (WithMaxBytes) sees: the
// bytes of the messages it holds (read ahead, waiting, running and
// settling: see WithMaxBytes for what a message's bytes are).
type ByteCounts struct {
	// Max is the bound, Held the bytes held now, Peak the most held at
	// once since Run began, Estimate the size of a message the next
	// receive is sized with.
	Max, Held, Peak, Estimate int64
	// Limited is set once the bound made a receive ask for fewer messages
	// than it would have otherwise.
	Limited bool
}

// counts is the byte bound's figures, for Stats.
func (b *byteBudget) countsLocked() ByteCounts {
	return ByteCounts{Max: b.max, Held: b.held.Load(), Peak: b.peak, Estimate: b.est, Limited: b.limited.Load()}
}
