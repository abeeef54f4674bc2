// Command worker is the process the chaos suite kills: a consumer built with
// sqsconsumer.New and Run whose handlers take a random time and record each
// completion in a journal (package journal) before returning nil, so that the
// test driver can tell, after a SIGKILL, which work was done.
//
//	worker -endpoint http://127.0.0.1:PORT -queue URL -journal FILE [flags]
//
// A message body may set its handler's behaviour: "sleep=1.5s" works that
// long, "sleep=hang" works until the handler's context is cancelled. Other
// bodies work a random time between -min and -max.
//
// SIGTERM or SIGINT cancels Run's context (signal.NotifyContext): the
// library's graceful shutdown. Run's return is journalled as an "exit" entry;
// the process exits 0 after a clean shutdown, 1 on a Run error, 2 on bad
// flags.
//
// -client picks the SQS client: "wire" (the default: the suite's client,
// whose transport hands net/http a private copy of each request body),
// "sdk" (the SDK's own default HTTP client, as sqs.New makes it: what a
// user who builds a client by hand gets) or "sqsclient" (package
// sqsclient's).
//
// -broken makes it misbehave on purpose, so the suite can show that each of
// its checks catches the fault it is meant to catch:
//
//	delete-before-handler  the handler deletes its message first, then works
//	fail-after-record      the handler records completion, then fails
//	ignore-cancel          "sleep=hang" handlers ignore their context
//	rehide-after-release   after the library reports a message released,
//	                       the worker hides it again for 10 minutes (what a
//	                       late renewal of the library would do)
//	unguarded-bodies       the library's guard of its request bodies is off
//	                       (internal/broken.UnguardedBodies): with -client sdk
//	                       a receive's answer can be lost
//
// -stall D (with -client sdk) holds net/http's connection writer after it
// sent a ReceiveMessage body until 16 KB of the answer has been read (at
// most D), and that read until the writer closed the connection (at most
// 50 ms): what a loaded machine does when it
// deschedules the writer there while the answer is being read, the moment
// the SDK's lost-answer race needs (package sqsclient's documentation). It
// does so once per process: for the first receive whose answer reaches
// 16 KB within D (one receive at a time is held; a hold that times out
// does not count), so that without a guard exactly one receive's answer
// meets the race.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/chaos/internal/wire"
	"github.com/sqskit/sqsconsumer/chaos/journal"
	"github.com/sqskit/sqsconsumer/internal/broken"
	"github.com/sqskit/sqsconsumer/sqsclient"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

type config struct {
	endpoint, queue, journal string
	concurrency              int
	lease, heartbeat         time.Duration
	shutdown, wait           time.Duration
	minWork, maxWork         time.Duration
	retryAfter               time.Duration
	seed                     uint64
	broken                   string
	client                   string
	stall                    time.Duration
}

