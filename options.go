package sqsconsumer

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer/ecsprotect"
)

// Defaults and limits. Every option's range is stated in its doc.
const (
	// defaultMaxLeaseDuration is the default WithMaxLeaseDuration.
	defaultMaxLeaseDuration = MaxVisibilityTimeout
	// defaultVisibilityTimeout is the lease length of a NewLease without
	// WithVisibilityTimeout (SQS's own queue default). A Consumer without
	// the option uses the queue's VisibilityTimeout instead.
	defaultVisibilityTimeout = 30 * time.Second
	// minVisibilityTimeout is the shortest lease the library accepts:
	// renewals need whole seconds and a margin.
	minVisibilityTimeout = 3 * time.Second
	// defaultWaitTime is the default long-poll wait (SQS's maximum).
	defaultWaitTime = 20 * time.Second
	// defaultReceiveSize and maxReceiveSize bound MaxNumberOfMessages
	// (WithBatchSize).
	defaultReceiveSize = 10
	maxReceiveSize     = 10
	// defaultConcurrency is the default number of handlers running at once.
	defaultConcurrency = 10
	// defaultShutdownTimeout is how long running handlers may finish after
	// Run's context is cancelled. It is below ECS's default 30 s stopTimeout.
	defaultShutdownTimeout = 20 * time.Second
	// defaultMaxReadAhead is the default WithMaxReadAhead, as many as
	// Pub/Sub's default MaxOutstandingMessages.
	defaultMaxReadAhead = 1000
	// maxReadAheadLimit is the largest WithMaxReadAhead: SQS lets about
	// 120,000 messages of a standard queue be in flight at once.
	maxReadAheadLimit = 120_000
)

// settings holds every option's value. New and NewLease fill it with
// defaults, apply the options, then validate.
type settings struct {
	visibility      time.Duration // 0 = queue's (Consumer) / defaultVisibilityTimeout (Lease)
	heartbeat       time.Duration // 0 = heartbeatInterval's rule
	maxLease        time.Duration
	ceilingGrace    time.Duration // 0 = one heartbeat interval
	ceilingGraceSet bool
	concurrency     int
	receiveSize     int // MaxNumberOfMessages of a full receive (WithBatchSize)
	waitTime        time.Duration
	pollers         int   // 0 = derived from concurrency and maxAhead (New sets it)
	adaptPollers    bool  // pollers was derived: the calls in flight follow the HTTP client (inflight.go)
	maxAhead        int   // read-ahead bound
	maxBytes        int64 // WithMaxBytes: bytes of the messages held
	shutdownTimeout time.Duration
	cancelIdlePolls bool          // WithCancelIdlePollsAtShutdown
	handlerTimeout  time.Duration // 0 = none
	backoff         func(receiveCount int) time.Duration
	middleware      []Middleware
	logger          *slog.Logger
	observer        Observer
	stats           *statsRecorder // a Consumer's own recorder, counted directly
	adaptiveMin     time.Duration
	adaptiveMax     time.Duration
	rateLimit       float64 // messages a second; 0 = none
	rateBurst       int
	fifoDispatch    bool      // WithFairDispatch(false)
	fairSet         bool      // WithFairDispatch was given (either way)
	groupLimit      int       // WithGroupLimit; 0 = none
	receivedAt      time.Time // Lease only: when SQS handed the message over
	errs            []error

	deadLetterURL string        // "" = from the queue's RedrivePolicy
	requireDLQ    bool          // WithRequireDeadLetterQueue
	breaker       *Breaker      // nil = off
	stallLimit    time.Duration // Health: 0 = default
	startupLimit  time.Duration // Health: 0 = DefaultStartupLimit
	handlerLimit  time.Duration // Health: 0 = default
	// WithAdaptiveConcurrency: on, its floor and initial limit (0 until
	// New fills in the default).
	adaptive                       bool
	adaptiveFloor, adaptiveInitial int

	scaling   *ScalingPolicy // WithScaling; nil = off
	scalingBy string         // the option that set scaling: "WithScaling" or "WithScalingTarget"

	protect    bool                  // WithScaleInProtection
	protector  *ecsprotect.Protector // its Protector: the caller's, or the Consumer's own (made in New)
	ownProtect bool                  // the Consumer made protector: Run starts and closes it

	panicPolicy func(context.Context, *Message, *PanicError) error // WithPanicPolicy; nil = the default
}

