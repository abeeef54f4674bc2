package sqsconsumer

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestNewLeaseValidates(t *testing.T) {
	t.Parallel()
	msg := types.Message{MessageId: aws.String("m"), ReceiptHandle: aws.String("h")}
	c := &sqs.Client{}
	tests := []struct {
		name   string
		client Client
		url    string
		msg    types.Message
		opts   []LeaseOption
		want   string
	}{
		{"nil client", nil, "https://sqs.example/q", msg, nil, "client is nil"},
		{"empty url", c, "", msg, nil, "queue URL is empty"},
		{"no handle", c, "https://sqs.example/q", types.Message{MessageId: aws.String("m")}, nil, "no receipt handle"},
		{"lease too short", c, "https://sqs.example/q", msg, []LeaseOption{WithVisibilityTimeout(time.Second)}, "WithVisibilityTimeout(1s)"},
		{"lease not whole seconds", c, "https://sqs.example/q", msg, []LeaseOption{WithVisibilityTimeout(1500 * time.Millisecond)}, "whole seconds"},
		{"heartbeat of half the lease", c, "https://sqs.example/q", msg, []LeaseOption{WithVisibilityTimeout(30 * time.Second), WithHeartbeatInterval(15 * time.Second)}, "less than half the lease"},
		{"lease past max", c, "https://sqs.example/q", msg, []LeaseOption{WithVisibilityTimeout(time.Hour), WithMaxLeaseDuration(time.Minute)}, "exceeds WithMaxLeaseDuration"},
		{"max lease past 12h", c, "https://sqs.example/q", msg, []LeaseOption{WithMaxLeaseDuration(13 * time.Hour)}, "WithMaxLeaseDuration(13h0m0s)"},
		{"nil observer", c, "https://sqs.example/q", msg, []LeaseOption{WithObserver(nil)}, "WithObserver(nil)"},
		{"grace past max", c, "https://sqs.example/q", msg, []LeaseOption{WithMaxLeaseDuration(time.Minute), WithCeilingGrace(time.Minute)}, "WithCeilingGrace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewLease(tt.client, tt.url, tt.msg, tt.opts...)
			require.Nil(t, l)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// Semantics 3: the terminal answers stop the heartbeat, cancel the
// handler with ErrLeaseLost, and Delete refuses without calling SQS.
func TestLeaseLost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(t *testing.T, b bundle, msg types.Message)
	}{
		{"ReceiptHandleIsInvalid", func(t *testing.T, b bundle, msg types.Message) {
			b.srv.FailNext("ChangeMessageVisibility", 1, sqstest.FaultReceiptHandleIsInvalid)
		}},
		{"MessageNotInflight", func(t *testing.T, b bundle, msg types.Message) {
			b.srv.FailNext("ChangeMessageVisibility", 1, sqstest.FaultMessageNotInflight)
		}},
		{"deleted by someone else (InvalidParameterValue)", func(t *testing.T, b bundle, msg types.Message) {
			_, err := b.client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &b.url, ReceiptHandle: msg.ReceiptHandle})
			require.NoError(t, err)
		}},
		{"superseded by a newer receive elsewhere", func(t *testing.T, b bundle, msg types.Message) {
			require.NoError(t, b.srv.Expire(b.url, *msg.MessageId))
			b.receiveNext(t, 30*time.Second)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				rec := &recorder{}
				msg, sent := b.receive(t, "x", 30*time.Second)
				l := b.lease(t, msg, sent, WithObserver(rec))
				ctx := l.Start(context.Background())
				defer l.Stop()
				tt.setup(t, b, msg)
				<-ctx.Done()
				require.Equal(t, sent.Add(10*time.Second), time.Now(), "lost at the first renewal")
				require.ErrorIs(t, context.Cause(ctx), ErrLeaseLost)
				require.ErrorIs(t, context.Cause(ctx), ErrLeaseLost)
				cmv := b.srv.CallCount("ChangeMessageVisibility")
				time.Sleep(time.Minute)
				require.Equal(t, cmv, b.srv.CallCount("ChangeMessageVisibility"), "the heartbeat stopped at once")
				dels := b.srv.CallCount("DeleteMessage")
				require.ErrorIs(t, l.Delete(context.Background()), ErrLeaseLost)
				require.ErrorIs(t, l.Release(context.Background(), 0), ErrLeaseLost)
				require.Equal(t, dels, b.srv.CallCount("DeleteMessage"), "Delete refused without a call")
				require.Equal(t, 1, rec.count(EventLeaseLost))
			})
		})
	}
}

