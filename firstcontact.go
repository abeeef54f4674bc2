package sqsconsumer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// Run's first contact with SQS. Until SQS has answered a call, an error
// that no retry can cure means the Consumer is pointed at the wrong place
// or lacks the right to be there: Run fails at once, naming the queue and
// the cause, whichever call met it first (the read of the queue's
// attributes, or, when that read was skipped or refused and
// WithVisibilityTimeout makes it optional, the first receive). An error
// that can heal (a refused connection, a timeout, a 5xx, throttling, a
// DNS server failing) is retried, logged, and named in Health (Retrying)
// until SQS answers: the same with or without WithVisibilityTimeout. Once
// SQS has answered, the endpoint is known to be right, and the receive
// loop's own rules apply (receive.go, poll).

// signatureCodes are SQS's (and AWS's) answers to a request signed for
// the wrong region or with credentials it does not know: a client
// configured for another region than the queue's answers so at once, and
// forever.
var signatureCodes = map[string]bool{
	"SignatureDoesNotMatch":      true,
	"InvalidSignatureException":  true,
	"IncompleteSignature":        true,
	"MissingAuthenticationToken": true,
	"InvalidAccessKeyId":         true,
	"AuthFailure":                true,
	"OptInRequired":              true,
}

// cannotSucceed reports whether err, met before SQS ever answered, is one
// no retry can cure, and why in a few words for the error Run returns.
func cannotSucceed(err error) (why string, fatal bool) {
	if broken.Is(broken.FirstContactRetried) {
		return "", false
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		if dns.IsNotFound {
			return fmt.Sprintf("the endpoint's host %q does not resolve (no such host): check the client's region and endpoint against the queue URL's", dns.Name), true
		}
		return "", false // a DNS server failing or timing out can heal
	}
	var (
		unknownCA x509.UnknownAuthorityError // these five are errors as values
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		header    tls.RecordHeaderError
		alert     tls.AlertError
		verify    *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid):
		return "TLS: the endpoint's certificate cannot be verified (check the endpoint, and the CA bundle the client trusts)", true
	case errors.As(err, &header), errors.As(err, &alert):
		return "TLS: the handshake with the endpoint failed (is it an HTTPS endpoint of SQS?)", true
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code := apiErr.ErrorCode()
		var missing *types.QueueDoesNotExist
		switch {
		case errors.As(err, &missing) || code == "QueueDoesNotExist" || code == "AWS.SimpleQueueService.NonExistentQueue":
			return "it does not exist (check the region and account in its URL)", true
		case isAccessDenied(err):
			return fmt.Sprintf("access denied (%s)", apiErr.ErrorMessage()), true
		case signatureCodes[code]:
			return fmt.Sprintf("SQS refused the request's signature (%s: %s): the client's region and credentials must be the queue's", code, apiErr.ErrorMessage()), true
		case classify(err) == kindPermanent:
			return fmt.Sprintf("SQS refused the request (%s: %s)", code, apiErr.ErrorMessage()), true
		}
	}
	var re *awshttp.ResponseError
	if persistentClientError(err) && errors.As(err, &re) && re.HTTPStatusCode() != http.StatusRequestTimeout {
		// The endpoint answers, but not as SQS answers a good request:
		// another service, or a proxy's error page.
		return fmt.Sprintf("the endpoint answered HTTP %d, not as SQS would (check the client's endpoint)", re.HTTPStatusCode()), true
	}
	return "", false
}

// firstContactError is the error of a first contact with the queue at
// queueURL that cannot succeed, why (see cannotSucceed); the caller
// prefixes the call ("sqsconsumer: ReceiveMessage: ").
func firstContactError(queueURL, why string, err error) error {
	return fmt.Errorf("queue %s: %s: %w", queueURL, why, err)
}

// queueAttributes are the source queue's attributes Run reads at its
// start: the lease (when WithVisibilityTimeout is not given), the type,
// the poison path's dead-letter queue, the byte bound's first estimate of
// a message's size, and the long-poll wait (under WithWaitTime(0)).
var queueAttributes = []types.QueueAttributeName{
	types.QueueAttributeNameVisibilityTimeout, types.QueueAttributeNameFifoQueue,
	types.QueueAttributeNameRedrivePolicy, types.QueueAttributeNameQueueArn,
	types.QueueAttributeNameMaximumMessageSize, types.QueueAttributeNameReceiveMessageWaitTimeSeconds,
}

// attrNeed is how much Run needs the queue's attributes (readQueue).
type attrNeed uint8

const (
	// attrsOptional: the receives may go on without them
	// (WithVisibilityTimeout gives the lease, the URL tells FIFO).
	attrsOptional attrNeed = iota
	// attrsAwaited: optional for the lease, but WithRequireDeadLetterQueue
	// must see the RedrivePolicy: an error that can heal is retried as
	// for attrsRequired; access denied to them is returned (attrErr), and
	// the requirement says why it cannot be checked.
	attrsAwaited
	// attrsRequired: the queue's VisibilityTimeout is the lease.
	attrsRequired
)

// readQueue reads the attributes of the queue at queueURL at Run's start,
// its first contact with SQS, through c. It returns them, or, when the
// attributes are not required (need) and the read failed in a way the
// receives may get past (access to the attributes denied, or, for
// attrsOptional alone, an error that can heal), empty attributes and that
// error (attrErr: FIFO is then judged from the URL, the dead-letter queue
// from the option alone). An error that cannot succeed fails Run (err);
// an error that can heal, unless the attributes are optional, is retried
// with backoff, logged (ev) and named in Health (prog), until the read
// succeeds or ctx ends (err: ctx.Err()).
func readQueue(ctx context.Context, c Client, queueURL string, need attrNeed, prog *progress, ev *eventSink) (out *sqs.GetQueueAttributesOutput, attrErr, err error) {
	for failures := 0; ; failures++ {
		out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(queueURL), AttributeNames: queueAttributes})
		if err == nil {
			prog.answer()
			prog.recvErr.Store(nil)
			return out, nil, nil
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, nil, ctx.Err() // cancelled: Run returns nil
		}
		msg := err.Error()
		prog.recvErr.Store(&msg)
		why, fatal := cannotSucceed(err)
		switch {
		case fatal && isAccessDenied(err) && need != attrsRequired:
			// Receiving needs no right to the attributes.
			ev.log(slog.LevelDebug, "sqsconsumer: could not read the queue's attributes; FIFO is judged from the URL", "error", err)
			return &sqs.GetQueueAttributesOutput{}, err, nil
		case fatal && isAccessDenied(err):
			return nil, nil, fmt.Errorf("sqsconsumer: GetQueueAttributes: queue %s: reading its VisibilityTimeout: access denied (allow sqs:GetQueueAttributes, or set WithVisibilityTimeout to skip this read): %w", queueURL, err)
		case fatal:
			return nil, nil, fmt.Errorf("sqsconsumer: GetQueueAttributes: %w", firstContactError(queueURL, why, err))
		case need == attrsOptional:
			// The receives retry on their own.
			ev.log(slog.LevelWarn, "sqsconsumer: could not read the queue's attributes; FIFO is judged from the URL and the receives retry", "error", err)
			return &sqs.GetQueueAttributesOutput{}, err, nil
		}
		backoff := receiveBackoff(failures)
		ev.log(slog.LevelWarn, "sqsconsumer: reading the queue's attributes failed; retrying", "error", err, "backoff", backoff.String())
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		case <-t.C:
		}
	}
}
