package sqsconsumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	c := &sqs.Client{}
	const u = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
	tests := []struct {
		name    string
		client  Client
		url     string
		handler Handler
		opts    []Option
		want    string
	}{
		{"nil client", nil, u, h, nil, "client is nil"},
		{"typed-nil client", (*sqs.Client)(nil), u, h, nil, "client is nil"},
		{"middleware returning nil", c, u, h, []Option{WithMiddleware(func(Handler) Handler { return nil })}, "middleware 0 returned a nil handler"},
		{"middleware returning a typed nil", c, u, h, []Option{WithMiddleware(func(Handler) Handler { return HandlerFunc(nil) })}, "middleware 0 returned a nil handler"},
		{"empty url", c, "", h, nil, "queue URL is empty"},
		{"nil handler", c, u, nil, nil, "handler is nil"},
		{"nil HandlerFunc", c, u, HandlerFunc(nil), nil, "nil HandlerFunc"},
		{"concurrency 0", c, u, h, []Option{WithConcurrency(0)}, "WithConcurrency(0)"},
		{"batch 11", c, u, h, []Option{WithBatchSize(11)}, "WithBatchSize(11)"},
		{"batch 0", c, u, h, []Option{WithBatchSize(0)}, "WithBatchSize(0)"},
		{"wait 21s", c, u, h, []Option{WithWaitTime(21 * time.Second)}, "WithWaitTime(21s)"},
		{"wait fractional", c, u, h, []Option{WithWaitTime(1500 * time.Millisecond)}, "whole seconds"},
		{"negative shutdown", c, u, h, []Option{WithShutdownTimeout(-time.Second)}, "WithShutdownTimeout"},
		{"heartbeat vs lease", c, u, h, []Option{WithVisibilityTimeout(30 * time.Second), WithHeartbeatInterval(20 * time.Second)}, "less than half the lease"},
		{"nil backoff", c, u, h, []Option{WithBackoff(nil)}, "WithBackoff(nil)"},
		{"nil middleware", c, u, h, []Option{WithMiddleware(nil)}, "middleware 0 is nil"},
		{"handler timeout", c, u, h, []Option{WithHandlerTimeout(-time.Second)}, "WithHandlerTimeout(-1s)"},
		{"queue name for a URL", c, "jobs", h, nil, `queue URL "jobs" is not a URL: pass the queue's URL (such as https://sqs.us-east-1.amazonaws.com/123456789012/jobs), not its name`},
		{"URL without scheme", c, "sqs.us-east-1.amazonaws.com/123456789012/jobs", h, nil, "is not a URL"},
		{"URL of another scheme", c, "arn://sqs/jobs", h, nil, `scheme "arn" is not http or https`},
		{"pollers", c, u, h, []Option{WithPollers(0)}, "WithPollers(0)"},
		{"lease-only option", c, u, h, []Option{WithReceivedAt(time.Now())}, "WithReceivedAt applies to NewLease only"},
		{"nil logger", c, u, h, []Option{WithLogger(nil)}, "WithLogger(nil)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := New(tt.client, tt.url, tt.handler, tt.opts...)
			require.Nil(t, got)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, tt.want)
		})
	}
	got, err := New(c, u, h)
	require.NoError(t, err)
	require.NotNil(t, got)
}

func TestRunReadsQueueVisibilityTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"VisibilityTimeout": "45"})
		ids := b.send(t, 1)
		done := make(chan struct{})
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(40 * time.Second)
			close(done)
			return nil
		}))
		require.NoError(t, err)
		stop := running(t, c)
		<-done
		require.NoError(t, stop())
		st := b.state(t, ids[0])
		require.Equal(t, 45*time.Second, st.Receives[0].VisibilityTimeout)
		require.Equal(t, st.Receives[0].At.Add(15*time.Second+coalesceWindow), st.VisibilityChanges[0].At, "renewed at a third of the queue's 45 s (sent after one batch window)")
		require.True(t, st.Deleted)
	})
}

func TestRunRejectsTooShortQueueTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"VisibilityTimeout": "1"})
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }))
		require.NoError(t, err)
		err = c.Run(context.Background())
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, "VisibilityTimeout (1s)")
		require.ErrorContains(t, c.Run(context.Background()), "only once")
	})
}

