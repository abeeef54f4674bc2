// Command worker is a production-style SQS worker built on sqsconsumer: the
// shape of a binary that runs as an ECS task (or a Kubernetes pod, or a
// systemd unit) and consumes one queue until it is told to stop.
//
// # Messages
//
// Each message body is one JSON object, an order:
//
//	{"order_id": "o-1001", "amount_cents": 2599}
//
// order_id (a non-empty string) is required and is the idempotency key: the
// worker processes each order once, however many messages about it arrive
// (SQS delivers at least once; producers retry), as long as the duplicates
// arrive within WORKER_IDEMPOTENCY_TTL. amount_cents is optional; other
// fields are ignored. A body that is not such an object fails without being
// processed, and is retried with backoff until the queue's redrive policy
// moves it to the dead-letter queue.
//
// The completed orders are remembered in this process's memory
// (sqsconsumer.NewMemoryStore), which recognises duplicates only within
// one worker and forgets them when it exits. When several workers consume
// the queue, pass a shared store instead (packages redisstore, pgstore or
// dynamostore of this module): the middleware and the key stay the same.
//
// # Environment
//
// The worker's settings:
//
//	SQS_QUEUE_URL              required: the queue to consume
//	WORKER_CONCURRENCY         handlers at once (default 10)
//	WORKER_VISIBILITY_TIMEOUT  lease length, e.g. 60s (default: the queue's VisibilityTimeout)
//	WORKER_STOP_TIMEOUT        the orchestrator's grace between SIGTERM and SIGKILL:
//	                           ECS's stopTimeout (default 30s)
//	WORKER_SHUTDOWN_TIMEOUT    how long running handlers may finish after SIGTERM
//	                           (default WORKER_STOP_TIMEOUT minus 5s; must be below it)
//	WORKER_IDEMPOTENCY_TTL     how long a processed order is remembered, e.g. 96h
//	                           (default 24h; from 1s to 366 days)
//	LOG_LEVEL                  debug, info, warn or error (default info)
//	WORKER_HTTP_ADDR           where to serve HTTP, e.g. :8080 (default: no server):
//	                           /healthz (liveness), /readyz (readiness) and /scaling
//	WORKER_SCALING_TARGET      turn on the scaling signal with this target, the longest
//	                           acceptable wait from send to handler start, e.g. 30s
//	                           (default off; from 1s to 12h). Costs one GetQueueAttributes
//	                           call every 30 s
//	WORKER_EMF_NAMESPACE       log each reading of the signal as a CloudWatch embedded
//	                           metric format line in this namespace, e.g. Orders/Worker
//	                           (default none; needs WORKER_SCALING_TARGET)
//
// /scaling answers the signal as JSON in the shape KEDA's metrics-api
// scaler reads (valueLocation "replicas"): 200 once the figure is known,
// 503 with the reason before that (or when WORKER_SCALING_TARGET is not
// set). The EMF lines are JSON lines on standard error beside the log
// lines, written whatever LOG_LEVEL says, so a log pipeline that extracts EMF (the CloudWatch agent,
// FireLens) turns them into the DesiredReplicas metric, dimension
// QueueName, for an ECS target-tracking policy. docs/scaling.md of this
// module has the KEDA ScaledObject and the ECS policy.
//
// The SQS client comes from the default AWS configuration (environment,
// shared files, the ECS task role), so the SDK's usual variables apply:
//
//	AWS_REGION                 the queue's region, e.g. us-east-1 (required unless a profile sets it)
//	AWS_ACCESS_KEY_ID,         static credentials; on ECS leave them unset and give the
//	AWS_SECRET_ACCESS_KEY      task role sqs:ReceiveMessage, DeleteMessage, ChangeMessageVisibility
//	                           and GetQueueAttributes (the scaling signal needs no more)
//	AWS_PROFILE                a profile of the shared config files
//	AWS_ENDPOINT_URL           send the requests elsewhere, e.g. to a local server
//	                           (AWS_ENDPOINT_URL_SQS for SQS alone)
//
// To try it on this machine with the module's in-memory SQS (any
// credentials do; the server checks no signatures):
//
//	go run ./cmd/sqstest -listen 127.0.0.1:9324 -queue orders
//
//	AWS_ENDPOINT_URL=http://127.0.0.1:9324 AWS_REGION=us-east-1 \
//	AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \
//	SQS_QUEUE_URL=http://127.0.0.1:9324/123456789012/orders go run ./examples/worker
//
//	AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local aws --region us-east-1 \
//	  --endpoint-url http://127.0.0.1:9324 sqs send-message \
//	  --queue-url http://127.0.0.1:9324/123456789012/orders \
//	  --message-body '{"order_id":"o-1001","amount_cents":2599}'
//
// Send the same order twice and the second is logged as "duplicate order
// skipped".
//
// It logs JSON lines to standard error and exits with status 0 after a clean
// shutdown on SIGTERM or SIGINT, 1 when the consumer stopped on a permanent
// error (the queue does not exist, access denied), and 2 when the
// configuration is invalid.
//
// # Stopping on ECS
//
// When ECS stops a task (a deployment, scale-in, a Spot interruption) it
// sends SIGTERM to each container, waits the container's stopTimeout (30 s
// unless the task definition says otherwise; at most 120 s) and then sends
// SIGKILL. On SIGTERM the worker stops receiving at once, hands back the
// messages it holds but has not started (they are visible to other workers
// immediately), and gives running handlers the shutdown timeout to finish
// while their leases keep being renewed. Handlers still running then are
// cancelled (context.Cause reports sqsconsumer.ErrShutdown) and their
// messages handed back too.
//
// That timeout must end before SIGKILL does, with room to spare: the
// hand-back calls, the last deletes and flushing the logs all happen after
// it. A worker killed in the middle of that loses no message, but the
// messages it still held stay invisible until their visibility timeout
// runs out, and handlers cut off half-way must be safe to run again. Hence
// the default of stopTimeout minus 5 s. Raise the task definition's
// stopTimeout (and WORKER_STOP_TIMEOUT with it) if handlers need longer.
//
// Make sure the signal reaches the process: use the exec form of
// ENTRYPOINT/CMD in the image (a shell in between does not forward SIGTERM),
// or enable the task definition's initProcessEnabled.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/examples/internal/orders"
	"github.com/sqskit/sqsconsumer/sqsclient"
)

