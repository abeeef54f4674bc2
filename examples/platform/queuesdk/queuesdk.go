// Package queuesdk is what a platform team's company queue SDK looks like
// when it is written against sqsconsumer: the package forty product teams
// import instead of sqsconsumer itself. It is an example (its test shows
// every rule below at work), not a package to import as it is.
//
// One SDK per process (New) owns what the process shares: the JSON logger,
// one concurrency budget, one /healthz, /readyz and /scaling for every
// queue (package fleet), and one ECS task scale-in Protector (package
// ecsprotect). A team calls Consume once per queue, at any time:
//
//	sdk, _ := queuesdk.New(queuesdk.Config{Client: client, Service: "billing"})
//	http.Handle("/", sdk.Handler())
//	go sdk.Consume(ctx, ordersURL, handler, sqsconsumer.WithConcurrency(32))
//	...
//	sdk.Close() // after ctx is cancelled: waits for every Consume
//
// The company's rules, which a team cannot turn off:
//
//   - Defaults first, then the team's options (the last one wins), then
//     the SDK's own: the company logger, a required dead-letter queue, the
//     panic policy, the error classes, the shared Protector.
//   - A handler fails with one of the company's error classes (wrapped
//     with %w); Classify says what each becomes.
//   - A shutdown timeout above MaxShutdownTimeout is refused: it would not
//     fit in ECS's stopTimeout.
//   - Every message gets one log line, "queuesdk: message handled", with
//     its class and handler time; a handler's own lines go through
//     sqsconsumer.Logger(ctx) and carry the message's fields.
package queuesdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/ecsprotect"
	"github.com/sqskit/sqsconsumer/fleet"
)

// The company's error classes. A handler returns one wrapped with %w
// (fmt.Errorf("order %s: %w", id, queuesdk.ErrValidation)); Classify maps it
// to what the Consumer does.
var (
	// ErrValidation: the message can never succeed (malformed, violates
	// the schema). It moves to the dead-letter queue at once.
	ErrValidation = errors.New("validation failed")
	// ErrTransient: worth another try in TransientRetry. A failure: five in
	// a row open the circuit breaker.
	ErrTransient = errors.New("transient failure")
	// ErrRateLimited: the downstream refuses work for now (an HTTP 429).
	// RateLimited makes one that carries its Retry-After.
	ErrRateLimited = errors.New("downstream rate limited")
	// ErrInterrupted: a long job saw sqsconsumer.Draining(ctx), saved its
	// progress and stopped early. The message goes back to the queue (as
	// soon as the Consumer's long polls in flight have returned), and it is
	// not a failure.
	ErrInterrupted = errors.New("interrupted: progress saved")
	// ErrPanic is what the SDK's panic policy turns a handler's panic
	// into: a bug, logged with its site and stack, retried after
	// PanicRetry until the queue's redrive policy moves it to the
	// dead-letter queue.
	ErrPanic = errors.New("handler panicked")
)

// The company's figures.
const (
	TransientRetry     = 30 * time.Second
	PanicRetry         = 5 * time.Minute
	MaxShutdownTimeout = 25 * time.Second // ECS's default stopTimeout (30 s), less the Protector's and SQS's calls
	DefaultBudget      = 64               // handlers at once across the process's queues
)

// Defaults are the company's defaults, applied before a team's options: a
// team overrides any of them by passing its own to Consume, but for
// WithCancelIdlePollsAtShutdown, a switch, which no option turns off.
var Defaults = sqsconsumer.Options(
	sqsconsumer.WithConcurrency(16),
	sqsconsumer.WithShutdownTimeout(20*time.Second),
	sqsconsumer.WithBreaker(sqsconsumer.Breaker{}),
	sqsconsumer.WithScalingTarget(30*time.Second),
	// An idle queue's shutdown returns within a round trip, not at the end
	// of its long poll in flight (up to 20 s), at a cost the option states.
	sqsconsumer.WithCancelIdlePollsAtShutdown(),
)

// RateLimited returns an error that is ErrRateLimited, for downstream,
// which asked to be left alone for retryAfter (an HTTP Retry-After
// header's value, "" if it gave none: the Consumer's backoff then).
func RateLimited(downstream, retryAfter string) error {
	d, _ := sqsconsumer.RetryAfterHeader(retryAfter)
	return &rateLimited{downstream: downstream, after: d}
}

type rateLimited struct {
	downstream string
	after      time.Duration
}

func (e *rateLimited) Error() string        { return e.downstream + ": " + ErrRateLimited.Error() }
func (e *rateLimited) Is(target error) bool { return target == ErrRateLimited }

// Classify maps a handler's error to what the Consumer does with it, and
// names its class for the logs. Errors of no company class pass as they
// are (a failure, retried after the backoff).
func Classify(err error) (class string, out error) {
	var rl *rateLimited
	switch {
	case err == nil:
		return "ok", nil
	case errors.Is(err, ErrValidation):
		return "validation", sqsconsumer.Permanent(err)
	case errors.As(err, &rl):
		return "rate_limited", sqsconsumer.Throttled(err, rl.after)
	case errors.Is(err, ErrRateLimited):
		return "rate_limited", sqsconsumer.Throttled(err, 0)
	case errors.Is(err, ErrTransient):
		return "transient", sqsconsumer.RetryAfter(err, TransientRetry)
	case errors.Is(err, ErrInterrupted):
		return "interrupted", sqsconsumer.Neutral(sqsconsumer.RetryAfter(err, 0))
	case errors.Is(err, ErrPanic):
		return "panic", sqsconsumer.RetryAfter(err, PanicRetry)
	}
	return "error", err
}

