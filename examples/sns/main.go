// Command sns consumes an SQS queue subscribed to an SNS topic, with a
// typed handler: the shape of a service that reacts to events another team
// publishes.
//
// # Messages
//
// The topic's publisher sends price changes, one JSON object each:
//
//	{"sku": "A-1", "old_cents": 1999, "new_cents": 1499}
//
// with an optional String message attribute "store". SNS wraps each in its
// notification envelope before the queue gets it, unless the subscription's
// raw message delivery is on. payload.Unwrap takes the envelope off (SNS,
// or SNSRaw when SNS_RAW_DELIVERY=true), so the handler gets the price
// change as a Go value, the attribute in the message's MessageAttributes
// either way, and the topic ARN, subject and SNS message ID from
// payload.FromContext.
//
// A body that is not an SNS notification (or, with raw delivery, that
// still is one), and a price change that does not decode or has no sku,
// fail permanently (sqsconsumer.Permanent): retrying cannot fix them, and
// the queue's redrive policy moves them to the dead-letter queue.
//
// # Environment
//
//	SQS_QUEUE_URL      required: the queue subscribed to the topic
//	SNS_RAW_DELIVERY   true if the subscription has raw message delivery on (default false)
//	LOG_LEVEL          debug, info, warn or error (default info)
//
// The SQS client comes from the default AWS configuration (AWS_REGION,
// credentials, AWS_ENDPOINT_URL, ...), as in examples/worker. To try it
// with the module's in-memory SQS:
//
//	go run ./cmd/sqstest -listen 127.0.0.1:9324 -queue prices
//
//	AWS_ENDPOINT_URL=http://127.0.0.1:9324 AWS_REGION=us-east-1 \
//	AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \
//	SQS_QUEUE_URL=http://127.0.0.1:9324/123456789012/prices go run ./examples/sns
//
// and send it what SNS would deliver:
//
//	AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local aws --region us-east-1 \
//	  --endpoint-url http://127.0.0.1:9324 sqs send-message \
//	  --queue-url http://127.0.0.1:9324/123456789012/prices \
//	  --message-body '{"Type":"Notification","MessageId":"1b2c3d4e-0000-4000-8000-000000000001","TopicArn":"arn:aws:sns:us-east-1:123456789012:prices","Subject":"price change","Message":"{\"sku\":\"A-1\",\"old_cents\":1999,\"new_cents\":1499}","Timestamp":"2026-03-14T12:00:00.000Z","MessageAttributes":{"store":{"Type":"String","Value":"berlin"}}}'
//
// It logs JSON lines to standard error and exits 0 after a clean shutdown
// on SIGTERM or SIGINT, 1 when the consumer stopped on an error, 2 when
// the configuration is invalid.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/payload"
	"github.com/sqskit/sqsconsumer/sqsclient"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Getenv, os.Stderr, awsClient)
	stop()
	os.Exit(code)
}

func awsClient(ctx context.Context) (sqsconsumer.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	return sqsclient.NewFromConfig(cfg, sqsclient.HTTPOptions{})
}

// settings is the program's configuration, read from the environment.
type settings struct {
	queueURL string
	raw      bool
	logLevel slog.Level
}

func loadSettings(getenv func(string) string) (settings, error) {
	var s settings
	var errs []error
	if s.queueURL = strings.TrimSpace(getenv("SQS_QUEUE_URL")); s.queueURL == "" {
		errs = append(errs, errors.New("SQS_QUEUE_URL is required: the URL of the queue subscribed to the topic"))
	}
	if v := getenv("SNS_RAW_DELIVERY"); v != "" {
		raw, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SNS_RAW_DELIVERY=%q: want true or false", v))
		}
		s.raw = raw
	}
	if v := getenv("LOG_LEVEL"); v != "" {
		if err := s.logLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", v))
		}
	}
	return s, errors.Join(errs...)
}

// run is the whole program: it returns when ctx is cancelled and the
// consumer has shut down, or on an error.
func run(ctx context.Context, getenv func(string) string, stderr io.Writer, newClient func(context.Context) (sqsconsumer.Client, error)) int {
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

	// What the queue carries: SNS envelopes, or the bare messages when
	// the subscription delivers raw.
	format := payload.SNS
	if s.raw {
		format = payload.SNSRaw
	}
	unwrap, err := payload.Unwrap(format)
	if err != nil {
		logger.Error("invalid payload format", "error", err)
		return exitConfig
	}
	handler, err := payload.Handle(pricer{log: logger}.handle)
	if err != nil {
		logger.Error("invalid handler", "error", err)
		return exitConfig
	}
	c, err := sqsconsumer.New(client, s.queueURL, handler,
		sqsconsumer.WithMiddleware(unwrap),
		sqsconsumer.WithLogger(logger),
		sqsconsumer.WithObserver(failureLog{logger}))
	if err != nil {
		logger.Error("invalid consumer options", "error", err)
		return exitConfig
	}
	logger.Info("consumer started", "queue_url", s.queueURL, "format", format.String())
	if err := c.Run(ctx); err != nil {
		logger.Error("consumer stopped on an error", "error", err)
		return exitFailed
	}
	logger.Info("consumer stopped cleanly")
	return exitOK
}