// Semantics 2 and 4: 12 virtual hours of heartbeats; no renewal asks past
// the ceiling; the handler is told a grace period before it; nothing is
// deleted.
func TestLeaseCeilingAfterTwelveHours(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		rec := &recorder{}
		msg, sent := b.receive(t, "long job", 30*time.Second)
		l := b.lease(t, msg, sent, WithObserver(rec))
		ctx := l.Start(context.Background())
		defer l.Stop()
		<-ctx.Done()
		ceiling := sent.Add(12 * time.Hour)
		require.ErrorIs(t, context.Cause(ctx), ErrLeaseCeiling)
		require.Equal(t, ceiling.Add(-10*time.Second), time.Now(), "cancelled one heartbeat interval before the ceiling")
		require.Equal(t, 1, rec.count(EventCeilingReached))

		time.Sleep(time.Minute) // past the ceiling: the lease runs out
		st := b.state(t, *msg.MessageId)
		require.False(t, st.Deleted)
		require.Greater(t, len(st.VisibilityChanges), 4000)
		last := st.VisibilityChanges[len(st.VisibilityChanges)-1]
		for _, c := range st.VisibilityChanges {
			require.Empty(t, c.Err, "SQS refused a renewal at %v", c.At)
			require.False(t, c.At.Add(c.Timeout).After(ceiling), "renewal at %v asked past the ceiling", c.At)
		}
		require.Less(t, last.Timeout, 30*time.Second, "the last renewal was clipped")
		require.Equal(t, ceiling.Add(-ceilingMargin), last.At.Add(last.Timeout))
		require.ErrorIs(t, l.Err(), ErrLeaseExpired, "after the ceiling the lease is over")
		require.Equal(t, 1, st.ReceiveCount, "held for 12 hours without a redelivery")
	})
}

func TestLeaseMaxLeaseDuration(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent, WithMaxLeaseDuration(5*time.Minute), WithCeilingGrace(30*time.Second))
		ctx := l.Start(context.Background())
		defer l.Stop()
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), ErrLeaseCeiling)
		require.Equal(t, sent.Add(5*time.Minute-30*time.Second), time.Now())
		time.Sleep(time.Minute)
		for _, c := range b.state(t, *msg.MessageId).VisibilityChanges {
			require.False(t, c.At.Add(c.Timeout).After(sent.Add(5*time.Minute)))
		}
	})
}

// Semantics 6: Adopt switches to the newest handle; the ceiling counts from
// the newest receive.
func TestLeaseAdopt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent)
		ctx := l.Start(context.Background())
		defer l.Stop()
		time.Sleep(11*time.Hour + 5*time.Second) // between two renewals
		require.NoError(t, b.srv.Expire(b.url, *msg.MessageId))
		msg2, sent2 := b.receiveNext(t, 30*time.Second)
		require.Equal(t, *msg.MessageId, *msg2.MessageId)
		l.Adopt(*msg2.ReceiptHandle, sent2)
		require.Equal(t, *msg2.ReceiptHandle, l.ReceiptHandle())
		time.Sleep(2 * time.Hour) // past the first receive's ceiling
		require.NoError(t, ctx.Err(), "the ceiling now counts from the newer receive")
		st := b.state(t, *msg.MessageId)
		for _, c := range st.VisibilityChanges {
			if c.At.After(sent2) {
				require.Equal(t, *msg2.ReceiptHandle, c.ReceiptHandle)
				require.Empty(t, c.Err)
			}
		}
		require.NoError(t, l.Delete(context.Background()))
		require.True(t, b.state(t, *msg.MessageId).Deleted, "deleted with the newest handle")
	})
}

// Semantics 5: Delete uses the latest handle, keeps the heartbeat until it
// is confirmed, retries transient failures, and a second Delete makes no call.
func TestLeaseDelete(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		rec := &recorder{}
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent, WithObserver(rec))
		l.Start(context.Background())
		defer l.Stop()
		time.Sleep(9 * time.Second)
		b.srv.FailNext("DeleteMessage", 3, sqstest.FaultThrottled)
		b.srv.DelayNext("DeleteMessage", 4, 2*time.Second)
		require.NoError(t, l.Delete(context.Background()))
		st := b.state(t, *msg.MessageId)
		require.True(t, st.Deleted)
		require.NotEmpty(t, st.VisibilityChanges, "the heartbeat kept renewing while the delete was retried")
		require.Equal(t, 4, b.srv.CallCount("DeleteMessage"))
		require.ErrorIs(t, l.Delete(context.Background()), ErrLeaseSettled)
		require.ErrorIs(t, l.Release(context.Background(), 0), ErrLeaseSettled)
		require.Equal(t, 4, b.srv.CallCount("DeleteMessage"), "a second Delete makes no call")
		require.Equal(t, 1, rec.count(EventDeleted))
		n := b.srv.CallCount("ChangeMessageVisibility")
		time.Sleep(time.Minute)
		require.Equal(t, n, b.srv.CallCount("ChangeMessageVisibility"), "no renewal after the delete")
	})
}