// Config is what New needs; only Client is required.
type Config struct {
	Client  sqsconsumer.Client
	Service string       // on every log line, as "service"
	Log     io.Writer    // where the JSON log lines go; default os.Stderr
	Level   slog.Leveler // default Info
	Budget  int          // handlers at once across the process's queues; default DefaultBudget
	// ECS configures the shared Protector; by default it reads
	// ECS_AGENT_URI, and off ECS it does nothing but log one warning.
	ECS []ecsprotect.Option
}

// SDK is one per process. Its methods are safe for concurrent use.
type SDK struct {
	client    sqsconsumer.Client
	log       *slog.Logger
	fleet     *fleet.Fleet
	protector *ecsprotect.Protector
	own       sqsconsumer.Option // after the team's options

	mu      sync.Mutex     // guards closed, and orders running.Add before Close's Wait
	closed  bool           // Close was called: no more Consume
	running sync.WaitGroup // the Consume calls in progress
}

// New returns the process's SDK.
func New(cfg Config) (*SDK, error) {
	if cfg.Client == nil {
		return nil, errors.New("queuesdk: Config.Client is required")
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if cfg.Budget == 0 {
		cfg.Budget = DefaultBudget
	}
	log := slog.New(slog.NewJSONHandler(cfg.Log, &slog.HandlerOptions{Level: cfg.Level})).With("service", cfg.Service)
	f, err := fleet.New(cfg.Budget)
	if err != nil {
		return nil, fmt.Errorf("queuesdk: %w", err)
	}
	p, err := ecsprotect.New(append([]ecsprotect.Option{ecsprotect.WithLogger(log)}, cfg.ECS...)...)
	if err != nil {
		return nil, fmt.Errorf("queuesdk: %w", err)
	}
	s := &SDK{client: cfg.Client, log: log, fleet: f, protector: p}
	s.own = sqsconsumer.Options(
		sqsconsumer.WithLogger(log),
		sqsconsumer.WithRequireDeadLetterQueue(),
		sqsconsumer.WithPanicPolicy(panicPolicy),
		sqsconsumer.WithMiddleware(classify),
		sqsconsumer.WithScaleInProtection(p),
	)
	return s, nil
}

// Consume consumes queueURL with h until ctx is cancelled (it returns nil
// once every message it held is settled) or the queue fails (a queue
// without a dead-letter queue, access denied: that queue then stays in
// /healthz, failed). opts come after Defaults and before the SDK's own.
func (s *SDK) Consume(ctx context.Context, queueURL string, h sqsconsumer.Handler, opts ...sqsconsumer.Option) error {
	c, err := sqsconsumer.New(s.client, queueURL, h, Defaults, sqsconsumer.Options(opts...), s.own)
	if err != nil {
		return err
	}
	if st := c.Settings(); st.ShutdownTimeout > MaxShutdownTimeout {
		return fmt.Errorf("%w: queuesdk: %s: WithShutdownTimeout(%v) is above the company's %v (ECS's stopTimeout)",
			sqsconsumer.ErrInvalidOption, queueURL, st.ShutdownTimeout, MaxShutdownTimeout)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("queuesdk: Consume(%s) after Close", queueURL)
	}
	s.running.Add(1)
	s.mu.Unlock()
	defer s.running.Done()
	return s.fleet.Serve(ctx, c)
}

// Handler serves /healthz, /readyz and /scaling for every queue of the
// process (package fleet's JSON).
func (s *SDK) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", s.fleet.HealthHandler())
	mux.Handle("/readyz", s.fleet.ReadyHandler())
	mux.Handle("/scaling", s.fleet.ScalingHandler())
	return mux
}

// Close waits for every Consume to return (cancel their contexts first),
// then clears the task's scale-in protection. Consume fails after it.
func (s *SDK) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.running.Wait()
	return s.protector.Close()
}

// panicPolicy turns a panic into ErrPanic, logged with the message's
// fields, where it happened and its stack.
func panicPolicy(ctx context.Context, _ *sqsconsumer.Message, p *sqsconsumer.PanicError) error {
	sqsconsumer.Logger(ctx).Error("queuesdk: handler panicked",
		"panic", fmt.Sprint(p.Value), "site", p.Site(), "stack", string(p.Stack))
	return fmt.Errorf("%w: %w", ErrPanic, p)
}

// classify is the innermost middleware: it maps the handler's error to
// its class and logs the message's line.
func classify(next sqsconsumer.Handler) sqsconsumer.Handler {
	return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		start := time.Now()
		class, err := Classify(next.HandleMessage(ctx, m))
		sqsconsumer.Logger(ctx).Info("queuesdk: message handled", "class", class, "took", time.Since(start))
		return err
	})
}
