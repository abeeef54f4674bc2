package sqsconsumer

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// downable fails every receive while down is set.
type downable struct {
	Client
	down atomic.Bool
}

func (d *downable) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if d.down.Load() {
		return nil, errors.New("dial tcp: connection refused")
	}
	return d.Client.ReceiveMessage(ctx, in, optFns...)
}

// healthGet asks c's HealthHandler with method and returns the status code
// and the decoded body (nil for no body).
func healthGet(t *testing.T, c *Consumer, method string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(method, "/healthz", nil))
	if rec.Body.Len() == 0 {
		return rec.Code, nil
	}
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return rec.Code, body
}

func TestHealthFollowsProgress(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		release := make(chan struct{})
		down := &downable{Client: b.client}
		c, err := New(down, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.Body == "slow" {
				<-release
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithShutdownTimeout(time.Minute))
		require.NoError(t, err)

		h := c.Health()
		require.False(t, h.Healthy)
		require.Equal(t, "not started", h.Status)
		code, _ := healthGet(t, c, http.MethodGet)
		require.Equal(t, http.StatusServiceUnavailable, code)

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		synctest.Wait()
		h = c.Health()
		require.True(t, h.Healthy, h.Problems)
		require.Equal(t, "running", h.Status)
		require.True(t, h.LastReceive.IsZero(), "the first long poll is still waiting")

		time.Sleep(5 * time.Minute) // idle: empty long polls every 20 s are progress
		h = c.Health()
		require.True(t, h.Healthy, h.Problems)
		require.WithinDuration(t, time.Now(), h.LastReceive, 20*time.Second)

		// Every receive fails for 3 minutes: a stall.
		down.down.Store(true)
		time.Sleep(time.Minute)
		require.True(t, c.Health().Healthy, "within the 2-minute limit")
		time.Sleep(2 * time.Minute)
		h = c.Health()
		require.False(t, h.Healthy)
		require.Len(t, h.Problems, 1)
		require.Regexp(t, `^no ReceiveMessage, visibility change or delete was answered by SQS for (2m[4-5]0s|3m0s)`, h.Problems[0], "since the last answer before the outage")
		require.Contains(t, h.Problems[0], "(limit 2m0s); the latest receive failed: ")
		require.Contains(t, h.Problems[0], "connection refused")
		code, body := healthGet(t, c, http.MethodGet)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, false, body["healthy"])
		require.Equal(t, "running", body["status"])

		down.down.Store(false)       // SQS is back
		time.Sleep(31 * time.Second) // the backoff (at most 10 s), then a 20 s long poll
		require.True(t, c.Health().Healthy, "healthy again after the next receive")

		// Draining: a handler still runs after the cancel.
		_, err = b.srv.Send(b.url, "slow")
		require.NoError(t, err)
		time.Sleep(time.Second)
		cancel()
		time.Sleep(5 * time.Second)
		h = c.Health()
		require.True(t, h.Healthy, h.Problems)
		require.Equal(t, "draining", h.Status)
		require.Equal(t, 1, h.Running)
		require.Equal(t, 6*time.Second, h.LongestHandler)
		code, body = healthGet(t, c, http.MethodGet)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "draining", body["status"])
		require.Equal(t, "6s", body["longest_handler"])
		close(release)
		require.NoError(t, <-done)
		h = c.Health()
		require.True(t, h.Healthy)
		require.Equal(t, "stopped", h.Status)
	})
}

func TestHealthRunError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.srv.FailNext("ReceiveMessage", 1, sqstest.FaultQueueDoesNotExist)
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		runErr := c.Run(context.Background())
		require.Error(t, runErr)
		h := c.Health()
		require.False(t, h.Healthy)
		require.Equal(t, "failed", h.Status)
		require.Equal(t, runErr, h.Err)
		require.Equal(t, []string{"Run returned an error: " + runErr.Error()}, h.Problems)
		code, body := healthGet(t, c, http.MethodGet)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, runErr.Error(), body["error"])
	})
}