func TestLeaseConcurrentDeletesMakeOneCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent)
		l.Start(context.Background())
		defer l.Stop()
		b.srv.DelayNext("DeleteMessage", 1, time.Second)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = l.Delete(context.Background()) }()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else {
				require.ErrorIs(t, err, ErrLeaseSettled)
			}
		}
		require.Equal(t, 1, ok)
		require.Equal(t, 1, b.srv.CallCount("DeleteMessage"))
	})
}

func TestLeaseReleaseAndExtend(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent)
		ctx := l.Start(context.Background())
		defer l.Stop()

		time.Sleep(5 * time.Second)
		require.NoError(t, l.Extend(ctx, 10*time.Minute))
		require.Equal(t, time.Now().Add(10*time.Minute), l.Deadline())
		n := b.srv.CallCount("ChangeMessageVisibility")
		time.Sleep(8 * time.Minute)
		require.Equal(t, n, b.srv.CallCount("ChangeMessageVisibility"), "no renewal while the extension has more than lease-interval left")
		time.Sleep(2*time.Minute - 15*time.Second)
		require.Greater(t, b.srv.CallCount("ChangeMessageVisibility"), n, "renewals resume before the extension runs out")
		require.NoError(t, ctx.Err())

		require.Error(t, l.Release(ctx, -time.Second))
		require.NoError(t, l.Release(ctx, 7*time.Second))
		released := time.Now()
		st := b.state(t, *msg.MessageId)
		last := st.VisibilityChanges[len(st.VisibilityChanges)-1]
		require.Equal(t, 7*time.Second, last.Timeout)
		require.Equal(t, released.Add(7*time.Second), st.VisibleAt)
		require.ErrorIs(t, l.Extend(ctx, time.Minute), ErrLeaseSettled)
		m2, _ := b.receiveNext(t, 30*time.Second) // long-polls until it is visible again
		require.Equal(t, *msg.MessageId, *m2.MessageId)
		require.Equal(t, released.Add(7*time.Second), time.Now())
	})
}

// Semantics 8: Stop joins the heartbeat goroutine (goleak checks in
// TestMain) and cancels the context.
func TestLeaseStop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent)
		l.Stop() // before Start: fine
		l2 := b.lease(t, msg, sent)
		ctx := l2.Start(context.Background())
		require.Equal(t, ctx, l2.Start(context.Background()), "Start twice returns the first context")
		b.srv.DelayNext("ChangeMessageVisibility", 1, time.Hour)
		time.Sleep(10*time.Second + time.Millisecond) // a renewal is in flight
		l2.Stop()
		l2.Stop()
		require.ErrorIs(t, context.Cause(ctx), ErrLeaseSettled)
	})
}

func TestLeaseOnDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent)
		var mu sync.Mutex
		var got []time.Time
		remove := l.OnDeadline(func(d time.Time) { mu.Lock(); got = append(got, d); mu.Unlock() })
		l.Start(context.Background())
		defer l.Stop()
		time.Sleep(21 * time.Second)
		remove()
		time.Sleep(20 * time.Second)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []time.Time{sent.Add(40 * time.Second), sent.Add(50 * time.Second)}, got)
	})
}

// One option value configures a Consumer and a standalone Lease alike.
func TestLeaseOptionsAreConsumerOptions(t *testing.T) {
	t.Parallel()
	shared := []LeaseOption{WithVisibilityTimeout(45 * time.Second), WithHeartbeatInterval(10 * time.Second), WithMaxLeaseDuration(time.Hour)}
	msg := types.Message{MessageId: aws.String("m"), ReceiptHandle: aws.String("h")}
	l, err := NewLease(&sqs.Client{}, "https://sqs.example/q", msg, shared...)
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, l.cfg.lease)
	require.Equal(t, 10*time.Second, l.cfg.interval)
	require.Equal(t, time.Hour, l.cfg.maxLease)
	opts := make([]Option, len(shared))
	for i, o := range shared {
		opts[i] = o
	}
	c, err := New(&sqs.Client{}, "https://sqs.example/q", HandlerFunc(func(context.Context, *Message) error { return nil }), opts...)
	require.NoError(t, err)
	cfg, err := c.s.leaseConfig(c.s.visibility)
	require.NoError(t, err)
	require.Equal(t, l.cfg.lease, cfg.lease)
	require.Equal(t, l.cfg.interval, cfg.interval)
	require.Equal(t, l.cfg.maxLease, cfg.maxLease)
}