// Semantics 5: success deletes (batched) with the latest handle; failure
// sets the backoff visibility; RetryAfter sets its own; a panic is a failure.
func TestSettlement(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 4)
		var logs bytes.Buffer
		var mu sync.Mutex
		calls := map[string]int{}
		h := HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			calls[m.Body]++
			n := calls[m.Body]
			mu.Unlock()
			switch m.Body {
			case "m001":
				if n == 1 {
					return errors.New("transient")
				}
			case "m002":
				if n == 1 {
					return RetryAfter(errors.New("later"), 42*time.Second)
				}
			case "m003":
				if n == 1 {
					panic("boom")
				}
			}
			return nil
		})
		c, err := New(b.client, b.url, h, WithVisibilityTimeout(30*time.Second),
			WithBackoff(func(n int) time.Duration { return time.Duration(n) * 7 * time.Second }),
			WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())

		for i, id := range ids {
			require.True(t, b.state(t, id).Deleted, "message %d deleted in the end", i)
		}
		require.Equal(t, 1, b.state(t, ids[0]).ReceiveCount)
		for i, want := range map[int]time.Duration{1: 7 * time.Second, 2: 42 * time.Second, 3: 7 * time.Second} {
			st := b.state(t, ids[i])
			require.Equal(t, 2, st.ReceiveCount, "message %d", i)
			first := st.VisibilityChanges[0]
			require.Equal(t, want, first.Timeout, "message %d retry visibility", i)
			require.Equal(t, first.At.Add(want), st.Receives[1].At, "message %d redelivered after its visibility", i)
		}
		var panicLine string
		for line := range strings.Lines(logs.String()) {
			if strings.Contains(line, "handler panicked") {
				panicLine = line
			}
		}
		require.Contains(t, panicLine, "level=ERROR")
		require.Regexp(t, `at="github.com/sqskit/sqsconsumer.TestSettlement.func\S* \(\S*consumer_test.go:\d+\)"`, panicLine, "the Error line names the user's frame")
		require.Less(t, len(panicLine), 400, "one readable line, not the stack")
		require.NotContains(t, logs.String(), "stack=", "the stack goes to Debug")
		require.Zero(t, b.srv.CallCount("DeleteMessage"), "deletes go through DeleteMessageBatch")
		require.Positive(t, b.srv.CallCount("DeleteMessageBatch"))
	})
}

func TestDefaultBackoffNeverZero(t *testing.T) {
	t.Parallel()
	prev := time.Duration(0)
	for n := 0; n <= 20; n++ {
		d := DefaultBackoff(n)
		require.GreaterOrEqual(t, d, 4*time.Second, "receive count %d", n)
		require.LessOrEqual(t, d, 18*time.Minute, "receive count %d", n)
		if n > 1 && n < 8 {
			require.Greater(t, d, prev*5/8, "grows with the receive count")
		}
		prev = d
	}
}

// A handler that returns an error because its lease was lost: the message
// is neither deleted nor released (the handle is no good).
func TestLostLeaseCancelsHandler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		cause := make(chan error, 1)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		b.srv.FailNextEntries("ChangeMessageVisibilityBatch", 1, sqstest.FaultReceiptHandleIsInvalid)
		stop := running(t, c)
		require.ErrorIs(t, <-cause, ErrLeaseLost)
		synctest.Wait()
		require.NoError(t, stop())
		st := b.state(t, ids[0])
		require.False(t, st.Deleted)
		for _, vc := range st.VisibilityChanges {
			// The injected failure never reached the message; the only
			// call after it is the release at shutdown of the message's
			// redelivery, taken by the poll in flight when Run stopped.
			require.Zero(t, vc.Timeout, "no renewal after the lease was lost")
			require.NotEqual(t, st.Receives[0].ReceiptHandle, vc.ReceiptHandle, "the lost handle is never used again")
		}
	})
}

// Semantics 4 through the Consumer: a handler running for 13 hours is told
// to stop before the ceiling and its message is not deleted.
func TestHandlerPastCeiling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		var cause error
		var stoppedAt time.Time
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			<-ctx.Done()
			cause, stoppedAt = context.Cause(ctx), time.Now()
			return nil // claims success anyway: still inside the lease, so it is deleted
		}), WithVisibilityTimeout(60*time.Second), WithMaxLeaseDuration(2*time.Hour))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(3 * time.Hour)
		require.NoError(t, stop())
		st := b.state(t, ids[0])
		require.ErrorIs(t, cause, ErrLeaseCeiling)
		require.Equal(t, st.Receives[0].At.Add(2*time.Hour-20*time.Second), stoppedAt)
		require.True(t, st.Deleted, "a handler that finishes inside the grace still gets its delete")
		require.Equal(t, 1, st.ReceiveCount)
	})
}

// Semantics 6: a redelivery of a message being handled is adopted, not
// handed to a second handler.
func TestRedeliveryIsAdopted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		rec := &recorder{}
		var runs atomic.Int32
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			runs.Add(1)
			time.Sleep(5 * time.Minute)
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithObserver(rec), WithWaitTime(time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, b.srv.Expire(b.url, ids[0])) // SQS lets the lease lapse
		time.Sleep(5 * time.Minute)
		require.NoError(t, stop())
		st := b.state(t, ids[0])
		require.Equal(t, int32(1), runs.Load())
		require.Equal(t, 1, rec.count(EventAdopted))
		require.Len(t, st.Receives, 2)
		require.True(t, st.Deleted, "deleted with the adopted handle")
		for _, vc := range st.VisibilityChanges {
			if vc.At.After(st.Receives[1].At) && vc.Err == "" {
				require.Equal(t, st.Receives[1].ReceiptHandle, vc.ReceiptHandle)
			}
		}
	})
}

