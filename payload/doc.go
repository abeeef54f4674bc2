// Package payload presents a handler with the payload a message carries,
// not the envelope it arrived in, and decodes it into a Go value.
//
// Most queues are fed by other services: a queue subscribed to an SNS topic
// receives each message inside an SNS notification envelope (unless the
// subscription's raw message delivery is on), an EventBridge rule's target
// receives the whole event, and S3 sends event notifications with a test
// message first. [Unwrap] is a middleware that takes these envelopes off:
//
//	unwrap, err := payload.Unwrap(payload.SNS) // what the queue carries; or payload.Auto
//	handler, err := payload.Handle(func(ctx context.Context, m *sqsconsumer.Message, o Order) error {
//		env := payload.FromContext(ctx) // env.SNS.TopicARN, env.SNS.Subject, ...
//		return process(ctx, o)
//	})
//	c, err := sqsconsumer.New(client, queueURL, handler, sqsconsumer.WithMiddleware(unwrap))
//
// The handler's message is a copy whose Body is the inner payload and whose
// MessageAttributes include the SNS envelope's attributes; everything else,
// the Lease and its receipt handle above all, is the original's, so the
// message is renewed, deleted or released as usual. [FromContext] gives
// the envelope: the SNS notification (topic ARN, subject, SNS message ID,
// timestamp), the EventBridge event (detail-type, source, ...), the parsed
// S3 records, and the original message.
//
// Detection is explicit by default: the formats given to Unwrap are what
// every body must be. [Auto] recognises each envelope by the members it
// always carries and passes any other body through untouched.
//
// # Failures that retrying cannot fix
//
// A body that is not the declared envelope, or that claims to be one but is
// malformed, and a body that does not decode into the handler's type, fail
// with errors wrapped by sqsconsumer.Permanent ([EnvelopeError],
// [DecodeError]) that say what is wrong (a missing field, the byte offset
// of a syntax error, the field of a type mismatch). The handler is not
// called and the message is not deleted. Retrying cannot help, so such a
// message belongs in the dead-letter queue: at once where the Consumer
// moves permanent failures there, else once the queue's redrive policy
// has seen maxReceiveCount receives.
//
// # Cost
//
// The envelope is read by a small JSON scanner that validates the body
// without building maps or reflecting on structs (a 1 KB SNS notification
// costs 7 allocations, most for the attribute map); the payload itself is
// decoded once, by the codec (encoding/json by default). The figures are
// in bench_test.go and in the repository's README, section "Measured"
// (payload is a package of the root module, github.com/sqskit/sqsconsumer).
//
// Large payloads stored in S3 by the Java and Python extended clients are
// read by the separate module github.com/sqskit/sqsconsumer/s3payload,
// whose middleware goes after Unwrap.
package payload
