package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// The conditions of issue 31's measurement (and issue 35's mixes).
const (
	quietRate     = 2    // messages a second, each quiet tenant
	noisyTotal    = 2000 // messages the noisy tenants send together, each burst
	noisyEvery    = 10 * time.Second
	handlerTime   = 50 * time.Millisecond
	concurrency   = 20
	callLatency   = 10 * time.Millisecond
	visibility    = 30 * time.Second
	drainDeadline = 2 * time.Minute // after the sending ends, at most
)

// dispatch is how a Consumer hands its slots out.
type dispatch struct {
	name   string
	fair   bool // WithFairDispatch
	limit  int  // WithGroupLimit; 0 none
	bounce int  // the handler hands a noisy message back (RetryAfter 0) beyond this many running; 0 never
}

var (
	fifoOrder = dispatch{name: "arrival order (WithFairDispatch(false))"}
	fairOrder = dispatch{name: "fair (default)", fair: true}
	fairLimit = dispatch{name: "fair, WithGroupLimit(10)", fair: true, limit: 10}
	// The other choice for a cap's extra messages, handing them back,
	// emulated in the handler: visible again after 1 s (SQS counts whole
	// seconds; at 0 s a message often comes back while its release is
	// still being confirmed, and the Consumer then holds it back for its
	// receive count's backoff), at the cost of a visibility change and
	// another receive for each.
	fairBounce = dispatch{name: "fair, cap 10 by handing back (1 s)", fair: true, bounce: 10}
)

// mix is who sends: quiet tenants at quietRate each, spread over the
// period, and noisy tenants bursting noisyTotal/noisy each every
// noisyEvery, all at the same instants, from the start. Ten tenants in
// all.
type mix struct {
	name  string
	noisy int
}

func (m mix) quiet() int { return 10 - m.noisy }
func (m mix) burst() int { return noisyTotal / m.noisy }

var (
	oneNoisy   = mix{name: "one noisy (9 quiet)", noisy: 1}
	twoNoisy   = mix{name: "two noisy (8 quiet)", noisy: 2}
	threeNoisy = mix{name: "three noisy (7 quiet)", noisy: 3}
	mixes      = []mix{oneNoisy, twoNoisy, threeNoisy}
)

// config is one run: consumers Consumers sharing one fair queue, the
// mix's quiet tenants sending for send, its noisy ones too when noisy.
type config struct {
	consumers int
	mix       mix
	noisy     bool
	d         dispatch
	send      time.Duration
}

// result is what one run measured, in virtual time.
type result struct {
	quietP50, quietP99, quietMax time.Duration // send to handler start, quiet tenants
	noisyP99                     time.Duration
	handled                      int
	elapsed                      time.Duration // from the first send to the last handler's return
	throughput                   float64       // handled / elapsed, messages a second
	callsPerMessage              float64       // the Consumers' SQS calls over handled
	topGroup                     string        // Stats.TopGroups[0] of the first Consumer
	noisyGroups                  int           // Stats.NoisyGroups of the first Consumer
	bounced                      int64         // messages handed back by the handler (fairBounce)
	quietInSQS, quietHere        time.Duration // p99 of a quiet message's wait in SQS (to its first receive), and here (from that receive's answer)
}

// slowClient makes every call take callLatency more (after the server's
// answer, as a network's return leg would) and counts the calls.
type slowClient struct {
	*sqs.Client
	calls atomic.Int64
}

