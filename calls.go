package sqsconsumer

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqskit/sqsconsumer/internal/coalesce"
)

// coalesceWindow is how long the coalesced calls wait for more entries
// before they send a partial call. It is tiny next to the slack renewing
// at a third leaves (a 30 s lease renews 20 s before its deadline).
const coalesceWindow = 25 * time.Millisecond

// maxEntries is the most entries SQS takes in one
// ChangeMessageVisibilityBatch or DeleteMessageBatch call.
const maxEntries = 10

// sqsCalls is how a lease reaches SQS: one request per call (singleCalls,
// a lease made with NewLease) or coalesced with other leases' into
// 10-entry calls (coalescedCalls, a Consumer's leases).
type sqsCalls interface {
	changeVisibility(ctx context.Context, handle string, seconds int32) error
	deleteMessage(ctx context.Context, handle string) error
}

// singleCalls makes one API call per request.
type singleCalls struct {
	client   Client
	queueURL string
}

func (s singleCalls) changeVisibility(ctx context.Context, handle string, seconds int32) error {
	_, err := s.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(s.queueURL),
		ReceiptHandle:     aws.String(handle),
		VisibilityTimeout: seconds,
	}, guardOpts...)
	return err
}

func (s singleCalls) deleteMessage(ctx context.Context, handle string) error {
	_, err := s.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{
		QueueUrl:      aws.String(s.queueURL),
		ReceiptHandle: aws.String(handle),
	}, guardOpts...)
	return err
}

type visEntry struct {
	handle  string
	seconds int32
}

// delEntry is one delete to coalesce: the handle and, for a lease's
// asynchronous delete (Lease.deleteAsync), the lease, the generation of
// the handle and what to call once SQS has answered, so that the answer
// goes back through one func value (deleteAnswered) made once.
type delEntry struct {
	handle string
	l      *Lease
	gen    uint32
	done   func(*Lease, error)
}

// entryIDs are the Ids of a batch call's entries, "0" to "9": the request
// points at them, so no Id is allocated per entry.
var entryIDs = [maxEntries]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// coalescedCalls coalesces visibility changes and deletes of many leases
// into ChangeMessageVisibilityBatch and DeleteMessageBatch calls: one
// coalesce.Coalescer each. A Consumer's calls run on its pollers between
// receives (runOn, flow.submit), or on a goroutine of their own when no
// poller takes them in time; close waits for every call in flight.
type coalescedCalls struct {
	vis *coalesce.Coalescer[visEntry]
	del *coalesce.Coalescer[delEntry]
	// retries counts the goroutines that carry on an asynchronous
	// delete whose first attempt did not simply succeed
	// (Lease.deleteRetry); close waits for them.
	retries sync.WaitGroup
	// report, when set, is told the result of every batch call as a
	// whole (nil: SQS answered, whatever its entries' fates), of a
	// delete or a visibility change, and, when SQS answered its first
	// attempt (rtt true), how long that took: a round trip, since these
	// calls never wait in a long poll. Set before the first call.
	report func(deleting bool, err error, took time.Duration, rtt bool)
}

// newCoalescedCalls makes the coalesced calls of a queue. Deletes have at
// most maxDeletes calls in flight (0: no limit): deletes come no faster
// than receives, and more calls at once would only open connections.
// Renewals are not limited: their rate follows the number of leases held.
// Cancelling base abandons every call sent under it (nil: never); rebase
// gives the later calls another.
func newCoalescedCalls(client Client, queueURL string, maxDeletes int, base context.Context) *coalescedCalls {
	var b *coalescedCalls // the calls report through it
	b = &coalescedCalls{
		vis: coalesce.New(maxEntries, coalesceWindow, 0, func(ctx context.Context, es []visEntry) []error {
			entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(es))
			for i := range es {
				entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
					Id:                &entryIDs[i],
					ReceiptHandle:     &es[i].handle, // the request points into es, which outlives the call
					VisibilityTimeout: es[i].seconds,
				}
			}
			sent := time.Now()
			out, err := client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
				QueueUrl: aws.String(queueURL),
				Entries:  entries,
			}, guardOpts...)
			if err != nil {
				b.reported(false, err, 0, false)
				return fill(len(es), err)
			}
			took, once := roundTrip(sent, out.ResultMetadata)
			b.reported(false, nil, took, once)
			return entryResults(len(es), "ChangeMessageVisibilityBatch", out.Successful, func(e types.ChangeMessageVisibilityBatchResultEntry) *string { return e.Id }, out.Failed)
		}),
		del: coalesce.New(maxEntries, coalesceWindow, maxDeletes, func(ctx context.Context, es []delEntry) []error {
			entries := make([]types.DeleteMessageBatchRequestEntry, len(es))
			for i := range es {
				// The request points into es, which outlives the call.
				entries[i] = types.DeleteMessageBatchRequestEntry{Id: &entryIDs[i], ReceiptHandle: &es[i].handle}
			}
			sent := time.Now()
			out, err := client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{
				QueueUrl: aws.String(queueURL),
				Entries:  entries,
			}, guardOpts...)
			if err != nil {
				b.reported(true, err, 0, false)
				return fill(len(es), err)
			}
			took, once := roundTrip(sent, out.ResultMetadata)
			b.reported(true, nil, took, once)
			return entryResults(len(es), "DeleteMessageBatch", out.Successful, func(e types.DeleteMessageBatchResultEntry) *string { return e.Id }, out.Failed)
		}),
	}
	if base != nil {
		b.vis.SetBase(base)
		b.del.SetBase(base)
	}
	return b
}

// rebase makes ctx the parent of the batch calls of the entries added
// from now on; the entries added before keep theirs (coalesce.SetBase).
func (b *coalescedCalls) rebase(ctx context.Context) {
	b.vis.SetBase(ctx)
	b.del.SetBase(ctx)
}