// Semantics 8: never more handlers than the concurrency, and beyond the
// free slots only the read-ahead: slow handlers (4 s each at concurrency
// 3) have asked for at most the handlers due to finish and the 100 ms of
// work rounded up, since the in-memory round trip is 0.
func TestBackPressure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 40)
		s := &spy{Client: b.client}
		var active, peak atomic.Int32
		c, err := New(s, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			n := active.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(time.Duration(len(m.Body)) * time.Second)
			active.Add(-1)
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(3), WithWaitTime(time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(30 * time.Second)
		st := c.Stats()
		require.Equal(t, 3, st.Running, "Stats counts the running handlers")
		require.LessOrEqual(t, st.Waiting+st.Asked, 3+1, "and the read-ahead")
		time.Sleep(5 * time.Minute)
		require.NoError(t, stop())
		require.Equal(t, int32(3), peak.Load())
		st = c.Stats()
		require.Zero(t, st.Running+st.Waiting+st.Asked, "nothing held after Run")
		_, _, _, peakAhead := c.fl.snapshot()
		require.LessOrEqual(t, peakAhead, 3+1, "at most the handlers due to finish, plus the gather")
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, n := range s.maxN {
			require.LessOrEqual(t, n, int32(3+3+1), "receive %d asked for %d", i, n)
		}
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted)
			require.Equal(t, 1, st.ReceiveCount, "no message waited unleased")
		}
	})
}

// Semantics 9: renewals and deletes of many leases are coalesced into
// 10-entry batches; a failed entry is retried on its own.
func TestBatching(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 100)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(95 * time.Second) // about ten renewals each
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(100))
		require.NoError(t, err)
		b.srv.FailNextEntries("DeleteMessageBatch", 3, sqstest.FaultInternalError)
		stop := running(t, c)
		time.Sleep(3 * time.Minute)
		require.NoError(t, stop())
		renewals := 0
		for _, id := range ids {
			st := b.state(t, id)
			require.True(t, st.Deleted)
			require.Equal(t, 1, st.ReceiveCount)
			renewals += len(st.VisibilityChanges)
		}
		calls := b.srv.Calls()
		require.Zero(t, calls["ChangeMessageVisibility"])
		require.Zero(t, calls["DeleteMessage"])
		perRenewal := float64(calls["ChangeMessageVisibilityBatch"]) / float64(renewals)
		t.Logf("renewals=%d batch calls=%d (%.3f per renewal); deletes: %d batch calls for 100", renewals, calls["ChangeMessageVisibilityBatch"], perRenewal, calls["DeleteMessageBatch"])
		require.LessOrEqual(t, perRenewal, 0.11)
		require.LessOrEqual(t, calls["DeleteMessageBatch"], 13, "100 deletes in 10 calls, plus at most one call per failed entry (each retries on its own jittered schedule)")
	})
}

// Semantics 7: shutdown stops receiving, releases what has not started,
// lets running handlers finish while their leases are renewed.
func TestShutdownLetsHandlersFinish(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 2)
		started := make(chan struct{}, 2)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			started <- struct{}{}
			time.Sleep(50 * time.Second) // longer than the lease: renewed during shutdown
			return ctx.Err()
		}), WithVisibilityTimeout(30*time.Second), WithShutdownTimeout(2*time.Minute))
		require.NoError(t, err)
		stop := running(t, c)
		<-started
		<-started
		synctest.Wait() // the poller is in its next long poll
		begin := time.Now()
		receives := b.srv.CallCount("ReceiveMessage")
		require.NoError(t, stop())
		require.WithinRange(t, time.Now(), begin.Add(50*time.Second+coalesceWindow), begin.Add(50*time.Second+2*coalesceWindow),
			"Run returned when the handlers' deletes did (after a renewal due at the same instant)")
		require.Equal(t, receives, b.srv.CallCount("ReceiveMessage"), "no receive after the cancel")
		for _, id := range ids {
			st := b.state(t, id)
			require.True(t, st.Deleted)
			require.Equal(t, 1, st.ReceiveCount)
		}
	})
}

func TestShutdownCancelsHandlersAfterTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		started := make(chan struct{})
		var cause error
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		}), WithVisibilityTimeout(30*time.Second), WithShutdownTimeout(45*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		<-started
		begin := time.Now()
		require.NoError(t, stop())
		require.Equal(t, begin.Add(45*time.Second+coalesceWindow), time.Now(), "cancelled at the shutdown timeout, then released")
		require.ErrorIs(t, cause, ErrShutdown)
		st := b.state(t, ids[0])
		require.False(t, st.Deleted)
		last := st.VisibilityChanges[len(st.VisibilityChanges)-1]
		require.Equal(t, time.Duration(0), last.Timeout, "released for another worker at once")
		require.GreaterOrEqual(t, len(st.VisibilityChanges), 4, "renewed while waiting")
		require.Equal(t, 1, st.ReceiveCount)
	})
}

