// Command platform runs three product teams' queues in one process
// through a company's queue SDK: package queuesdk, next to it, is what a
// platform team writes on top of sqsconsumer (company defaults, a required
// dead-letter queue, JSON logs per message, a panic policy, error classes,
// one health and scaling endpoint, ECS scale-in protection).
//
//	go run ./examples/platform
//
// needs no AWS account: it starts an in-memory SQS (package sqstest) with
// the queues orders, emails and reports, each with its dead-letter queue
// (moving a message after 3 receives), and a producer that sends to them.
// The orders queue starts at once, emails joins 5 s later and reports 5 s
// after that, as three teams' code calling Consume at different times.
// After 30 s it stops as on SIGTERM (a queue whose long poll was sent in
// the last second before waits for it, up to 20 s) and prints what
// /healthz and /scaling answered just before, and where every message
// ended up. The JSON log lines go to standard error.
//
// What to look for: orders with a bad body go to orders-dlq at once
// (ErrValidation); the payments service behind orders takes 4 calls at
// once and answers 429 above that, so the orders queue's adaptive limit
// falls to about 4 (ErrRateLimited is back pressure, not a failure: the
// breaker stays closed); one email in eight is turned away by the mail provider at its first attempt and retried 30 s later
// (ErrTransient); an email whose body is "crash" panics, is logged with
// its stack and retried 5 minutes later (ErrPanic); the long reports still
// running at the shutdown save their progress and go back to the queue
// (ErrInterrupted) rather than being cut at the shutdown timeout.
//
// Flags:
//
//	-sqs memory|aws|URL  where the queues are (default $SQS_ENDPOINT, else memory):
//	                     aws is SQS with the default AWS configuration (environment,
//	                     shared files, task role); a URL is an SQS-compatible endpoint,
//	                     called with static credentials ($AWS_ACCESS_KEY_ID and
//	                     $AWS_SECRET_ACCESS_KEY, else "local") and -region
//	-for D               stop after D (default 30s in memory, else 0: until SIGINT or SIGTERM)
//	-rate N              messages a second the demo producer sends to each queue
//	                     (default 5 in memory, else 0: send nothing)
//	-http ADDR           serve /healthz, /readyz and /scaling there (default none)
//
// Against the module's in-memory SQS served on a socket:
//
//	go run ./cmd/sqstest -listen 127.0.0.1:9324 -queue orders,dlq=3 -queue emails,dlq=3 -queue reports,dlq=3
//	go run ./examples/platform -sqs http://127.0.0.1:9324 -rate 5 -http 127.0.0.1:8080
//	curl -s 127.0.0.1:8080/scaling
//
// The queues are found by name (GetQueueUrl). It exits with status 1 if a
// queue could not be consumed (a queue without a dead-letter queue is
// refused), 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/examples/platform/queuesdk"
	"github.com/sqskit/sqsconsumer/sqsclient"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// queueNames are the three teams' queues, in the order they join.
var queueNames = []string{"orders", "emails", "reports"}

// runConfig is what one run does.
type runConfig struct {
	SQS    string        // "memory", "aws" or an endpoint URL
	Region string        // for an endpoint URL
	For    time.Duration // stop after this long; 0: when ctx ends
	Rate   float64       // messages a second sent to each queue; 0: none
	Later  time.Duration // between one queue's Consume and the next's
	HTTP   string        // listen address of the probes; "": none
}

