package sqsconsumer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestPlan(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	base := schedule{
		lease: 30 * time.Second, interval: 10 * time.Second, grace: 10 * time.Second,
		ceiling: at(12 * time.Hour), deadline: at(30 * time.Second), nextRenew: at(10 * time.Second),
	}
	with := func(f func(*schedule)) schedule { s := base; f(&s); return s }
	tests := []struct {
		name string
		now  time.Time
		s    schedule
		want step
	}{
		{"before the first renewal: sleep until a third of the lease", at(0), base,
			step{wake: at(10 * time.Second), deadline: at(30 * time.Second)}},
		{"renewal due: ask for the full lease", at(10 * time.Second), base,
			step{renewNow: true, renewFor: 30 * time.Second, deadline: at(30 * time.Second)}},
		{"late renewal still asks for the full lease", at(25 * time.Second), base,
			step{renewNow: true, renewFor: 30 * time.Second, deadline: at(30 * time.Second)}},
		{"deadline passed after SQS was asked: expired", at(30 * time.Second),
			with(func(s *schedule) { s.asked = true }),
			step{expired: true, deadline: at(30 * time.Second)}},
		{"deadline passed before SQS was ever asked: renew at once, not expired", at(30 * time.Second), base,
			step{renewNow: true, late: true, renewFor: 30 * time.Second, deadline: at(30 * time.Second)}},
		{"long past an estimated deadline: still ask SQS", at(40 * time.Second), base,
			step{renewNow: true, late: true, renewFor: 30 * time.Second, deadline: at(30 * time.Second)}},
		{"past an estimated deadline with the ceiling too near to renew: expired", at(12*time.Hour - 2*time.Second),
			with(func(s *schedule) { s.deadline = at(12*time.Hour - 3*time.Second); s.ceilingFired = true }),
			step{expired: true, deadline: at(12*time.Hour - 3*time.Second)}},
		{"past an estimated deadline after SQS refused to go further: expired", at(31 * time.Second),
			with(func(s *schedule) { s.noRenew = true }),
			step{expired: true, deadline: at(31*time.Second - time.Second)}},
		{"near the ceiling: clip to ceiling minus margin", at(12*time.Hour - 20*time.Second),
			with(func(s *schedule) {
				s.deadline = at(12*time.Hour - 10*time.Second)
				s.nextRenew = at(12*time.Hour - 20*time.Second)
				s.ceilingFired = true
			}),
			step{renewNow: true, renewFor: 18 * time.Second, deadline: at(12*time.Hour - 10*time.Second)}},
		{"grace reached: fire the ceiling cancellation", at(12*time.Hour - 10*time.Second),
			with(func(s *schedule) {
				s.deadline = at(12*time.Hour - 2*time.Second)
				s.nextRenew = at(12*time.Hour - 22*time.Second)
			}),
			step{fireCeiling: true, wake: at(12*time.Hour - 2*time.Second), deadline: at(12*time.Hour - 2*time.Second)}},
		{"wake for the grace before the renewal when it comes first", at(12*time.Hour - 15*time.Second),
			with(func(s *schedule) {
				s.deadline = at(12*time.Hour + 5*time.Second)
				s.nextRenew = at(12*time.Hour - 5*time.Second)
				s.ceiling = at(12 * time.Hour)
			}),
			step{wake: at(12*time.Hour - 10*time.Second), deadline: at(12*time.Hour + 5*time.Second)}},
		{"at the ceiling a renewal that would not extend is not sent", at(12*time.Hour - 10*time.Second),
			with(func(s *schedule) {
				s.deadline = at(12*time.Hour - 2*time.Second)
				s.nextRenew = at(12*time.Hour - 22*time.Second)
				s.ceilingFired = true
			}),
			step{wake: at(12*time.Hour - 2*time.Second), deadline: at(12*time.Hour - 2*time.Second)}},
		{"SQS refused (noRenew): wait for the deadline", at(15 * time.Second),
			with(func(s *schedule) { s.noRenew = true }),
			step{wake: at(30 * time.Second), deadline: at(30 * time.Second)}},
		{"whole seconds only", at(12*time.Hour - 20*time.Second - 300*time.Millisecond),
			with(func(s *schedule) {
				s.deadline = at(12*time.Hour - 10*time.Second)
				s.nextRenew = at(0)
				s.ceilingFired = true
			}),
			step{renewNow: true, renewFor: 18 * time.Second, deadline: at(12*time.Hour - 10*time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan(tt.now, tt.s)
			require.Equal(t, tt.want, got)
		})
	}
}

// Semantics 1 and 2: the clock starts when the receive was sent; renewals
// come every third of the lease, each asking for the whole lease.
func TestLeaseRenewsAtAThird(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "hello", 30*time.Second)
		time.Sleep(4 * time.Second) // the message waited in the process before the lease was made
		l := b.lease(t, msg, sent)
		require.Equal(t, sent.Add(30*time.Second), l.Deadline())
		ctx := l.Start(context.Background())
		defer l.Stop()

		time.Sleep(65 * time.Second)
		require.NoError(t, ctx.Err())
		changes := b.state(t, *msg.MessageId).VisibilityChanges
		require.Len(t, changes, 6, "renewals at 10, 20, ... 60 s after the receive")
		for i, c := range changes {
			require.Equal(t, sent.Add(time.Duration(i+1)*10*time.Second), c.At, "renewal %d", i)
			require.Equal(t, 30*time.Second, c.Timeout)
			require.Empty(t, c.Err)
		}
		require.Equal(t, sent.Add(90*time.Second), l.Deadline())
		st := b.state(t, *msg.MessageId)
		require.True(t, st.InFlight)
		require.Equal(t, 1, st.ReceiveCount, "never redelivered while renewed")
	})
}