// Exit codes.
const (
	exitOK     = 0 // clean shutdown after SIGTERM or SIGINT
	exitFailed = 1 // the consumer stopped on a permanent error
	exitConfig = 2 // the configuration is invalid
)

// Defaults of the environment settings.
const (
	defaultConcurrency = 10
	// defaultStopTimeout is ECS's default stopTimeout: SIGKILL follows
	// SIGTERM after this long.
	defaultStopTimeout = 30 * time.Second
	// shutdownMargin is what the default shutdown timeout leaves of the
	// stop timeout for handing messages back and flushing logs.
	shutdownMargin = 5 * time.Second
	// httpShutdownTimeout bounds how long the HTTP server's requests in
	// progress may take to finish after the consumer stopped.
	httpShutdownTimeout = 2 * time.Second
)

func main() {
	// The first SIGTERM or SIGINT cancels ctx and starts the graceful
	// shutdown; stop() then restores the default behaviour, so a second
	// Ctrl-C kills the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Getenv, os.Stderr, awsClient)
	stop()
	os.Exit(code)
}

// awsClient builds the SQS client from the default AWS configuration.
func awsClient(ctx context.Context) (sqsconsumer.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	return sqsclient.NewFromConfig(cfg, sqsclient.HTTPOptions{})
}

// settings is the worker's configuration, read from the environment.
type settings struct {
	queueURL        string
	concurrency     int
	visibility      time.Duration // 0: the queue's VisibilityTimeout
	stopTimeout     time.Duration
	shutdownTimeout time.Duration
	idempotencyTTL  time.Duration
	logLevel        slog.Level
	httpAddr        string        // "": no HTTP server
	scalingTarget   time.Duration // 0: the scaling signal is off
	emfNamespace    string        // "": no EMF lines
}

// loadSettings reads the settings through getenv and reports every invalid
// or missing value at once.
func loadSettings(getenv func(string) string) (settings, error) {
	s := settings{concurrency: defaultConcurrency, stopTimeout: defaultStopTimeout, idempotencyTTL: sqsconsumer.DefaultIdempotencyTTL}
	var errs []error
	s.queueURL = strings.TrimSpace(getenv("SQS_QUEUE_URL"))
	if s.queueURL == "" {
		errs = append(errs, errors.New("SQS_QUEUE_URL is required: the URL of the queue to consume, e.g. https://sqs.us-east-1.amazonaws.com/123456789012/orders"))
	}
	if v := getenv("WORKER_CONCURRENCY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("WORKER_CONCURRENCY=%q: want a whole number of at least 1", v))
		}
		s.concurrency = n
	}
	duration := func(name string, dst *time.Duration) {
		v := getenv(name)
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive duration such as 30s", name, v))
			return
		}
		*dst = d
	}
	duration("WORKER_VISIBILITY_TIMEOUT", &s.visibility)
	duration("WORKER_STOP_TIMEOUT", &s.stopTimeout)
	s.shutdownTimeout = max(s.stopTimeout-shutdownMargin, s.stopTimeout/2)
	duration("WORKER_SHUTDOWN_TIMEOUT", &s.shutdownTimeout)
	duration("WORKER_IDEMPOTENCY_TTL", &s.idempotencyTTL)
	duration("WORKER_SCALING_TARGET", &s.scalingTarget)
	s.httpAddr = strings.TrimSpace(getenv("WORKER_HTTP_ADDR"))
	s.emfNamespace = strings.TrimSpace(getenv("WORKER_EMF_NAMESPACE"))
	if s.emfNamespace != "" && s.scalingTarget == 0 {
		errs = append(errs, fmt.Errorf("WORKER_EMF_NAMESPACE=%q needs WORKER_SCALING_TARGET: the EMF lines report the scaling signal", s.emfNamespace))
	}
	if s.idempotencyTTL < time.Second || s.idempotencyTTL > sqsconsumer.MaxIdempotencyTTL {
		errs = append(errs, fmt.Errorf("WORKER_IDEMPOTENCY_TTL (%v): must be from 1s to %v", s.idempotencyTTL, sqsconsumer.MaxIdempotencyTTL))
	}
	if s.shutdownTimeout >= s.stopTimeout {
		errs = append(errs, fmt.Errorf("WORKER_SHUTDOWN_TIMEOUT (%v) must be below WORKER_STOP_TIMEOUT (%v): SIGKILL would cut the shutdown short", s.shutdownTimeout, s.stopTimeout))
	}
	if v := getenv("LOG_LEVEL"); v != "" {
		if err := s.logLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", v))
		}
	}
	return s, errors.Join(errs...)
}