func TestHealthHandlerLimits(t *testing.T) {
	t.Parallel()
	t.Run("a handler past its bound", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.send(t, 1)
			c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
				time.Sleep(5 * time.Minute)
				return nil
			}), WithVisibilityTimeout(30*time.Second), WithHealthLimits(0, 2*time.Minute))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(2 * time.Minute)
			require.True(t, c.Health().Healthy)
			time.Sleep(time.Second)
			h := c.Health()
			require.False(t, h.Healthy)
			require.Equal(t, []string{"a handler has run for 2m1s (limit 2m0s)"}, h.Problems)
			time.Sleep(3 * time.Minute)
			require.True(t, c.Health().Healthy, "it finished")
			require.NoError(t, stop())
		})
	})
	t.Run("default bound from WithHandlerTimeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.send(t, 1)
			c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
				time.Sleep(5 * time.Minute) // ignores its context
				return nil
			}), WithVisibilityTimeout(30*time.Second), WithHandlerTimeout(time.Minute))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(2*time.Minute + time.Second)
			require.Contains(t, c.Health().Problems, "a handler has run for 2m1s (limit 2m0s)")
			time.Sleep(3 * time.Minute)
			require.NoError(t, stop())
		})
	})
	t.Run("the lease ceiling nears", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			ids := b.send(t, 1)
			c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
				time.Sleep(10 * time.Minute) // ignores ErrLeaseCeiling
				return nil
			}), WithVisibilityTimeout(30*time.Second), WithMaxLeaseDuration(5*time.Minute))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(4*time.Minute + 40*time.Second)
			require.True(t, c.Health().Healthy, "more than one heartbeat (10 s) left")
			time.Sleep(15 * time.Second)
			h := c.Health()
			require.False(t, h.Healthy)
			require.Equal(t, []string{"1 running handler(s) near the lease ceiling, their messages about to be delivered again: [" + ids[0] + "]"}, h.Problems)
			time.Sleep(6 * time.Minute)
			require.NoError(t, stop())
		})
	})
}

func TestHealthLongHandlersRenewOnly(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// One slot, no read-ahead, a 10-minute handler: no receive for 10
		// minutes, but renewals every 30 s show progress.
		b := setup(t, nil)
		b.send(t, 2)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(10 * time.Minute)
			return nil
		}), WithVisibilityTimeout(90*time.Second), WithConcurrency(1), WithMaxReadAhead(0))
		require.NoError(t, err)
		stop := running(t, c)
		for range 9 {
			time.Sleep(time.Minute)
			h := c.Health()
			require.True(t, h.Healthy, h.Problems)
			require.WithinDuration(t, time.Now(), h.LastRenewal, 31*time.Second)
		}
		require.NoError(t, stop())
	})
}

func TestHealthWithOpenBreaker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 5)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			return errors.New("down")
		}), WithVisibilityTimeout(30*time.Second), WithBreaker(Breaker{Failures: 1, Pause: time.Hour}))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(10 * time.Minute)
		h := c.Health()
		require.True(t, h.Healthy, "an open breaker pauses on purpose: %v", h.Problems)
		require.Equal(t, "open", h.Breaker)
		require.Less(t, h.LastReceive, time.Now().Add(-9*time.Minute), "nothing received while open")
		require.NoError(t, stop())
	})
}

func TestHealthHandlerHTTP(t *testing.T) {
	t.Parallel()
	c, err := New(&sqs.Client{}, "https://sqs.us-east-1.amazonaws.com/1/q", HandlerFunc(func(context.Context, *Message) error { return nil }))
	require.NoError(t, err)
	code, body := healthGet(t, c, http.MethodHead)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Nil(t, body, "HEAD has no body")
	rec := httptest.NewRecorder()
	c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/healthz", nil))
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	require.Equal(t, "GET, HEAD", rec.Header().Get("Allow"))
	rec = httptest.NewRecorder()
	c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.JSONEq(t, `{"healthy":false,"ready":false,"status":"not started","problems":["Run has not been called"],"running":0}`, rec.Body.String())
}

func TestWithHealthLimitsValidates(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	_, err := New(&sqs.Client{}, "https://sqs.us-east-1.amazonaws.com/1/q", h, WithHealthLimits(time.Millisecond, -time.Second))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "WithHealthLimits: stall limit 1ms must be 0 (the default) or from 1s to 24h")
	require.ErrorContains(t, err, "WithHealthLimits: handler limit -1s must be 0")
}

// Health may be called from any goroutine, also while Run sets up.
func TestHealthDuringStartup(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 3)
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithBreaker(Breaker{}), WithHandlerTimeout(time.Minute))
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 200 {
				_ = c.Health()
				runtime.Gosched()
			}
		}()
		stop := running(t, c)
		<-done
		time.Sleep(time.Second)
		require.NoError(t, stop())
	})
}

