// Package lambdasqs runs an sqsconsumer Handler or BatchHandler in AWS
// Lambda, fed by an SQS event source mapping, with the same middleware
// chain, leases and observers as a Consumer.
//
// The mapping receives the messages, invokes the function with up to its
// batch size of records, and deletes the records the function does not
// report as failed. The adapter returns a partial batch response
// (events.SQSEventResponse with batchItemFailures), which the mapping reads
// only when ReportBatchItemFailures is on in its FunctionResponseTypes
// (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html).
// Without it, any failure makes the mapping return the whole batch.
//
// While the function runs, each record's visibility is extended by a
// sqsconsumer.Lease heartbeat (ChangeMessageVisibility every third of the
// lease), so a job longer than the queue's visibility timeout is not handed
// to a second invocation meanwhile. The adapter never deletes: the mapping
// does that for the records reported as succeeded. Failed records become
// visible again when their visibility runs out, or after the delay their
// error asks for with sqsconsumer.RetryAfter: the adapter sets that
// visibility before it returns (on a FIFO queue the records reported
// failed after the first failure come back with it, at its delay).
//
// The function's deadline (from its context) is honoured: a reserve before
// it (WithReserve) the handlers' contexts are cancelled with ErrDeadline,
// the heartbeats stop, and every record not finished by then is reported
// as failed, so it comes back instead of being lost to a function timeout.
// A notice before that cutoff (WithDrainNotice) the drain begins:
// sqsconsumer.Draining of a handler's context (or a BatchHandler's) is
// closed, so that a long job can checkpoint and return
// sqsconsumer.RetryAfter(err, 0), and its record is released at once
// rather than cut at the cutoff.
//
// On FIFO queues (an event source ARN ending in .fifo) records are
// handled in order, and the response names every record from the first
// failure on, as the mapping requires.
//
// The function's role needs sqs:ChangeMessageVisibility on the queue, in
// addition to what the mapping needs.
package lambdasqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer"
	fifoorder "github.com/sqskit/sqsconsumer/internal/fifo"
)

// ErrDeadline is the cause of a handler's context cancelled because the
// function's deadline, less the reserve, was reached. Its record is
// reported as failed.
var ErrDeadline = errors.New("lambdasqs: the function's deadline is near; the record is reported failed and will be delivered again")

// errEarlierFailed is the error of a FIFO record not handled because an
// earlier record of the event failed.
var errEarlierFailed = errors.New("lambdasqs: an earlier record of the FIFO batch failed; not handled, reported failed to keep the order")

// eventSequence is the group, for internal/fifo's rules, of every record
// of a FIFO event: the event source mapping needs every record from the
// first failure on reported failed, whatever its message group, so the
// whole event is one sequence.
const eventSequence = ""

// inSequence is the group function of a FIFO event for fifoorder.EarlierFailed.
func inSequence(int) string { return eventSequence }

// Handler is the Lambda handler Wrap and WrapBatch return; pass it to
// lambda.Start. It is safe for concurrent use (Lambda calls it once at a
// time per execution environment).
type Handler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// Option configures Wrap and WrapBatch.
type Option func(*config)

type config struct {
	visibility  time.Duration
	reserve     time.Duration
	notice      time.Duration
	window      time.Duration
	concurrency int
	middleware  []sqsconsumer.Middleware
	observer    sqsconsumer.Observer
	leaseOpts   []sqsconsumer.LeaseOption
	queueURL    func(arn string) (string, error)
	errs        []error
}

const (
	minVisibility     = 3 * time.Second  // shorter leaves no room to renew (sqsconsumer's own minimum)
	maxVisibility     = 12 * time.Hour   // SQS's largest visibility timeout
	defaultVisibility = 30 * time.Second // SQS's default visibility timeout
)

