package sqsconsumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/aws/aws-sdk-go-v2/service/sqs"
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
		{"a broken URL is not taken for a name", c, "htp:/bad url", h, nil, `queue URL "htp:/bad url" is not a URL (a queue URL looks like https://sqs.us-east-1.amazonaws.com/123456789012/NAME)`},
		{"a FIFO queue's name for a URL", c, "jobs.fifo", h, nil, `(such as https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo), not its name`},
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
		_, _, _, peakAhead := c.flowOf().snapshot()
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
