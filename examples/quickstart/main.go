// Command quickstart shows what the Consumer does for a queue whose handlers
// sometimes run longer than the visibility timeout.
//
//	go run ./examples/quickstart
//
// needs no AWS account: it starts an in-memory SQS (package sqstest), sends a
// few hundred messages whose handlers take from a few milliseconds to more
// than three times the 3-second lease, consumes them all and prints a report:
// how many were processed, how many were handled twice (must be 0: the
// leases of the slow ones were renewed instead of running out), how many
// renewals that took, the API calls by action, and the slowest handlers next
// to the lease.
//
// With SQS_QUEUE_URL set it runs against that queue using the default AWS
// configuration (environment, shared config files, instance role) and sends
// the same messages there first. Use an empty scratch queue: messages that
// this run did not send are left alone (handed back with a delay), but
// receiving them raises their receive count.
//
// It exits with status 1 if a message was handled twice or not all were
// processed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

// runConfig is what one run does.
type runConfig struct {
	// Messages is how many messages to send and consume.
	Messages int
	// Lease is the visibility timeout the Consumer keeps renewing
	// (WithVisibilityTimeout); it renews every third of it.
	Lease time.Duration
	// Concurrency is how many handlers run at once.
	Concurrency int
	// Seed makes the handler durations reproducible.
	Seed uint64
	// QueueURL, when set, is a real SQS queue to use instead of the
	// in-memory one.
	QueueURL string
	// Timeout bounds the whole run: whatever is unprocessed by then
	// makes run fail.
	Timeout time.Duration
}

func defaultConfig() runConfig {
	return runConfig{
		Messages:    300,
		Lease:       3 * time.Second, // the shortest lease the library accepts
		Concurrency: 50,
		Seed:        1,
		Timeout:     2 * time.Minute,
	}
}

func main() {
	cfg := defaultConfig()
	flag.IntVar(&cfg.Messages, "messages", cfg.Messages, "how many messages to send and consume")
	flag.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "handlers running at once")
	flag.DurationVar(&cfg.Lease, "lease", cfg.Lease, "visibility timeout the consumer renews (whole seconds, at least 3s)")
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the handler durations")
	flag.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up after this long")
	flag.Parse()
	cfg.QueueURL = os.Getenv("SQS_QUEUE_URL")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run sends cfg.Messages messages, consumes them with a Consumer, writes
// the report to out and returns an error if any message was handled twice
// or not processed.
func run(ctx context.Context, out io.Writer, cfg runConfig) error {
	if cfg.Messages < 1 {
		return errors.New("messages must be at least 1")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	var q *queue
	var err error
	if cfg.QueueURL == "" {
		q, err = memoryQueue()
	} else {
		q, err = awsQueue(ctx, cfg.QueueURL)
	}
	if err != nil {
		return err
	}

	jobs := makeJobs(cfg)
	ids, err := q.send(ctx, jobs)
	if err != nil {
		return fmt.Errorf("sending the messages: %w", err)
	}
	res, err := consume(ctx, q, cfg, jobs, ids)
	if err != nil {
		return err
	}
	res.report(out)
	return res.verdict()
}