func (c *slowClient) wait(ctx context.Context) {
	c.calls.Add(1)
	t := time.NewTimer(callLatency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (c *slowClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := c.Client.ReceiveMessage(ctx, in, o...)
	c.wait(ctx)
	return out, err
}

func (c *slowClient) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	out, err := c.Client.DeleteMessage(ctx, in, o...)
	c.wait(ctx)
	return out, err
}

func (c *slowClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	out, err := c.Client.DeleteMessageBatch(ctx, in, o...)
	c.wait(ctx)
	return out, err
}

func (c *slowClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	out, err := c.Client.ChangeMessageVisibility(ctx, in, o...)
	c.wait(ctx)
	return out, err
}

func (c *slowClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out, err := c.Client.ChangeMessageVisibilityBatch(ctx, in, o...)
	c.wait(ctx)
	return out, err
}

func (c *slowClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, o ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	out, err := c.Client.GetQueueAttributes(ctx, in, o...)
	c.wait(ctx)
	return out, err
}

// waits collects the waits from send to handler start.
type waits struct {
	mu      sync.Mutex // guards the fields below
	sentAt  []time.Time
	quiet   []time.Duration
	noisy   []time.Duration
	last    time.Time   // the latest handler return
	startAt []time.Time // each message's first handler start, by body
	done    int
}

func (w *waits) sent(at time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sentAt = append(w.sentAt, at)
	w.startAt = append(w.startAt, time.Time{})
	return strconv.Itoa(len(w.sentAt) - 1)
}

func (w *waits) started(body string, noisy bool, now time.Time) {
	i, _ := strconv.Atoi(body)
	w.mu.Lock()
	defer w.mu.Unlock()
	d := now.Sub(w.sentAt[i])
	if w.startAt[i].IsZero() {
		w.startAt[i] = now
	}
	if noisy {
		w.noisy = append(w.noisy, d)
	} else {
		w.quiet = append(w.quiet, d)
	}
}

func (w *waits) finished(now time.Time) (done, sent int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done++
	w.last = now
	return w.done, len(w.sentAt)
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// simulate runs cfg in a synctest bubble of t and returns what it
// measured. Every figure is of virtual time.
func simulate(t *testing.T, cfg config) (res result) {
	synctest.Test(t, func(t *testing.T) {
		res = simulateIn(t, cfg)
	})
	return res
}

func simulateIn(t *testing.T, cfg config) result {
	srv := sqstest.NewServer()
	defer srv.Close()
	url, err := srv.CreateQueue("tenants", map[string]string{"VisibilityTimeout": strconv.Itoa(int(visibility / time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	client := &slowClient{Client: srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })}
	var w waits
	start := time.Now()

	// The senders, on the server directly: their calls are not the
	// Consumers'.
	var senders sync.WaitGroup
	send := func(group string) {
		if _, err := srv.Send(url, w.sent(time.Now()), sqstest.WithGroupID(group)); err != nil {
			t.Error(err)
		}
	}
	quiet := cfg.mix.quiet()
	for i := range quiet {
		senders.Add(1)
		go func() {
			defer senders.Done()
			group := fmt.Sprint("quiet-", i)
			// Spread the tenants over the period.
			time.Sleep(time.Second / quietRate * time.Duration(i) / time.Duration(quiet))
			for time.Since(start) < cfg.send {
				send(group)
				time.Sleep(time.Second / quietRate)
			}
		}()
	}
	noisy := 0
	if cfg.noisy {
		noisy = cfg.mix.noisy
	}
	for i := range noisy {
		senders.Add(1)
		go func() {
			defer senders.Done()
			group := fmt.Sprint("noisy-", i)
			for time.Since(start) < cfg.send {
				for range cfg.mix.burst() {
					send(group)
				}
				time.Sleep(noisyEvery)
			}
		}()
	}

	alldone := make(chan struct{})
	var sendingOver atomic.Bool
	handler := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		w.started(m.Body, strings.HasPrefix(m.GroupID, "noisy"), time.Now())
		time.Sleep(handlerTime)
		if done, sent := w.finished(time.Now()); sendingOver.Load() && done == sent {
			close(alldone)
		}
		return nil
	})
	var bounced atomic.Int64
	handlerFor := func() sqsconsumer.Handler {
		var noisyRunning atomic.Int64
		return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
			if cfg.d.bounce > 0 && strings.HasPrefix(m.GroupID, "noisy") {
				if noisyRunning.Add(1) > int64(cfg.d.bounce) {
					noisyRunning.Add(-1)
					bounced.Add(1)
					return sqsconsumer.RetryAfter(nil, time.Second)
				}
				defer noisyRunning.Add(-1)
			}
			return handler.HandleMessage(ctx, m)
		})
	}
	opts := []sqsconsumer.Option{sqsconsumer.WithConcurrency(concurrency), sqsconsumer.WithFairDispatch(cfg.d.fair)}
	if cfg.d.limit > 0 {
		opts = append(opts, sqsconsumer.WithGroupLimit(cfg.d.limit))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var consumers []*sqsconsumer.Consumer
	var runs sync.WaitGroup
	for range cfg.consumers {
		c, err := sqsconsumer.New(client, url, handlerFor(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, c)
		runs.Add(1)
		go func() {
			defer runs.Done()
			if err := c.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	senders.Wait()
	// Every message is sent: the last handler to return closes alldone
	// (one may already have returned).
	w.mu.Lock()
	sendingOver.Store(true)
	over := w.done == len(w.sentAt)
	w.mu.Unlock()
	timeout := time.NewTimer(drainDeadline)
	defer timeout.Stop()
	if !over {
		select {
		case <-alldone:
		case <-timeout.C:
			t.Errorf("not drained %v after the sending ended: %d of %d handled, %d bounced; %v", drainDeadline, w.done, len(w.sentAt), bounced.Load(), stuck(srv, url))
		}
	}
	st := consumers[0].Stats()
	calls := client.calls.Load()
	cancel()
	runs.Wait()

	// The quiet messages' waits in SQS (send to the receive that got them
	// first) and here (that receive's answer to the handler's start).
	states := srv.Messages(url)
	w.mu.Lock()
	var inSQS, here []time.Duration
	for _, m := range states {
		if i, _ := strconv.Atoi(m.Body); strings.HasPrefix(m.GroupID, "quiet") && len(m.Receives) > 0 {
			inSQS = append(inSQS, m.Receives[0].At.Sub(m.SentAt))
			here = append(here, w.startAt[i].Sub(m.Receives[0].At.Add(callLatency)))
		}
	}
	defer w.mu.Unlock()
	res := result{quietInSQS: quantile(inSQS, 0.99), quietHere: quantile(here, 0.99),
		quietP50: quantile(w.quiet, 0.50), quietP99: quantile(w.quiet, 0.99), quietMax: quantile(w.quiet, 1),
		noisyP99: quantile(w.noisy, 0.99),
		handled:  w.done, elapsed: w.last.Sub(start),
		noisyGroups: st.NoisyGroups, bounced: bounced.Load(),
	}
	if len(st.TopGroups) > 0 {
		res.topGroup = st.TopGroups[0].Group
	}
	res.throughput = float64(res.handled) / res.elapsed.Seconds()
	// The calls until the last handler returned (the shutdown's are left
	// out), the start's attribute reads included.
	res.callsPerMessage = float64(calls) / float64(res.handled)
	return res
}

// stuck describes the messages not deleted yet, for a run that did not
// drain.
func stuck(srv *sqstest.Server, url string) []string {
	var out []string
	for _, m := range srv.Messages(url) {
		if !m.Deleted {
			line := fmt.Sprintf("%s group %s in flight %v visible at %v;", m.Body, m.GroupID, m.InFlight, m.VisibleAt.Format("15:04:05.000"))
			for _, r := range m.Receives {
				line += fmt.Sprintf(" recv %s %v;", r.At.Format("05.000"), r.VisibilityTimeout)
			}
			for _, c := range m.VisibilityChanges {
				line += fmt.Sprintf(" chg %s %+v;", c.At.Format("05.000"), c)
			}
			out = append(out, line)
		}
	}
	return out
}