// Semantics 7 and issue 10's orphaned polls: a shutdown never cancels a
// long poll in flight (it may already hold messages that would stay
// invisible for a whole lease). The poll returns within its wait, which
// never exceeds the shutdown timeout, and what it brings is released at
// once.
func TestShutdownNeverAbandonsALongPoll(t *testing.T) {
	t.Parallel()
	for _, budget := range []time.Duration{20 * time.Second, 3 * time.Second} {
		t.Run(budget.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				s := &spy{Client: b.client}
				handled := atomic.Int32{}
				c, err := New(s, b.url, HandlerFunc(func(context.Context, *Message) error { handled.Add(1); return nil }),
					WithVisibilityTimeout(30*time.Second), WithConcurrency(25), WithShutdownTimeout(budget))
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(2 * time.Second) // an idle queue: one receive waits in its long poll
				var stopped atomic.Bool
				var ranFor time.Duration
				var runErr error
				go func() {
					begin := time.Now()
					runErr = stop()
					ranFor = time.Since(begin)
					stopped.Store(true)
				}()
				time.Sleep(500 * time.Millisecond)
				require.False(t, stopped.Load(), "Run waits for the polls in flight")
				// They reach the poll after the shutdown began, all at the
				// same virtual instant (a delay, not one send after another,
				// which the poll could answer part-way through).
				ids := b.send(t, 20, sqstest.WithDelay(100*time.Millisecond))
				time.Sleep(time.Second)
				synctest.Wait()
				taken := 0
				for _, id := range ids {
					st := b.state(t, id)
					require.LessOrEqual(t, len(st.Receives), 1, "the poll in flight returns once")
					taken += len(st.Receives)
					require.False(t, st.InFlight, "released within a second, not left for a lease")
					require.False(t, st.Deleted)
				}
				require.Equal(t, 10, taken, "the poll in flight took a batch")
				require.Zero(t, handled.Load(), "no handler starts after the shutdown began")
				time.Sleep(budget)
				synctest.Wait()
				require.True(t, stopped.Load())
				require.NoError(t, runErr)
				require.LessOrEqual(t, ranFor, budget, "Run returned within the shutdown timeout")
				s.mu.Lock()
				defer s.mu.Unlock()
				require.Len(t, s.maxN, 1, "one receive at a time on an idle queue, none after the shutdown began")
			})
		})
	}
}

// FIFO: one message of a group at a time, in order; a failure hands the
// rest of the group back so the order holds; messages waiting behind a
// running one are leased; other groups run in parallel.
func TestFIFOGroups(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		for i := range 3 {
			_, err := b.srv.Send(b.url, fmt.Sprintf("a%d", i), sqstest.WithGroupID("a"))
			require.NoError(t, err)
			_, err = b.srv.Send(b.url, fmt.Sprintf("b%d", i), sqstest.WithGroupID("b"))
			require.NoError(t, err)
		}
		var mu sync.Mutex
		var order []string
		failed := false
		running_ := map[string]int{}
		maxPerGroup := 0
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			running_[m.GroupID]++
			maxPerGroup = max(maxPerGroup, running_[m.GroupID])
			order = append(order, m.Body)
			fail := m.Body == "b1" && !failed
			if fail {
				failed = true
			}
			mu.Unlock()
			time.Sleep(40 * time.Second) // longer than the lease: the waiting ones must be renewed
			mu.Lock()
			running_[m.GroupID]--
			mu.Unlock()
			if fail {
				return RetryAfter(errors.New("b1 failed once"), 5*time.Second)
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(10), WithWaitTime(time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(10 * time.Minute)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 1, maxPerGroup, "one handler per group at a time")
		var a, bs []string
		for _, o := range order {
			if o[0] == 'a' {
				a = append(a, o)
			} else {
				bs = append(bs, o)
			}
		}
		require.Equal(t, []string{"a0", "a1", "a2"}, a)
		require.Equal(t, []string{"b0", "b1", "b1", "b2"}, bs, "b2 waited for b1's retry")
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted, st.Body)
			if st.Body == "a2" {
				require.Equal(t, 1, st.ReceiveCount, "a2 waited in the process, leased, without a redelivery")
				require.NotEmpty(t, st.VisibilityChanges)
			}
		}
	})
}

func TestFIFOShutdownReleasesWaitingMessages(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		for i := range 3 {
			_, err := b.srv.Send(b.url, fmt.Sprintf("g%d", i), sqstest.WithGroupID("g"))
			require.NoError(t, err)
		}
		started := make(chan struct{}, 3)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			started <- struct{}{}
			time.Sleep(10 * time.Second)
			return nil
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		<-started
		require.NoError(t, stop())
		require.Len(t, started, 0, "no handler started after the cancel")
		for _, st := range b.srv.Messages(b.url) {
			if st.Body == "g0" {
				require.True(t, st.Deleted)
				continue
			}
			require.False(t, st.Deleted)
			require.False(t, st.InFlight, "%s released (visibility 0)", st.Body)
		}
	})
}

func TestReceiveErrors(t *testing.T) {
	t.Parallel()
	t.Run("transient: back off and keep polling", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			ids := b.send(t, 1)
			b.srv.FailNext("ReceiveMessage", 5, sqstest.FaultServiceUnavailable)
			c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }), WithVisibilityTimeout(30*time.Second))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Minute)
			require.NoError(t, stop())
			require.True(t, b.state(t, ids[0]).Deleted)
		})
	})
	t.Run("permanent: Run returns the error after a clean shutdown", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.send(t, 1)
			finished := make(chan struct{})
			started := make(chan struct{})
			c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error {
				close(started)
				time.Sleep(15 * time.Second)
				close(finished)
				return nil
			}), WithVisibilityTimeout(30*time.Second), WithConcurrency(2), WithWaitTime(time.Second))
			require.NoError(t, err)
			go func() {
				<-started
				b.srv.FailNext("ReceiveMessage", 1, sqstest.FaultQueueDoesNotExist) // a later receive, while the handler runs
			}()
			err = c.Run(context.Background())
			require.Error(t, err)
			require.Contains(t, err.Error(), "ReceiveMessage")
			select {
			case <-finished:
			default:
				t.Fatal("Run returned before the running handler finished")
			}
			for _, st := range b.srv.Messages(b.url) {
				require.True(t, st.Deleted, "the running handler's message was settled before Run returned")
			}
		})
	})
}

func TestHandlerTimeoutAndMiddlewareOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 1)
		var trail []string
		var mu sync.Mutex
		mw := func(name string) Middleware {
			return func(next Handler) Handler {
				return HandlerFunc(func(ctx context.Context, m *Message) error {
					mu.Lock()
					trail = append(trail, name)
					mu.Unlock()
					return next.HandleMessage(ctx, m)
				})
			}
		}
		var took time.Duration
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			start := time.Now()
			<-ctx.Done()
			took = time.Since(start)
			return ctx.Err()
		}), WithVisibilityTimeout(30*time.Second), WithHandlerTimeout(3*time.Second), WithMiddleware(mw("outer"), mw("inner")))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Second)
		require.NoError(t, stop())
		require.Equal(t, 3*time.Second, took)
		require.Equal(t, []string{"outer", "inner"}, trail[:2])
	})
}

func TestObserverSeesTheLifeOfAMessage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 1)
		rec := &recorder{}
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(25 * time.Second)
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithObserver(rec))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(30 * time.Second)
		require.NoError(t, stop())
		var kinds []string
		for _, e := range rec.events {
			kinds = append(kinds, e.Kind.String())
			require.NotNil(t, e.Message)
		}
		require.Equal(t, "received,started,renewed,renewed,succeeded,deleted,done", strings.Join(kinds, ","))
		last := rec.events[len(rec.events)-1]
		require.Equal(t, 25*time.Second+coalesceWindow, last.SinceReceive)
	})
}

// malformed returns a crafted ReceiveMessage answer once, then defers to
// the real client.
type malformed struct {
	Client
	once sync.Once
	out  *sqs.ReceiveMessageOutput
}

func (m *malformed) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	var out *sqs.ReceiveMessageOutput
	m.once.Do(func() { out = m.out })
	if out != nil {
		return out, nil
	}
	return m.Client.ReceiveMessage(ctx, in, optFns...)
}

func TestMalformedReceiveAnswers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		var logs bytes.Buffer
		bad := &malformed{Client: b.client, out: &sqs.ReceiveMessageOutput{Messages: []types.Message{
			{MessageId: aws.String("no-handle")},
			{ReceiptHandle: aws.String("no-id")},
			{}, // and more than the one asked for
		}}}
		var handled atomic.Int32
		c, err := New(bad, b.url, HandlerFunc(func(context.Context, *Message) error { handled.Add(1); return nil }),
			WithVisibilityTimeout(30*time.Second), WithConcurrency(1), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		require.Equal(t, int32(1), handled.Load(), "only the real message reached the handler")
		require.True(t, b.state(t, ids[0]).Deleted)
		require.Contains(t, logs.String(), "without MessageId or ReceiptHandle")
		require.Contains(t, logs.String(), "more messages than asked for")
	})
}

// A shutdown budget longer than the lease is fine (leases stay renewed
// while handlers drain, as the shutdown advice says): no warning.
func TestNoWarningWhenShutdownOutlastsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		var logs bytes.Buffer
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(10*time.Second), WithShutdownTimeout(time.Minute), WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		require.NoError(t, err)
		require.NoError(t, running(t, c)())
		require.Empty(t, logs.String())
	})
}

// Reading the queue's VisibilityTimeout fails: the error says what to do,
// and offers WithVisibilityTimeout only where it helps.
func TestRunExplainsQueueAttributeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		fault    sqstest.Fault
		want     string
		wantHint bool
	}{
		{"missing queue", sqstest.FaultQueueDoesNotExist, "does not exist (check the region and account in its URL)", false},
		{"access denied", sqstest.FaultAccessDenied, "access denied (allow sqs:GetQueueAttributes, or set WithVisibilityTimeout to skip this read)", true},
		{"server error", sqstest.FaultInternalError, "reading the queue's VisibilityTimeout", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				b.srv.FailNext("GetQueueAttributes", 1, tt.fault)
				c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }))
				require.NoError(t, err)
				err = c.Run(context.Background())
				require.ErrorContains(t, err, tt.want)
				require.Equal(t, tt.wantHint, strings.Contains(err.Error(), "WithVisibilityTimeout"), "hint in %q", err)
			})
		})
	}
}

// A handler may settle its own message (acknowledge early, or release with
// a visibility of its choosing); the Consumer then leaves it alone.
func TestHandlerSettlesItself(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 2)
		var logs bytes.Buffer
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.Body == "m000" {
				return m.Lease.Delete(ctx) // acknowledge before the slow part
			}
			if m.ReceiveCount == 1 {
				require.NoError(t, m.Lease.Release(ctx, 3*time.Second))
				return errors.New("released by hand")
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(10 * time.Second)
		require.NoError(t, stop())
		require.True(t, b.state(t, ids[0]).Deleted)
		st := b.state(t, ids[1])
		require.True(t, st.Deleted)
		require.Equal(t, 2, st.ReceiveCount)
		require.Equal(t, 3*time.Second, st.VisibilityChanges[0].Timeout, "the handler's own visibility was not overwritten")
		require.Len(t, st.VisibilityChanges, 1)
		require.NotContains(t, logs.String(), "could not", "nothing failed to settle")
		require.NotContains(t, logs.String(), "could not be deleted")
	})
}

