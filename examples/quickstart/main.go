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
// Next to that report it shows what a plain receive/delete loop does with
// the same jobs on a second in-memory queue: the same number of goroutines,
// each receiving a message with the same visibility timeout, running the
// handler and deleting the message, with nothing renewing the visibility.
// Every job that outlives the timeout becomes visible again while it runs
// and is handled a second time (or a third); the table puts its duplicates,
// the handler time they waste and the messages left in the queue next to
// the Consumer's. Against a real queue (SQS_QUEUE_URL) the comparison is
// skipped.
//
// While it runs it prints a progress line, if standard output is a
// terminal.
//
// It exits with status 1 if the Consumer handled a message twice or did not
// process them all. The plain loop's duplicates are expected and do not
// fail the run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
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
	// Progress, when set, makes run rewrite a one-line progress report
	// on out (with carriage returns) while the messages are consumed.
	Progress bool
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
	cfg.Progress = isTerminal(os.Stdout)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// isTerminal reports whether f is a terminal (a character device), where a
// progress line that rewrites itself reads well; in a pipe or a file it
// would only be noise.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// run sends cfg.Messages messages, consumes them with a Consumer and (on
// the in-memory queue) with a plain receive/delete loop, writes the report
// to out and returns an error if the Consumer handled any message twice or
// did not process them all.
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
	t := newTally(ids)

	// The plain loop gets its own in-memory queue with the same jobs, and
	// runs at the same time as the Consumer.
	var (
		nt      *tally
		nres    *naiveResult
		nerr    error
		naiveWG sync.WaitGroup
	)
	if cfg.QueueURL == "" {
		nq, err := memoryQueue()
		if err != nil {
			return err
		}
		nids, err := nq.send(ctx, jobs)
		if err != nil {
			return fmt.Errorf("sending the messages for the plain loop: %w", err)
		}
		nt = newTally(nids)
		naiveWG.Go(func() { nres, nerr = runNaive(ctx, nq, cfg, jobs[0].Run, nt) })
	}
	var stopProgress func()
	if cfg.Progress {
		stopProgress = showProgress(out, len(ids), t, nt)
	}
	res, err := consume(ctx, q, cfg, jobs, ids, t)
	naiveWG.Wait()
	if stopProgress != nil {
		stopProgress()
	}
	if err != nil {
		return err
	}
	if nerr != nil {
		return nerr
	}
	res.report(out)
	if nres != nil {
		compare(out, res, nres)
	} else {
		fmt.Fprintln(out, "\n(the comparison with a plain receive/delete loop runs on the in-memory queue only)")
	}
	return res.verdict()
}

// progressEvery is how often the progress line is rewritten.
const progressEvery = 200 * time.Millisecond

// showProgress rewrites one line on out every progressEvery: the messages
// the Consumer deleted and (nt not nil) those the plain loop handled, and
// their duplicates. The returned function stops it, waits for it and erases the
// line.
func showProgress(out io.Writer, total int, t, nt *tally) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(out, "\r\033[K")
				return
			case <-tick.C:
			}
			// Short enough for an 80-column terminal: a wrapped line
			// would not be rewritten in place.
			deleted, _ := t.progress()
			line := fmt.Sprintf("%5.1fs  done: Consumer %d/%d", time.Since(start).Seconds(), deleted, total)
			if nt != nil {
				_, ran := nt.progress()
				line += fmt.Sprintf(", plain loop %d/%d  duplicates: %d vs %d", ran, total, t.duplicates(), nt.duplicates())
			} else {
				line += fmt.Sprintf("  duplicates: %d", t.duplicates())
			}
			fmt.Fprint(out, "\r\033[K"+line)
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
