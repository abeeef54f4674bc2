package sqsconsumer

// What a new user meets in the first hour: startup, an idle shutdown, a
// missing dead-letter queue, the failures the log shows.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// Run on a context already cancelled returns nil and calls nothing.
func TestRunOnCancelledContextDoesNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		lc := &latencyClient{Client: b.client}
		c, err := New(lc, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, c.Run(ctx))
		require.Zero(t, lc.calls.Load(), "calls to SQS")
		h := c.Health()
		require.Equal(t, "stopped", h.Status)
		require.True(t, h.Healthy)
	})
}

// A SIGTERM while Run reads the queue's attributes is a clean stop.
func TestRunCancelledDuringStartupReturnsNil(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.srv.DelayNext("GetQueueAttributes", 1, 5*time.Second)
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(time.Second)
		require.Equal(t, "starting", c.Health().Status)
		cancel()
		require.NoError(t, <-done)
	})
}

// Health says "starting" (healthy, not ready) until SQS answers a first
// call; when none is answered within the startup limit it turns
// unhealthy and names the latest error; once SQS answers it is running
// and ready.
func TestHealthStartingUntilSQSAnswers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		fault := sqstest.FaultServiceUnavailable
		rc := &refusingClient{Client: b.client, err: fault}
		rc.refusing.Store(true)
		c, err := New(rc, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second), WithStartupLimit(20*time.Second))
		require.NoError(t, err)
		stop := running(t, c)

		time.Sleep(10 * time.Second)
		h := c.Health()
		require.Equal(t, "starting", h.Status)
		require.True(t, h.Healthy, "%v", h.Problems)
		require.False(t, h.Ready)
		require.Equal(t, http.StatusOK, h.HTTPStatus())
		require.Equal(t, http.StatusServiceUnavailable, h.ReadyHTTPStatus())

		time.Sleep(15 * time.Second)
		h = c.Health()
		require.Equal(t, "starting", h.Status)
		require.False(t, h.Healthy)
		require.Len(t, h.Problems, 1)
		require.Contains(t, h.Problems[0], "SQS has answered no call")
		require.Contains(t, h.Problems[0], "ServiceUnavailable")
		require.Equal(t, http.StatusServiceUnavailable, h.HTTPStatus())

		rc.refusing.Store(false) // SQS answers again: the next receive, a long poll on an empty queue, after its 20 s
		time.Sleep(35 * time.Second)
		h = c.Health()
		require.Equal(t, "running", h.Status)
		require.True(t, h.Healthy, "%v", h.Problems)
		require.True(t, h.Ready)
		require.NoError(t, stop())
		h = c.Health()
		require.Equal(t, "stopped", h.Status)
		require.False(t, h.Ready)
	})
}

// refusingClient fails every call with err while refusing is set.
type refusingClient struct {
	Client
	err      error
	refusing atomic.Bool
}

func (c *refusingClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if c.refusing.Load() {
		return nil, c.err
	}
	return c.Client.ReceiveMessage(ctx, in, optFns...)
}

func (c *refusingClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if c.refusing.Load() {
		return nil, c.err
	}
	return c.Client.GetQueueAttributes(ctx, in, optFns...)
}

