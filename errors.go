package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// Sentinel errors. Match them with errors.Is; a handler's context reports
// the first four through context.Cause.
var (
	// ErrLeaseLost means SQS no longer accepts the lease's receipt handle:
	// it is stale (a newer receive superseded it), the message was deleted,
	// or it is no longer in flight. The message is never deleted after this.
	ErrLeaseLost = errors.New("sqsconsumer: lease lost: the receipt handle is stale or the message is no longer in flight")
	// ErrLeaseCeiling means the lease is about to reach its maximum
	// duration (12 hours after the receive by default), past which SQS
	// refuses to extend visibility. The message is not deleted.
	ErrLeaseCeiling = errors.New("sqsconsumer: lease ceiling reached: the message cannot stay invisible any longer")
	// ErrLeaseExpired means no renewal was confirmed before the lease's
	// deadline passed: the message may already be visible to other consumers.
	ErrLeaseExpired = errors.New("sqsconsumer: lease expired: no renewal was confirmed before the deadline")
	// ErrShutdown means the consumer is shutting down and the handler did
	// not finish within the shutdown timeout.
	ErrShutdown = errors.New("sqsconsumer: consumer shut down before the handler finished")
	// ErrLeaseSettled is returned by Delete, Release and Extend on a lease
	// that was already deleted, released or stopped (Lease.Stop leaves the
	// message to SQS: it comes back when its visibility runs out).
	ErrLeaseSettled = errors.New("sqsconsumer: lease already settled")
	// ErrInvalidOption wraps every validation error New and NewLease return.
	ErrInvalidOption = errors.New("sqsconsumer: invalid option")
)

// RetryAfter wraps a handler error to ask for the message to be delivered
// again after d (the visibility timeout to set, 0 to 12 h, rounded up to
// whole seconds) instead of after the configured backoff. A negative d is
// taken as 0 (deliver again at once) and one over 12 h as 12 h. It
// concerns this message only; for a downstream that refuses work, see
// Throttled.
//
// RetryAfter(nil, d) is not nil: it is how a handler asks to see the
// message again after d without an error of its own ("not yet": a job
// whose input is not ready). The message is not deleted, nothing failed
// (the breaker does not count it), and its error reads "retry
// requested". A RetryAfter around an error of the handler's own is a
// failure for the breaker unless Neutral marks it. The README's "Errors
// and retries" lists every case.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		err = errRetryRequested
	}
	return &retryAfterError{err: err, after: min(max(d, 0), MaxVisibilityTimeout)}
}

// errRetryRequested is the error of RetryAfter(nil, d): no failure.
var errRetryRequested = errors.New("retry requested")

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.err, e.after)
}

func (e *retryAfterError) Unwrap() error { return e.err }

// RetryDelay reports the delay RetryAfter (or, when it said one, Throttled)
// attached to err or to any error it wraps (0 to 12 h), and whether there
// is one: for code that settles messages outside a Consumer (lambdasqs
// releases a failed record for it).
func RetryDelay(err error) (time.Duration, bool) { return retryAfterOf(err) }

// retryAfterOf reports the delay RetryAfter (or, when it said one,
// Throttled) attached to err, if any.
func retryAfterOf(err error) (time.Duration, bool) {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.after, true
	}
	var th *throttledError
	if errors.As(err, &th) && th.after > 0 {
		return th.after, true
	}
	return 0, false
}

// Neutral wraps a handler error to say that it tells nothing about what
// the handler depends on: the message is not handled (it is retried after
// the backoff, or its RetryAfter delay), but the circuit breaker
// (WithBreaker) does not count it as a failure and the adaptive limit
// (WithAdaptiveConcurrency) does not react to it. Use it for a failure
// that belongs to the message or to this worker, not to a downstream
// (a lock another worker holds, an input that is not ready yet, a
// precondition of this message), so that many of them at once cannot
// open the breaker and pause receiving. errors.Is and errors.As see
// through the wrapper. Neutral(nil) is nil.
//
// Every result a handler can give, and what the breaker and the adaptive
// limit make of it, is listed in one place: see the README's "Errors and
// retries".
func Neutral(err error) error {
	if err == nil {
		return nil
	}
	return &neutralError{err: err}
}

// IsNeutral reports whether err, or any error it wraps, was marked by
// Neutral.
func IsNeutral(err error) bool {
	var n *neutralError
	return errors.As(err, &n)
}

