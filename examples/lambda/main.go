// Command lambda is examples/worker's order handler, unchanged, running in
// AWS Lambda behind an SQS event source mapping through package lambdasqs:
// the same Idempotent middleware, the same observer, the same lease
// heartbeat while a record is handled.
//
// # Messages
//
// As for examples/worker: each body is one JSON order,
//
//	{"order_id": "o-1001", "amount_cents": 2599}
//
// The handler is examples/worker's, package examples/internal/orders,
// unchanged. A malformed body is reported as a failed record: the mapping
// leaves it on the queue, and the redrive policy moves it to the
// dead-letter queue after maxReceiveCount receives.
//
// # Deploying
//
// Build for the provided.al2023 runtime (the binary must be called
// bootstrap):
//
//	GOOS=linux GOARCH=arm64 go build -tags lambda.norpc -o bootstrap ./examples/lambda
//	zip function.zip bootstrap
//
// Create the function with runtime provided.al2023, handler bootstrap,
// architecture arm64, and an execution role that allows
// sqs:ReceiveMessage, sqs:DeleteMessage, sqs:GetQueueAttributes (for the
// mapping) and sqs:ChangeMessageVisibility (for the heartbeat). Then map
// the queue with partial batch responses on:
//
//	aws lambda create-event-source-mapping --function-name orders \
//	  --event-source-arn arn:aws:sqs:us-east-1:123456789012:orders \
//	  --batch-size 10 --function-response-types ReportBatchItemFailures
//
// Without ReportBatchItemFailures the mapping ignores the response and
// returns the whole batch when any record fails. AWS recommends a queue
// visibility timeout of at least six times the function's timeout
// (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html);
// with the heartbeat a shorter one is safe too, since a running record's
// visibility is renewed, and a failed record then comes back sooner.
//
// # Environment
//
//	SQS_VISIBILITY_TIMEOUT   the queue's VisibilityTimeout, e.g. 60s (default 30s)
//	BATCHING_WINDOW          the mapping's MaximumBatchingWindowInSeconds, e.g. 5s (default 0)
//	WORKER_IDEMPOTENCY_TTL   how long a processed order is remembered (default 24h)
//	LOG_LEVEL                debug, info, warn or error (default info)
//
// The completed orders are remembered in the execution environment's
// memory (sqsconsumer.NewMemoryStore): duplicates are recognised only
// within one environment, until Lambda recycles it. Pass a shared store
// (redisstore, pgstore, dynamostore) to recognise them everywhere.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/examples/internal/orders"
	"github.com/sqskit/sqsconsumer/lambdasqs"
	"github.com/sqskit/sqsconsumer/sqsclient"
)

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		logger.Error("loading the AWS configuration", "error", err)
		os.Exit(1)
	}
	client, err := sqsclient.NewFromConfig(cfg, sqsclient.HTTPOptions{})
	if err != nil {
		logger.Error("making the SQS client", "error", err)
		os.Exit(1)
	}
	h, err := newHandler(client, os.Getenv, os.Stderr)
	if err != nil {
		logger.Error("invalid configuration", "error", err)
		os.Exit(1)
	}
	lambda.Start(h)
}

// newHandler builds the Lambda handler from the environment (read through
// getenv), logging to w.
func newHandler(client sqsconsumer.Client, getenv func(string) string, w io.Writer) (lambdasqs.Handler, error) {
	level := slog.LevelInfo
	if v := getenv("LOG_LEVEL"); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return nil, fmt.Errorf("LOG_LEVEL=%q: %w", v, err)
		}
	}
	logger := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	visibility, err := durationEnv(getenv, "SQS_VISIBILITY_TIMEOUT", 30*time.Second)
	if err != nil {
		return nil, err
	}
	window, err := durationEnv(getenv, "BATCHING_WINDOW", 0)
	if err != nil {
		return nil, err
	}
	ttl, err := durationEnv(getenv, "WORKER_IDEMPOTENCY_TTL", sqsconsumer.DefaultIdempotencyTTL)
	if err != nil {
		return nil, err
	}

	// The same handler, middleware and observer as examples/worker.
	handler := orders.Handler{Log: logger, Work: 50 * time.Millisecond} // as examples/worker's stand-in for real work
	idempotent, err := sqsconsumer.NewIdempotent(sqsconsumer.NewMemoryStore(),
		sqsconsumer.WithIdempotencyKey(orders.Key),
		sqsconsumer.WithIdempotencyTTL(ttl),
		sqsconsumer.WithDuplicateHook(handler.LogDuplicate))
	if err != nil {
		return nil, err
	}
	return lambdasqs.Wrap(client, handler,
		lambdasqs.WithMiddleware(idempotent),
		lambdasqs.WithVisibilityTimeout(visibility),
		lambdasqs.WithBatchingWindow(window),
		lambdasqs.WithObserver(orders.Observer{Log: logger}),
		lambdasqs.WithLeaseOptions(sqsconsumer.WithLogger(logger)))
}

func durationEnv(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", name, v, err)
	}
	return d, nil
}