func (b *coalescedCalls) reported(deleting bool, err error, took time.Duration, rtt bool) {
	if b.report != nil {
		b.report(deleting, err, took, rtt)
	}
}

// roundTrip is how long a batch call sent at sent took, and whether that
// is one round trip: the SDK answered its first attempt (the call's
// metadata lists one attempt, or none when no retryer recorded any). A
// call the SDK retried also took its backoff.
func roundTrip(sent time.Time, md middleware.Metadata) (took time.Duration, once bool) {
	took = time.Since(sent)
	if res, ok := retry.GetAttemptResults(md); ok && len(res.Results) > 1 {
		return took, false
	}
	return took, true
}

func (b *coalescedCalls) changeVisibility(ctx context.Context, handle string, seconds int32) error {
	return b.vis.Do(ctx, visEntry{handle: handle, seconds: seconds})
}

func (b *coalescedCalls) deleteMessage(ctx context.Context, handle string) error {
	return b.del.Do(ctx, delEntry{handle: handle})
}

// runOn hands the coalesced calls to run (the Consumer's pollers, see
// flow.submit) instead of goroutines of their own.
func (b *coalescedCalls) runOn(run func(call func()) bool) {
	b.vis.RunOn(run)
	b.del.RunOn(run)
}

// close waits for the delete retries (they call the coalescers: a
// Consumer closes its calls only once every delivery has finished, so no
// retry starts meanwhile), then sends what is pending and waits for every
// call in flight.
func (b *coalescedCalls) close() {
	b.retries.Wait()
	b.vis.Close()
	b.del.Close()
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

var errNoEntryResult = errors.New("sqsconsumer: SQS returned neither success nor failure for a batch entry")

// entryResults maps a batch call's response back onto its n entries (Ids
// "0".."n-1", n at most maxEntries): nil for an entry listed as successful, its
// *EntryError for a failed one, errNoEntryResult for one listed as neither.
func entryResults[T any](n int, op string, successful []T, id func(T) *string, failed []types.BatchResultErrorEntry) []error {
	var ok [maxEntries]bool
	for _, e := range successful {
		if i, err := strconv.Atoi(aws.ToString(id(e))); err == nil && i >= 0 && i < n && i < maxEntries {
			ok[i] = true
		}
	}
	errs := make([]error, n)
	for i := range errs {
		if i >= maxEntries || !ok[i] {
			errs[i] = errNoEntryResult
		}
	}
	for _, f := range failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= n {
			continue
		}
		errs[i] = &EntryError{Op: op, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
	}
	return errs
}

// minDeleteCalls is the least number of delete calls a Consumer lets be
// in flight at once (otherwise one per receive it may have in flight): a
// burst of settlements waits for a call instead of opening a connection
// of its own.
const minDeleteCalls = 4

// idleConnsPerHost reports how many idle connections per host the HTTP
// client of c keeps for reuse, if it can tell: for an *sqs.Client (or any
// Client with an Options method returning sqs.Options) whose HTTP client
// is the SDK's *awshttp.BuildableClient, an *http.Client over an
// *http.Transport, or one wrapping either that has an Unwrap method
// (package sqsclient's); and for any Client or HTTP client that says so
// itself with a MaxIdleConnsPerHost method. A Transport's 0 means
// net/http's default, 2.
func idleConnsPerHost(c Client) (n int, ok bool) {
	if p, ok := c.(interface{ MaxIdleConnsPerHost() int }); ok {
		return p.MaxIdleConnsPerHost(), true
	}
	o, ok := c.(interface{ Options() sqs.Options })
	if !ok || isNil(o) {
		return 0, false
	}
	hc := o.Options().HTTPClient
	for range 8 { // wrappers of wrappers, within reason
		switch h := hc.(type) {
		case interface{ MaxIdleConnsPerHost() int }:
			return h.MaxIdleConnsPerHost(), true
		case *awshttp.BuildableClient:
			return transportIdle(h.GetTransport()), true
		case *http.Client:
			if tr, ok := h.Transport.(*http.Transport); ok {
				return transportIdle(tr), true
			}
			if h.Transport == nil {
				return transportIdle(http.DefaultTransport.(*http.Transport)), true
			}
			return 0, false
		case interface{ Unwrap() aws.HTTPClient }:
			hc = h.Unwrap()
		default:
			return 0, false
		}
	}
	return 0, false
}

func transportIdle(tr *http.Transport) int {
	if tr == nil {
		return 0
	}
	if tr.MaxIdleConnsPerHost > 0 {
		return tr.MaxIdleConnsPerHost
	}
	return http.DefaultMaxIdleConnsPerHost
}

// lanesPerIdleConn is how many calls a Consumer keeps in flight at most
// for each idle connection of an HTTP client it cannot trace (see
// inflight.go), and up to how many it rises quickly from the pool over
// one it can. Calls beyond the idle pool dial connections of their own
// that the pool closes again when it is full, each a TLS handshake.
// Measured over HTTPS at a 10 ms round trip with the SDK's default pool of
// 10 (bench/throughput), twice the pool kept new connections near 2 per
// 1,000 messages, where the Consumer's own bound (every slot and the
// whole read-ahead in full receives: 103 by default) opened about 150,
// before the Consumer kept its calls in flight steady (lanes.go,
// steadyLocked).
const lanesPerIdleConn = 2

// poolInfo is what New learnt of the HTTP client's connection pool, and
// whether it has bounded the calls in flight (limited: Stats.LimitedByPool).
type poolInfo struct {
	idle    int  // idle connections per host it keeps
	known   bool // idle is known (idleConnsPerHost)
	limited atomic.Bool
}