// run is the whole worker: it returns when ctx is cancelled (the signal)
// and the consumer has shut down, or on a permanent error. newClient makes
// the SQS client.
func run(ctx context.Context, getenv func(string) string, stderr io.Writer, newClient func(context.Context) (sqsconsumer.Client, error)) int {
	return runWith(ctx, getenv, stderr, newClient, 50*time.Millisecond, net.Listen)
}

// runWith is run with the example handler's work time and the function
// that opens the HTTP server's listener.
func runWith(ctx context.Context, getenv func(string) string, stderr io.Writer, newClient func(context.Context) (sqsconsumer.Client, error),
	work time.Duration, listen func(network, addr string) (net.Listener, error)) int {
	s, err := loadSettings(getenv)
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: s.logLevel}))
	if err != nil {
		logger.Error("invalid configuration", "error", err)
		return exitConfig
	}
	client, err := newClient(ctx)
	if err != nil {
		logger.Error("cannot create the SQS client", "error", err)
		return exitConfig
	}

	handler := orders.Handler{Log: logger, Work: work}
	// Each order is processed once: the middleware claims its order ID
	// before the handler runs and records it as completed after.
	idempotent, err := sqsconsumer.NewIdempotent(sqsconsumer.NewMemoryStore(),
		sqsconsumer.WithIdempotencyKey(orders.Key),
		sqsconsumer.WithIdempotencyTTL(s.idempotencyTTL),
		sqsconsumer.WithDuplicateHook(handler.LogDuplicate))
	if err != nil {
		logger.Error("invalid idempotency options", "error", err)
		return exitConfig
	}
	opts := []sqsconsumer.Option{
		sqsconsumer.WithMiddleware(idempotent),
		sqsconsumer.WithConcurrency(s.concurrency),
		sqsconsumer.WithShutdownTimeout(s.shutdownTimeout),
		// The library logs what needs attention (lost leases, panics,
		// receive failures); the observer adds one line per message.
		sqsconsumer.WithLogger(logger),
		sqsconsumer.WithObserver(orders.Observer{Log: logger}),
	}
	if s.visibility > 0 {
		opts = append(opts, sqsconsumer.WithVisibilityTimeout(s.visibility))
	}
	if s.scalingTarget > 0 {
		// EMF lines go beside the log lines, on standard error, but not
		// through the logger: LOG_LEVEL=warn must not lose the metric.
		opts = append(opts, sqsconsumer.WithScaling(sqsconsumer.ScalingPolicy{Target: s.scalingTarget,
			EMFNamespace: s.emfNamespace, EMFWriter: stderr}))
	}
	c, err := sqsconsumer.New(client, s.queueURL, handler, opts...)
	if err != nil {
		logger.Error("invalid consumer options", "error", err)
		return exitConfig
	}
	if s.httpAddr != "" {
		ln, err := listen("tcp", s.httpAddr)
		if err != nil {
			logger.Error("cannot listen on WORKER_HTTP_ADDR", "addr", s.httpAddr, "error", err)
			return exitConfig
		}
		stopHTTP := serveHTTP(ln, c, logger)
		defer stopHTTP()
	}

	logger.Info("worker started", "queue_url", s.queueURL, "concurrency", s.concurrency,
		"shutdown_timeout", s.shutdownTimeout.String(), "stop_timeout", s.stopTimeout.String(),
		"http_addr", s.httpAddr, "scaling_target", s.scalingTarget.String())
	if err := c.Run(ctx); err != nil {
		logger.Error("worker stopped on an error", "error", err)
		return exitFailed
	}
	logger.Info("worker stopped cleanly", "cause", fmt.Sprint(context.Cause(ctx)))
	return exitOK
}

// routes are the worker's HTTP endpoints: the orchestrator's probes and
// the scaling signal.
func routes(c *sqsconsumer.Consumer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", c.HealthHandler())
	mux.Handle("/readyz", c.ReadyHandler())
	mux.Handle("/scaling", c.ScalingHandler())
	return mux
}

// serveHTTP serves routes(c) on ln until the returned function is called;
// that function shuts the server down and waits for it.
func serveHTTP(ln net.Listener, c *sqsconsumer.Consumer, logger *slog.Logger) (stop func()) {
	srv := &http.Server{
		Handler:           routes(c),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Error("HTTP server stopped", "error", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			logger.Warn("HTTP server shutdown", "error", err)
			_ = srv.Close()
		}
		<-done
	}
}
