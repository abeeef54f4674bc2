package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// bench is the endpoint side of a run: it makes a fresh queue, filled with
// n messages, for every measurement.
type bench struct {
	cfg     benchConfig
	where   string
	counter *callCounter
	// target makes a queue named name holding n messages, and a client
	// for it. Every measurement drains a queue of its own: a long poll
	// cancelled at the end of the previous one may still be waiting on
	// the server, and if it saw new messages arrive it would take them
	// invisible for the visibility timeout.
	target func(ctx context.Context, name string, n int) (*target, error)
	close  func()
	made   int // targets made so far
}

// target is one queue to drain.
type target struct {
	client *sqs.Client
	url    string
	close  func()
}

func newBench(cfg benchConfig) (*bench, error) {
	counter := newCallCounter()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Every poller holds a connection in its long poll and the batch calls
	// need more: without enough idle connections kept per host, each
	// request would open (and leave in TIME_WAIT) a new one.
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 4*cfg.Pollers + 32
	tr.DialContext = counter.dial((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	httpClient := &http.Client{Transport: counter.wrap(ownBody{next: tr})}
	newClient := func(endpoint string) *sqs.Client {
		return sqs.New(sqs.Options{
			Region:       "us-east-1",
			Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
			BaseEndpoint: aws.String(endpoint),
			HTTPClient:   httpClient,
		})
	}

	if cfg.Endpoint != "" {
		client := newClient(cfg.Endpoint)
		return &bench{
			cfg:     cfg,
			where:   "endpoint " + cfg.Endpoint,
			counter: counter,
			target: func(ctx context.Context, name string, n int) (*target, error) {
				out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
				if err != nil {
					return nil, fmt.Errorf("creating queue %s at %s: %w", name, cfg.Endpoint, err)
				}
				url := aws.ToString(out.QueueUrl)
				if err := sendBatches(ctx, client, url, n); err != nil {
					return nil, err
				}
				return &target{client: client, url: url, close: func() {
					_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
				}}, nil
			},
			close: tr.CloseIdleConnections,
		}, nil
	}

	// In-process, every measurement gets a server of its own: sqstest keeps
	// every message and receipt handle for inspection, and a heap grown by
	// earlier rounds would slow later ones down through the GC.
	return &bench{
		cfg:     cfg,
		where:   "in-process sqstest on a loopback listener",
		counter: counter,
		target: func(_ context.Context, name string, n int) (*target, error) {
			// The listener exists before the server, so queue URLs name it.
			ts := httptest.NewUnstartedServer(nil)
			srv := sqstest.NewServer(sqstest.WithBaseURL("http://" + ts.Listener.Addr().String()))
			ts.Config.Handler = srv.Handler()
			ts.Start()
			stop := func() {
				srv.Close()
				ts.Close()
				tr.CloseIdleConnections()
			}
			url, err := srv.CreateQueue(name, nil)
			if err != nil {
				stop()
				return nil, err
			}
			for i := range n {
				if _, err := srv.Send(url, "message "+strconv.Itoa(i)); err != nil {
					stop()
					return nil, err
				}
			}
			return &target{client: newClient(ts.URL), url: url, close: stop}, nil
		},
		close: tr.CloseIdleConnections,
	}, nil
}

// measure makes a queue of n messages (unmeasured), then times c draining
// it.
func (b *bench) measure(ctx context.Context, c contender, n int) (measurement, error) {
	b.made++
	t, err := b.target(ctx, fmt.Sprintf("throughput-%d-%d", os.Getpid(), b.made), n)
	if err != nil {
		return measurement{}, fmt.Errorf("preparing a queue of %d messages: %w", n, err)
	}
	defer t.close()
	runtime.GC()
	b.counter.reset()
	var mem0, mem1 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	cpu0 := cpuTime()
	start := time.Now()
	// The label lets a -cpuprofile be split by contender
	// (go tool pprof -tagfocus contender=raw).
	var d drained
	pprof.Do(ctx, pprof.Labels("contender", c.name), func(ctx context.Context) {
		d, err = c.drain(ctx, t.client, t.url, n, b.cfg)
	})
	if err != nil {
		return measurement{}, err
	}
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&mem1)
	return measurement{messages: n, elapsed: d.end.Sub(start), calls: b.counter.snapshot(), cpu: cpu, dials: int(b.counter.dials.Load()),
		allocs: mem1.TotalAlloc - mem0.TotalAlloc, gcs: mem1.NumGC - mem0.NumGC,
		redelivered: d.redelivered, note: d.note}, nil
}

// ownBody hands net/http its own copy of each request body. smithy-go closes
// the request body as soon as the response arrives; if net/http's connection
// writer reads that body once more (it does when descheduled on a busy
// machine) it takes WriteTo's io.EOF for a write error and closes the
// connection while the response is read. The SDK then retries, and the first
// answer's messages stay in flight for the visibility timeout: the stalls
// sqstest's documentation describes. A private copy makes the race
// impossible.
type ownBody struct{ next http.RoundTripper }

func (o ownBody) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return o.next.RoundTrip(req)
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	own := req.Clone(req.Context())
	own.Body = io.NopCloser(bytes.NewReader(b))
	own.ContentLength = int64(len(b))
	own.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return o.next.RoundTrip(own)
}