// WithVisibilityTimeout is the queue's visibility timeout, which the
// mapping's receive used: the lease length, renewed every third of it.
// Whole seconds, 3 s to 12 h; default 30 s (SQS's default).
func WithVisibilityTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < minVisibility || d > maxVisibility || d%time.Second != 0 {
			c.errs = append(c.errs, fmt.Errorf("WithVisibilityTimeout(%v): must be whole seconds from %v to %v", d, minVisibility, maxVisibility))
			return
		}
		c.visibility = d
	}
}

// WithReserve is how long before the function's deadline the handlers'
// contexts are cancelled (ErrDeadline), heartbeats stop and the response
// is returned. Handlers get up to half of it to return after the
// cancellation. 100 ms to 1 min; default 1 s.
func WithReserve(d time.Duration) Option {
	return func(c *config) {
		if d < 100*time.Millisecond || d > time.Minute {
			c.errs = append(c.errs, fmt.Errorf("WithReserve(%v): must be from 100ms to 1m0s", d))
			return
		}
		c.reserve = d
	}
}

// WithDrainNotice is how long before the cutoff (the function's deadline
// less WithReserve) the drain begins: sqsconsumer.Draining of the
// handlers' contexts is closed, while the contexts themselves stay live
// until the cutoff. A drain that would begin before the invocation does
// begins at once. 0 (the drain begins at the cutoff, with the
// cancellation) to 15 min; default 1 s.
func WithDrainNotice(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > 15*time.Minute {
			c.errs = append(c.errs, fmt.Errorf("WithDrainNotice(%v): must be from 0 to 15m0s", d))
			return
		}
		c.notice = d
	}
}

// WithBatchingWindow is the mapping's MaximumBatchingWindowInSeconds: the
// records may have been received that long before the invocation, so each
// lease counts from then (its first renewal comes that much sooner).
// 0 to 5 min; default 0.
func WithBatchingWindow(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > 5*time.Minute {
			c.errs = append(c.errs, fmt.Errorf("WithBatchingWindow(%v): must be from 0 to 5m0s", d))
			return
		}
		c.window = d
	}
}

// WithConcurrency bounds how many records of a standard queue's event Wrap
// handles at once; default: all of them. (FIFO records are handled one at
// a time, in order; WrapBatch runs every record's middleware at once.)
// 1 to 10,000.
func WithConcurrency(n int) Option {
	return func(c *config) {
		if n < 1 || n > 10_000 {
			c.errs = append(c.errs, fmt.Errorf("WithConcurrency(%d): must be from 1 to 10000", n))
			return
		}
		c.concurrency = n
	}
}

// WithMiddleware wraps each record's handling, as the Consumer option of
// the same name does; the first middleware is the outermost.
func WithMiddleware(mws ...sqsconsumer.Middleware) Option {
	return func(c *config) {
		for i, mw := range mws {
			if mw == nil {
				c.errs = append(c.errs, fmt.Errorf("WithMiddleware: middleware %d is nil", i))
				return
			}
		}
		c.middleware = append(c.middleware, mws...)
	}
}

// WithObserver is told of each record's events (started, succeeded,
// failed, and the lease's renewals) and of each BatchHandler call
// (EventBatch). It must be safe for concurrent use; a panic in it is
// recovered.
func WithObserver(o sqsconsumer.Observer) Option {
	return func(c *config) {
		if o == nil {
			c.errs = append(c.errs, errors.New("WithObserver(nil)"))
			return
		}
		c.observer = o
		c.leaseOpts = append(c.leaseOpts, sqsconsumer.WithObserver(o))
	}
}

// WithLeaseOptions passes options to every record's sqsconsumer.NewLease
// (WithHeartbeatInterval, WithLogger, ...). WithVisibilityTimeout and
// WithReceivedAt are the adapter's own.
func WithLeaseOptions(opts ...sqsconsumer.LeaseOption) Option {
	return func(c *config) { c.leaseOpts = append(c.leaseOpts, opts...) }
}

