// Command sqstest serves the in-memory SQS of package
// github.com/sqskit/sqsconsumer/sqstest on a real listener, for SDKs and tools in other
// languages or processes:
//
//	go run ./cmd/sqstest -listen 127.0.0.1:9324 -queue jobs -queue jobs.fifo
//
// It prints one line, "sqstest listening on http://127.0.0.1:9324", and serves until
// SIGINT or SIGTERM. Queue URLs use the listen address as their base (or -base-url), so
// clients can call them directly. Point a client at it with endpoint URL = that base,
// any region and any credentials (signatures are not checked).
//
// The server is meant to run for a long time, so unlike an sqstest.Server in a test
// it does not keep every message forever: per queue it remembers the last -history
// messages that left the queue (default 10,000; sqstest.WithHistoryLimit). A receipt
// handle of a deleted message is answered as SQS answers it (a repeated delete
// succeeds) until the message falls out of that history, and as never issued after.
// Deleting a queue forgets its messages and handles at once.
//
// A Go client (aws-sdk-go-v2) on the same machine can lose an answer to a race of its
// own and retry, leaving the first answer's messages in flight until their visibility
// timeout; package sqstest's documentation ("Over a real socket") explains it, and
// production clients meet it too. Make such a client with package sqsclient (as in
// production), or give it an HTTP client whose transport is
// sqstest.RebufferingTransport:
//
//	client, err := sqsclient.New(sqs.Options{Region: "us-east-1",
//		BaseEndpoint: aws.String("http://127.0.0.1:9324"),
//		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", "")}, sqsclient.HTTPOptions{})
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sqstest:", err)
		os.Exit(1)
	}
}

// defaultHistory is the default of -history: enough for a client to repeat a delete
// (a retry after a lost answer) long after the message went, small enough to bound
// memory at a few MB per queue.
const defaultHistory = 10_000

type queueFlags []string

func (q *queueFlags) String() string     { return strings.Join(*q, ",") }
func (q *queueFlags) Set(v string) error { *q = append(*q, v); return nil }

// run serves until ctx is done. It writes the endpoint line to stdout once listening.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sqstest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9324", "address to listen on (host:port; port 0 picks a free one)")
	baseURL := fs.String("base-url", "", "prefix of queue URLs (default: http://<listen address>)")
	account := fs.String("account", sqstest.DefaultAccountID, "account id in queue URLs and ARNs")
	region := fs.String("region", sqstest.DefaultRegion, "region in queue ARNs")
	history := fs.Int("history", defaultHistory, "messages remembered per queue after they leave it (deleted, moved, expired, purged); 0 remembers all, and memory grows without bound")
	var queues queueFlags
	fs.Var(&queues, "queue", "create this queue at start (repeatable; a name ending in .fifo makes a FIFO queue)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *history < 0 {
		return fmt.Errorf("-history %d: must be 0 or more", *history)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	base := *baseURL
	if base == "" {
		base = "http://" + ln.Addr().String()
	}
	srv := sqstest.NewServer(sqstest.WithBaseURL(base), sqstest.WithAccountID(*account), sqstest.WithRegion(*region),
		sqstest.WithHistoryLimit(*history))
	for _, q := range queues {
		if _, err := srv.CreateQueue(q, nil); err != nil {
			ln.Close()
			return fmt.Errorf("queue %q: %w", q, err)
		}
	}

	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(stdout, "sqstest listening on %s\n", base)

	select {
	case err := <-served:
		srv.Close()
		return err
	case <-ctx.Done():
	}
	srv.Close() // ends long polls at once, so Shutdown does not wait up to 20 s
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = hs.Shutdown(shutdownCtx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
