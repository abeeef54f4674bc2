package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// bench is one way of reaching the server side: a round-trip time and an
// HTTP client. It makes a fresh queue, filled with n messages, for every
// measurement.
type bench struct {
	cfg    benchConfig
	srv    *serverConn
	rtt    time.Duration // added to every measured SQS call (see front)
	client clientSpec
	// warm, when above 0, is the deletes after which measureDrain reads
	// the server's counters once more: the steady state's connections
	// are those made after it.
	warm int
}

func newBench(cfg benchConfig, srv *serverConn, rtt time.Duration, client clientSpec) *bench {
	return &bench{cfg: cfg, srv: srv, rtt: rtt, client: client}
}

// setup states the RTT, protocol, client and server of b's figures.
func (b *bench) setup() string {
	return fmt.Sprintf("RTT %v · %s · client: %s · server: %s",
		b.rtt, b.srv.opts.Proto, b.client.describe(b.srv.opts.Proto.tls()), b.srv.where())
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
	// client is the contender's: an SQS client of its own on a new HTTP
	// client of b's kind, so every measurement starts with an empty pool,
	// as a new process would. Its calls pay the RTT and are counted.
	client *sqs.Client
	trace  *actionTrace // the client's connections by action (-conntrace); nil when off
	filler *sqs.Client  // neither: for inspecting and deleting the queue
	url    string
	close  func()
}

// target makes a queue named name holding n messages with attributes attrs
// (e.g. VisibilityTimeout), and a client for it. Filling the queue does
// not pay the RTT and is not counted; the client handed to the contender
// does and is. Every measurement drains a queue of its own: a long poll
// cancelled at the end of the previous one may still be waiting on the
// server, and if it saw new messages arrive it would take them invisible
// for the visibility timeout.
func (b *bench) target(ctx context.Context, name string, n int, attrs map[string]string) (*target, error) {
	url, err := b.srv.createQueue(ctx, name, n, attrs)
	if err != nil {
		return nil, fmt.Errorf("preparing queue %s of %d messages: %w", name, n, err)
	}
	filler := b.srv.filler
	var trace *actionTrace
	if b.cfg.ConnTrace {
		trace = newActionTrace()
	}
	return &target{
		client: b.client.sqsClient(b.srv.urls.URL, b.srv.roots, trace),
		trace:  trace,
		filler: filler,
		url:    url,
		close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = filler.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
		},
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

// measureDrain makes a fresh server with a queue of n messages with
// attributes attrs (unmeasured), then times drain emptying it; name labels
// the profile.
func (b *bench) measureDrain(ctx context.Context, name string, n int, attrs map[string]string,
	drain func(ctx context.Context, client *sqs.Client, url string) (drained, error)) (measurement, error) {
	if err := b.srv.fresh(ctx, b.rtt); err != nil {
		return measurement{}, err
	}
	t, err := b.target(ctx, queueName("throughput"), n, attrs)
	if err != nil {
		return measurement{}, err
	}
	defer t.close()
	runtime.GC()
	if err := b.srv.reset(ctx); err != nil {
		return measurement{}, err
	}
	s0, err := b.srv.stats(ctx)
	if err != nil {
		return measurement{}, err
	}
	var mem0, mem1 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	cpu0 := cpuTime()
	start := time.Now()
	// Halfway through, and once b.warm messages are deleted (if set and
	// fewer than n), the server's counters once more (one control call
	// each, on a goroutine of its own so the drain does not wait for it).
	finished := make(chan struct{})
	mid := b.readAt(ctx, finished)
	ctx = withHalfway(ctx, mid.trigger)
	var warm *counterRead
	if b.warm > 0 && b.warm < n {
		warm = b.readAt(ctx, finished)
		ctx = withWarm(ctx, b.warm, warm.trigger)
	}
	var d drained
	// The label lets a -cpuprofile be split by contender
	// (go tool pprof -tagfocus contender=raw).
	pprof.Do(ctx, pprof.Labels("contender", name), func(ctx context.Context) {
		d, err = drain(ctx, t.client, t.url)
	})
	close(finished)
	midStats, midErr := mid.wait()
	var warmStats serverStats
	if warm != nil && midErr == nil {
		warmStats, midErr = warm.wait()
	}
	if err != nil {
		return measurement{}, err
	}
	if midErr != nil {
		return measurement{}, fmt.Errorf("reading the counters during the drain: %w", midErr)
	}
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&mem1)
	s1, err := b.srv.stats(ctx)
	if err != nil {
		return measurement{}, err
	}
	m := measurement{messages: n, elapsed: d.end.Sub(start), calls: s1.Calls, cpu: cpu,
		conns: int(s1.Conns), handshakes: int(s1.Handshakes), unused: int(s1.Unused),
		lateConns: int(s1.Conns - midStats.Conns), lateMessages: n / 2,
		requests: int(s1.Requests), http2: int(s1.HTTP2),
		allocs: mem1.TotalAlloc - mem0.TotalAlloc, gcs: mem1.NumGC - mem0.NumGC,
		redelivered: d.redelivered, receivedAgain: s1.ReceivedAgain, note: d.note, stats: d.stats}
	if t.trace != nil {
		m.trace = t.trace.snapshot()
	}
	if warm != nil {
		m.warmConns, m.warmMessages = int(s1.Conns-warmStats.Conns), n-b.warm
	}
	if b.srv.place == placeChild {
		m.serverCPU = s1.CPU - s0.CPU
	}
	return m, nil
}

// counterRead is a read of the server's counters that happens when
// trigger is called (once), or not at all if the drain finishes first.
type counterRead struct {
	fire chan struct{}
	done chan struct{}
	once sync.Once
	st   serverStats
	err  error
}

// readAt starts a goroutine that reads the counters when the returned
// read's trigger is called, or gives up when finished is closed.
func (b *bench) readAt(ctx context.Context, finished <-chan struct{}) *counterRead {
	r := &counterRead{fire: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		select {
		case <-r.fire:
			r.st, r.err = b.srv.stats(ctx)
		case <-finished:
			r.err = errors.New("the drain ended before the mark")
		}
	}()
	return r
}

func (r *counterRead) trigger() { r.once.Do(func() { close(r.fire) }) }

// wait returns the counters read.
func (r *counterRead) wait() (serverStats, error) {
	<-r.done
	return r.st, r.err
}