// WithQueueURL maps a record's event source ARN to its queue URL. Default:
// https://sqs.REGION.amazonaws.com/ACCOUNT/NAME from
// arn:aws:sqs:REGION:ACCOUNT:NAME (the SDK client's endpoint decides where
// calls go; SQS routes by the URL's account and name).
func WithQueueURL(f func(arn string) (string, error)) Option {
	return func(c *config) {
		if f == nil {
			c.errs = append(c.errs, errors.New("WithQueueURL(nil)"))
			return
		}
		c.queueURL = f
	}
}

// QueueURL is WithQueueURL's default: the URL of the queue an SQS ARN
// names, arn:PARTITION:sqs:REGION:ACCOUNT:NAME.
func QueueURL(arn string) (string, error) {
	p := strings.Split(arn, ":")
	if len(p) != 6 || p[0] != "arn" || p[2] != "sqs" || p[3] == "" || p[4] == "" || p[5] == "" {
		return "", fmt.Errorf("lambdasqs: %q is not an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)", arn)
	}
	domain := "amazonaws.com"
	if p[1] == "aws-cn" {
		domain = "amazonaws.com.cn"
	}
	return "https://sqs." + p[3] + "." + domain + "/" + p[4] + "/" + p[5], nil
}

func newConfig(client sqsconsumer.Client, opts []Option) (*config, error) {
	c := &config{visibility: defaultVisibility, reserve: time.Second, notice: time.Second, queueURL: QueueURL}
	if client == nil {
		c.errs = append(c.errs, errors.New("client is nil"))
	}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("an Option is nil"))
			continue
		}
		o(c)
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("%w: lambdasqs: %w", sqsconsumer.ErrInvalidOption, errors.Join(c.errs...))
	}
	return c, nil
}

// Wrap returns a Lambda handler that runs h, inside the middleware, for
// each record of an SQS event, each under its own lease. A record
// succeeds when h returns nil; an error or a panic fails it. client makes
// the visibility calls (sqs.NewFromConfig(cfg) in the function's init).
// Bad arguments return an error wrapping sqsconsumer.ErrInvalidOption.
func Wrap(client sqsconsumer.Client, h sqsconsumer.Handler, opts ...Option) (Handler, error) {
	c, err := newConfig(client, opts)
	if err == nil && h == nil {
		err = fmt.Errorf("%w: lambdasqs: handler is nil", sqsconsumer.ErrInvalidOption)
	}
	if err != nil {
		return nil, err
	}
	a := &adapter{cfg: c, client: client, handler: sqsconsumer.Chain(h, c.middleware...)}
	return a.invoke, nil
}

// WrapBatch returns a Lambda handler that runs every record through the
// middleware on its own, then hands the records that got through to h in
// one call, in the event's order, and reports h's result per record, as a
// Consumer given sqsconsumer.Batch would (a BatchFailures names the
// failures; any other error, or a panic, fails them all). A record the
// middleware settles by itself (a duplicate skipped by Idempotent) is not
// in the call. On FIFO queues h gets only the records before the first
// one whose middleware failed.
func WrapBatch(client sqsconsumer.Client, h sqsconsumer.BatchHandler, opts ...Option) (Handler, error) {
	c, err := newConfig(client, opts)
	if err == nil && h == nil {
		err = fmt.Errorf("%w: lambdasqs: batch handler is nil", sqsconsumer.ErrInvalidOption)
	}
	if err != nil {
		return nil, err
	}
	a := &adapter{cfg: c, client: client, batch: h}
	a.handler = sqsconsumer.Chain(sqsconsumer.HandlerFunc(a.join), c.middleware...)
	return a.invoke, nil
}

type adapter struct {
	cfg     *config
	client  sqsconsumer.Client
	handler sqsconsumer.Handler      // the chain; ends in h, or in join
	batch   sqsconsumer.BatchHandler // WrapBatch's
}

// joinOnly reports whether WrapBatch's chain is join alone (no
// middleware): every record then joins at once, so one goroutine runs the
// batch (runJoined) instead of a goroutine per record and gather.
func (a *adapter) joinOnly() bool { return len(a.cfg.middleware) == 0 }

