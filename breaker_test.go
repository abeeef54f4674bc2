package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// receiveLog wraps a Client and records when each receive was sent and
// how many messages it asked for.
type receiveLog struct {
	Client
	mu   sync.Mutex
	at   []time.Time
	maxN []int32
}

func (r *receiveLog) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	r.mu.Lock()
	r.at = append(r.at, time.Now())
	r.maxN = append(r.maxN, in.MaxNumberOfMessages)
	r.mu.Unlock()
	return r.Client.ReceiveMessage(ctx, in, optFns...)
}

// between returns the MaxNumberOfMessages of the receives sent in [from, to).
func (r *receiveLog) between(from, to time.Time) []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ns []int32
	for i, at := range r.at {
		if !at.Before(from) && at.Before(to) {
			ns = append(ns, r.maxN[i])
		}
	}
	return ns
}

// The scenario: the downstream is out for 10 minutes while a
// backlog waits in a queue whose redrive policy moves a message to the
// dead-letter queue after 5 receives.
func TestBreakerKeepsReceiveCountsThroughAnOutage(t *testing.T) {
	t.Parallel()
	const outage = 10 * time.Minute
	for _, tt := range []struct {
		name  string
		opts  func(outageEnd time.Time) []Option
		check func(t *testing.T, b dlqBundle, rl *receiveLog, start, tripped, closed time.Time)
	}{
		{
			name: "without a breaker messages reach the dead-letter queue",
			opts: func(time.Time) []Option { return nil },
			check: func(t *testing.T, b dlqBundle, _ *receiveLog, _, _, _ time.Time) {
				require.NotEmpty(t, b.srv.Messages(b.dlq), "every failure spent a receive count")
				t.Logf("without a breaker: %d of 100 messages in the dead-letter queue", len(b.srv.Messages(b.dlq)))
			},
		},
		{
			name: "probing with one message at a time",
			opts: func(time.Time) []Option { return []Option{WithBreaker(Breaker{})} },
			check: func(t *testing.T, b dlqBundle, rl *receiveLog, start, tripped, closed time.Time) {
				require.Empty(t, b.srv.Messages(b.dlq))
				// Pauses of 30 s, 1, 2, 4 and 5 minutes: the probe after
				// 12.5 minutes is the first after the outage.
				require.WithinDuration(t, start.Add(12*time.Minute+40*time.Second), closed, 20*time.Second)
				probes := rl.between(tripped.Add(time.Second), closed.Add(500*time.Millisecond))
				require.Len(t, probes, 5, "while open nothing is received; half-open, one probe per pause")
				for _, n := range probes {
					require.EqualValues(t, 1, n, "a probe asks for one message")
				}
				most := 0
				for _, st := range b.srv.Messages(b.url) {
					require.True(t, st.Deleted, st.Body)
					require.LessOrEqual(t, st.ReceiveCount, 3, "%s: at most one failure, one probe and the success", st.Body)
					most = max(most, st.ReceiveCount)
				}
				t.Logf("message probes: 0 in the dead-letter queue, %d probe receives while not closed, at most %d receives per message, closed %v after the outage", len(probes), most, closed.Sub(start.Add(outage)))
			},
		},
		{
			name: "probing with Probe, without a message",
			opts: func(end time.Time) []Option {
				return []Option{WithBreaker(Breaker{MaxPause: time.Minute, Probe: func(ctx context.Context) error {
					if time.Now().Before(end) {
						return errors.New("still down")
					}
					return nil
				}})}
			},
			check: func(t *testing.T, b dlqBundle, rl *receiveLog, start, tripped, closed time.Time) {
				require.Empty(t, b.srv.Messages(b.dlq))
				require.WithinDuration(t, start.Add(outage+time.Minute), closed, time.Minute)
				require.Empty(t, rl.between(tripped.Add(time.Second), closed), "no receive at all until the probe succeeded")
				twice := 0
				for _, st := range b.srv.Messages(b.url) {
					require.True(t, st.Deleted, st.Body)
					require.LessOrEqual(t, st.ReceiveCount, 2, "%s: the outage cost at most the receive before the breaker opened", st.Body)
					if st.ReceiveCount == 2 {
						twice++
					}
				}
				require.LessOrEqual(t, twice, 20, "only what was held when it opened: the slots and one batch of read-ahead")
				t.Logf("Probe: 0 in the dead-letter queue, 0 receives while open, %d of 100 messages received twice, closed %v after the outage", twice, closed.Sub(start.Add(outage)))
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setupDLQ(t, false, 5, map[string]string{"VisibilityTimeout": "30"})
				b.send(t, 100)
				start := time.Now()
				end := start.Add(outage)
				var mu sync.Mutex
				var tripped, closed time.Time
				rl := &receiveLog{Client: b.client}
				h := HandlerFunc(func(ctx context.Context, m *Message) error {
					time.Sleep(time.Second)
					mu.Lock()
					defer mu.Unlock()
					if time.Now().Before(end) {
						if tripped.IsZero() {
							tripped = time.Now() // about when the 5th failure opens it
						}
						return errors.New("downstream unavailable")
					}
					if closed.IsZero() {
						closed = time.Now().Add(-time.Second)
					}
					return nil
				})
				c, err := New(rl, b.url, h, append(tt.opts(end), WithConcurrency(4))...)
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(30 * time.Minute)
				require.NoError(t, stop())
				mu.Lock()
				defer mu.Unlock()
				tt.check(t, b, rl, start, tripped, closed)
			})
		})
	}
}

