package payload

import (
	"context"
	"fmt"
	"strings"

	"github.com/sqskit/sqsconsumer"
)

// Format names an envelope a queue's bodies arrive in.
type Format uint8

// The formats Unwrap knows.
const (
	// Auto recognises each of the envelopes below by its shape and hands
	// any other body on untouched. It must be given alone. A body that
	// starts with '{' is scanned once to tell; any other body costs a
	// glance at its first byte.
	Auto Format = iota + 1
	// SNS is an SNS notification envelope: the subscription's raw message
	// delivery is off (SNS's default). The handler sees the published
	// message and its attributes; the envelope is in [FromContext].
	SNS
	// SNSRaw is an SNS subscription with raw message delivery on: the body
	// is the published message and the publisher's attributes are the SQS
	// message's attributes, so nothing is unwrapped (SNS sends no topic,
	// subject or message ID in this mode). A body that is an SNS envelope
	// fails: the subscription is not in raw mode.
	SNSRaw
	// EventBridge is an EventBridge event delivered by a rule without an
	// input transformer. The handler sees the event's detail object; the
	// rest is in [FromContext].
	EventBridge
	// S3Events is an S3 event notification. The body stays the
	// notification; its parsed records are in [FromContext]. The test
	// message S3 sends when notifications are configured (s3:TestEvent) is
	// acknowledged without calling the handler: the message is deleted.
	S3Events
)

var formatNames = [...]string{Auto: "auto", SNS: "SNS", SNSRaw: "SNS raw", EventBridge: "EventBridge", S3Events: "S3 events"}

// String returns the format's name, e.g. "EventBridge".
func (f Format) String() string {
	if f > 0 && int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// Envelope is what Unwrap took off a message. Handlers get it from
// [FromContext]; they must not modify it.
type Envelope struct {
	// Layers lists the envelopes removed, outermost first: [SNS,
	// S3Events] for an S3 notification sent through an SNS topic. It is
	// empty for a body Auto found plain.
	Layers []Format
	// SNS is the SNS envelope, nil if there was none.
	SNS *SNSNotification
	// Event is the EventBridge event, nil if there was none.
	Event *Event
	// S3 is the S3 notification, nil if there was none.
	S3 *S3Notification
	// Original is the message as received, body and attributes untouched.
	// Its Lease is the one the handler's message shares.
	Original *sqsconsumer.Message
}

type envelopeKey struct{}

// FromContext returns the envelope Unwrap took off the message being
// handled, or nil when the handler does not run under Unwrap.
func FromContext(ctx context.Context) *Envelope {
	e, _ := ctx.Value(envelopeKey{}).(*Envelope)
	return e
}

// EnvelopeError says why a body that claims to be an envelope, or that the
// queue was declared to carry, is not a valid one. Unwrap returns it
// wrapped in sqsconsumer.Permanent: redelivering the message cannot fix it.
type EnvelopeError struct {
	// Format is the envelope that was expected or claimed.
	Format Format
	// Reason says what is wrong, e.g. `no "Message" field`.
	Reason string
}

func (e *EnvelopeError) Error() string {
	return fmt.Sprintf("payload: body is not a valid %s envelope: %s", e.Format, e.Reason)
}

func malformed(f Format, format string, args ...any) error {
	return sqsconsumer.Permanent(&EnvelopeError{Format: f, Reason: fmt.Sprintf(format, args...)})
}

// Unwrap returns a middleware that takes the envelopes the queue's bodies
// arrive in off each message before the handler sees it. layers lists them
// outermost first: Unwrap(SNS) for a queue subscribed to an SNS topic,
// Unwrap(SNS, S3Events) for S3 notifications sent through a topic,
// Unwrap(EventBridge) for an EventBridge rule's target, Unwrap(Auto) to
// recognise any of them by shape.
//
// The handler gets a copy of the message whose Body is the inner payload
// and whose MessageAttributes include the SNS envelope's attributes (in
// SQS's form, Binary values decoded from base64), so a handler reads the
// same fields whether the subscription uses raw delivery or not. ID,
// Attributes, ReceiveCount, GroupID, ReceivedAt and Lease are the
// original's: the lease, the receipt handle and the delete are untouched.
// [FromContext] returns the envelope.
//
// A body that is not the declared envelope, or that claims to be one
// (Auto) but is malformed, fails with a permanent error
// (sqsconsumer.Permanent wrapping an *EnvelopeError) that says what is
// wrong. With Auto, a body claims to be an envelope only when it has all
// the members that envelope always carries (SNS: Type, MessageId,
// TopicArn and Timestamp; EventBridge: all nine top-level fields; S3:
// nothing but a Records array whose every element has "eventSource":
// "aws:s3"), so a plain JSON body is never taken for one; Auto looks inside
// an SNS envelope for an EventBridge event or S3 notification too.
//
// Put Unwrap before middleware that reads the body (the first argument of
// WithMiddleware is the outermost). The returned middleware is safe for
// concurrent use. Errors wrap sqsconsumer.ErrInvalidOption.
func Unwrap(layers ...Format) (sqsconsumer.Middleware, error) {
	if err := checkLayers(layers); err != nil {
		return nil, fmt.Errorf("%w: payload.Unwrap: %v", sqsconsumer.ErrInvalidOption, err)
	}
	layers = append([]Format(nil), layers...)
	return func(next sqsconsumer.Handler) sqsconsumer.Handler {
		return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
			if m == nil {
				return next.HandleMessage(ctx, m)
			}
			env, inner, skip, err := unwrap(layers, m)
			if err != nil || skip {
				return err
			}
			return next.HandleMessage(context.WithValue(ctx, envelopeKey{}, env), inner)
		})
	}, nil
}