// record is one record's state during an invocation. The records of an
// invocation are allocated together.
type record struct {
	m        sqsconsumer.Message
	lease    *sqsconsumer.Lease
	queueURL string
	ctx      context.Context
	err      error       // its result, once finished is set
	finished atomic.Bool // set when its chain returned
	// WrapBatch: result gets the record's share of the batch's result.
	result chan error
}

// finish sets the record's result.
func (r *record) finish(err error) {
	r.err = err
	r.finished.Store(true)
}

type invocationKey struct{}

// invocation is what join needs: the records, by message ID (WrapBatch
// with middleware only).
type invocation struct {
	recs   []*record
	byID   map[string]int
	events chan joinEvent
}

func (a *adapter) invoke(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	start := time.Now()
	cutoff := start.Add(15 * time.Minute) // Lambda's longest timeout
	if d, ok := ctx.Deadline(); ok {
		cutoff = d.Add(-a.cfg.reserve)
	}
	records := make([]record, len(ev.Records))
	recs := make([]*record, 0, len(ev.Records))
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}} // [] rather than null: every record succeeded
	fifo := false
	ls, cancelAll := a.leaseSetup(ctx, start, cutoff)
	defer cancelAll()
	drain := time.AfterFunc(time.Until(cutoff.Add(-a.cfg.notice)), ls.beginDrain)
	defer drain.Stop()
	for i := range ev.Records {
		r := &records[i]
		if err := a.lease(ls, &ev.Records[i], r); err != nil {
			// Not leased: report it failed (it comes back) unless it
			// has no usable identifier at all.
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
			continue
		}
		fifo = fifo || strings.HasSuffix(ev.Records[i].EventSourceARN, ".fifo")
		recs = append(recs, r)
	}
	if len(resp.BatchItemFailures) > 0 && fifo {
		// An unusable record in a FIFO event: report everything.
		resp.BatchItemFailures = resp.BatchItemFailures[:0]
		for i := range ev.Records {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
		}
		for _, r := range recs {
			r.lease.Stop()
		}
		return resp, nil
	}
	defer func() {
		for _, r := range recs {
			r.lease.Stop() // never deletes: the mapping does
		}
	}()

	var g group
	switch {
	case a.batch != nil && a.joinOnly():
		g.start(1)
		go func() {
			defer g.done()
			a.runJoined(ls.base, recs, fifo)
		}()
	case a.batch != nil:
		a.runBatch(ls.base, recs, fifo, cutoff, &g)
	default:
		a.runEach(recs, fifo, &g)
	}
	// Wait for every record, or the cutoff and then half the reserve.
	timer := time.NewTimer(time.Until(cutoff))
	select {
	case <-g.all:
	case <-timer.C:
		timer.Reset(a.cfg.reserve / 2)
		select {
		case <-g.all:
		case <-timer.C:
		}
	}
	timer.Stop()

	failed := make([]bool, len(recs))
	for i, r := range recs {
		var err error
		if r.finished.Load() {
			err = r.err
		} else {
			err = fmt.Errorf("%w (still running at the cutoff)", ErrDeadline)
		}
		if err == nil && r.lease.Err() != nil {
			err = r.lease.Err() // handed to someone else meanwhile
		}
		failed[i] = err != nil
	}
	var earlier []bool
	if fifo {
		earlier = fifoorder.EarlierFailed(len(recs), inSequence, func(i int) bool { return failed[i] })
	}
	var retry []retryAt
	var first *retryAt // FIFO: the first failure's delay, which the records after it share
	for i, r := range recs {
		if !failed[i] && !(fifo && earlier[i]) {
			continue
		}
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.m.ID})
		switch {
		case fifo && first != nil:
			if first.ok {
				retry = append(retry, retryAt{r: r, after: first.after, ok: true})
			}
		case r.finished.Load():
			ra := retryAt{r: r}
			ra.after, ra.ok = sqsconsumer.RetryDelay(r.err)
			if ra.ok {
				retry = append(retry, ra)
			}
			first = &ra
		default:
			first = &retryAt{}
		}
	}
	a.release(ctx, retry)
	return resp, nil
}