func TestLeaseHeartbeatIntervalOption(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 60*time.Second)
		l := b.lease(t, msg, sent, WithVisibilityTimeout(60*time.Second), WithHeartbeatInterval(5*time.Second))
		l.Start(context.Background())
		time.Sleep(21 * time.Second)
		l.Stop()
		require.Len(t, b.state(t, *msg.MessageId).VisibilityChanges, 4)
	})
}

// Semantics 3: transient failures are retried before the deadline; the
// deadline only moves when SQS confirmed.
func TestLeaseRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	for _, f := range []sqstest.Fault{sqstest.FaultThrottled, sqstest.FaultInternalError, sqstest.FaultServiceUnavailable} {
		t.Run(f.Type, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				rec := &recorder{}
				msg, sent := b.receive(t, "x", 30*time.Second)
				l := b.lease(t, msg, sent, WithObserver(rec))
				b.srv.FailNext("ChangeMessageVisibility", 4, f)
				ctx := l.Start(context.Background())
				defer l.Stop()
				time.Sleep(10*time.Second + time.Millisecond)
				synctest.Wait()
				require.Equal(t, sent.Add(30*time.Second), l.Deadline(), "a failed renewal does not move the deadline")
				time.Sleep(15 * time.Second)
				require.NoError(t, ctx.Err())
				require.Equal(t, 4, rec.count(EventRenewalFailed))
				require.GreaterOrEqual(t, rec.count(EventRenewed), 1)
				require.True(t, l.Deadline().After(sent.Add(30*time.Second)))
				require.Equal(t, 1, b.state(t, *msg.MessageId).ReceiveCount)
			})
		})
	}
}

func TestLeaseExpiresWhenNoRenewalLands(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		rec := &recorder{}
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent, WithObserver(rec))
		b.srv.FailNext("ChangeMessageVisibility", 1000, sqstest.FaultServiceUnavailable)
		ctx := l.Start(context.Background())
		defer l.Stop()
		<-ctx.Done()
		require.Equal(t, sent.Add(30*time.Second), time.Now(), "cancelled exactly at the deadline")
		require.ErrorIs(t, context.Cause(ctx), ErrLeaseExpired)
		require.ErrorIs(t, l.Err(), ErrLeaseExpired)
		calls := b.srv.CallCount("ChangeMessageVisibility")
		require.Greater(t, calls, 5, "retried repeatedly before the deadline")
		require.ErrorIs(t, l.Delete(context.Background()), ErrLeaseExpired)
		require.Equal(t, 0, b.srv.CallCount("DeleteMessage"), "no delete after expiry")
		require.Equal(t, 1, rec.count(EventLeaseExpired))
	})
}

// A renewal that hangs is cut off by its own timeout, leaving time to retry.
func TestLeaseRenewalCallTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent)
		b.srv.DelayNext("ChangeMessageVisibility", 1, time.Hour)
		ctx := l.Start(context.Background())
		defer l.Stop()
		time.Sleep(25 * time.Second)
		require.NoError(t, ctx.Err(), "the hung call timed out and a retry landed")
		require.True(t, l.Deadline().After(sent.Add(30*time.Second)))
	})
}

// A lease whose first renewal moves earlier before its heartbeat started
// (an Extend to less than the time left) re-arms its start timer, so the
// renewal comes before the new deadline, not at the old schedule's +10 s.
func TestHeartbeatStartMovesEarlier(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent)
		l.Start(context.Background())
		defer l.Stop()
		time.Sleep(time.Second)
		require.NoError(t, l.Extend(context.Background(), 5*time.Second)) // deadline now +6 s
		time.Sleep(5 * time.Second)                                       // +6 s
		synctest.Wait()
		require.NoError(t, l.Err(), "still active")
		require.True(t, l.Deadline().After(time.Now().Add(20*time.Second)), "renewed to the lease length before the 6 s deadline")
		st := b.state(t, *msg.MessageId)
		require.Len(t, st.VisibilityChanges, 2, "the Extend and one renewal")
	})
}