// A handler that finishes just as a renewal is due: the delete waits for
// the renewal in flight, so SQS's refusal of a renewal that landed after our
// own delete can never read as a lost lease (found by bench/longhandlers).
func TestDeleteRacingRenewal(t *testing.T) {
	t.Parallel()
	for run := range 5 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				b.send(t, 50)
				rec := &recorder{}
				c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
					time.Sleep(10 * time.Second) // exactly one heartbeat interval
					return nil
				}), WithVisibilityTimeout(30*time.Second), WithConcurrency(50), WithObserver(rec))
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(time.Minute)
				require.NoError(t, stop())
				require.Equal(t, 50, rec.count(EventDeleted))
				require.Zero(t, rec.count(EventLeaseLost))
				require.Zero(t, rec.count(EventRenewalFailed))
			})
		})
	}
}

// A handler that succeeded gives its slot back while SQS confirms the
// delete: the next message can start, the message being deleted stays
// leased, and no more than the concurrency of such messages are held.
func TestSucceededHandlerFreesSlotBeforeDeleteConfirms(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 12)
		s := &spy{Client: b.client}
		var mu sync.Mutex
		held, peakHeld, active, peakActive := 0, 0, 0, 0
		obs := ObserverFunc(func(e Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case EventReceived:
				held++
				peakHeld = max(peakHeld, held)
			case EventDeleted, EventReleased:
				held--
			}
		})
		c, err := New(s, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			active++
			peakActive = max(peakActive, active)
			mu.Unlock()
			time.Sleep(time.Second)
			mu.Lock()
			active--
			mu.Unlock()
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(2), WithMaxReadAhead(1), WithWaitTime(time.Second), WithObserver(obs))
		require.NoError(t, err)
		b.srv.DelayNext("DeleteMessageBatch", 100, 5*time.Second) // every delete takes 5 s to confirm
		stop := running(t, c)
		time.Sleep(2 * time.Minute)
		require.NoError(t, stop())

		mu.Lock()
		require.Equal(t, 2, peakActive, "never more handlers than the concurrency")
		// Concurrency 2 and a read-ahead bound of 1: at most 3 messages
		// wait for their delete's confirmation, and 1 is read ahead.
		require.LessOrEqual(t, peakHeld, 2+3+1, "2 handlers, 3 messages waiting for their delete, 1 read ahead")
		require.Greater(t, peakHeld, 2+1, "slots were freed before deletes were confirmed")
		mu.Unlock()
		s.mu.Lock()
		for i, n := range s.maxN {
			require.LessOrEqual(t, n, int32(3), "receive %d asked for %d", i, n)
		}
		s.mu.Unlock()
		for _, id := range ids {
			st := b.state(t, id)
			require.True(t, st.Deleted, id)
			require.Equal(t, 1, st.ReceiveCount, "%s stayed leased while its delete was confirmed", id)
		}
	})
}

// Semantics 1 on a quiet queue: a message that arrives 8 s into a 20 s long
// poll is handed to its handler under a live lease, whatever the lease
// length, and is deleted on its first delivery. Counting the lease from the
// poll's sending made every lease under 8 s dead on arrival.
func TestQuietQueueLeaseIsLiveOnArrival(t *testing.T) {
	t.Parallel()
	for _, lease := range []time.Duration{3 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second} {
		t.Run(lease.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				rec := &recorder{}
				type seen struct {
					ctxErr     error
					count      int
					receivedAt time.Time
					length     time.Duration
				}
				got := make(chan seen, 4)
				c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
					got <- seen{ctxErr: context.Cause(ctx), count: m.ReceiveCount, receivedAt: m.ReceivedAt, length: m.Lease.Length()}
					time.Sleep(lease / 2) // work that needs most of the lease
					return ctx.Err()
				}), WithVisibilityTimeout(lease), WithObserver(rec))
				require.NoError(t, err)
				stop := running(t, c)
				synctest.Wait() // the poll is waiting on an empty queue
				time.Sleep(8 * time.Second)
				id, err := b.srv.Send(b.url, "late")
				require.NoError(t, err)
				arrived := time.Now()
				s := <-got
				require.NoError(t, s.ctxErr, "the handler's context must be live on arrival")
				require.Equal(t, arrived.Add(-time.Second), s.receivedAt, "the lease clock starts a second before the answer, not at the poll's sending")
				require.Equal(t, 1, s.count)
				require.Equal(t, lease, s.length, "the handler can read its lease length")
				time.Sleep(lease) // handler done, delete confirmed
				synctest.Wait()
				require.NoError(t, stop())
				st := b.state(t, id)
				require.True(t, st.Deleted, "deleted on its first delivery")
				require.Equal(t, 1, st.ReceiveCount, "no receive count wasted")
				require.Zero(t, rec.count(EventLeaseExpired))
				require.Zero(t, rec.count(EventLeaseLost))
				require.Len(t, got, 0, "handled once")
			})
		})
	}
}