func defaultSettings() settings {
	return settings{
		maxLease:        defaultMaxLeaseDuration,
		concurrency:     defaultConcurrency,
		receiveSize:     defaultReceiveSize,
		waitTime:        defaultWaitTime,
		maxAhead:        defaultMaxReadAhead,
		maxBytes:        DefaultMaxBytes,
		shutdownTimeout: defaultShutdownTimeout,
		backoff:         DefaultBackoff,
	}
}

// settingsPool holds the settings settingsFor fills.
var settingsPool = sync.Pool{New: func() any { return new(settings) }}

// settingsFor applies opts over the defaults and checks what New and
// NewLease have in common: a client and a queue URL. Option errors stay in
// the settings' errs, after these.
func settingsFor[O Option](c Client, queueURL string, opts []O) (settings, []error) {
	// The options write through a pointer the compiler cannot follow, so
	// settings they fill would be allocated each time: NewLease, called
	// for each record of a Lambda event, borrows them instead.
	p := settingsPool.Get().(*settings)
	*p = defaultSettings()
	for _, o := range opts {
		if any(o) != nil {
			o.apply(p)
		}
	}
	s := *p
	*p = settings{} // keep no observer or logger alive
	settingsPool.Put(p)
	var errs []error
	if isNil(c) {
		errs = append(errs, fmt.Errorf("%w: client is nil", ErrInvalidOption))
	}
	if err := checkQueueURL(queueURL); err != nil {
		errs = append(errs, err)
	}
	return s, errs
}

// isNil reports whether v is nil or holds a nil pointer, map, func or
// channel (a typed nil such as a (*sqs.Client)(nil) passes a plain == nil
// check and panics at the first call).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface, reflect.Slice:
		return rv.IsNil()
	}
	return false
}

// checkQueueURL rejects what cannot be a queue URL, above all a queue
// name where the URL belongs: SQS identifies the queue by its URL
// (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME), which GetQueueUrl
// returns for a name.
func checkQueueURL(queueURL string) error {
	if queueURL == "" {
		return fmt.Errorf("%w: queue URL is empty", ErrInvalidOption)
	}
	if plainQueueURL(queueURL) {
		return nil
	}
	u, err := url.Parse(queueURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		if queueNameLike(queueURL) {
			return fmt.Errorf("%w: queue URL %q is not a URL: pass the queue's URL (such as https://sqs.us-east-1.amazonaws.com/123456789012/%s), not its name; GetQueueUrl turns a name into the URL",
				ErrInvalidOption, queueURL, queueURL)
		}
		return fmt.Errorf("%w: queue URL %q is not a URL (a queue URL looks like https://sqs.us-east-1.amazonaws.com/123456789012/NAME)", ErrInvalidOption, queueURL)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%w: queue URL %q: scheme %q is not http or https", ErrInvalidOption, queueURL, u.Scheme)
	}
	return nil
}

// plainQueueURL reports whether u has the plain shape of every SQS queue
// URL, http[s]://HOST[:PORT]/PATH with letters, digits, '.', '-' and '_'
// in the host and those, '/' and '~' in the path: a URL checkQueueURL
// accepts without parsing it (NewLease runs for each record of a Lambda
// event). Anything else is left to url.Parse.
func plainQueueURL(u string) bool {
	var rest string
	switch {
	case len(u) > len("https://") && u[:len("https://")] == "https://":
		rest = u[len("https://"):]
	case len(u) > len("http://") && u[:len("http://")] == "http://":
		rest = u[len("http://"):]
	default:
		return false
	}
	i := 0
	for i < len(rest) && (isAlnum(rest[i]) || rest[i] == '.' || rest[i] == '-' || rest[i] == '_') {
		i++
	}
	if i == 0 {
		return false // no host
	}
	if i < len(rest) && rest[i] == ':' {
		j := i + 1
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == i+1 {
			return false // an empty port
		}
		i = j
	}
	if i < len(rest) && rest[i] != '/' {
		return false
	}
	for ; i < len(rest); i++ {
		if c := rest[i]; !isAlnum(c) && c != '.' && c != '-' && c != '_' && c != '/' && c != '~' {
			return false
		}
	}
	return true
}