var brokenModes = map[string]bool{"": true, "delete-before-handler": true, "fail-after-record": true, "ignore-cancel": true, "rehide-after-release": true,
	"unguarded-bodies": true}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.endpoint, "endpoint", "", "SQS endpoint URL (required)")
	fs.StringVar(&c.queue, "queue", "", "queue URL (required)")
	fs.StringVar(&c.journal, "journal", "", "journal file to append to (required)")
	fs.IntVar(&c.concurrency, "concurrency", 4, "handlers at once")
	fs.DurationVar(&c.lease, "lease", 3*time.Second, "visibility timeout (lease length)")
	fs.DurationVar(&c.heartbeat, "heartbeat", 0, "heartbeat interval (0: a third of the lease)")
	fs.DurationVar(&c.shutdown, "shutdown", 2*time.Second, "shutdown budget for running handlers")
	fs.DurationVar(&c.wait, "wait", time.Second, "long-poll wait")
	fs.DurationVar(&c.minWork, "min", 50*time.Millisecond, "shortest random handler time")
	fs.DurationVar(&c.maxWork, "max", 400*time.Millisecond, "longest random handler time")
	fs.DurationVar(&c.retryAfter, "retry-after", time.Second, "visibility after a failed handler")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the handler times (mixed with the pid)")
	fs.StringVar(&c.client, "client", "wire", "SQS client: wire, sdk or sqsclient")
	fs.DurationVar(&c.stall, "stall", 0, "with -client sdk: hold the connection writer after each receive's body until 16 KB of its answer was read, at most this long")
	fs.StringVar(&c.broken, "broken", "", "misbehave on purpose: delete-before-handler, fail-after-record, ignore-cancel or rehide-after-release")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var errs []error
	if c.endpoint == "" || c.queue == "" || c.journal == "" {
		errs = append(errs, errors.New("-endpoint, -queue and -journal are required"))
	}
	if c.minWork < 0 || c.maxWork < c.minWork {
		errs = append(errs, fmt.Errorf("-min %v and -max %v: need 0 <= min <= max", c.minWork, c.maxWork))
	}
	if c.client != "wire" && c.client != "sdk" && c.client != "sqsclient" {
		errs = append(errs, fmt.Errorf("-client %q: must be wire, sdk or sqsclient", c.client))
	}
	if c.stall != 0 && (c.client != "sdk" || c.stall < 0) {
		errs = append(errs, fmt.Errorf("-stall %v: needs -client sdk and a positive duration", c.stall))
	}
	if !brokenModes[c.broken] {
		errs = append(errs, fmt.Errorf("-broken %q: unknown mode", c.broken))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %v", fs.Args()))
	}
	return c, errors.Join(errs...)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return 2
	}
	if c.broken == "unguarded-bodies" {
		broken.Set(broken.UnguardedBodies)
	}
	j, err := journal.Create(c.journal)
	if err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return 2
	}
	defer j.Close()
	pid := os.Getpid()
	client, err := newClient(c, pid)
	if err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return 2
	}
	h := &handler{c: c, j: j, pid: pid, rng: rand.New(rand.NewPCG(c.seed, uint64(pid))), client: client, handles: map[string]string{}}
	opts := []sqsconsumer.Option{
		sqsconsumer.WithVisibilityTimeout(c.lease),
		sqsconsumer.WithConcurrency(c.concurrency),
		sqsconsumer.WithShutdownTimeout(c.shutdown),
		sqsconsumer.WithWaitTime(c.wait),
		sqsconsumer.WithBackoff(func(int) time.Duration { return c.retryAfter }),
		sqsconsumer.WithLogger(slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		sqsconsumer.WithObserver(sqsconsumer.ObserverFunc(h.observe)),
	}
	if c.heartbeat > 0 {
		opts = append(opts, sqsconsumer.WithHeartbeatInterval(c.heartbeat))
	}
	cons, err := sqsconsumer.New(client, c.queue, h, opts...)
	if err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return 2
	}
	h.write(journal.Entry{Kind: journal.Ready}, false)
	err = cons.Run(ctx)
	detail := ""
	if err != nil {
		detail = err.Error()
	}
	h.write(journal.Entry{Kind: journal.Exit, Detail: detail}, true)
	if err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return 1
	}
	return 0
}

// newClient makes the SQS client -client names.
func newClient(c config, pid int) (*sqs.Client, error) {
	if c.client == "wire" {
		return wire.Client(c.endpoint, pid), nil
	}
	o := sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(c.endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("chaos", "chaos", ""),
	}
	if c.client == "sdk" {
		if c.stall > 0 {
			dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
			o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
				tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					conn, err := dialer.DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return newStallConn(conn, c.stall), nil
				}
			})
		}
		return sqs.New(o), nil
	}
	return sqsclient.New(o, sqsclient.HTTPOptions{MaxIdleConnsPerHost: 64})
}

// stallConn holds the write that ends a ReceiveMessage body until 16 KB
// of the answer has been read on the connection (at most most), then
// holds that read until the writer closed the connection (at most 50 ms),
// so that the writer, which reads the request body once more after the
// held write, gets there while the answer is still being read (see
// -stall). Once per process (stalled), one hold at a time (holding).
type stallConn struct {
	net.Conn
	most time.Duration

	mu      sync.Mutex // guards the fields below
	release chan struct{}
	read    int           // answer bytes read since the hold
	closed  chan struct{} // closed by Close
}

func newStallConn(c net.Conn, most time.Duration) *stallConn {
	return &stallConn{Conn: c, most: most, closed: make(chan struct{})}
}