// A Consumer's batched, asynchronous delete whose handle was superseded
// while the call was in flight (a redelivery the lease adopted) is made
// again with the new handle: SQS may answer the stale one with success and
// delete nothing.
func TestAsyncDeleteRepeatsWithAdoptedHandle(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		calls := newCoalescedCalls(b.client, b.url, 0, nil)
		defer calls.close()
		cfg, err := (&settings{maxLease: MaxVisibilityTimeout}).leaseConfig(30 * time.Second)
		require.NoError(t, err)
		l := newTestLease(calls, b.url, msg, sent, &cfg)
		l.Start(context.Background())
		defer l.Stop()

		b.srv.DelayNext("DeleteMessageBatch", 1, 5*time.Second)
		result := make(chan error, 1)
		require.True(t, l.deleteAsync(func(_ *Lease, err error) { result <- err }))
		time.Sleep(time.Second) // the first delete waits in the server
		require.NoError(t, b.srv.Expire(b.url, *msg.MessageId))
		again, at := b.receiveNext(t, 30*time.Second)
		require.True(t, l.adopt(*again.ReceiptHandle, at, 2, 30*time.Second))

		require.NoError(t, <-result)
		st := b.state(t, *msg.MessageId)
		require.True(t, st.Deleted, "deleted with the adopted handle")
		require.Equal(t, 2, b.srv.Calls()["DeleteMessageBatch"], "the stale delete, then one with the new handle")
		require.ErrorIs(t, l.Delete(context.Background()), ErrLeaseSettled)
	})
}

// deleteAsync declines, doing nothing, when it cannot go ahead at once: a
// standalone lease (no batching), another call of the lease in flight, a
// lease already settled. The caller then uses Delete.
func TestAsyncDeleteDeclines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		standalone := b.lease(t, msg, sent)
		require.False(t, standalone.deleteAsync(func(*Lease, error) { t.Error("called") }))

		calls := newCoalescedCalls(b.client, b.url, 0, nil)
		defer calls.close()
		cfg, err := (&settings{maxLease: MaxVisibilityTimeout}).leaseConfig(30 * time.Second)
		require.NoError(t, err)
		l := newTestLease(calls, b.url, msg, sent, &cfg)
		require.True(t, l.acquireCall(nil)) // a renewal in flight
		require.False(t, l.deleteAsync(func(*Lease, error) { t.Error("called") }))
		l.releaseCall()
		require.NoError(t, l.Delete(context.Background()))
		require.False(t, l.deleteAsync(func(*Lease, error) { t.Error("called") }))
		require.Equal(t, 1, b.srv.Calls()["DeleteMessageBatch"])
	})
}

// newTestLease makes a Consumer's kind of lease (a delivery's) for a test's own calls and queue. It writes
// them into cfg only when they differ, which is at the first call, before
// any lease sharing cfg runs; later calls only read it.
func newTestLease(calls sqsCalls, queueURL string, m types.Message, at time.Time, cfg *leaseConfig) *Lease {
	if cfg.calls != calls || cfg.events.queueURL != queueURL {
		cfg.calls, cfg.events.queueURL = calls, queueURL
	}
	return &newDelivery(m, at, at, cfg).lease
}