func TestBreakerReleasesUnstartedAndKeepsRunningLeases(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, true, 5, nil)
		ids := map[string]string{}
		for _, body := range []string{"a0", "a1", "a2", "b0", "c0"} {
			id, err := b.srv.Send(b.url, body, sqstest.WithGroupID(body[:1]))
			require.NoError(t, err)
			ids[body] = id
		}
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.Body == "a0" {
				time.Sleep(3 * time.Minute) // outlives the 30 s lease: renewed throughout
				return nil
			}
			time.Sleep(time.Second)
			return errors.New("down")
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(5),
			WithBreaker(Breaker{Failures: 2, Pause: 10 * time.Minute}))
		require.NoError(t, err)
		stop := running(t, c)
		// The first receive brings a0, a1 and a2 (one group, in order):
		// a1 and a2 wait behind a0. b0 and c0 fail and open the breaker.
		time.Sleep(time.Minute)
		for _, body := range []string{"a1", "a2"} {
			st := b.state(t, ids[body])
			require.Equal(t, 1, st.ReceiveCount, body)
			require.False(t, st.InFlight, "%s: held unstarted, handed back when the breaker opened", body)
			require.Zero(t, st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout, body)
		}
		require.True(t, b.state(t, ids["b0"]).InFlight || b.state(t, ids["c0"]).InFlight, "the failure that opened the breaker is held back")
		time.Sleep(3 * time.Minute)
		require.NoError(t, stop())
		st := b.state(t, ids["a0"])
		require.True(t, st.Deleted, "the running handler kept its lease and finished")
		require.Equal(t, 1, st.ReceiveCount)
		require.GreaterOrEqual(t, len(st.VisibilityChanges), 8, "renewed every 10 s for 3 minutes")
		require.Equal(t, 1, b.state(t, ids["a1"]).ReceiveCount, "nothing received while open")
	})
}

func TestRenewalGateStopsReceiving(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, false, 5, nil)
		first := b.send(t, 2)
		rl := &receiveLog{Client: b.client}
		c, err := New(rl, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.Body < "m002" {
				time.Sleep(2 * time.Minute)
			}
			return nil
		}), WithVisibilityTimeout(60*time.Second), WithConcurrency(4),
			WithBreaker(Breaker{Pause: 30 * time.Second}))
		require.NoError(t, err)
		start := time.Now()
		// The renewals due at 20 s fail (throttled) in three calls in a row.
		b.srv.FailNext("ChangeMessageVisibilityBatch", 3, sqstest.FaultThrottled)
		stop := running(t, c)
		// A long poll sent just before the gate closed (at 20 s) is
		// never cancelled: what it brings back is handed back at once.
		time.Sleep(30 * time.Second)
		caught, err := b.srv.Send(b.url, "m001x")
		require.NoError(t, err)
		time.Sleep(20 * time.Second)
		late := make([]string, 5)
		for i := range late {
			id, err := b.srv.Send(b.url, fmt.Sprintf("m%03d", 2+i))
			require.NoError(t, err)
			late[i] = id
		}
		time.Sleep(10 * time.Minute)
		require.NoError(t, stop())
		// Two slots were free all along; the gate kept them empty from
		// the third failed call (about 20 s) until the running handlers
		// succeeded (2 min) and closed it.
		require.Empty(t, rl.between(start.Add(45*time.Second), start.Add(2*time.Minute)), "no receive while renewals fail")
		st := b.state(t, caught)
		require.Len(t, st.Receives, 2)
		require.Less(t, st.Receives[0].At.Sub(start), 45*time.Second, "the long poll in flight brought it")
		require.Zero(t, st.VisibilityChanges[0].Timeout, "handed back at once, not handled while the breaker was open")
		require.False(t, st.Receives[1].At.Before(start.Add(2*time.Minute)))
		for _, id := range late {
			st := b.state(t, id)
			require.True(t, st.Deleted)
			require.False(t, st.Receives[0].At.Before(start.Add(2*time.Minute)), "received only after the breaker closed")
		}
		for _, id := range first {
			st := b.state(t, id)
			require.True(t, st.Deleted, "the running handlers kept their leases")
			require.Equal(t, 1, st.ReceiveCount)
		}
	})
}