func (c *stallConn) Close() error {
	c.mu.Lock()
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// stallAt is how far into a held receive's answer the writer is released.
const stallAt = 16 << 10

// holding is set while a receive's writer is held; stalled once a hold
// ended with its answer being read (the race met).
var holding, stalled atomic.Bool

func (c *stallConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if stalled.Load() || !bytes.Contains(p, []byte(`"MaxNumberOfMessages"`)) || !bytes.HasSuffix(p, []byte("}")) || !holding.CompareAndSwap(false, true) {
		return n, err
	}
	defer holding.Store(false)
	release := make(chan struct{})
	c.mu.Lock()
	c.release, c.read = release, 0
	c.mu.Unlock()
	t := time.NewTimer(c.most)
	defer t.Stop()
	select {
	case <-release:
	case <-t.C:
		c.mu.Lock()
		c.release = nil
		c.mu.Unlock()
	}
	return n, err
}

func (c *stallConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	var release chan struct{}
	if c.release != nil {
		if c.read += n; c.read >= stallAt {
			release, c.release = c.release, nil
		}
	}
	c.mu.Unlock()
	if release != nil {
		stalled.Store(true)
		close(release)
		t := time.NewTimer(50 * time.Millisecond) // the writer's turn: it closes the connection, or goes on
		select {
		case <-c.closed:
		case <-t.C:
		}
		t.Stop()
	}
	return n, err
}

type handler struct {
	c   config
	j   *journal.Writer
	pid int

	mu      sync.Mutex // guards rng and handles
	rng     *rand.Rand
	handles map[string]string // rehide-after-release: message id -> its latest receipt handle

	client *sqs.Client // rehide-after-release's own calls
}

// write journals e for this process. A journal that cannot be written makes
// every later check meaningless, so the process stops at once.
func (h *handler) write(e journal.Entry, durable bool) {
	e.PID = h.pid
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if err := h.j.Append(e, durable); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(3)
	}
}

// observe journals the library's settlement and lease events.
func (h *handler) observe(e sqsconsumer.Event) {
	switch e.Kind {
	case sqsconsumer.EventReceived, sqsconsumer.EventAdopted, sqsconsumer.EventDeleted, sqsconsumer.EventReleased,
		sqsconsumer.EventLeaseLost, sqsconsumer.EventLeaseExpired, sqsconsumer.EventFailed:
		detail := ""
		if e.Err != nil {
			detail = e.Err.Error()
		}
		h.write(journal.Entry{Kind: "ev:" + e.Kind.String(), Time: e.Time, MessageID: e.MessageID, ReceiveCount: e.ReceiveCount, Detail: detail}, false)
	}
	if e.Kind == sqsconsumer.EventReleased && h.c.broken == "rehide-after-release" {
		h.mu.Lock()
		handle := h.handles[e.MessageID]
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = h.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &h.c.queue, ReceiptHandle: &handle, VisibilityTimeout: 600})
		cancel()
	}
}

// work says how long the handler of body works: forever (until cancelled)
// for "sleep=hang", the given duration for "sleep=D", else a random time.
func (h *handler) work(body string) (d time.Duration, hang bool) {
	for f := range strings.FieldsSeq(body) {
		v, ok := strings.CutPrefix(f, "sleep=")
		if !ok {
			continue
		}
		if v == "hang" {
			return 0, true
		}
		if d, err := time.ParseDuration(v); err == nil {
			return d, false
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.c.minWork + time.Duration(h.rng.Int64N(int64(h.c.maxWork-h.c.minWork)+1)), false
}

func (h *handler) HandleMessage(ctx context.Context, m *sqsconsumer.Message) error {
	at := func(kind, detail string) journal.Entry {
		return journal.Entry{Kind: kind, MessageID: m.ID, ReceiveCount: m.ReceiveCount, Detail: detail}
	}
	h.write(at(journal.Start, ""), false)
	if h.c.broken == "rehide-after-release" {
		h.mu.Lock()
		h.handles[m.ID] = m.Lease.ReceiptHandle()
		h.mu.Unlock()
	}
	if h.c.broken == "delete-before-handler" {
		if err := m.Lease.Delete(ctx); err != nil {
			return err
		}
	}
	d, hang := h.work(m.Body)
	if hang && h.c.broken == "ignore-cancel" {
		select {} // a handler that never returns
	}
	var timeout <-chan time.Time
	if !hang {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
	case <-ctx.Done():
		cause := context.Cause(ctx)
		h.write(at(journal.Cancel, cause.Error()), false)
		return cause
	}
	// The work is done: make that durable before the message may be deleted.
	h.write(at(journal.Done, ""), true)
	if h.c.broken == "fail-after-record" {
		h.write(at(journal.Fail, "broken: fail after record"), false)
		return errors.New("broken: failing after the work was recorded")
	}
	return nil
}