type neutralError struct{ err error }

func (e *neutralError) Error() string { return e.err.Error() }
func (e *neutralError) Unwrap() error { return e.err }

// Throttled wraps a handler error to say that the downstream is refusing
// work (an HTTP 429 or 503 with Retry-After, a throttling exception, a
// quota) and will take more in d: back pressure. The Consumer then
//
//   - hands the message back for d (rounded up to whole seconds, at most
//     12 h; for d <= 0, the downstream did not say, its backoff as after
//     any failure: WithBackoff), as RetryAfter would;
//   - slows down before its next receive, not after five failures:
//     without WithAdaptiveConcurrency it pauses, receiving nothing and
//     starting none of the messages it holds until the message's delay
//     (d, or its backoff) has passed (the handlers running go on); with
//     it, it lowers its concurrency limit at once (and pauses for that
//     delay only when the limit is at its floor);
//   - does not count it as a failure for the circuit breaker, nor as a
//     success.
//
// A Permanent error stays permanent inside Throttled, and a message whose
// lease ended or that the shutdown cancelled is neither throttled nor
// failed, whatever the handler returns (the README's "Errors and
// retries" lists every case). Throttled says something of the whole
// downstream; for one message that must wait, use RetryAfter. In Lambda
// (package lambdasqs) a Throttled record is reported failed like any
// other. RetryAfterHeader reads an HTTP Retry-After header into d.
//
// Throttled(nil, d) is not nil: its error reads "downstream throttled".
// errors.Is and errors.As see through the wrapper; IsThrottled tells an
// Observer's EventFailed of a throttled message.
func Throttled(err error, d time.Duration) error {
	if err == nil {
		err = errors.New("downstream throttled")
	}
	return &throttledError{err: err, after: min(max(d, 0), MaxVisibilityTimeout)}
}

// IsThrottled reports whether err, or any error it wraps, was marked by
// Throttled.
func IsThrottled(err error) bool {
	var th *throttledError
	return errors.As(err, &th)
}

type throttledError struct {
	err   error
	after time.Duration // 0: the downstream did not say
}

func (e *throttledError) Error() string {
	if e.after <= 0 {
		return fmt.Sprintf("%v (throttled)", e.err)
	}
	return fmt.Sprintf("%v (throttled, retry after %v)", e.err, e.after)
}

func (e *throttledError) Unwrap() error { return e.err }

// RetryAfterHeader reads the value of an HTTP Retry-After header (RFC
// 9110, section 10.2.3: https://www.rfc-editor.org/rfc/rfc9110#field.retry-after),
// delay-seconds ("120") or an HTTP-date ("Fri, 31 Dec 1999 23:59:59
// GMT", counted from now), into the d for Throttled. ok is false, and d
// 0, for an empty or unreadable value; a date in the past gives 0 and
// true. The result is at most 12 h.
//
//	if resp.StatusCode == http.StatusTooManyRequests {
//		d, _ := sqsconsumer.RetryAfterHeader(resp.Header.Get("Retry-After"))
//		return sqsconsumer.Throttled(errors.New(resp.Status), d)
//	}
func RetryAfterHeader(value string) (d time.Duration, ok bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(value, 10, 64); err == nil {
		return time.Duration(min(secs, uint64(MaxVisibilityTimeout/time.Second))) * time.Second, true
	}
	at, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	return min(max(time.Until(at), 0), MaxVisibilityTimeout), true
}

// outcomeKind is what a handler's result says of the downstream the handler
// depends on: what the circuit breaker and the adaptive limit hear.
type outcomeKind int8

const (
	outcomeNeutral   outcomeKind = iota // says nothing about the downstream
	outcomeSuccess                      // the downstream did its part
	outcomeFailure                      // the downstream (or the handler) failed: the breaker counts it
	outcomeThrottled                    // the downstream refused for now: back pressure (Throttled)
)

