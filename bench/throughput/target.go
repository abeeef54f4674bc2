package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
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
	rtt     time.Duration // added to every measured SQS call (see delay)
	counter *callCounter
	// target makes a queue named name holding n messages, and a client
	// for it. Every measurement drains a queue of its own: a long poll
	// cancelled at the end of the previous one may still be waiting on
	// the server, and if it saw new messages arrive it would take them
	// invisible for the visibility timeout.
	// attrs are the queue's attributes (e.g. VisibilityTimeout).
	// Filling the queue does not pay the RTT; the client handed to the
	// contender does.
	target func(ctx context.Context, name string, n int, attrs map[string]string) (*target, error)
	close  func()
}

// queuesMade numbers the queues of the process: a name must not repeat
// within a minute of its queue's deletion (SQS refuses it), across benches
// too.
var queuesMade atomic.Int64

// queueName is a name no other queue of this run has.
func queueName(kind string) string {
	return fmt.Sprintf("%s-%d-%d", kind, os.Getpid(), queuesMade.Add(1))
}

// target is one queue to drain.
type target struct {
	client *sqs.Client // pays the bench's RTT; its calls are counted
	filler *sqs.Client // neither: for setting up and inspecting the queue
	url    string
	close  func()
}

// newBench prepares the endpoint side of a run whose measured SQS calls
// each take rtt longer (0: loopback as it is).
func newBench(cfg benchConfig, rtt time.Duration) (*bench, error) {
	counter := newCallCounter()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Every poller holds a connection in its long poll and the batch calls
	// need more: without enough idle connections kept per host, each
	// request would open (and leave in TIME_WAIT) a new one.
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 4*cfg.Pollers + 32
	tr.DialContext = counter.dial((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	// The counter sees each call as the contender does: its RTT included.
	httpClient := &http.Client{Transport: counter.wrap(delay{rtt: rtt, next: sqstest.RebufferingTransport(tr)})}
	fillHTTP := &http.Client{Transport: sqstest.RebufferingTransport(tr)}
	newClient := func(endpoint string, hc *http.Client) *sqs.Client {
		return sqs.New(sqs.Options{
			Region:       "us-east-1",
			Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
			BaseEndpoint: aws.String(endpoint),
			HTTPClient:   hc,
		})
	}

	if cfg.Endpoint != "" {
		client := newClient(cfg.Endpoint, httpClient)
		filler := newClient(cfg.Endpoint, fillHTTP)
		return &bench{
			cfg:     cfg,
			where:   "endpoint " + cfg.Endpoint,
			rtt:     rtt,
			counter: counter,
			target: func(ctx context.Context, name string, n int, attrs map[string]string) (*target, error) {
				out, err := filler.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
				if err != nil {
					return nil, fmt.Errorf("creating queue %s at %s: %w", name, cfg.Endpoint, err)
				}
				url := aws.ToString(out.QueueUrl)
				if err := sendBatches(ctx, filler, url, n); err != nil {
					return nil, err
				}
				return &target{client: client, filler: filler, url: url, close: func() {
					_, _ = filler.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
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
		rtt:     rtt,
		counter: counter,
		target: func(_ context.Context, name string, n int, attrs map[string]string) (*target, error) {
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
			url, err := srv.CreateQueue(name, attrs)
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
			return &target{client: newClient(ts.URL, httpClient), filler: newClient(ts.URL, fillHTTP), url: url, close: stop}, nil
		},
		close: tr.CloseIdleConnections,
	}, nil
}

// measure makes a queue of n messages (unmeasured), then times c draining
// it.
func (b *bench) measure(ctx context.Context, c contender, n int) (measurement, error) {
	return b.measureWith(ctx, c, n, b.cfg)
}

// measureWith is measure with cfg instead of b's own (the matrix's raw
// loop with more pollers).
func (b *bench) measureWith(ctx context.Context, c contender, n int, cfg benchConfig) (measurement, error) {
	return b.measureDrain(ctx, c.name, n, nil, func(ctx context.Context, client *sqs.Client, url string) (drained, error) {
		return c.drain(ctx, client, url, n, cfg)
	})
}

// measureDrain makes a queue of n messages with attributes attrs
// (unmeasured), then times drain emptying it; name labels the profile.
func (b *bench) measureDrain(ctx context.Context, name string, n int, attrs map[string]string,
	drain func(ctx context.Context, client *sqs.Client, url string) (drained, error)) (measurement, error) {
	t, err := b.target(ctx, queueName("throughput"), n, attrs)
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
	pprof.Do(ctx, pprof.Labels("contender", name), func(ctx context.Context) {
		d, err = drain(ctx, t.client, t.url)
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