func main() {
	cfg := runConfig{SQS: os.Getenv("SQS_ENDPOINT"), Region: os.Getenv("AWS_REGION"), Later: 5 * time.Second, For: -1, Rate: -1}
	if cfg.SQS == "" {
		cfg.SQS = "memory"
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	flag.StringVar(&cfg.SQS, "sqs", cfg.SQS, "memory, aws, or an SQS-compatible endpoint URL")
	flag.StringVar(&cfg.Region, "region", cfg.Region, "region of an endpoint URL")
	flag.DurationVar(&cfg.For, "for", cfg.For, "stop after this long (default 30s in memory, else until SIGINT or SIGTERM)")
	flag.Float64Var(&cfg.Rate, "rate", cfg.Rate, "messages a second sent to each queue (default 5 in memory, else 0)")
	flag.StringVar(&cfg.HTTP, "http", cfg.HTTP, "listen address of /healthz, /readyz and /scaling (default none)")
	flag.Parse()
	if cfg.For < 0 {
		cfg.For = 0
		if cfg.SQS == "memory" {
			cfg.For = 30 * time.Second
		}
	}
	if cfg.Rate < 0 {
		cfg.Rate = 0
		if cfg.SQS == "memory" {
			cfg.Rate = 5
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := connect(ctx, cfg)
	if err == nil {
		if b.srv != nil {
			defer b.srv.Close()
		}
		err = run(ctx, cfg, b, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "platform:", err)
		os.Exit(1)
	}
}

// backend is where the queues are.
type backend struct {
	client sqsconsumer.Client
	urls   []string // queueNames' URLs
	send   func(ctx context.Context, url, body string) error
	srv    *sqstest.Server // in memory only
	dlqs   []string        // in memory only: the dead-letter queues' URLs
}

// connect returns the backend cfg.SQS names.
func connect(ctx context.Context, cfg runConfig) (*backend, error) {
	if cfg.SQS == "memory" {
		return memoryBackend()
	}
	var client *sqs.Client
	var err error
	switch cfg.SQS {
	case "aws":
		var awsCfg aws.Config
		if awsCfg, err = config.LoadDefaultConfig(ctx); err != nil {
			return nil, fmt.Errorf("loading the AWS configuration: %w", err)
		}
		client, err = sqsclient.NewFromConfig(awsCfg, sqsclient.HTTPOptions{})
	default:
		client, err = endpointClient(cfg.SQS, cfg.Region)
	}
	if err != nil {
		return nil, err
	}
	b := &backend{client: client, send: func(ctx context.Context, url, body string) error {
		_, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &body})
		return err
	}}
	for _, name := range queueNames {
		out, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", name, err)
		}
		b.urls = append(b.urls, aws.ToString(out.QueueUrl))
	}
	return b, nil
}

// endpointClient is the client of an SQS-compatible endpoint. Its
// credentials are static ($AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY,
// else "local"): the default configuration loader is not used, since a
// custom endpoint with AWS_CA_BUNDLE set makes it fail.
func endpointClient(endpoint, region string) (*sqs.Client, error) {
	key, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if key == "" || secret == "" {
		key, secret = "local", "local"
	}
	return sqsclient.New(sqs.Options{
		Region:       region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(key, secret, ""),
	}, sqsclient.HTTPOptions{})
}

// memoryBackend starts an in-memory SQS with the three queues and their
// dead-letter queues. The client reaches it without a socket.
func memoryBackend() (*backend, error) {
	srv := sqstest.NewServer()
	b := &backend{client: srv.Client(), srv: srv, send: func(_ context.Context, url, body string) error {
		_, err := srv.Send(url, body)
		return err
	}}
	for _, name := range queueNames {
		url, dlq, err := srv.CreateQueueWithDLQ(name, 3, map[string]string{"VisibilityTimeout": "30"})
		if err != nil {
			return nil, err
		}
		b.urls, b.dlqs = append(b.urls, url), append(b.dlqs, dlq)
	}
	return b, nil
}