// A lease whose estimated deadline passed before SQS was ever asked asks
// SQS (renews at once) instead of declaring itself expired: estimates err
// early. SQS's answer decides: accepted, the lease lives and deletes; the
// handle refused, it is lost (not expired) and never deletes.
func TestLeasePastEstimatedDeadlineAsksSQS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		refuse  bool
		wantErr error // context.Cause after the first renewal
	}{
		{"accepted: alive", false, nil},
		{"handle refused: lost", true, ErrLeaseLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				msg, _ := b.receive(t, "m", 30*time.Second)
				rec := &recorder{}
				if tt.refuse {
					b.srv.FailNext("ChangeMessageVisibility", 1, sqstest.FaultReceiptHandleIsInvalid)
				}
				// The caller's clock says the message was handed over 8 s
				// ago under a 5 s lease: past its deadline, SQS never asked.
				l := b.lease(t, msg, time.Now().Add(-8*time.Second), WithVisibilityTimeout(5*time.Second), WithObserver(rec))
				ctx := l.Start(context.Background())
				synctest.Wait()
				require.Zero(t, rec.count(EventLeaseExpired), "not declared expired without asking SQS")
				if tt.wantErr != nil {
					require.ErrorIs(t, context.Cause(ctx), tt.wantErr)
					require.ErrorIs(t, l.Delete(context.Background()), tt.wantErr)
				} else {
					require.NoError(t, context.Cause(ctx))
					require.Equal(t, 1, rec.count(EventRenewed))
					require.Equal(t, time.Now().Add(5*time.Second), l.Deadline())
					require.NoError(t, l.Delete(context.Background()))
				}
				l.Stop()
				require.Equal(t, !tt.refuse, b.state(t, aws.ToString(msg.MessageId)).Deleted)
			})
		})
	}
}

// A renewal that fails transiently past the estimated deadline leaves the
// lease expired: SQS was asked and nothing was confirmed.
func TestLeasePastEstimatedDeadlineExpiresWhenAskingFails(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, _ := b.receive(t, "m", 30*time.Second)
		b.srv.FailNext("ChangeMessageVisibility", 1, sqstest.FaultInternalError)
		l := b.lease(t, msg, time.Now().Add(-8*time.Second), WithVisibilityTimeout(5*time.Second))
		ctx := l.Start(context.Background())
		synctest.Wait()
		require.ErrorIs(t, context.Cause(ctx), ErrLeaseExpired)
		l.Stop()
	})
}

// Issue 16: nil contexts are errors (or, for Start, Background), never
// panics.
func TestLeaseNilContexts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "m", 30*time.Second)
		l := b.lease(t, msg, sent)
		//lint:ignore SA1012 nil contexts are the point
		ctx := l.Start(nil)
		require.NoError(t, ctx.Err())
		//lint:ignore SA1012 nil contexts are the point
		require.ErrorContains(t, l.Delete(nil), "Lease.Delete(nil, ...)")
		//lint:ignore SA1012 nil contexts are the point
		require.ErrorContains(t, l.Release(nil, 0), "Lease.Release(nil, ...)")
		//lint:ignore SA1012 nil contexts are the point
		require.ErrorContains(t, l.Extend(nil, time.Minute), "Lease.Extend(nil, ...)")
		l.Stop()
		require.ErrorIs(t, context.Cause(ctx), ErrLeaseSettled)
	})
}

// Stop ends the lease: Delete, Release and Extend after it are refused
// without calling SQS, and the message comes back when its visibility runs
// out. ErrLeaseSettled's documentation promises exactly this.
func TestLeaseCallsAfterStopAreRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "hello", 30*time.Second)
		l := b.lease(t, msg, sent)
		ctx := l.Start(context.Background())
		time.Sleep(5 * time.Second)
		l.Stop()
		require.ErrorIs(t, context.Cause(ctx), ErrLeaseSettled)
		calls := b.srv.Calls()
		require.ErrorIs(t, l.Delete(context.Background()), ErrLeaseSettled)
		require.ErrorIs(t, l.Release(context.Background(), 0), ErrLeaseSettled)
		require.ErrorIs(t, l.Extend(context.Background(), time.Minute), ErrLeaseSettled)
		require.Equal(t, calls, b.srv.Calls(), "no SQS call after Stop")
		require.NoError(t, l.Err(), "stopping is not a failure of the lease")
		st := b.state(t, *msg.MessageId)
		require.False(t, st.Deleted)
		time.Sleep(30 * time.Second)
		again, _ := b.receiveNext(t, 30*time.Second)
		require.Equal(t, *msg.MessageId, *again.MessageId, "delivered again when its visibility ran out")
	})
}

func TestHandoverTime(t *testing.T) {
	t.Parallel()
	sent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		answered time.Duration // after sent
		want     time.Duration // after sent
	}{
		{"instant answer: the request's sending", 0, 0},
		{"answer within the slack: the request's sending", 800 * time.Millisecond, 0},
		{"answer exactly one slack later", time.Second, 0},
		{"message arrived 8 s into a long poll", 8 * time.Second, 7 * time.Second},
		{"whole 20 s poll", 20 * time.Second, 19 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := HandoverTime(sent, sent.Add(tt.answered))
			require.Equal(t, sent.Add(tt.want), got, "HandoverTime(sent, sent+%v)", tt.answered)
		})
	}
}