// checkLayers validates a list of layers: Auto alone; SNS or SNSRaw only
// first; EventBridge or S3Events only last.
func checkLayers(layers []Format) error {
	if len(layers) == 0 {
		return fmt.Errorf("no format given; say what the queue carries (SNS, SNSRaw, EventBridge, S3Events) or Auto")
	}
	for i, f := range layers {
		switch f {
		case Auto:
			if len(layers) > 1 {
				//lint:ignore ST1005 the message names the Layer constant it is about
				return fmt.Errorf("Auto must be given alone, got %v", layers)
			}
		case SNS, SNSRaw:
			if i != 0 {
				return fmt.Errorf("%v can only be the outermost layer (first), got %v", f, layers)
			}
		case EventBridge, S3Events:
			if i != len(layers)-1 {
				return fmt.Errorf("%v can only be the innermost layer (last), got %v", f, layers)
			}
		default:
			return fmt.Errorf("unknown format %v at position %d", f, i)
		}
	}
	return nil
}

// unwrapped is everything Unwrap makes for one message, in one allocation.
type unwrapped struct {
	env    Envelope
	sns    SNSNotification
	inner  sqsconsumer.Message
	layers [2]Format
}

// unwrap applies layers to m. It returns the envelope, the message the
// handler sees, and skip = true for a message to acknowledge without
// calling the handler (the S3 test event).
func unwrap(layers []Format, m *sqsconsumer.Message) (*Envelope, *sqsconsumer.Message, bool, error) {
	u := &unwrapped{inner: *m}
	u.env.Original, u.env.Layers = m, u.layers[:0]
	var buf [16]member // the members of the body being peeled, on the stack
	if len(layers) == 1 && layers[0] == Auto {
		for depth := 0; depth < 2 && startsWithObject(u.inner.Body); depth++ {
			o, err := scanObjectInto(u.inner.Body, buf[:0])
			if err != nil {
				break // not JSON: plain
			}
			f := detect(o)
			if f == 0 || (f == SNS && depth > 0) {
				break
			}
			if skip, err := u.peel(f, o); err != nil || skip {
				return nil, nil, skip, err
			}
			if f != SNS {
				break
			}
		}
	} else {
		for _, f := range layers {
			var o object
			if f != SNSRaw {
				var err error
				if o, err = scanObjectInto(u.inner.Body, buf[:0]); err != nil {
					return nil, nil, false, malformed(f, "%v", err)
				}
			}
			if skip, err := u.peel(f, o); err != nil || skip {
				return nil, nil, skip, err
			}
		}
	}
	return &u.env, &u.inner, false, nil
}

// detect returns the envelope o claims to be, or 0.
func detect(o object) Format {
	switch {
	case snsClaim(o):
		return SNS
	case eventClaim(o):
		return EventBridge
	case s3Claim(o) || s3TestEvent(o):
		return S3Events
	}
	return 0
}

// peel takes layer f off u.inner.Body (whose object is o; nil for SNSRaw)
// and records it in u.env. skip is true for a message to acknowledge
// without calling the handler.
func (u *unwrapped) peel(f Format, o object) (skip bool, err error) {
	body := u.inner.Body
	switch f {
	case SNS:
		if !snsClaim(o) {
			return false, malformed(f, "%s; is raw message delivery on? Then declare SNSRaw", missing(o, "Type", "MessageId", "TopicArn", "Timestamp"))
		}
		if err := parseSNS(o, &u.sns); err != nil {
			return false, malformed(f, "%v", err)
		}
		attrs, err := sqsAttributes(u.inner.MessageAttributes, o)
		if err != nil {
			return false, malformed(f, "%v", err)
		}
		u.env.SNS = &u.sns
		u.inner.Body, u.inner.MessageAttributes = u.sns.Message, attrs
	case SNSRaw:
		if startsWithObject(body) {
			var buf [16]member
			if o, err := scanObjectInto(body, buf[:0]); err == nil && snsClaim(o) {
				return false, malformed(f, "the body is an SNS notification envelope, so raw message delivery is off: declare SNS, or turn raw delivery on")
			}
		}
	case EventBridge:
		if !eventClaim(o) {
			return false, malformed(f, "%s", missing(o, eventKeys...))
		}
		e, err := parseEvent(o)
		if err != nil {
			return false, malformed(f, "%v", err)
		}
		u.env.Event = e
		u.inner.Body = e.Detail
	case S3Events:
		if s3TestEvent(o) {
			return true, nil
		}
		if _, ok := o.get("Records"); !ok {
			return false, malformed(f, "no \"Records\" field")
		}
		n, err := parseS3(body)
		if err != nil {
			return false, malformed(f, "%v", err)
		}
		u.env.S3 = n
	default:
		return false, malformed(f, "unknown format")
	}
	u.env.Layers = append(u.env.Layers, f)
	return false, nil
}

// missing names the keys o lacks.
func missing(o object, keys ...string) string {
	var out []string
	for _, k := range keys {
		if _, ok := o.get(k); !ok {
			out = append(out, fmt.Sprintf("%q", k))
		}
	}
	if len(out) == 1 {
		return "no " + out[0] + " field"
	}
	return "no " + strings.Join(out, ", ") + " fields"
}