// run consumes the three queues through one SDK until ctx ends (or
// cfg.For has passed), then shuts them down and writes the report to out;
// the log lines go to logw.
func run(ctx context.Context, cfg runConfig, b *backend, out, logw io.Writer) error {
	sdk, err := queuesdk.New(queuesdk.Config{Client: b.client, Service: "shop", Log: logw})
	if err != nil {
		return err
	}
	if cfg.HTTP != "" {
		ln, err := net.Listen("tcp", cfg.HTTP)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: sdk.Handler(), ReadHeaderTimeout: 5 * time.Second}
		var serving sync.WaitGroup
		serving.Go(func() { _ = srv.Serve(ln) }) // returns at Shutdown
		defer func() {
			_ = srv.Shutdown(context.Background())
			serving.Wait()
		}()
	}
	if cfg.For > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.For)
		defer cancel()
	}
	// The queues and the producer run until stopping is cancelled: after
	// the probes' last answers are taken, when ctx ends.
	stopping, stop := context.WithCancelCause(context.Background())
	defer stop(nil)

	pay, mail, rep := &payments{}, &mailer{}, newReporter()
	teams := []struct {
		h    sqsconsumer.HandlerFunc
		opts []sqsconsumer.Option
	}{
		{pay.handle, []sqsconsumer.Option{ // the orders team's own options after the company's
			sqsconsumer.WithConcurrency(32),
			sqsconsumer.WithAdaptiveConcurrency(sqsconsumer.AdaptiveConcurrency{Floor: 2}),
		}},
		{mail.handle, nil},
		{rep.handle, []sqsconsumer.Option{sqsconsumer.WithConcurrency(4)}},
	}
	var wg sync.WaitGroup
	for i, team := range teams {
		wg.Go(func() {
			select { // each team's queue joins later than the one before
			case <-time.After(time.Duration(i) * cfg.Later):
			case <-stopping.Done():
				return
			}
			if err := sdk.Consume(stopping, b.urls[i], team.h, team.opts...); err != nil {
				stop(fmt.Errorf("%s: %w", queueNames[i], err))
			}
		})
	}
	if cfg.Rate > 0 {
		wg.Go(func() { produce(stopping, b, cfg.Rate) })
	}

	select {
	case <-ctx.Done():
	case <-stopping.Done():
	}
	fmt.Fprintln(out, "before the shutdown:")
	for _, path := range []string{"/healthz", "/scaling"} {
		rec := httptest.NewRecorder()
		sdk.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Fprintf(out, "GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
	stop(nil)
	wg.Wait()
	if err := sdk.Close(); err != nil {
		return err
	}

	fmt.Fprintf(out, "\npayments: %d charged, %d refused with 429; emails: %d sent; reports: %d done, %d interrupted at the shutdown\n",
		pay.charged, pay.refused, mail.sent, rep.done, rep.interrupted)
	if b.srv != nil {
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "queue\tsent\thandled\tdead-lettered\tvisible\twaiting for a retry")
		for i, url := range b.urls {
			var deleted, redriven, visible, invisible int
			msgs := b.srv.Messages(url)
			for _, st := range msgs {
				switch {
				case st.Deleted:
					deleted++ // handled, or moved to the DLQ by the Consumer
				case st.MovedToDLQ:
					redriven++ // by the queue's redrive policy
				case st.InFlight:
					invisible++
				default:
					visible++
				}
			}
			dead := len(b.srv.Messages(b.dlqs[i]))
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\n", queueNames[i], len(msgs), deleted-(dead-redriven), dead, visible, invisible)
		}
		_ = w.Flush()
	}
	if err := context.Cause(stopping); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// produce sends about rate messages a second to orders and emails until
// ctx ends: the orders in bursts of 20 (one in twenty malformed), one
// email in twenty-five "crash", and a report of 5 to 40 steps once every
// ten emails.
func produce(ctx context.Context, b *backend, rate float64) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// A failed send is the producer's business, not the consumers'.
		for j := i; i%20 == 0 && j < i+20; j++ {
			body := fmt.Sprintf(`{"order_id":"o-%d","amount_cents":%d}`, j, 100+j%900)
			if j%20 == 7 {
				body = "not json"
			}
			_ = b.send(ctx, b.urls[0], body)
		}
		body := fmt.Sprintf("email %d", i)
		if i%25 == 11 {
			body = "crash"
		}
		_ = b.send(ctx, b.urls[1], body)
		if i%10 == 0 {
			_ = b.send(ctx, b.urls[2], fmt.Sprint(5+i*7%36))
		}
	}
}