// breakerAt drives a breaker by hand.
type breakerAt struct {
	*breaker
	opens, closes, wakes, probes int
}

func newTestBreaker(cfg Breaker) *breakerAt {
	var s settings
	WithBreaker(cfg).apply(&s)
	b := &breakerAt{breaker: newBreaker(*s.breaker)}
	b.onOpen = func(string) { b.opens++ }
	b.onClose = func() { b.closes++ }
	b.wake = func() { b.wakes++ }
	b.runProbe = func() { b.probes++ }
	return b
}

func TestBreakerStateMachine(t *testing.T) {
	t.Parallel()
	const F, S = outcomeFailure, outcomeSuccess
	for _, tt := range []struct {
		name     string
		cfg      Breaker
		outcomes []outcomeKind
		calls    []error
		want     breakerState
	}{
		{"4 failures stay closed", Breaker{}, []outcomeKind{F, F, F, F}, nil, breakerClosed},
		{"5 in a row open", Breaker{}, []outcomeKind{F, F, F, F, F}, nil, breakerOpen},
		{"a success resets the run", Breaker{}, []outcomeKind{F, F, F, F, S, F, F, F, F}, nil, breakerClosed},
		{"neutral outcomes do not count", Breaker{}, []outcomeKind{F, F, outcomeNeutral, F, F, outcomeNeutral}, nil, breakerClosed},
		{"ratio over a full window", Breaker{Failures: 100, Ratio: 0.5, Window: 4}, []outcomeKind{F, S, F, S}, nil, breakerOpen},
		{"ratio waits for a full window", Breaker{Failures: 100, Ratio: 0.5, Window: 4}, []outcomeKind{F, S, F}, nil, breakerClosed},
		{"ratio below", Breaker{Failures: 100, Ratio: 0.75, Window: 4}, []outcomeKind{F, S, F, S, F, S}, nil, breakerClosed},
		{"3 failed calls open", Breaker{}, nil, []error{errors.New("throttled"), errors.New("throttled"), errors.New("throttled")}, breakerOpen},
		{"a good call resets", Breaker{}, nil, []error{errors.New("x"), errors.New("x"), nil, errors.New("x")}, breakerClosed},
		{"cancelled calls do not count", Breaker{}, nil, []error{context.Canceled, context.Canceled, context.Canceled}, breakerClosed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTestBreaker(tt.cfg)
				defer b.stop()
				for _, o := range tt.outcomes {
					b.record(o)
				}
				for _, err := range tt.calls {
					b.recordCall(err)
				}
				st, _, _ := b.status()
				require.Equal(t, tt.want, st)
				if tt.want == breakerOpen {
					require.Equal(t, 1, b.opens)
					require.Zero(t, b.limit(0), "open: no receive")
				} else {
					require.Equal(t, -1, b.limit(0))
				}
			})
		})
	}
}

func TestBreakerHalfOpen(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newTestBreaker(Breaker{Failures: 1, Pause: 10 * time.Second, MaxPause: 35 * time.Second})
		defer b.stop()
		b.record(outcomeFailure)
		require.Equal(t, 2*35*time.Second, b.holdFor(), "a failure while open is held back for twice MaxPause")
		time.Sleep(10*time.Second - time.Millisecond)
		require.Zero(t, b.limit(0))
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, 1, b.wakes, "the end of the pause wakes the flow")
		require.Equal(t, 1, b.limit(0), "half-open: one message")
		require.Zero(t, b.limit(1), "one at a time")
		require.False(t, b.refusing(), "a probe's message is taken")

		b.record(outcomeFailure) // the probe failed: 20 s
		require.Equal(t, 2, b.opens)
		time.Sleep(20*time.Second - time.Millisecond)
		require.Zero(t, b.limit(0))
		time.Sleep(time.Millisecond)
		synctest.Wait()
		b.record(outcomeFailure) // 35 s (capped)
		time.Sleep(35*time.Second - time.Millisecond)
		require.Zero(t, b.limit(0))
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, 1, b.limit(0))

		b.record(outcomeSuccess)
		require.Equal(t, 1, b.closes)
		require.Equal(t, -1, b.limit(5))
		require.Zero(t, b.holdFor())

		b.record(outcomeFailure) // reopened soon after closing: doubled from 35 s, capped at 35 s
		require.Equal(t, 35*time.Second, b.pause)
	})
}