// retryAt is a failed record to release for after (ok: its error asked
// for a delay with sqsconsumer.RetryAfter).
type retryAt struct {
	r     *record
	after time.Duration
	ok    bool
}

// releaseCalls bounds the visibility calls release makes at once.
const releaseCalls = 10

// release sets the visibility of each failed record whose error asked for
// a delay (sqsconsumer.RetryAfter), before the response goes back, within
// the function's deadline. A call that fails leaves the record to come
// back when its visibility runs out (the lease logs it, if it has a
// logger).
func (a *adapter) release(ctx context.Context, retry []retryAt) {
	if len(retry) == 0 {
		return
	}
	rctx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(rctx, d)
		defer cancel()
	}
	sem := make(chan struct{}, releaseCalls)
	var g group
	g.start(len(retry))
	for _, ra := range retry {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; g.done() }()
			_ = ra.r.lease.Release(rctx, ra.after)
		}()
	}
	<-g.all
}

// group counts an invocation's goroutines; the last one to return closes
// all (a goroutine waiting on a WaitGroup to close it cost a goroutine and
// a wake-up per invocation).
type group struct {
	left atomic.Int32
	all  chan struct{}
}

// start sets how many goroutines there are, before the first one starts.
func (g *group) start(n int) {
	g.all = make(chan struct{})
	g.left.Store(int32(n))
	if n == 0 {
		close(g.all)
	}
}

// done is called by each goroutine when it returns.
func (g *group) done() {
	if g.left.Add(-1) == 0 {
		close(g.all)
	}
}

// leaseSetup is what the records of one invocation share: the lease
// options, when the records were received, the context their handling
// derives from (cancelled at the cutoff; its Draining channel is drain),
// and the queue URL of the latest ARN.
type leaseSetup struct {
	opts       []sqsconsumer.LeaseOption
	receivedAt time.Time
	base       context.Context
	drain      chan struct{}
	arn, url   string
}

// beginDrain closes the invocation's drain channel (a timer's function,
// once).
func (ls *leaseSetup) beginDrain() { close(ls.drain) }

func (a *adapter) leaseSetup(ctx context.Context, start, cutoff time.Time) (*leaseSetup, context.CancelFunc) {
	receivedAt := start.Add(-a.cfg.window - time.Second)
	opts := make([]sqsconsumer.LeaseOption, 0, len(a.cfg.leaseOpts)+2)
	opts = append(opts, a.cfg.leaseOpts...)
	opts = append(opts, sqsconsumer.WithVisibilityTimeout(a.cfg.visibility), sqsconsumer.WithReceivedAt(receivedAt))
	drain := make(chan struct{})
	base, cancel := context.WithDeadlineCause(sqsconsumer.WithDrainSignal(context.WithoutCancel(ctx), drain), cutoff, ErrDeadline)
	return &leaseSetup{opts: opts, receivedAt: receivedAt, base: base, drain: drain}, cancel
}