// HealthHandler answers as a liveness probe, ReadyHandler as a readiness
// and startup probe.
func TestReadyHandler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }))
		require.NoError(t, err)
		get := func(h http.Handler) (int, Health) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			var got struct {
				Healthy bool   `json:"healthy"`
				Ready   bool   `json:"ready"`
				Status  string `json:"status"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
			return rec.Code, Health{Healthy: got.Healthy, Ready: got.Ready, Status: got.Status}
		}
		code, h := get(c.ReadyHandler())
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "not started", h.Status)
		stop := running(t, c)
		time.Sleep(time.Second)
		code, h = get(c.ReadyHandler())
		require.Equal(t, http.StatusOK, code)
		require.True(t, h.Ready)
		code, _ = get(c.HealthHandler())
		require.Equal(t, http.StatusOK, code)
		rec := httptest.NewRecorder()
		c.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
		require.NoError(t, stop())
		code, h = get(c.ReadyHandler())
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "stopped", h.Status)
		code, _ = get(c.HealthHandler())
		require.Equal(t, http.StatusOK, code, "stopped cleanly is alive")
	})
}

// An idle Consumer's shutdown waits for its long poll by default (never
// stranding a message); with WithCancelIdlePollsAtShutdown it returns at
// once, and a message SQS hands over in the poll's last instant comes back
// after one lease.
func TestIdleShutdown(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		opts   []Option
		within time.Duration // from the cancel to Run's return
	}{
		{"default: the poll in flight is waited for", nil, 15*time.Second + 20*time.Millisecond},
		{"WithCancelIdlePollsAtShutdown: at once", []Option{WithCancelIdlePollsAtShutdown()}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				lc := &latencyClient{Client: b.client, rtt: 20 * time.Millisecond}
				c, err := New(lc, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
					append([]Option{WithVisibilityTimeout(30 * time.Second)}, tt.opts...)...)
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				time.Sleep(5*time.Second + 20*time.Millisecond) // the first poll was sent at 20 ms, answered by setup's call
				synctest.Wait()
				begun := time.Now()
				cancel()
				require.NoError(t, <-done)
				require.LessOrEqual(t, time.Since(begun), tt.within+20*time.Millisecond)
				require.GreaterOrEqual(t, time.Since(begun), tt.within)
			})
		})
	}
}

// The cost of WithCancelIdlePollsAtShutdown: a message SQS hands to the
// poll that the shutdown cancels is not lost, but waits out one lease.
func TestCancelledIdlePollStrandsForOneLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		cc := &cancellableReturn{Client: b.client, back: 10 * time.Millisecond}
		c, err := New(cc, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second), WithCancelIdlePollsAtShutdown())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		id, err := b.srv.Send(b.url, "late") // the poll takes it; its answer is on its way
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		m := b.state(t, id)
		require.Len(t, m.Receives, 1, "the cancelled poll took it")
		require.True(t, m.InFlight, "stranded until its lease ends")
		require.Equal(t, m.Receives[0].At.Add(30*time.Second), m.VisibleAt)
	})
}

// cancellableReturn is a Client whose receive answers take back to come
// back, abandoned when the caller's context ends meanwhile: the answer of
// a poll cancelled while on its way is lost, as over a network.
type cancellableReturn struct {
	Client
	back time.Duration
}

func (c *cancellableReturn) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := c.Client.ReceiveMessage(ctx, in, optFns...)
	if err != nil {
		return nil, err
	}
	if !sleepCtx(ctx, c.back) {
		return nil, ctx.Err()
	}
	return out, nil
}

// Run checks at start that the dead-letter queue exists, whether it was
// given or comes from the queue's RedrivePolicy.
func TestRunChecksTheDeadLetterQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ghost := strings.TrimSuffix(b.url, "q") + "ghost-dlq"
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }), WithDeadLetterQueue(ghost))
		require.NoError(t, err)
		err = c.Run(context.Background())
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, "dead-letter queue "+ghost+" (from WithDeadLetterQueue) does not exist")
		require.Equal(t, "failed", c.Health().Status)

		src, err := b.srv.CreateQueue("src", map[string]string{
			"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:gone","maxReceiveCount":"5"}`})
		require.NoError(t, err)
		c, err = New(b.client, src, HandlerFunc(func(context.Context, *Message) error { return nil }))
		require.NoError(t, err)
		require.ErrorContains(t, c.Run(context.Background()), "(from the queue's RedrivePolicy) does not exist")
	})
}

// With a logger, a failed message is logged at Warn with its ID, receive
// count, error and retry delay, at most 10 lines at once and one a second
// after that, the lines held back counted; a success is never logged.
func TestFailuresAreLoggedWithinARate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		var mu sync.Mutex
		var buf bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&lockedWriter{mu: &mu, w: &buf}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if strings.HasPrefix(m.Body, "ok") {
				return nil
			}
			return RetryAfter(errors.New("downstream refused"), time.Hour)
		}), WithVisibilityTimeout(30*time.Second), WithLogger(logger), WithConcurrency(50))
		require.NoError(t, err)
		b.send(t, 30)
		_, err = b.srv.Send(b.url, "ok")
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Second)
		b.send(t, 1)
		time.Sleep(2 * time.Second)
		require.NoError(t, stop())

		mu.Lock()
		defer mu.Unlock()
		var failed []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec))
			require.NotContains(t, rec["msg"], "succeeded")
			if rec["msg"] == "sqsconsumer: handler failed; message released for a retry" {
				failed = append(failed, rec)
			}
		}
		require.Len(t, failed, 11, "10 at once, then the one a second later")
		first := failed[0]
		require.Equal(t, "WARN", first["level"])
		require.NotEmpty(t, first["message_id"])
		require.EqualValues(t, 1, first["receive_count"])
		require.Contains(t, first["error"], "downstream refused")
		require.Equal(t, "1h0m0s", first["retry_after"])
		require.EqualValues(t, 20, failed[10]["failures_not_logged"], "the 20 held back")
	})
}

// lockedWriter serialises the writes of a logger used from many goroutines.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
