package s3payload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqskit/sqsconsumer"
)

// Client is the part of the S3 API a Reader uses; *s3.Client satisfies it.
// DeleteObject is called only with WithDeleteAfterDelete.
type Client interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, optFns ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
}

// Limits of WithMaxSize.
const (
	// DefaultMaxSize is the largest payload a Reader fetches unless
	// WithMaxSize says otherwise: 64 MiB.
	DefaultMaxSize = 64 << 20
	// MaxMaxSize is the largest limit WithMaxSize accepts: 2 GiB, the
	// largest payload the Java client can store.
	MaxMaxSize = 2 << 30
)

// ReaderOption configures NewReader.
type ReaderOption func(*readerConfig) error

type readerConfig struct {
	buckets     map[string]bool
	maxSize     int64
	deleteAfter bool
	logger      *slog.Logger
}

// WithBuckets lists the buckets a pointer may name (at least one is
// required). A pointer to any other bucket fails permanently, before any
// S3 call: a message must never make the consumer read an arbitrary
// object with its own credentials. May be given more than once; the lists
// add up.
func WithBuckets(names ...string) ReaderOption {
	return func(c *readerConfig) error {
		for _, n := range names {
			if n == "" {
				return errors.New("WithBuckets: empty bucket name")
			}
			c.buckets[n] = true
		}
		return nil
	}
}

// WithMaxSize sets the largest payload the Reader fetches, in bytes (default
// DefaultMaxSize; 1 to MaxMaxSize). A message whose size attribute, or
// whose object, is larger fails permanently; the object is never read past
// the limit.
func WithMaxSize(n int64) ReaderOption {
	return func(c *readerConfig) error {
		if n < 1 || n > MaxMaxSize {
			return fmt.Errorf("WithMaxSize(%d): want 1 to %d bytes", n, int64(MaxMaxSize))
		}
		c.maxSize = n
		return nil
	}
}

// WithDeleteAfterDelete deletes each payload's S3 object once SQS has
// confirmed the deletion of its message (never before, and never for a
// message that failed, was released or lost its lease). Off by default:
// when a topic fans one message out to several queues, the consumers of
// the other queues read the same object. With it, the Reader must also be
// the Consumer's observer (sqsconsumer.WithObserver(r), or combined with
// sqsconsumer.Observers) and be closed with Close. Deletion failures are
// logged (WithLogger) and not retried: keep a lifecycle rule on the bucket
// to expire what is left behind.
func WithDeleteAfterDelete() ReaderOption {
	return func(c *readerConfig) error { c.deleteAfter = true; return nil }
}

// WithLogger logs failed object deletions to l. Default: nowhere.
func WithLogger(l *slog.Logger) ReaderOption {
	return func(c *readerConfig) error {
		if l == nil {
			return errors.New("WithLogger: logger is nil")
		}
		c.logger = l
		return nil
	}
}

// Reader fetches the payloads that the Java and Python extended clients
// (and Sender) offloaded to S3. Its Middleware replaces each such message's
// pointer body with the payload before the handler sees it. A Reader is
// safe for concurrent use and may serve several Consumers.
type Reader struct {
	client Client
	cfg    readerConfig

	mu      sync.Mutex
	pending map[*sqsconsumer.Lease]Pointer // handled messages (by lease) whose SQS delete is awaited; guarded by mu
	queue   []Pointer                      // objects to delete; guarded by mu
	wake    chan struct{}                  // signals the deleter; capacity 1
	running bool                           // the deleter goroutine is running; guarded by mu
	closed  bool                           // Close was called; guarded by mu
	done    chan struct{}                  // closed when the deleter returns
	stop    context.CancelFunc             // cancels the deleter's calls
	ctx     context.Context                // the deleter's calls' context
}