// queueNameLike reports whether s could be a queue's name: what SQS
// allows in one (1 to 80 letters, digits, hyphens and underscores, and a
// ".fifo" suffix), the usual mistake of passing the name for the URL.
func queueNameLike(s string) bool {
	name := strings.TrimSuffix(s, ".fifo")
	if name == "" || len(s) > 80 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// pollWait is the WaitTimeSeconds of every receive, as Run makes it:
// WithWaitTime's, or under WithWaitTime(0) the queue's
// ReceiveMessageWaitTimeSeconds (queueWait; known false when Run could not
// read it: SQS's longest then), never longer than the shutdown timeout,
// since a receive in flight at shutdown is never cancelled and must return
// within it, and at least a second. 0 only when the queue short-polls
// (WithWaitTime(0) on a queue whose wait is 0): the SDK cannot send a wait
// of 0, so receives leave WaitTimeSeconds out. It is pure, for table tests.
func (s *settings) pollWait(queueWait time.Duration, known bool) time.Duration {
	w := s.waitTime
	if w == 0 {
		switch {
		case !known:
			w = maxWaitTime
		case queueWait <= 0:
			return 0
		default:
			w = min(queueWait, maxWaitTime)
		}
	}
	return max(min(w, s.shutdownTimeout.Truncate(time.Second)), time.Second)
}

func (s *settings) fail(format string, args ...any) {
	s.errs = append(s.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
}

// Option configures a Consumer. Options that also configure a Lease made
// with NewLease implement LeaseOption, and go doc lists them under
// LeaseOption: WithVisibilityTimeout, WithHeartbeatInterval,
// WithMaxLeaseDuration, WithCeilingGrace, WithLogger, WithObserver (and
// WithReceivedAt, for NewLease only). Every one of them is an Option too.
//
// Options apply in order; one given twice takes its later value (so a
// team's options after a platform's defaults override them), except
// WithMiddleware, whose lists are concatenated, and WithScaling with
// WithScalingTarget, which New refuses together. Options that contradict
// each other, or that one makes do nothing, are refused by New (or Run,
// when only the queue can tell) with an error naming both (see New).
type Option interface {
	apply(*settings)
}

// LeaseOption configures a Lease; every LeaseOption is also an Option, so
// one value configures both a Consumer and its leases.
type LeaseOption interface {
	Option
	leaseOption()
}

type option func(*settings)

func (o option) apply(s *settings) { o(s) }

type leaseOption func(*settings)

func (o leaseOption) apply(s *settings) { o(s) }
func (leaseOption) leaseOption()        {}

// WithVisibilityTimeout sets the lease length: the visibility each renewal
// asks for, counted from the renewal. Range 3 s to
// 12 h, whole seconds. Consumer default: the queue's VisibilityTimeout,
// read at Run (the Consumer also asks for it on ReceiveMessage when set);
// Lease default: 30 s (SQS's own default for a queue).
func WithVisibilityTimeout(d time.Duration) LeaseOption {
	return leaseOption(func(s *settings) {
		if d < minVisibilityTimeout || d > MaxVisibilityTimeout || d%time.Second != 0 {
			s.fail("WithVisibilityTimeout(%v): must be whole seconds from %v to %v", d, minVisibilityTimeout, MaxVisibilityTimeout)
			return
		}
		s.visibility = d
	})
}

// WithHeartbeatInterval sets how often a lease renews. Default: a third of
// the lease length. Must be at least one second and less than half the lease.
func WithHeartbeatInterval(d time.Duration) LeaseOption {
	return leaseOption(func(s *settings) {
		if d < time.Second {
			s.fail("WithHeartbeatInterval(%v): must be at least 1s", d)
			return
		}
		s.heartbeat = d
	})
}

// WithMaxLeaseDuration caps how long a message may be held, counted from
// the receive: the lease never asks SQS for visibility past it. Range 1 s
// to 12 h; default (and SQS's limit) 12 h.
func WithMaxLeaseDuration(d time.Duration) LeaseOption {
	return leaseOption(func(s *settings) {
		if d < time.Second || d > MaxVisibilityTimeout {
			s.fail("WithMaxLeaseDuration(%v): must be from 1s to %v", d, MaxVisibilityTimeout)
			return
		}
		s.maxLease = d
	})
}

// WithCeilingGrace sets how long before the maximum lease duration the
// handler's context is cancelled with ErrLeaseCeiling, so it can checkpoint
// and stop while the message is still invisible. Default: one heartbeat
// interval. Range 0 to 12 h, and below WithMaxLeaseDuration (New refuses
// it otherwise, naming both).
func WithCeilingGrace(d time.Duration) LeaseOption {
	return leaseOption(func(s *settings) {
		if d < 0 || d > MaxVisibilityTimeout {
			s.fail("WithCeilingGrace(%v): must be from 0 to %v", d, MaxVisibilityTimeout)
			return
		}
		s.ceilingGrace = d
		s.ceilingGraceSet = true
	})
}

// WithObserver sets an Observer told of every event of every message.
// Default: none.
func WithObserver(o Observer) LeaseOption {
	return leaseOption(func(s *settings) {
		if o == nil {
			s.fail("WithObserver(nil): observer must not be nil")
			return
		}
		s.observer = o
	})
}

// WithLogger makes the library log warnings and errors (lease lost, panics,
// receive failures) and debug lines to l. Default: the library logs nothing.
// Handlers log through it with their message's fields with Logger(ctx).
func WithLogger(l *slog.Logger) LeaseOption {
	return leaseOption(func(s *settings) {
		if l == nil {
			s.fail("WithLogger(nil): logger must not be nil")
			return
		}
		s.logger = l
	})
}

// WithConcurrency sets how many handlers run at once. Range 1 to 100,000;
// default 10. Beyond the free handler slots the
// Consumer reads ahead a little (see WithMaxReadAhead), so a slot that
// frees finds a message waiting. A handler that succeeded gives its slot
// back at once while its message, still leased, waits for SQS to confirm
// the delete.
func WithConcurrency(n int) Option {
	return option(func(s *settings) {
		if n < 1 || n > 100_000 {
			s.fail("WithConcurrency(%d): must be from 1 to 100000", n)
			return
		}
		s.concurrency = n
	})
}

// WithBatchSize sets the receive size: MaxNumberOfMessages of each
// ReceiveMessage call, 1 to 10; default 10. A receive asks for fewer only
// when a free handler slot would otherwise have nothing coming. (It has
// nothing to do with Batch handlers, whose size Batch takes.)
func WithBatchSize(n int) Option {
	return option(func(s *settings) {
		if n < 1 || n > maxReceiveSize {
			s.fail("WithBatchSize(%d): must be from 1 to %d", n, maxReceiveSize)
			return
		}
		s.receiveSize = n
	})
}

// WithWaitTime sets the long-poll wait of each ReceiveMessage call
// (WaitTimeSeconds), whole seconds from 0 to 20 s; default 20 s.
//
// 0 takes the queue's ReceiveMessageWaitTimeSeconds, which Run reads at
// its start (Settings.WaitTime shows it from then on): every receive asks
// for that wait, so a later change to the queue's attribute applies from
// the next Run. A queue whose wait is 0 when Run reads it is short-polled:
// receives leave WaitTimeSeconds out (the Go SDK cannot send 0), so they
// follow the queue's attribute if it changes (up to 20 s, whatever the
// shutdown timeout); a receive of an empty queue answers at once, and an
// idle Consumer asks again at once, one billed call after another. When
// Run cannot read the queue's attributes (WithVisibilityTimeout lets it go
// on without them), it waits 20 s.
//
// A Consumer never waits longer than its shutdown timeout (at least 1 s):
// a shutdown never cancels a receive in flight, which may already hold
// messages, so each must return within the shutdown budget.
func WithWaitTime(d time.Duration) Option {
	return option(func(s *settings) {
		if d < 0 || d > maxWaitTime || d%time.Second != 0 {
			s.fail("WithWaitTime(%v): must be whole seconds from 0 to %v", d, maxWaitTime)
			return
		}
		s.waitTime = d
	})
}

// WithPollers fixes the most calls a Consumer has in flight at once
// (receives, and the deletes and visibility changes its pollers make
// between them), 1 to 1000. Pollers start as the flow needs them.
//
// Default: the calls in flight follow what the HTTP client sustains
// without closing connections and dialling new ones, up to enough to ask
// for every handler slot and the whole read-ahead in full receives,
// (concurrency + max read-ahead) / receive size (WithBatchSize) + 1. The
// Consumer traces its calls' connections (net/http/httptrace, through
// each call's context) and starts at the client's idle pool
// (MaxIdleConnsPerHost, when it can read it: 10 for the SDK's default
// client), where none can be lost; it rises while the pool keeps its
// connections and the work wants more calls, and falls when the pool
// closes them (Stats.MaxCallsInFlight, Stats.Conns). While the limit is
// what holds it back, a poller with nothing due receives anyway, within
// the read-ahead's bound, as a bare receive loop does: so the calls in
// flight stay steady and the pool keeps their connections. A client whose
// calls do not reach a net/http Transport with their context cannot be
// traced: its calls in flight stay within twice its idle pool when the
// Consumer can read the pool, and at the default's bound otherwise.
func WithPollers(n int) Option {
	return option(func(s *settings) {
		if n < 1 || n > 1000 {
			s.fail("WithPollers(%d): must be from 1 to 1000", n)
			return
		}
		s.pollers = n
	})
}

// WithMaxReadAhead bounds how many messages a Consumer holds or has asked
// for beyond its handler slots: received and waiting for a slot (leased:
// their visibility is renewed while they wait), or asked for by receives
// in flight. Range 0 to 120,000 (about what SQS lets a standard queue have
// in flight); default 1000.
// 0 turns read-ahead off: a receive then asks only for free slots, and
// each freed slot waits a receive round trip for its next message.
//
// Within the bound the Consumer reads ahead only what it needs: the
// messages its handlers finish during one receive round trip (Little's
// law, from its own measurements of both), plus up to one receive, as much
// as handlers finish in 100 ms, so that receives stay full. Fast handlers
// then never wait for a receive, and slow ones hold almost nothing
// unstarted, leaving the queue to other processes. Handlers that started
// together (a backlog of jobs of one length) finish together: the Consumer
// asks, one round trip ahead, for the messages of the handlers due to
// finish. The bound caps memory and what one process can take from a
// queue: throughput is at most about (concurrency + n) / (receive round
// trip + handler time). Messages whose handler succeeded give their slot
// back while SQS confirms their delete; at most concurrency + n wait so.
//
// What calls cost: at saturation a receive and a delete each serve 10
// messages (0.2 calls a message, plus renewals for long handlers). Below
// saturation a receive asks for fewer only when a free slot would
// otherwise wait for nothing, so a lightly loaded consumer makes more,
// smaller receives: it trades calls for latency.
func WithMaxReadAhead(n int) Option {
	return option(func(s *settings) {
		if n < 0 || n > maxReadAheadLimit {
			s.fail("WithMaxReadAhead(%d): must be from 0 to %d", n, maxReadAheadLimit)
			return
		}
		s.maxAhead = n
	})
}

// WithMaxBytes bounds the bytes of the messages a Consumer holds: from
// the answer of the receive that brought a message until the Consumer lets
// go of it, read ahead, waiting for a handler slot (or behind its FIFO
// group), running, and settling (its handler succeeded, SQS has not yet
// confirmed its delete). A message's bytes are its body, its message
// attributes (names, types, values), its system attributes, its receipt
// handle and ID: what the Consumer keeps of it. Range 1 to MaxBytesLimit
// (1 TiB); default DefaultMaxBytes (64 MiB).
//
// SQS does not say how big a receive's messages will be before it
// answers, so the bound acts before each receive: it asks for no more
// messages than fit beside the bytes held and what the receives in flight
// may bring, each message counted at an estimate of a message's size. The
// estimate starts at the queue's MaximumMessageSize (read at Run; 1 MiB,
// SQS's largest since August 2025, if it cannot be read), becomes the
// largest message of the first answer with any, jumps to any larger
// message received later, and otherwise comes down toward the mean size
// of the messages received (by a 64th of the gap a message). So with
// messages of one size the Consumer never holds more than n bytes; a
// message larger than the estimate can take it past n by the difference,
// for the receives in flight when it arrives, and the estimate then
// follows. When nothing is held or asked for, one receive of one message
// always goes out, however large: a message larger than n is handled,
// alone, and never blocks the Consumer.
//
// The bound works with WithConcurrency and WithMaxReadAhead, which bound
// messages by count: whichever is reached first holds the receives back.
// With 1 MiB messages the default lets at most 64 of them be held, so
// that many handlers at most run at once however high WithConcurrency is
// (Stats.Bytes.Limited says when the bound held a receive back). Besides
// the messages held, a process's heap carries the answers being decoded
// (the SDK reads each whole) and the garbage collector's slack: the
// README's "Measured" section gives the heap measured with 1 MiB messages.
func WithMaxBytes(n int64) Option {
	return option(func(s *settings) {
		if n < 1 || n > MaxBytesLimit {
			s.fail("WithMaxBytes(%d): must be from 1 to %d (1 TiB)", n, int64(MaxBytesLimit))
			return
		}
		s.maxBytes = n
	})
}

// WithShutdownTimeout sets how long running handlers may finish after
// Run's context is cancelled, while their leases keep being renewed; then
// their contexts are cancelled with ErrShutdown and their messages
// released. Range 0 to 12 h; default 20 s (below ECS's default 30 s stopTimeout).
func WithShutdownTimeout(d time.Duration) Option {
	return option(func(s *settings) {
		if d < 0 || d > MaxVisibilityTimeout {
			s.fail("WithShutdownTimeout(%v): must be from 0 to %v", d, MaxVisibilityTimeout)
			return
		}
		s.shutdownTimeout = d
	})
}

// WithCancelIdlePollsAtShutdown makes the shutdown cancel the long polls
// in flight that have waited idlePollAge (1 s) or more, instead of waiting
// for them to return. An idle Consumer then stops within a round trip
// rather than at the end of its poll (up to WithWaitTime, 20 s by
// default, 10 s on average), which speeds up every rolling deploy of an
// idle service.
//
// The cost, and why it is off by default: SQS may hand a message to a
// poll in the instant before it is cancelled; the answer is then lost,
// and the message stays invisible for one lease (the receive's
// visibility timeout) and has one more receive counted, before SQS hands
// it out again. Nothing is lost; such a message is late. Only a message
// that arrives within about one round trip of the cancellation can be
// caught so (a poll that has waited a second is waiting on an empty
// queue: a poll that found messages answers at once), so the risk grows
// with the rate at which messages arrive on a queue that looks idle.
// Without this option a shutdown never cancels a receive in flight, and
// no message is ever caught that way. Default: off.
func WithCancelIdlePollsAtShutdown() Option {
	return option(func(s *settings) { s.cancelIdlePolls = true })
}

// WithHandlerTimeout bounds each handler call: its context is cancelled
// with context.DeadlineExceeded after d. 0 means no bound, the default
// (the lease ceiling still applies). Range 0, or 1 ms to 12 h, and below
// WithMaxLeaseDuration (the ceiling would cancel the handler first: New
// refuses it, naming both).
func WithHandlerTimeout(d time.Duration) Option {
	return option(func(s *settings) {
		if d != 0 && (d < time.Millisecond || d > MaxVisibilityTimeout) {
			s.fail("WithHandlerTimeout(%v): must be 0 (no bound) or from 1ms to %v", d, MaxVisibilityTimeout)
			return
		}
		s.handlerTimeout = d
	})
}

// DefaultBackoff is the visibility given to a message whose handler failed
// on its n-th receive: 5 s doubling per receive (5 s, 10 s, 20 s, ...) up to
// 15 minutes, with ±20 % jitter so retries of a burst spread out.
func DefaultBackoff(receiveCount int) time.Duration {
	d := backoffDelay(receiveCount-1, 5*time.Second, 15*time.Minute)
	return between(d-d/5, d+d/5)
}

// WithBackoff sets the visibility given to a message whose handler failed,
// as a function of its receive count (1 on the first delivery). Results
// are rounded up to whole seconds and clamped to 1 s..12 h, so a failure
// never makes a message visible at once. Default: DefaultBackoff.
func WithBackoff(f func(receiveCount int) time.Duration) Option {
	return option(func(s *settings) {
		if f == nil {
			s.fail("WithBackoff(nil): backoff function must not be nil")
			return
		}
		s.backoff = f
	})
}

// WithMiddleware wraps the handler; the first middleware is the outermost.
// May be given more than once; the lists are concatenated.
func WithMiddleware(mws ...Middleware) Option {
	return option(func(s *settings) {
		for i, mw := range mws {
			if mw == nil {
				s.fail("WithMiddleware: middleware %d is nil", i)
				return
			}
		}
		s.middleware = append(s.middleware, mws...)
	})
}

// WithReceivedAt tells NewLease when SQS handed the message over, where
// the lease's clock (deadline and ceiling) starts. It must not be later
// than the real moment: pass HandoverTime(sent, answered) for a receive
// sent at sent whose answer arrived at answered (the sending time alone is
// also safe, but after a long wait in a long poll it leaves the lease
// little or nothing). Default: HandoverTime for an answer arriving at
// NewLease, one second before it. A Consumer knows this itself and
// rejects the option.
func WithReceivedAt(t time.Time) LeaseOption {
	return leaseOption(func(s *settings) {
		if t.IsZero() {
			s.fail("WithReceivedAt: time must not be zero")
			return
		}
		s.receivedAt = t
	})
}

// WithAdaptiveVisibility makes the lease follow the work: each
// ReceiveMessage asks for twice the p99 receive-to-settle time of recent
// messages (in-process queueing included), rounded up to whole seconds and
// clamped to [lo, hi] (see AdaptiveVisibility), and the heartbeat renews
// at a third of that. Fast work then gets short leases, so a crashed
// worker's messages come back soon, and the heartbeat covers the tail.
// Until 20 messages have settled the lease is WithVisibilityTimeout's (or
// the queue's, clamped the same way); a WithVisibilityTimeout outside
// [lo, hi] is refused by New, naming both. lo is at least
// MinAdaptiveVisibility (10 s); hi at most 12 h (and at most
// WithMaxLeaseDuration) and at least lo. Cannot be combined with
// WithHeartbeatInterval (the interval follows the lease). Default: off.
func WithAdaptiveVisibility(lo, hi time.Duration) Option {
	return option(func(s *settings) {
		if lo < MinAdaptiveVisibility || hi > MaxVisibilityTimeout || hi < lo {
			s.fail("WithAdaptiveVisibility(%v, %v): need %v <= lo <= hi <= %v", lo, hi, MinAdaptiveVisibility, MaxVisibilityTimeout)
			return
		}
		s.adaptiveMin, s.adaptiveMax = lo, hi
	})
}

// WithBreaker turns on the circuit breaker b describes (see Breaker).
// Default: off.
func WithBreaker(b Breaker) Option {
	return option(func(s *settings) {
		b := b // each application fills in its own copy: the Option may be shared
		if b.Failures == 0 {
			b.Failures = defaultBreakerFailures
		}
		if b.Window == 0 {
			b.Window = defaultBreakerWindow
		}
		if b.CallFailures == 0 {
			b.CallFailures = defaultBreakerCallFailures
		}
		if b.Pause == 0 {
			b.Pause = defaultBreakerPause
		}
		if b.MaxPause == 0 {
			b.MaxPause = max(defaultBreakerMaxPause, b.Pause)
		}
		var errs []string
		if b.Failures < 1 || b.Failures > 100_000 {
			errs = append(errs, fmt.Sprintf("Failures %d must be from 1 to 100000", b.Failures))
		}
		if b.Ratio < 0 || b.Ratio > 1 || b.Ratio != b.Ratio {
			errs = append(errs, fmt.Sprintf("Ratio %v must be from 0 to 1", b.Ratio))
		}
		if b.Window < 2 || b.Window > 100_000 {
			errs = append(errs, fmt.Sprintf("Window %d must be from 2 to 100000", b.Window))
		}
		if b.CallFailures < 1 || b.CallFailures > 100_000 {
			errs = append(errs, fmt.Sprintf("CallFailures %d must be from 1 to 100000", b.CallFailures))
		}
		if b.Pause < time.Second || b.Pause > MaxVisibilityTimeout {
			errs = append(errs, fmt.Sprintf("Pause %v must be from 1s to %v", b.Pause, MaxVisibilityTimeout))
		}
		if b.MaxPause < b.Pause || b.MaxPause > MaxVisibilityTimeout {
			errs = append(errs, fmt.Sprintf("MaxPause %v must be from Pause (%v) to %v", b.MaxPause, b.Pause, MaxVisibilityTimeout))
		}
		for _, e := range errs {
			s.fail("WithBreaker: %s", e)
		}
		if len(errs) == 0 {
			s.breaker = &b
		}
	})
}

// WithScalingTarget turns on the scaling signal with wait as its target
// (the longest acceptable wait from a message's send to its handler's
// start) and every other field of ScalingPolicy at its default. It is
// WithScaling(ScalingPolicy{Target: wait}).
//
// It cannot be combined with WithScaling (New refuses the pair): the
// target alone would silently reset the rest of that policy. Give
// WithScaling a policy with the Target instead.
func WithScalingTarget(wait time.Duration) Option {
	return scalingOption("WithScalingTarget", ScalingPolicy{Target: wait})
}

// WithScaling turns on the scaling signal (Consumer.Scaling,
// Consumer.ScalingHandler): while Run runs, the Consumer reads the queue's
// counts every p.Interval and computes the number of replicas the queue
// needs. See ScalingPolicy for each field's default and range. Default: off.
//
// The figure is ceil((arrival + backlog/Target) / (capacity ×
// Utilization)), where capacity is what this replica's handler slots
// finish a second when never starved (WithConcurrency over the mean time a
// message holds a slot; not WithAdaptiveConcurrency's limit, which is a
// downstream's, and more replicas would only share it), backlog the visible count (followed at once when
// it rises, halfway toward each lower reading), and arrival
// the whole queue's arrival rate, inferred from each reading's raw counts:
// its departures (messages in flight over their mean time in flight,
// Little's law) plus the visible count's growth since the previous
// reading, smoothed by a quarter (each reading moves it a quarter of the
// way). A growing backlog shows in the figure at once. Only the arrivals'
// share is held: it is the highest of the last ScaleInAfter, while the
// backlog's share follows each reading, so the figure falls as a backlog
// drains and down to a lower arrivals' share only after ScaleInAfter. A
// change within a tenth of the last figure is not made. The figure is
// never 0 while anything is visible or in flight (nor at all without
// ScaleToZero). Replicas reading one queue read the same counts and, with
// the same settings and work, compute about the same figure.
//
// Given twice, the later policy replaces the earlier one whole; with
// WithScalingTarget it is refused (see WithScalingTarget).
func WithScaling(p ScalingPolicy) Option { return scalingOption("WithScaling", p) }

// scalingOption is WithScaling or WithScalingTarget (name), which must
// not both be given.
func scalingOption(name string, p ScalingPolicy) Option {
	return option(func(s *settings) {
		p := p // each application fills in its own copy: the Option may be shared
		if s.scalingBy != "" && s.scalingBy != name {
			s.fail("WithScaling and WithScalingTarget cannot be combined: WithScalingTarget is WithScaling with every field but Target at its default, so whichever came last would silently replace the other's policy; give one WithScaling with the Target")
			return
		}
		s.scalingBy = name
		if p.Interval == 0 {
			p.Interval = DefaultScalingInterval
		}
		switch {
		case p.ScaleInAfter == 0:
			p.ScaleInAfter = DefaultScaleInAfter
		case p.ScaleInAfter < 0:
			p.ScaleInAfter = 0
		}
		if p.Utilization == 0 {
			p.Utilization = DefaultScalingUtilization
		}
		switch {
		case p.Target < time.Second || p.Target > MaxVisibilityTimeout:
			s.fail("%s: Target %v out of range [1s, 12h] (the longest acceptable wait from send to handler start)", name, p.Target)
		case p.Interval < MinScalingInterval || p.Interval > MaxScalingInterval:
			s.fail("%s: Interval %v out of range [%v, %v]", name, p.Interval, MinScalingInterval, MaxScalingInterval)
		case p.ScaleInAfter > time.Hour:
			s.fail("%s: ScaleInAfter %v above 1h", name, p.ScaleInAfter)
		default:
			if err := p.check(); err != nil {
				s.fail("%s: %v", name, err)
				return
			}
			s.scaling = &p
		}
	})
}

// WithScaleInProtection protects the ECS task from scale-in while the
// Consumer holds any message (running, waiting for a slot, read ahead or
// settling), through the ECS agent's task scale-in protection endpoint
// (package ecsprotect): service auto scaling and deployments then do not
// stop the task in the middle of a handler. Once the Consumer has held
// nothing for the Protector's quiet period (default 2 minutes), the
// protection is cleared. Default: off.
//
// p nil: the Consumer makes its own Protector from the environment
// (ECS_AGENT_URI, default settings, the Consumer's logger), starts it at
// Run and clears and closes it after Run's drain. Without ECS_AGENT_URI
// it makes no call and logs one warning. A process with several Consumers
// (a fleet) must share one Protector, since protection is one per task:
// make it with ecsprotect.New, pass it to each, and Close it after every
// Consumer's Run has returned; Run starts it if it was not started.
//
// The Consumer tells the Protector only when it starts and stops holding
// anything, never per message; the agent's calls run on the Protector's
// goroutine, bounded by its call timeout, and never delay a handler or a
// receive. A failing agent is logged and counted (Stats.ScaleInProtection),
// never fatal.
func WithScaleInProtection(p *ecsprotect.Protector) Option {
	return option(func(s *settings) {
		s.protect, s.protector, s.ownProtect = true, p, p == nil
	})
}