// outcomeOf is the one place that sorts a handler's result (err, for a
// message whose handler ran, alone or in a batch) for the breaker and the
// adaptive limit, given why its lease ended or is ending (leaseErr: lost,
// expired, at its ceiling; nil while it lives) and whether the shutdown
// cancelled its handler. In order, the first that applies:
//
//   - nil: a success.
//   - The lease ended (lost, expired, at its ceiling), the shutdown
//     cancelled the handler, or err wraps ErrLeaseLost, ErrLeaseExpired,
//     ErrLeaseCeiling or ErrShutdown: neutral. The Consumer ended it, not
//     the downstream.
//   - A message failed without running because an earlier message of its
//     FIFO group failed (errEarlierFailed): neutral.
//   - RetryAfter(nil, d), a retry the handler asked for without an error:
//     neutral.
//   - Permanent: neutral (the message's fault; it goes to the dead-letter
//     queue).
//   - Neutral: neutral, as the handler said; NewIdempotent's middleware
//     marks so a duplicate it did not run because its key is in progress
//     elsewhere (ErrInProgress).
//   - Throttled: throttled. Not a failure: the adaptive limit lowers, or
//     the Consumer pauses for its delay.
//   - Anything else (an error, a panic, a handler timeout, a RetryAfter
//     around an error): a failure.
//
// Messages handed back without running (a pause, a shutdown, an open
// breaker, their lease ending while they waited) never reach it.
func outcomeOf(err error, leaseErr error, shutdown bool) outcomeKind {
	switch {
	case err == nil:
		return outcomeSuccess
	case broken.Is(broken.BreakerCountsNeutral):
		return outcomeFailure
	case leaseErr != nil, shutdown,
		errors.Is(err, ErrLeaseLost), errors.Is(err, ErrLeaseExpired), errors.Is(err, ErrLeaseCeiling), errors.Is(err, ErrShutdown),
		errors.Is(err, errEarlierFailed), errors.Is(err, errRetryRequested),
		IsPermanent(err), IsNeutral(err):
		return outcomeNeutral
	case IsThrottled(err) && broken.Is(broken.ThrottledCountsForBreaker):
		return outcomeFailure
	case IsThrottled(err):
		return outcomeThrottled
	}
	return outcomeFailure
}

// Permanent wraps a handler error to say that handling the message again
// cannot succeed: its body cannot be decoded, it violates a schema, it names
// something that does not exist. errors.Is and errors.As see through the
// wrapper to err. Permanent(nil) is nil, so that `return Permanent(err)`
// after a call that succeeded deletes the message rather than moving it
// to the dead-letter queue.
//
// A Permanent error wrapped by RetryAfter (or the other way round) is
// still permanent. An EventFailed carries the error, so observers can
// tell with IsPermanent(e.Err).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked by
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// PanicError is the error a handler's panic is turned into. Stack is the
// panicking goroutine's stack at the time of the panic.
type PanicError struct {
	Value any
	Stack []byte

	recovered bool   // made by protect (not a handler's own error value), not yet handed to a PanicPolicy (police)
	at        string // where it panicked, for the log (panicSite)
}

// protect runs f and turns a panic in it into a *PanicError with the
// panicking goroutine's stack: the one place where a panic of the user's
// code (a handler, a batch handler, a breaker probe) becomes an error.
func protect(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack(), recovered: true, at: panicSite()}
		}
	}()
	return f()
}

// panicSite names where a panic happened, called from a deferred recover:
// of the frames below runtime.gopanic, the first in the user's code
// (outside the runtime and this module's non-test files), else the first
// outside the runtime. "" if none is found.
func panicSite() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	var fallback string
	panicking := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			panicking = true
		case !panicking || strings.HasPrefix(f.Function, "runtime."):
		default:
			site := fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
			if !strings.HasPrefix(f.Function, "github.com/sqskit/sqsconsumer.") || strings.HasSuffix(f.File, "_test.go") {
				return site
			}
			if fallback == "" {
				fallback = site
			}
		}
		if !more {
			return fallback
		}
	}
}