// lease makes r, a record's lease, message and the context its handling
// runs in.
func (a *adapter) lease(ls *leaseSetup, e *events.SQSMessage, r *record) error {
	if e.EventSourceARN != ls.arn || ls.url == "" {
		url, err := a.cfg.queueURL(e.EventSourceARN)
		if err != nil {
			return err
		}
		ls.arn, ls.url = e.EventSourceARN, url
	}
	raw := toSQS(e)
	l, err := sqsconsumer.NewLease(a.client, ls.url, raw, ls.opts...)
	if err != nil {
		return err
	}
	r.lease, r.queueURL, r.ctx = l, ls.url, l.Start(ls.base)
	r.m = sqsconsumer.Message{
		ID:                e.MessageId,
		Body:              e.Body,
		Attributes:        e.Attributes,
		MessageAttributes: raw.MessageAttributes,
		GroupID:           e.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
		ReceivedAt:        ls.receivedAt, // the lease's clock starts there
		Lease:             l,
	}
	r.m.ReceiveCount, _ = strconv.Atoi(e.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	return nil
}

// Event builds the event an SQS event source mapping would send for msgs,
// received (with all system and message attributes) from the queue arn in
// region: for tests, and for code that plays the mapping.
func Event(arn, region string, msgs []types.Message) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
		r := events.SQSMessage{
			MessageId:      aws.ToString(m.MessageId),
			ReceiptHandle:  aws.ToString(m.ReceiptHandle),
			Body:           aws.ToString(m.Body),
			Md5OfBody:      aws.ToString(m.MD5OfBody),
			Attributes:     m.Attributes,
			EventSource:    "aws:sqs",
			EventSourceARN: arn,
			AWSRegion:      region,
		}
		if m.MD5OfMessageAttributes != nil {
			r.Md5OfMessageAttributes = *m.MD5OfMessageAttributes
		}
		if len(m.MessageAttributes) > 0 {
			r.MessageAttributes = make(map[string]events.SQSMessageAttribute, len(m.MessageAttributes))
			for k, v := range m.MessageAttributes {
				r.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue,
					BinaryValue: v.BinaryValue, StringListValues: v.StringListValues, BinaryListValues: v.BinaryListValues}
			}
		}
		ev.Records[i] = r
	}
	return ev
}

// toSQS converts a record to the SDK's shape. The strings point into e,
// which NewLease only reads.
func toSQS(e *events.SQSMessage) types.Message {
	m := types.Message{
		MessageId:     &e.MessageId,
		ReceiptHandle: &e.ReceiptHandle,
		Body:          &e.Body,
		Attributes:    e.Attributes,
	}
	if e.Md5OfBody != "" {
		m.MD5OfBody = &e.Md5OfBody
	}
	if len(e.MessageAttributes) > 0 {
		m.MessageAttributes = make(map[string]types.MessageAttributeValue, len(e.MessageAttributes))
		for k, v := range e.MessageAttributes {
			m.MessageAttributes[k] = types.MessageAttributeValue{
				DataType:         aws.String(v.DataType),
				StringValue:      v.StringValue,
				BinaryValue:      v.BinaryValue,
				StringListValues: v.StringListValues,
				BinaryListValues: v.BinaryListValues,
			}
		}
	}
	return m
}

// runEach starts Wrap's handling: a goroutine per record on a standard
// queue (at most the configured concurrency at once), one goroutine in
// order on a FIFO queue, stopping at the first failure.
func (a *adapter) runEach(recs []*record, fifo bool, g *group) {
	if fifo {
		g.start(1)
		go func() {
			defer g.done()
			var order fifoorder.Order[*record]
			for _, r := range recs {
				order.Enter(eventSequence, r)
			}
			for _, r := range recs {
				if order.Returning(eventSequence, r) {
					r.finish(errEarlierFailed)
					continue
				}
				a.handle(r, a.handler)
				order.Leave(eventSequence, r, r.err == nil) // not done: the rest is marked returning
			}
		}()
		return
	}
	var sem chan struct{}
	if a.cfg.concurrency > 0 && a.cfg.concurrency < len(recs) {
		sem = make(chan struct{}, a.cfg.concurrency)
	}
	g.start(len(recs))
	for _, r := range recs {
		go func() {
			defer g.done()
			if sem != nil {
				sem <- struct{}{}
				defer func() { <-sem }()
			}
			a.handle(r, a.handler)
		}()
	}
}

// handle runs h for one record, turning a panic into a failure, and
// reports the record's events.
func (a *adapter) handle(r *record, h sqsconsumer.Handler) {
	if err := context.Cause(r.ctx); err != nil && r.ctx.Err() != nil {
		// The cutoff passed (or the lease ended) before it could start.
		a.observe(sqsconsumer.EventFailed, r, err)
		r.finish(err)
		return
	}
	a.observe(sqsconsumer.EventStarted, r, nil)
	err := call(r.ctx, h, &r.m)
	if err != nil {
		a.observe(sqsconsumer.EventFailed, r, err)
	} else {
		a.observe(sqsconsumer.EventSucceeded, r, nil)
	}
	r.finish(err)
}