// A lease due for renewal when its message arrives is renewed at once: with
// a 3 s lease (renewal every second) and the clock starting a second
// before the answer, the first renewal goes out on arrival.
func TestQuietQueueRenewsAtOnceWhenDueOnArrival(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		rec := &recorder{}
		release := make(chan struct{})
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			<-release
			return nil
		}), WithVisibilityTimeout(3*time.Second), WithObserver(rec))
		require.NoError(t, err)
		stop := running(t, c)
		synctest.Wait()
		time.Sleep(8 * time.Second)
		id, err := b.srv.Send(b.url, "late")
		require.NoError(t, err)
		sentAt := time.Now()
		time.Sleep(coalesceWindow)
		synctest.Wait()
		st := b.state(t, id)
		require.NotEmpty(t, st.VisibilityChanges, "renewed at once")
		require.Equal(t, sentAt, st.VisibilityChanges[0].At.Add(-coalesceWindow), "the first renewal left on arrival (plus the batch window)")
		close(release)
		synctest.Wait()
		require.NoError(t, stop())
		require.True(t, b.state(t, id).Deleted)
		require.Zero(t, rec.count(EventLeaseExpired))
	})
}

// Statistics measure work, not the long poll's wait: 20 ms jobs arriving
// 6 s apart on an idle queue are 20 ms jobs, and the lease they call for is
// the floor.
func TestQuietQueueStatsMeasureWork(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(20 * time.Millisecond)
			return nil
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		for range 30 {
			time.Sleep(6 * time.Second)
			_, err := b.srv.Send(b.url, "job")
			require.NoError(t, err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, stop())
		st := c.Stats()
		require.EqualValues(t, 30, st.Processed)
		require.Less(t, st.P99, 100*time.Millisecond, "p99 is the work plus the delete, not the wait")
		require.Equal(t, MinAdaptiveVisibility, AdaptiveVisibility(st.P99, 0, MaxVisibilityTimeout), "a lease at the floor")
	})
}

// Issue 10 point 6: a receive that keeps failing with the same client error
// ends Run with that error after maxSameReceiveFailures attempts; throttling
// is retried for as long as it lasts.
func TestReceiveFailingTheSameWayEndsRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.srv.FailNext("ReceiveMessage", 1000, sqstest.Fault{Status: 400, Type: "UnmappableAnswer", Message: "the answer could not be read"})
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		begin := time.Now()
		err = c.Run(context.Background())
		require.ErrorContains(t, err, "failed 10 times in a row with the same client error")
		require.ErrorContains(t, err, "the answer could not be read")
		require.Less(t, time.Since(begin), 2*time.Minute, "about a minute of backoff")
		require.Equal(t, maxSameReceiveFailures, b.srv.CallCount("ReceiveMessage"))
	})
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 3)
		b.srv.FailNext("ReceiveMessage", 30, sqstest.FaultThrottled)
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(10 * time.Minute)
		require.NoError(t, stop(), "throttling never ends Run")
		for _, id := range ids {
			require.True(t, b.state(t, id).Deleted)
		}
	})
}

// Issue 10 point 5: when SQS stops answering visibility calls, Run still
// returns within the shutdown timeout plus one call timeout, and no message
// is deleted unless its handler succeeded.
func TestShutdownWithinBudgetWhenSQSMisbehaves(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 4)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			select {
			case <-ctx.Done(): // long work that honours its context
				return context.Cause(ctx)
			case <-time.After(10 * time.Minute):
				return nil
			}
		}), WithVisibilityTimeout(10*time.Minute), WithShutdownTimeout(5*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Second)
		// From now on every visibility change hangs until the caller gives up.
		b.srv.DelayNext("ChangeMessageVisibilityBatch", 1000, time.Hour)
		b.srv.DelayNext("ChangeMessageVisibility", 1000, time.Hour)
		begin := time.Now()
		require.NoError(t, stop())
		require.LessOrEqual(t, time.Since(begin), 5*time.Second+shutdownCallTimeout, "the shutdown timeout plus one call timeout")
		for _, id := range ids {
			require.False(t, b.state(t, id).Deleted)
		}
	})
}

// Issue 16: a nil context to Run is an error, not a panic.
func TestRunNilContext(t *testing.T) {
	t.Parallel()
	c, err := New(&sqs.Client{}, "https://sqs.example/q", HandlerFunc(func(context.Context, *Message) error { return nil }))
	require.NoError(t, err)
	//lint:ignore SA1012 the nil context is the point
	require.ErrorContains(t, c.Run(nil), "Run(nil)") //nolint:staticcheck
}

// corruptFirst rewrites the MD5OfBody of the first message of the first
// receive answer that holds two or more, as a bit flip on the way would.
type corruptFirst struct {
	next http.RoundTripper
	done atomic.Bool
}

