// Command sqstest serves the in-memory SQS of package
// github.com/sqskit/sqsconsumer/sqstest on a real listener, for SDKs and tools in other
// languages or processes:
//
//	go run ./cmd/sqstest -listen 127.0.0.1:9324 -queue jobs -queue jobs.fifo
//
// -queue NAME[,dlq=N][,Attribute=Value...] creates a queue at start: a name ending
// in .fifo makes a FIFO queue; dlq=N makes its dead-letter queue too, named NAME-dlq
// (jobs-dlq, jobs-dlq.fifo), keeping messages 14 days, and moves a message there
// after N receives (1 to 1,000; sqstest.Server.CreateQueueWithDLQ); the other pairs
// are the queue's attributes (a value cannot hold a comma):
//
//	go run ./cmd/sqstest -queue jobs,dlq=5,VisibilityTimeout=30
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
// The server answers for its own address only: a request whose QueueUrl names
// another host or port (another sqstest, an AWS endpoint) is answered as SQS answers a
// queue that does not exist, 400 QueueDoesNotExist
// (AWS.SimpleQueueService.NonExistentQueue), instead of reaching this server's queue
// of the same name. Its own address is the host and port of -base-url (default the
// listen address) and the one the request was sent to (its Host header), so queue
// URLs on localhost work for a client that connects to localhost. Behind a proxy or
// a port forward, whose address neither shows, -any-host accepts every host and
// port, routing by the URL's account and queue name alone (sqstest.Server.Handler).
//
// Exit status: 0 after SIGINT or SIGTERM, and for -h; 2 for bad flags (one line
// on stderr, and a pointer to -h); 1 when serving fails.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is a bad flag or argument: exit status 2.
type usageError struct{ error }

// exitCode reports err on stderr and returns the process's exit status: 0 for
// nil, 2 for a usageError (with the pointer to -h), 1 otherwise.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "sqstest:", err)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, "Run sqstest -h for usage.")
		return 2
	}
	return 1
}

// defaultHistory is the default of -history: enough for a client to repeat a delete
// (a retry after a lost answer) long after the message went, small enough to bound
// memory at a few MB per queue.
const defaultHistory = 10_000

type queueFlags []string

func (q *queueFlags) String() string     { return strings.Join(*q, ",") }
func (q *queueFlags) Set(v string) error { *q = append(*q, v); return nil }

// run serves until ctx is done. It writes the endpoint line to stdout once listening.
// With -h it prints the usage to stderr and returns nil at once; a bad flag or
// argument is a usageError.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sqstest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9324", "address to listen on (host:port; port 0 picks a free one)")
	baseURL := fs.String("base-url", "", "prefix of queue URLs (default: http://<listen address>)")
	account := fs.String("account", sqstest.DefaultAccountID, "account id in queue URLs and ARNs")
	region := fs.String("region", sqstest.DefaultRegion, "region in queue ARNs")
	history := fs.Int("history", defaultHistory, "messages remembered per queue after they leave it (deleted, moved, expired, purged); 0 remembers all, and memory grows without bound")
	anyHost := fs.Bool("any-host", false, "serve queue URLs that name any host and port (behind a proxy); default: only this server's, others are answered as queues that do not exist")
	var queues queueFlags
	fs.Var(&queues, "queue", "create this queue at start: NAME[,dlq=N][,Attribute=Value...] (repeatable; a name ending in .fifo makes a FIFO queue; dlq=N also makes NAME-dlq its dead-letter queue after N receives)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: sqstest [-listen HOST:PORT] [-queue NAME ...] [flags]\n\n"+
			"Serves an in-memory SQS (package sqstest) until SIGINT or SIGTERM. Exit status: 0, also\n"+
			"for -h; 2 for bad flags; 1 when serving fails.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	// The flag package would print the whole usage after a bad flag; the error
	// alone (and a pointer to -h) is printed instead, and -h prints the usage.
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage()
		return nil
	case err != nil:
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %v", fs.Args())}
	}
	if *history < 0 {
		return usageError{fmt.Errorf("-history %d: must be 0 or more", *history)}
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
		if err := createQueue(srv, q); err != nil {
			ln.Close()
			return usageError{fmt.Errorf("-queue %q: %w", q, err)}
		}
	}

	handler := srv.HostCheckingHandler()
	if *anyHost {
		handler = srv.Handler()
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
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

// createQueue makes the queue a -queue flag describes: NAME[,dlq=N][,Attribute=Value...].
func createQueue(srv *sqstest.Server, spec string) error {
	parts := strings.Split(spec, ",")
	name, attrs, dlq := parts[0], map[string]string{}, 0
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		switch {
		case !ok || k == "":
			return fmt.Errorf("%q: want dlq=N or Attribute=Value", p)
		case k == "dlq":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				return fmt.Errorf("dlq=%s: the receives before a message moves to the dead-letter queue, from 1 to 1000", v)
			}
			if dlq > 0 {
				return fmt.Errorf("dlq given twice")
			}
			dlq = n
		default:
			if _, dup := attrs[k]; dup {
				return fmt.Errorf("attribute %s given twice", k)
			}
			attrs[k] = v
		}
	}
	if dlq == 0 {
		_, err := srv.CreateQueue(name, attrs)
		return err
	}
	if _, ok := attrs["RedrivePolicy"]; ok {
		return errors.New("dlq=N and RedrivePolicy both set the dead-letter queue: give one")
	}
	_, _, err := srv.CreateQueueWithDLQ(name, dlq, attrs)
	return err
}