// NewReader returns a Reader that fetches payloads with client. WithBuckets
// is required. Errors wrap sqsconsumer.ErrInvalidOption.
func NewReader(client Client, opts ...ReaderOption) (*Reader, error) {
	if client == nil || isNil(client) {
		return nil, fmt.Errorf("%w: s3payload.NewReader: client is nil", sqsconsumer.ErrInvalidOption)
	}
	cfg := readerConfig{buckets: map[string]bool{}, maxSize: DefaultMaxSize}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: s3payload.NewReader: nil option", sqsconsumer.ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("%w: s3payload.NewReader: %v", sqsconsumer.ErrInvalidOption, err)
		}
	}
	if len(cfg.buckets) == 0 {
		return nil, fmt.Errorf("%w: s3payload.NewReader: no bucket allowed; name the buckets payloads may come from with WithBuckets", sqsconsumer.ErrInvalidOption)
	}
	r := &Reader{client: client, cfg: cfg, pending: map[*sqsconsumer.Lease]Pointer{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	r.ctx, r.stop = context.WithCancel(context.Background())
	return r, nil
}

// Offloaded describes the S3 object a handler's payload came from.
type Offloaded struct {
	Pointer Pointer
	// Size is the payload's size in bytes.
	Size int64
	// Original is the message as received: the pointer body and the size
	// attribute.
	Original *sqsconsumer.Message
}

type offloadedKey struct{}

// FromContext returns what the Reader fetched for the message being
// handled, or nil when its payload was not offloaded (or the handler does
// not run under a Reader).
func FromContext(ctx context.Context) *Offloaded {
	o, _ := ctx.Value(offloadedKey{}).(*Offloaded)
	return o
}

// FetchError says why an offloaded payload could not be read. It is
// wrapped in sqsconsumer.Permanent when retrying cannot help: the object
// or bucket does not exist, the object is archived or too large, the
// pointer is malformed or names a bucket that is not allowed. Otherwise
// (network errors, throttling, server errors, access denied) the message
// is retried with the Consumer's backoff. Either way it is not deleted.
type FetchError struct {
	Pointer Pointer // zero when the pointer could not be read
	Reason  string
	Err     error // the S3 error, if any
}

func (e *FetchError) Error() string {
	where := ""
	if e.Pointer.Bucket != "" {
		where = fmt.Sprintf(" s3://%s/%s", e.Pointer.Bucket, e.Pointer.Key)
	}
	if e.Err != nil {
		return fmt.Sprintf("s3payload: cannot read the offloaded payload%s: %s: %v", where, e.Reason, e.Err)
	}
	return fmt.Sprintf("s3payload: cannot read the offloaded payload%s: %s", where, e.Reason)
}

func (e *FetchError) Unwrap() error { return e.Err }

func permanent(p Pointer, err error, format string, args ...any) error {
	return sqsconsumer.Permanent(&FetchError{Pointer: p, Reason: fmt.Sprintf(format, args...), Err: err})
}

// sizeOf returns the message's size attribute, new name first.
func sizeOf(m *sqsconsumer.Message) (name string, v types.MessageAttributeValue, ok bool) {
	if v, ok := m.MessageAttributes[SizeAttribute]; ok {
		return SizeAttribute, v, true
	}
	if v, ok := m.MessageAttributes[LegacySizeAttribute]; ok {
		return LegacySizeAttribute, v, true
	}
	return "", v, false
}

// Middleware returns the middleware that fetches offloaded payloads. A
// message is offloaded when it has the size attribute (either name); any
// other message passes through at the cost of two map lookups. The
// handler gets a copy of the message whose Body is the payload and whose
// MessageAttributes lack the size attribute; ID, Lease and the rest are
// the original's. [FromContext] tells the handler where the payload came
// from.
//
// Under payload.Unwrap, put this middleware after it (inner): an SNS
// extended client's pointer arrives inside the SNS envelope, with the size
// attribute among the envelope's attributes.
func (r *Reader) Middleware() sqsconsumer.Middleware {
	return func(next sqsconsumer.Handler) sqsconsumer.Handler {
		return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
			if m == nil {
				return next.HandleMessage(ctx, m)
			}
			name, attr, ok := sizeOf(m)
			if !ok {
				return next.HandleMessage(ctx, m)
			}
			off, inner, err := r.fetch(ctx, m, name, attr)
			if err != nil {
				return err
			}
			err = next.HandleMessage(context.WithValue(ctx, offloadedKey{}, off), inner)
			if err == nil && r.cfg.deleteAfter && m.Lease != nil {
				r.mu.Lock()
				if !r.closed {
					r.pending[m.Lease] = off.Pointer // copies made by payload.Unwrap share the lease
				}
				r.mu.Unlock()
			}
			return err
		})
	}
}