func call(ctx context.Context, h sqsconsumer.Handler, m *sqsconsumer.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &sqsconsumer.PanicError{Value: v}
		}
	}()
	return h.HandleMessage(ctx, m)
}

// runJoined is WrapBatch's handling when the chain is join alone: what
// runBatch, join and gather do then, on one goroutine. The records start
// in order; one whose context ended before (the cutoff, or its lease)
// fails with the cause, and on a FIFO queue the records after it fail
// with errEarlierFailed; the others go to the batch handler together, in
// base (the invocation's base context).
func (a *adapter) runJoined(base context.Context, recs []*record, fifo bool) {
	batch := make([]*record, 0, len(recs))
	ended := func(i int) bool { return recs[i].ctx.Err() != nil }
	var earlier []bool
	if fifo {
		earlier = fifoorder.EarlierFailed(len(recs), inSequence, ended)
	}
	for i, r := range recs {
		if ended(i) {
			err := context.Cause(r.ctx)
			a.observe(sqsconsumer.EventFailed, r, err)
			r.finish(err)
			continue
		}
		a.observe(sqsconsumer.EventStarted, r, nil)
		if fifo && earlier[i] {
			a.observe(sqsconsumer.EventFailed, r, errEarlierFailed)
			r.finish(errEarlierFailed)
			continue
		}
		batch = append(batch, r)
	}
	if len(batch) == 0 {
		return
	}
	results := a.batchResults(base, batch, fifo)
	for i, r := range batch {
		err := results[i]
		if err != nil {
			a.observe(sqsconsumer.EventFailed, r, err)
		} else {
			a.observe(sqsconsumer.EventSucceeded, r, nil)
		}
		r.finish(err)
	}
}

// runBatch starts WrapBatch's handling: every record's chain at once; the
// records that reach join go to the batch handler together once every
// record has joined or returned.
func (a *adapter) runBatch(base context.Context, recs []*record, fifo bool, cutoff time.Time, g *group) {
	inv := &invocation{recs: recs, byID: make(map[string]int, len(recs)), events: make(chan joinEvent, 2*len(recs))}
	for i, r := range recs {
		inv.byID[r.m.ID] = i
	}
	g.start(len(recs) + 1)
	for i, r := range recs {
		r.result = make(chan error, 1)
		r.ctx = context.WithValue(r.ctx, invocationKey{}, inv)
		go func() {
			defer g.done()
			a.handle(r, a.handler)
			inv.events <- joinEvent{i: i}
		}()
	}
	go func() {
		defer g.done()
		a.gather(base, inv, recs, fifo, cutoff)
	}()
}

// joinEvent says that record i joined (with its context) or, ctx nil,
// that its chain returned.
type joinEvent struct {
	i   int
	ctx context.Context
}

// join is the innermost step of WrapBatch's chain: it hands the record to
// gather and returns its share of the batch's result.
func (a *adapter) join(ctx context.Context, m *sqsconsumer.Message) error {
	inv, _ := ctx.Value(invocationKey{}).(*invocation)
	if inv == nil {
		return errors.New("lambdasqs: the batch step was called outside an invocation (a middleware replaced the context?)")
	}
	i, ok := inv.byID[m.ID]
	if !ok {
		return fmt.Errorf("lambdasqs: message %q is not a record of this invocation", m.ID)
	}
	inv.events <- joinEvent{i: i, ctx: ctx}
	return <-inv.recs[i].result
}