func (c *corruptFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil || req.Header.Get("X-Amz-Target") != "AmazonSQS.ReceiveMessage" || c.done.Load() {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if json.Unmarshal(body, &out) == nil {
		if msgs, _ := out["Messages"].([]any); len(msgs) >= 2 && c.done.CompareAndSwap(false, true) {
			msgs[0].(map[string]any)["MD5OfBody"] = "00000000000000000000000000000000"
			body, _ = json.Marshal(out)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp, nil
}

// Issue 16: one message whose body does not match its digest costs only
// itself. The SDK would reject the whole answer, leaving its other messages
// invisible for a lease, unhandled.
func TestCorruptMessageCostsOnlyItself(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		client := b.srv.Client(func(o *sqs.Options) {
			o.Retryer = aws.NopRetryer{}
			o.HTTPClient = &http.Client{Transport: &corruptFirst{next: b.srv.Transport()}}
		})
		ids := b.send(t, 3)
		var handled atomic.Int32
		c, err := New(client, b.url, HandlerFunc(func(context.Context, *Message) error {
			handled.Add(1)
			return nil
		}), WithVisibilityTimeout(time.Minute))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(2 * time.Second)
		require.NoError(t, stop())
		require.EqualValues(t, 3, handled.Load(), "all three handled within seconds, not after the minute-long lease")
		counts := map[int]int{}
		for _, id := range ids {
			st := b.state(t, id)
			require.True(t, st.Deleted)
			counts[st.ReceiveCount]++
		}
		require.Equal(t, map[int]int{1: 2, 2: 1}, counts, "the two intact messages on their first delivery, the corrupt one on its second")
	})
}

// Issue 16: a delete that outlives the lease must not let the lease run
// out: renewals go on while the delete is pending, so the message is not
// handled twice.
func TestRenewalsContinueWhileDeletePending(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		var runs atomic.Int32
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error {
			runs.Add(1)
			time.Sleep(25 * time.Second)
			return nil
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		b.srv.DelayNext("DeleteMessageBatch", 1, 27*time.Second) // the first delete answers late
		stop := running(t, c)
		time.Sleep(2 * time.Minute)
		require.NoError(t, stop())
		st := b.state(t, ids[0])
		require.True(t, st.Deleted)
		require.EqualValues(t, 1, runs.Load(), "handled once")
		require.Equal(t, 1, st.ReceiveCount, "never visible again while the delete was pending")
	})
}

// panicHandler is a slog.Handler whose every record panics.
type panicHandler struct{}

func (panicHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (panicHandler) Handle(context.Context, slog.Record) error { panic("log handler broke") }
func (h panicHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h panicHandler) WithGroup(string) slog.Handler           { return h }

// Issue 16: a panic in the caller's Observer, backoff function or log
// handler is recovered: messages are still handled and settled, and Run
// returns nil. (Without the recovery the panic ends the test binary.)
func TestCallbackPanicsAreContained(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts []Option
	}{
		{"observer", []Option{WithObserver(ObserverFunc(func(Event) { panic("observer broke") }))}},
		{"backoff", []Option{WithBackoff(func(int) time.Duration { panic("backoff broke") })}},
		{"logger", []Option{WithLogger(slog.New(panicHandler{}))}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				ids := b.send(t, 4)
				var calls sync.Map
				c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
					if _, again := calls.LoadOrStore(m.ID, true); !again && m.Body == "m000" {
						return errors.New("fails once") // exercises the backoff
					}
					return nil
				}), append([]Option{WithVisibilityTimeout(30 * time.Second)}, tt.opts...)...)
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(time.Minute)
				require.NoError(t, stop())
				for _, id := range ids {
					require.True(t, b.state(t, id).Deleted, "%s settled despite the panics", id)
				}
			})
		})
	}
}

// A message whose lease ends while it waits for its turn (lost or expired
// before its handler could start) is never handed to the handler: another
// consumer may hold it by then. Here the second message of a FIFO group
// waits behind the first; the server expires its lease meanwhile, so its
// next renewal is refused. When the first finishes, the second is not
// started with that dead lease: it comes back from SQS and runs then.
func TestWaitingMessageWithLeaseGoneNeverStarts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		var ids []string
		for _, body := range []string{"a0", "a1"} {
			id, err := b.srv.Send(b.url, body, sqstest.WithGroupID("a"))
			require.NoError(t, err)
			ids = append(ids, id)
		}
		type call struct {
			body     string
			count    int
			deadOnIn bool
		}
		var mu sync.Mutex
		var calls []call
		var lost []error
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			calls = append(calls, call{m.Body, m.ReceiveCount, ctx.Err() != nil})
			mu.Unlock()
			if m.Body == "a0" {
				time.Sleep(2 * time.Minute)
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(5),
			WithObserver(ObserverFunc(func(e Event) {
				if e.Kind == EventDone && e.Message.Body == "a1" && e.Err != nil {
					mu.Lock()
					lost = append(lost, e.Err)
					mu.Unlock()
				}
			})))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Second)
		require.Equal(t, 1, b.state(t, ids[1]).ReceiveCount, "a1 came with a0 and waits behind it")
		require.NoError(t, b.srv.Expire(b.url, ids[1]))
		time.Sleep(5 * time.Minute)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, calls, 2, "%+v", calls)
		require.Equal(t, call{"a0", 1, false}, calls[0])
		// a1's first delivery, whose lease was refused while it waited,
		// never reached the handler; a later one did (the second, or a
		// third when a receive brought it back before the first was
		// finished here and it was handed back).
		require.Equal(t, "a1", calls[1].body)
		require.GreaterOrEqual(t, calls[1].count, 2, "a1's first delivery never reached the handler")
		require.False(t, calls[1].deadOnIn)
		require.Len(t, lost, 1, "a1's first delivery ended with its lease's error")
		require.ErrorIs(t, lost[0], ErrLeaseLost)
		for _, id := range ids {
			require.True(t, b.state(t, id).Deleted)
		}
	})
}