func TestBreakerHalfOpenWaitsForCalls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newTestBreaker(Breaker{Pause: time.Second})
		defer b.stop()
		for range 3 {
			b.recordCall(errors.New("throttled"))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		b.record(outcomeSuccess)
		st, _, _ := b.status()
		require.Equal(t, breakerHalfOpen, st, "a handler succeeded but calls still fail")
		b.recordCall(nil)
		st, _, _ = b.status()
		require.Equal(t, breakerClosed, st)
	})
}

func TestBreakerProbeFunc(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newTestBreaker(Breaker{Failures: 1, Pause: time.Second, Probe: func(context.Context) error { return nil }})
		defer b.stop()
		b.record(outcomeFailure)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 1, b.probes)
		require.Zero(t, b.limit(0), "half-open with Probe: no message")
		b.probed(errors.New("no"))
		require.Equal(t, 2, b.opens)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Equal(t, 2, b.probes)
		b.probed(nil)
		require.Equal(t, 1, b.closes)
	})
}

func TestWithBreakerValidates(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	for _, tt := range []struct {
		b    Breaker
		want string
	}{
		{Breaker{Failures: -1}, "Failures -1 must be from 1 to 100000"},
		{Breaker{Ratio: 1.5}, "Ratio 1.5 must be from 0 to 1"},
		{Breaker{Ratio: math.NaN()}, "Ratio NaN"},
		{Breaker{Window: 1}, "Window 1 must be from 2"},
		{Breaker{CallFailures: -2}, "CallFailures -2"},
		{Breaker{Pause: time.Millisecond}, "Pause 1ms must be from 1s"},
		{Breaker{Pause: time.Minute, MaxPause: 30 * time.Second}, "MaxPause 30s must be from Pause (1m0s)"},
	} {
		t.Run(fmt.Sprint(tt.want), func(t *testing.T) {
			_, err := New(&sqs.Client{}, "https://sqs.us-east-1.amazonaws.com/1/q", h, WithBreaker(tt.b))
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, "WithBreaker: "+tt.want)
		})
	}
}

func TestBreakerShutdownWhileOpen(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		probe func(ctx context.Context) error
	}{
		{"probe waits for its context", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{"probe panics", func(context.Context) error { panic("probe bug") }},
		{"probe fails", func(context.Context) error { return errors.New("still down") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				ids := b.send(t, 3)
				var mu sync.Mutex
				probes := 0
				c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
					return errors.New("down")
				}), WithVisibilityTimeout(30*time.Second), WithBreaker(Breaker{Failures: 1, Pause: 10 * time.Second, MaxPause: 10 * time.Second,
					Probe: func(ctx context.Context) error {
						mu.Lock()
						probes++
						mu.Unlock()
						return tt.probe(ctx)
					}}))
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(time.Minute + 5*time.Second)
				calls := b.srv.CallCount("ReceiveMessage")
				begun := time.Now()
				require.NoError(t, stop())
				require.Less(t, time.Since(begun), 2*time.Second, "Run returns at once: nothing runs, the probe's context is cancelled")
				require.Equal(t, calls, b.srv.CallCount("ReceiveMessage"))
				mu.Lock()
				defer mu.Unlock()
				require.GreaterOrEqual(t, probes, 1)
				for _, id := range ids {
					require.False(t, b.state(t, id).Deleted)
				}
				h := c.Health()
				require.True(t, h.Healthy)
				require.Equal(t, "stopped", h.Status)
			})
		})
	}
}