func (e *PanicError) Error() string { return fmt.Sprintf("sqsconsumer: handler panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// errorKind is how the lease treats an error from a visibility or delete call.
type errorKind int

const (
	kindTransient errorKind = iota // retry while the deadline allows
	kindLost                       // the handle is no good: stop, never delete
	kindCeiling                    // the requested visibility passes SQS's 12 h limit
	kindPermanent                  // a request SQS will never accept (bad queue, access denied)
)

// Query-protocol and shape codes SQS uses for receipt-handle problems. With
// the query-compatible JSON protocol ErrorCode() may return either form
// (the SDK reports the x-amzn-query-error code when the response has one, else
// the shape name), so both are listed.
var lostCodes = map[string]bool{
	"ReceiptHandleIsInvalid":                    true,
	"MessageNotInflight":                        true,
	"AWS.SimpleQueueService.MessageNotInflight": true,
	"InvalidIdFormat":                           true,
}

var permanentCodes = map[string]bool{
	"QueueDoesNotExist":                           true,
	"AWS.SimpleQueueService.NonExistentQueue":     true,
	"AccessDenied":                                true,
	"AccessDeniedException":                       true,
	"InvalidAddress":                              true,
	"InvalidSecurity":                             true,
	"UnsupportedOperation":                        true,
	"AWS.SimpleQueueService.UnsupportedOperation": true,
	"InvalidClientTokenId":                        true,
	"UnrecognizedClientException":                 true,
	"MissingParameter":                            true,
	"MissingRequiredParameterException":           true,
	"KMS.AccessDeniedException":                   true,
	"KMS.DisabledException":                       true,
	"KMS.NotFoundException":                       true,
}

// classifyCode sorts an SQS error code and message — from an API error or
// from a failed batch entry — into what the lease does next. It is the one
// place that knows SQS's receipt-handle answers (the cases are listed in
// sqstest/doc.go).
func classifyCode(code, message string) errorKind {
	if lostCodes[code] {
		return kindLost
	}
	if code == "InvalidParameterValue" || code == "InvalidParameterValueException" {
		switch {
		case strings.Contains(message, "Total VisibilityTimeout for the message is beyond the limit"):
			return kindCeiling
		case strings.Contains(message, "not available for visibility timeout change"),
			strings.Contains(message, "receipt handle has expired"),
			strings.Contains(message, "is not a valid receipt handle"),
			strings.Contains(message, "parameter ReceiptHandle is invalid"):
			return kindLost
		}
		return kindPermanent
	}
	if permanentCodes[code] {
		return kindPermanent
	}
	return kindTransient
}

// classify sorts an error from an SQS call. Context cancellation by the
// caller and unknown errors (network failures, 5xx, throttling, timeouts)
// are transient.
func classify(err error) errorKind {
	if err == nil {
		return kindTransient
	}
	var rhi *types.ReceiptHandleIsInvalid
	var mni *types.MessageNotInflight
	var iif *types.InvalidIdFormat
	if errors.As(err, &rhi) || errors.As(err, &mni) || errors.As(err, &iif) {
		return kindLost
	}
	var qdne *types.QueueDoesNotExist
	if errors.As(err, &qdne) {
		return kindPermanent
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return classifyCode(apiErr.ErrorCode(), apiErr.ErrorMessage())
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return kindTransient
	}
	return kindTransient
}

// isAccessDenied reports whether err is SQS (or IAM) refusing the caller
// the action.
func isAccessDenied(err error) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode() {
	case "AccessDenied", "AccessDeniedException", "AWS.SimpleQueueService.AccessDenied":
		return true
	}
	return false
}

// persistentClientError reports whether err is an answer that retrying
// will not change: a 4xx other than throttling (or an answer the SDK could
// not decode as one).
func persistentClientError(err error) bool {
	var re *awshttp.ResponseError
	if !errors.As(err, &re) {
		return false
	}
	st := re.HTTPStatusCode()
	if st < 400 || st >= 500 || st == http.StatusTooManyRequests {
		return false
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "RequestThrottled", "ThrottlingException", "Throttling", "OverLimit", "KMS.ThrottlingException":
			return false
		}
	}
	return true
}

// errorIdentity is what two failures must share to count as the same
// error: the API error's code and message (the request ID differs every
// time), else the whole text.
func errorIdentity(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode() + ": " + apiErr.ErrorMessage()
	}
	return err.Error()
}

// EntryError is the error of one failed entry of a batch call, routed back
// to the lease that asked for it.
type EntryError struct {
	Op          string // "ChangeMessageVisibilityBatch" or "DeleteMessageBatch"
	Code        string
	Message     string
	SenderFault bool
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("sqsconsumer: %s entry failed: %s: %s", e.Op, e.Code, e.Message)
}

// ErrorCode and ErrorMessage make an EntryError look like an SQS API error
// to code that matches on smithy.APIError.
func (e *EntryError) ErrorCode() string    { return e.Code }
func (e *EntryError) ErrorMessage() string { return e.Message }
func (e *EntryError) ErrorFault() smithy.ErrorFault {
	if e.SenderFault {
		return smithy.FaultClient
	}
	return smithy.FaultServer
}

var _ smithy.APIError = (*EntryError)(nil)