func (r *Reader) fetch(ctx context.Context, m *sqsconsumer.Message, name string, attr types.MessageAttributeValue) (*Offloaded, *sqsconsumer.Message, error) {
	if attr.StringValue == nil {
		return nil, nil, permanent(Pointer{}, nil, "the %s attribute has no value", name)
	}
	declared, err := strconv.ParseInt(*attr.StringValue, 10, 64)
	if err != nil || declared < 0 {
		return nil, nil, permanent(Pointer{}, nil, "the %s attribute is %q, want a size in bytes", name, *attr.StringValue)
	}
	p, err := ParsePointer(m.Body)
	if err != nil {
		return nil, nil, permanent(Pointer{}, err, "the message has the %s attribute but its body is not a pointer", name)
	}
	if !r.cfg.buckets[p.Bucket] {
		return nil, nil, permanent(p, nil, "bucket %q is not among the allowed buckets (WithBuckets)", p.Bucket)
	}
	if declared > r.cfg.maxSize {
		return nil, nil, permanent(p, nil, "the payload has %d bytes (%s), over the limit of %d (WithMaxSize)", declared, name, r.cfg.maxSize)
	}
	out, err := r.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &p.Bucket, Key: &p.Key})
	if err != nil {
		return nil, nil, classifyGet(p, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(io.LimitReader(out.Body, r.cfg.maxSize+1))
	if err != nil {
		return nil, nil, &FetchError{Pointer: p, Reason: "reading the object failed", Err: err}
	}
	if int64(len(data)) > r.cfg.maxSize {
		return nil, nil, permanent(p, nil, "the object is larger than the limit of %d bytes (WithMaxSize)", r.cfg.maxSize)
	}
	inner := *m
	inner.Body = string(data)
	inner.MessageAttributes = maps.Clone(m.MessageAttributes)
	delete(inner.MessageAttributes, SizeAttribute)
	delete(inner.MessageAttributes, LegacySizeAttribute)
	return &Offloaded{Pointer: p, Size: int64(len(data)), Original: m}, &inner, nil
}

// classifyGet sorts a GetObject error into permanent and retryable.
func classifyGet(p Pointer, err error) error {
	var nsk *s3types.NoSuchKey
	var ios *s3types.InvalidObjectState
	var nsb *s3types.NoSuchBucket
	switch {
	case errors.As(err, &nsk):
		return permanent(p, err, "the object does not exist (deleted, expired by a lifecycle rule, or never written)")
	case errors.As(err, &nsb):
		return permanent(p, err, "the bucket does not exist")
	case errors.As(err, &ios):
		return permanent(p, err, "the object is archived and must be restored first")
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return permanent(p, err, "the object does not exist (deleted, expired by a lifecycle rule, or never written)")
		case "NoSuchBucket":
			return permanent(p, err, "the bucket does not exist")
		case "InvalidObjectState":
			return permanent(p, err, "the object is archived and must be restored first")
		}
	}
	return &FetchError{Pointer: p, Reason: "GetObject failed; the message will be retried", Err: err}
}

// Observe deletes the objects of messages whose deletion SQS confirmed,
// with WithDeleteAfterDelete; without it, it does nothing. It returns at
// once: the deletions run in a goroutine the Reader owns until Close.
func (r *Reader) Observe(e sqsconsumer.Event) {
	if !r.cfg.deleteAfter {
		return
	}
	switch e.Kind {
	case sqsconsumer.EventDeleted, sqsconsumer.EventFailed, sqsconsumer.EventReleased,
		sqsconsumer.EventLeaseLost, sqsconsumer.EventLeaseExpired, sqsconsumer.EventCeilingReached, sqsconsumer.EventDone:
	default:
		return
	}
	if e.Message == nil || e.Message.Lease == nil {
		return
	}
	k := e.Message.Lease
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pending[k]
	if !ok {
		return
	}
	delete(r.pending, k)
	if e.Kind != sqsconsumer.EventDeleted || r.closed {
		return // the message stays (or may stay) in the queue: so does its object
	}
	r.queue = append(r.queue, p)
	if !r.running {
		r.running = true
		go r.deleter()
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// deleter deletes the queued objects until Close.
func (r *Reader) deleter() {
	defer close(r.done)
	for {
		r.mu.Lock()
		batch := r.queue
		r.queue = nil
		closed := r.closed
		r.mu.Unlock()
		for _, p := range batch {
			_, err := r.client.DeleteObject(r.ctx, &s3.DeleteObjectInput{Bucket: &p.Bucket, Key: &p.Key})
			if err != nil && r.cfg.logger != nil {
				r.cfg.logger.Warn("s3payload: deleting an offloaded payload failed; the object stays", "bucket", p.Bucket, "key", p.Key, "error", err)
			}
		}
		if closed && len(batch) == 0 {
			return
		}
		if len(batch) == 0 {
			<-r.wake
		}
	}
}

// Close stops accepting deletions and waits until the ones already queued
// are done or ctx ends (then the calls in flight are cancelled and the
// rest abandoned, and Close returns ctx's error). Call it after the
// Consumer's Run has returned. Safe to call more than once; a Reader
// without WithDeleteAfterDelete has nothing to wait for.
func (r *Reader) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	running := r.running
	r.pending = map[*sqsconsumer.Lease]Pointer{}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	if !running {
		r.stop()
		return nil
	}
	select {
	case <-r.done:
		r.stop()
		return nil
	case <-ctx.Done():
		r.stop()
		<-r.done
		return ctx.Err()
	}
}