// Issue 35, case 3: five duplicates of a message whose first delivery is
// still running arrive together; NewIdempotent answers each with
// RetryAfter(ErrInProgress, ...). They say nothing of the downstream: the
// breaker stays closed and receiving goes on (before, they opened it and
// paused receiving for 30 s).
func TestBreakerIgnoresInProgressDuplicates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		for range 6 {
			_, err := b.srv.Send(b.url, "order-42") // a producer that retried: one key, six messages
			require.NoError(t, err)
		}
		idem, err := NewIdempotent(NewMemoryStore(), WithIdempotencyKey(func(m *Message) (string, error) { return m.Body, nil }))
		require.NoError(t, err)
		var mu sync.Mutex
		handledAt := map[string]time.Time{}
		start := time.Now()
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.Body == "order-42" {
				time.Sleep(time.Minute) // the first delivery runs on; the others are in progress elsewhere
			}
			mu.Lock()
			handledAt[m.Body] = time.Now()
			mu.Unlock()
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(10), WithMiddleware(idem), WithBreaker(Breaker{}))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Second)
		_, err = b.srv.Send(b.url, "other")
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		st, reason, opens := c.runOf().br.status()
		failed := c.Stats().Failed
		require.NoError(t, stop())
		require.Equal(t, breakerClosed, st, "opened: %s", reason)
		require.Zero(t, opens)
		mu.Lock()
		defer mu.Unlock()
		at, ok := handledAt["other"]
		require.True(t, ok, "a message sent at 5 s is handled at once, receiving was not paused")
		require.Less(t, at.Sub(start), 6*time.Second)
		require.GreaterOrEqual(t, failed, int64(5), "the five duplicates did fail (and come back later)")
	})
}

// A Batch handler marks entries of its BatchFailures Neutral (or
// Throttled): the breaker does not count them, however many fail at once;
// an entry with a plain error still counts.
func TestBreakerIgnoresNeutralBatchEntries(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		wrap  func(error) error
		opens bool
	}{
		{"Neutral", Neutral, false},
		{"Throttled", func(err error) error { return Throttled(err, time.Second) }, false},
		{"plain errors count", func(err error) error { return err }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				b.send(t, 10)
				var mu sync.Mutex
				calls := 0
				h, err := Batch(func(ctx context.Context, msgs []*Message) error {
					mu.Lock()
					calls++
					first := calls == 1
					mu.Unlock()
					if !first {
						return nil
					}
					bf := BatchFailures{}
					for _, m := range msgs {
						bf[m.ID] = tt.wrap(errors.New("not this time"))
					}
					return bf
				}, 10, time.Second)
				require.NoError(t, err)
				c, err := New(b.client, b.url, h, WithVisibilityTimeout(30*time.Second), WithBreaker(Breaker{}))
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(5 * time.Second)
				_, _, opens := c.runOf().br.status()
				require.NoError(t, stop())
				require.Equal(t, tt.opens, opens > 0)
			})
		})
	}
}

// A handler cancelled at its lease's ceiling (ErrLeaseCeiling) says
// nothing of the downstream, whatever it returns (here ctx.Err(), a bare
// context.Canceled): the breaker does not count it, alone or in a batch.
// Its message is not deleted but released (its handle still holds),
// within the ceiling. Before, the lease still lived when the handler
// returned, so the ceiling read as an ordinary failure: one in a row
// opened this breaker.
func TestBreakerIgnoresTheLeaseCeiling(t *testing.T) {
	t.Parallel()
	waitCtx := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	batch, err := Batch(func(ctx context.Context, _ []*Message) error { return waitCtx(ctx) }, 10, time.Second)
	require.NoError(t, err)
	for _, tt := range []struct {
		name string
		h    Handler
	}{
		{"single", HandlerFunc(func(ctx context.Context, _ *Message) error { return waitCtx(ctx) })},
		{"batch", batch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				ids := b.send(t, 3)
				var rec recorder
				c, err := New(b.client, b.url, tt.h, WithVisibilityTimeout(30*time.Second),
					WithMaxLeaseDuration(time.Minute), WithObserver(&rec), WithBreaker(Breaker{Failures: 1}))
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(52 * time.Second) // the ceiling fires at 50 s (one heartbeat interval before it)
				st, reason, opens := c.runOf().br.status()
				require.NoError(t, stop())
				require.Equal(t, 3, rec.count(EventCeilingReached))
				require.Equal(t, 3, rec.count(EventFailed))
				require.Equal(t, breakerClosed, st, "opened: %s", reason)
				require.Zero(t, opens)
				for _, id := range ids {
					m := b.state(t, id)
					require.False(t, m.Deleted)
					// The first delivery's last visibility change: its
					// release (a receive in flight at the shutdown may take
					// the message again once it is visible, and hand it back).
					first := m.Receives[0]
					var last sqstest.VisibilityChange
					for _, vc := range m.VisibilityChanges {
						if vc.ReceiptHandle == first.ReceiptHandle {
							last = vc
						}
					}
					require.Empty(t, last.Err)
					require.Equal(t, first.At.Add(50*time.Second+coalesceWindow), last.At, "released when its handler returned")
					require.Positive(t, last.Timeout, "a failure's backoff, not at once")
					require.False(t, last.At.Add(last.Timeout).After(first.At.Add(time.Minute)), "released within the ceiling")
				}
			})
		})
	}
}