// SQS answered the queue's attributes, but Run is still starting: the
// dead-letter queue's check hangs. Health says "starting" (or "paused"
// between Pause and Resume), never an empty Status, and, past the
// startup limit, why it is not running yet.
func TestHealthStartingAfterAFirstAnswer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, false, 5, nil)
		b.srv.DelayNext("GetQueueAttributes", 1, 0)         // the queue's own
		b.srv.DelayNext("GetQueueAttributes", 1, time.Hour) // the dead-letter queue's check
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second), WithDeadLetterQueue(b.dlq), WithStartupLimit(5*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Second)
		h := c.Health()
		require.Equal(t, "starting", h.Status)
		require.True(t, h.Healthy, "%v", h.Problems)
		c.Pause()
		h = c.Health()
		require.Equal(t, "paused", h.Status)
		require.True(t, h.Healthy, "%v", h.Problems)
		c.Resume()
		time.Sleep(5 * time.Second)
		h = c.Health()
		require.Equal(t, "starting", h.Status)
		require.False(t, h.Healthy)
		require.Len(t, h.Problems, 1)
		require.Contains(t, h.Problems[0], "Run has not finished starting")
		require.NoError(t, stop())
	})
}

// A freshly started idle Consumer whose read of the queue's attributes
// failed (WithVisibilityTimeout makes it optional) waits in its first
// long poll: SQS has answered nothing yet, but the poll is progress while
// it is within its wait (and call timeout). It is not unhealthy past the
// startup limit for that; once the poll answers it runs. A poll that
// outlasts its own timeout does count.
func TestHealthFirstLongPollIsProgress(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.srv.FailNext("GetQueueAttributes", 1, sqstest.FaultInternalError)
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second), WithStartupLimit(5*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		for range 6 {
			time.Sleep(3 * time.Second)
			h := c.Health()
			require.Equal(t, "starting", h.Status)
			require.True(t, h.Healthy, "%v", h.Problems)
		}
		time.Sleep(5 * time.Second) // the poll answered, empty
		h := c.Health()
		require.Equal(t, "running", h.Status)
		require.True(t, h.Healthy, "%v", h.Problems)
		require.NoError(t, stop())
	})
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.srv.FailNext("GetQueueAttributes", 1, sqstest.FaultInternalError)
		b.srv.DelayNext("ReceiveMessage", 1, time.Hour) // a poll that hangs
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second), WithStartupLimit(5*time.Second), WithWaitTime(5*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(14 * time.Second)
		require.True(t, c.Health().Healthy, "%v", c.Health().Problems)
		time.Sleep(2 * time.Second) // past the poll's 5 s wait plus 10 s
		h := c.Health()
		require.False(t, h.Healthy)
		require.Contains(t, h.Problems[0], "SQS has answered no call")
		require.NoError(t, stop())
	})
}

// A busy Consumer whose leases are long (an adaptive lease grown to
// twice the handlers' 2 minutes) renews only every third of a lease, and
// with every slot taken (no read-ahead) it does not receive: SQS is asked
// nothing for longer than a stall limit of 35 s (accepted: the adaptive
// interval is unknown at New). That silence is no stall: Health stays
// healthy throughout. Renewals that SQS stops confirming are one: once
// overdue, the stall limit counts.
func TestHealthBusyWithLongLeasesIsNotStalled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 60)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error { time.Sleep(2 * time.Minute); return nil }),
			WithConcurrency(2), WithMaxReadAhead(0), WithAdaptiveVisibility(10*time.Second, 10*time.Minute),
			WithVisibilityTimeout(30*time.Second), WithHealthLimits(35*time.Second, 0), WithWaitTime(5*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		for range 1000 {
			time.Sleep(3 * time.Second)
			h := c.Health()
			require.True(t, h.Healthy, "%v", h.Problems)
		}
		require.NoError(t, stop())
	})
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 2)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error { time.Sleep(time.Hour); return nil }),
			WithConcurrency(2), WithMaxReadAhead(0), WithVisibilityTimeout(3*time.Minute), WithHealthLimits(70*time.Second, 0))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Minute)
		require.True(t, c.Health().Healthy, "%v", c.Health().Problems)
		// Renewals stop being confirmed: one is owed within a minute,
		// and 70 s after the last answer the stall is reported, and
		// stays so once the leases expired.
		b.srv.FailNext("ChangeMessageVisibilityBatch", 1000, sqstest.FaultInternalError)
		time.Sleep(2*time.Minute + 30*time.Second)
		h := c.Health()
		require.False(t, h.Healthy, "renewals SQS no longer confirms were not reported")
		require.Contains(t, h.Problems[0], "no ReceiveMessage, visibility change or delete was answered")
		time.Sleep(2 * time.Minute)
		require.False(t, c.Health().Healthy, "the leases expired unrenewed, and the stall was no longer reported")
		require.NoError(t, stop())
	})
}
