package sqsconsumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

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
			if strings.Contains(line, `msg="sqsconsumer: handler panicked"`) {
				panicLine = line
			}
		}
		require.Contains(t, panicLine, "level=ERROR")
		require.Regexp(t, `at="github.com/sqskit/sqsconsumer.TestSettlement.func\S* \(\S*settle_test.go:\d+\)"`, panicLine, "the Error line names the user's frame")
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

// decide is the settle door's rule for every path after a handler: what
// happens to the message, and the visibility a failure gets.
func TestDecide(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name  string
		in    settleInput
		act   settleAction
		after time.Duration
	}{
		{"the handler deleted it itself", settleInput{ran: true, settled: true}, actSettled, 0},
		{"the handler released it itself and failed", settleInput{ran: true, err: boom, settled: true, backoff: time.Minute}, actSettled, 0},
		{"never ran: handed back at once", settleInput{}, actRelease, 0},
		{"never ran, lease ended meanwhile: left to SQS", settleInput{leaseErr: ErrLeaseLost}, actLeave, 0},
		{"success: deleted", settleInput{ran: true}, actDelete, 0},
		{"success with a lost lease: the delete is refused by the lease itself", settleInput{ran: true, leaseErr: ErrLeaseLost}, actDelete, 0},
		{"failure with a lost lease: left to SQS", settleInput{ran: true, err: boom, leaseErr: ErrLeaseLost, backoff: time.Minute}, actLeave, 0},
		{"failure with an expired lease: left to SQS", settleInput{ran: true, err: boom, leaseErr: ErrLeaseExpired}, actLeave, 0},
		{"failure: its backoff", settleInput{ran: true, err: boom, backoff: 7 * time.Second}, actRelease, 7 * time.Second},
		{"failure with a zero backoff: never visible at once", settleInput{ran: true, err: boom}, actRelease, time.Second},
		{"failure: rounded up to whole seconds", settleInput{ran: true, err: boom, backoff: 1200 * time.Millisecond}, actRelease, 2 * time.Second},
		{"failure: at most 12 hours", settleInput{ran: true, err: boom, backoff: 13 * time.Hour}, actRelease, MaxVisibilityTimeout},
		{"RetryAfter picks the delay over the backoff", settleInput{ran: true, err: RetryAfter(boom, 90*time.Second), backoff: 7 * time.Second}, actRelease, 90 * time.Second},
		{"RetryAfter 0: visible at once", settleInput{ran: true, err: RetryAfter(boom, 0), backoff: 7 * time.Second}, actRelease, 0},
		{"breaker not closed: at least its hold", settleInput{ran: true, err: boom, backoff: 7 * time.Second, hold: 10 * time.Minute}, actRelease, 10 * time.Minute},
		{"breaker hold over a shorter RetryAfter", settleInput{ran: true, err: RetryAfter(boom, 5*time.Second), hold: 10 * time.Minute}, actRelease, 10 * time.Minute},
		{"a longer backoff over the breaker's hold", settleInput{ran: true, err: boom, backoff: time.Hour, hold: 10 * time.Minute}, actRelease, time.Hour},
		{"shutdown: handed back at once, breaker or not", settleInput{ran: true, err: boom, shutdown: true, backoff: time.Minute, hold: 10 * time.Minute}, actRelease, 0},
		{"an earlier message of its group failed: at once, no backoff, no hold", settleInput{ran: true, err: errEarlierFailed, backoff: time.Minute, hold: 10 * time.Minute}, actRelease, 0},
		{"earlier failed as batch members get it", settleInput{ran: true, err: earlierFailed, backoff: time.Minute, hold: 10 * time.Minute}, actRelease, 0},
		{"Throttled picks its delay over the backoff", settleInput{ran: true, err: Throttled(boom, 1500*time.Millisecond), backoff: 7 * time.Second}, actRelease, 2 * time.Second},
		{"Throttled without a delay: the backoff", settleInput{ran: true, err: Throttled(boom, 0), backoff: 7 * time.Second}, actRelease, 7 * time.Second},
		{"Throttled at shutdown: at once", settleInput{ran: true, err: Throttled(boom, time.Minute), shutdown: true}, actRelease, 0},
		{"Neutral: the backoff", settleInput{ran: true, err: Neutral(boom), backoff: 7 * time.Second}, actRelease, 7 * time.Second},
		{"Permanent: to the dead-letter queue, with the failure's visibility if the move fails", settleInput{ran: true, err: Permanent(boom), backoff: 7 * time.Second}, actDeadLetter, 7 * time.Second},
		{"Permanent with RetryAfter", settleInput{ran: true, err: RetryAfter(Permanent(boom), 30*time.Second)}, actDeadLetter, 30 * time.Second},
		{"Permanent with a lost lease: left to SQS", settleInput{ran: true, err: Permanent(boom), leaseErr: ErrLeaseLost}, actLeave, 0},
		{"never ran, at the ceiling: the handle holds, handed back at once", settleInput{leaseErr: ErrLeaseCeiling}, actRelease, 0},
		{"success at the ceiling: deleted", settleInput{ran: true, leaseErr: ErrLeaseCeiling}, actDelete, 0},
		{"failure at the ceiling: released for its backoff (the lease clips it to the ceiling)", settleInput{ran: true, err: boom, leaseErr: ErrLeaseCeiling, backoff: 7 * time.Second}, actRelease, 7 * time.Second},
		{"Permanent at the ceiling: to the dead-letter queue", settleInput{ran: true, err: Permanent(boom), leaseErr: ErrLeaseCeiling}, actDeadLetter, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			act, after := decide(tt.in)
			require.Equal(t, tt.act, act, "action")
			require.Equal(t, tt.after, after, "visibility")
		})
	}
}