// gather waits until every record joined or returned, then calls the
// batch handler with the joined ones, in base (the invocation's base
// context), and hands out the results.
func (a *adapter) gather(base context.Context, inv *invocation, recs []*record, fifo bool, cutoff time.Time) {
	const (
		pending = iota
		joined
		left
	)
	state := make([]int8, len(recs))
	ctxs := make([]context.Context, len(recs))
	waiting := len(recs)
	timer := time.NewTimer(time.Until(cutoff))
	defer timer.Stop()
	for waiting > 0 {
		select {
		case e := <-inv.events:
			if state[e.i] != pending {
				continue // the return of a record that joined
			}
			waiting--
			if e.ctx != nil {
				state[e.i], ctxs[e.i] = joined, e.ctx
			} else {
				state[e.i] = left
			}
		case <-timer.C:
			// Out of time: the joined records fail with the rest.
			for i, r := range recs {
				if state[i] == joined {
					r.result <- ErrDeadline
				}
			}
			return
		}
	}
	var batch []*record
	var earlier []bool
	if fifo {
		// A record that returned before joining has its result set.
		earlier = fifoorder.EarlierFailed(len(recs), inSequence, func(i int) bool { return state[i] == left && recs[i].err != nil })
	}
	for i, r := range recs {
		if state[i] != joined {
			continue
		}
		if fifo && earlier[i] {
			r.result <- errEarlierFailed
			continue
		}
		batch = append(batch, r)
	}
	if len(batch) == 0 {
		return
	}
	results := a.batchResults(base, batch, fifo)
	for i, r := range batch {
		r.result <- results[i]
	}
}

// batchResults calls the batch handler for batch and returns each record's
// result; on a FIFO queue every record after the first failure fails too
// (errEarlierFailed), as the event source mapping requires.
func (a *adapter) batchResults(base context.Context, batch []*record, fifo bool) []error {
	results := a.callBatch(base, batch)
	if fifo {
		earlier := fifoorder.EarlierFailed(len(results), inSequence, func(i int) bool { return results[i] != nil })
		for i := range results {
			if earlier[i] {
				results[i] = errEarlierFailed
			}
		}
	}
	return results
}

// callBatch calls the batch handler for batch and returns each record's
// result. ctx is the invocation's base context, cancelled at the cutoff
// with ErrDeadline (the batch can outlive the invocation only past the
// cutoff).
func (a *adapter) callBatch(ctx context.Context, batch []*record) []error {
	msgs := make([]*sqsconsumer.Message, len(batch))
	for i, r := range batch {
		msgs[i] = &r.m
	}
	begun := time.Now()
	err := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = &sqsconsumer.PanicError{Value: v}
			}
		}()
		return a.batch(ctx, msgs)
	}()
	out := make([]error, len(batch))
	var bf sqsconsumer.BatchFailures
	switch {
	case err == nil:
	case errors.As(err, &bf):
		index := make(map[string]int, len(batch))
		for i, m := range msgs {
			index[m.ID] = i
		}
		for id, e := range bf {
			i, ok := index[id]
			if !ok {
				err = fmt.Errorf("lambdasqs: the batch handler reported message %q, which is not in its batch; failing the whole batch: %w", id, err)
				for i := range out {
					out[i] = err
				}
				break
			}
			out[i] = e
		}
	default:
		for i := range out {
			out[i] = err
		}
	}
	if a.cfg.observer != nil {
		now := time.Now()
		a.safeObserve(sqsconsumer.Event{Kind: sqsconsumer.EventBatch, QueueURL: batch[0].queueURL, Time: now, Err: err, Batch: msgs, SinceStart: now.Sub(begun)})
	}
	return out
}

// observe tells the observer of a record's event.
func (a *adapter) observe(kind sqsconsumer.EventKind, r *record, err error) {
	if a.cfg.observer == nil {
		return
	}
	now := time.Now()
	a.safeObserve(sqsconsumer.Event{Kind: kind, QueueURL: r.queueURL, MessageID: r.m.ID, ReceiveCount: r.m.ReceiveCount,
		GroupID: r.m.GroupID, Time: now, SinceReceive: now.Sub(r.m.ReceivedAt), Err: err, Message: &r.m})
}

func (a *adapter) safeObserve(e sqsconsumer.Event) {
	defer func() { _ = recover() }() // an observer's bug must not fail the invocation
	a.cfg.observer.Observe(e)
}
