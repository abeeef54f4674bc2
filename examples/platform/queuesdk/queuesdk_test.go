package queuesdk_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/ecsprotect"
	"github.com/sqskit/sqsconsumer/examples/platform/queuesdk"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// bed is one process's SDK on an in-memory SQS, with an in-memory ECS
// agent: no socket anywhere, so it runs in a synctest bubble.
type bed struct {
	srv   *sqstest.Server
	sdk   *queuesdk.SDK
	log   *syncBuffer
	agent *agent
}

func newBed(t *testing.T) *bed {
	t.Helper()
	b := &bed{srv: sqstest.New(t), log: &syncBuffer{}, agent: &agent{}}
	sdk, err := queuesdk.New(queuesdk.Config{
		Client: b.srv.Client(), Service: "billing", Log: b.log,
		ECS: []ecsprotect.Option{
			ecsprotect.WithAgentURI("http://169.254.170.2/api/task-1"),
			ecsprotect.WithHTTPClient(&http.Client{Transport: b.agent}),
		},
	})
	require.NoError(t, err)
	b.sdk = sdk
	t.Cleanup(func() { _ = sdk.Close() }) // after the Consume calls' (a failed test's)
	return b
}

// queue makes name and its dead-letter queue (3 receives), 30 s visibility.
func (b *bed) queue(t *testing.T, name string) (url, dlq string) {
	t.Helper()
	url, dlq, err := b.srv.CreateQueueWithDLQ(name, 3, map[string]string{"VisibilityTimeout": "30"})
	require.NoError(t, err)
	return url, dlq
}

func (b *bed) send(t *testing.T, url string, bodies ...string) []string {
	t.Helper()
	ids := make([]string, len(bodies))
	for i, body := range bodies {
		id, err := b.srv.Send(url, body)
		require.NoError(t, err)
		ids[i] = id
	}
	return ids
}

// consume runs Consume in its own goroutine, as a team's code would; stop
// cancels it, as SIGTERM would, and returns what Consume returned. A test
// that fails before it calls stop has it called at its end, so that the
// bubble's goroutines end.
func (b *bed) consume(t *testing.T, url string, h sqsconsumer.HandlerFunc, opts ...sqsconsumer.Option) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.sdk.Consume(ctx, url, h, opts...) }()
	stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { _ = stop() })
	return stop
}

// get asks the SDK's handler for path, as a probe would, without a socket.
func (b *bed) get(t *testing.T, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	b.sdk.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var m map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m), "%s: %q", path, rec.Body.String())
	return rec.Code, m
}

// queues returns the per-queue entries of a /healthz or /scaling body.
func queues(body map[string]any) []map[string]any {
	var out []map[string]any
	list, _ := body["queues"].([]any)
	for _, q := range list {
		out = append(out, q.(map[string]any))
	}
	return out
}

// breakers returns each queue's breaker state in a /healthz body.
func breakers(body map[string]any) []string {
	var out []string
	for _, q := range queues(body) {
		out = append(out, fmt.Sprint(q["health"].(map[string]any)["breaker"]))
	}
	return out
}

var ok sqsconsumer.HandlerFunc = func(context.Context, *sqsconsumer.Message) error { return nil }

// The company's defaults apply to every queue, a team overrides one of
// them for its queue only, the SDK's own options are there whatever the
// team passes, and the startup line shows what each Consumer ended up
// with. A team option the company forbids, or one out of range, is
// refused before anything is received.
func TestDefaultsAndTeamOverride(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t)
		orders, _ := b.queue(t, "orders")
		emails, _ := b.queue(t, "emails")
		stopOrders := b.consume(t, orders, ok, sqsconsumer.WithConcurrency(4))
		stopEmails := b.consume(t, emails, ok)
		time.Sleep(time.Second)

		err := b.sdk.Consume(context.Background(), orders, ok, sqsconsumer.WithShutdownTimeout(time.Minute))
		require.ErrorIs(t, err, sqsconsumer.ErrInvalidOption)
		require.ErrorContains(t, err, "WithShutdownTimeout(1m0s) is above the company's 25s")
		err = b.sdk.Consume(context.Background(), orders, ok, sqsconsumer.WithConcurrency(0))
		require.ErrorIs(t, err, sqsconsumer.ErrInvalidOption)

		started := map[string]map[string]any{}
		for _, l := range b.log.find(t, "sqsconsumer: running") {
			require.Equal(t, "billing", l["service"])
			s := l["settings"].(map[string]any)
			started[s["queue_url"].(string)] = s
		}
		require.Len(t, started, 2, "one startup line per queue")
		require.Equal(t, 4.0, started[orders]["concurrency"], "the team's override")
		require.Equal(t, 16.0, started[emails]["concurrency"], "the company's default")
		for _, s := range started {
			require.Equal(t, "20s", s["shutdown_timeout"])
			require.NotNil(t, s["breaker"])
			require.Equal(t, "30s", s["scaling"].(map[string]any)["target"])
			require.Equal(t, true, s["require_dead_letter_queue"])
			require.Equal(t, "redrive_policy", s["dead_letter_source"])
			require.Equal(t, "set", s["panic_policy"])
			require.Equal(t, 1.0, s["middleware"], "classify")
			require.Equal(t, "shared", s["scale_in_protection"])
			require.Equal(t, "set", s["logger"])
			require.Empty(t, s["pending"])
		}
		require.NoError(t, stopOrders())
		require.NoError(t, stopEmails())
		require.NoError(t, b.sdk.Close())
	})
}

// A queue without a dead-letter queue is refused at Run, naming the queue
// and the fix; nothing is received from it, and /healthz reports it
// failed.
func TestQueueWithoutDLQRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t)
		legacy, err := b.srv.CreateQueue("legacy", nil)
		require.NoError(t, err)
		id := b.send(t, legacy, "hello")[0]

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds the test if the queue is not refused
		defer cancel()
		err = b.sdk.Consume(ctx, legacy, ok)
		require.ErrorIs(t, err, sqsconsumer.ErrInvalidOption)
		require.ErrorContains(t, err, legacy)
		require.ErrorContains(t, err, "RedrivePolicy")
		st, found := b.srv.Message(legacy, id)
		require.True(t, found)
		require.Zero(t, st.ReceiveCount)

		code, body := b.get(t, "/healthz")
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Contains(t, fmt.Sprint(body["problems"]), legacy)
		require.NoError(t, b.sdk.Close())
	})
}

// A panic becomes the company's ErrPanic (the team's observer sees it, and
// the *PanicError inside), logged once by the SDK with the message's
// fields, where it happened and its stack; the message comes back after
// PanicRetry, and the redrive policy moves it to the dead-letter queue
// after three receives.
func TestPanicBecomesErrPanic(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t)
		url, dlq := b.queue(t, "orders")
		id := b.send(t, url, "o-1")[0]
		var mu sync.Mutex
		var failed []error
		observer := sqsconsumer.WithObserver(sqsconsumer.ObserverFunc(func(e sqsconsumer.Event) {
			if e.Kind == sqsconsumer.EventFailed {
				mu.Lock()
				failed = append(failed, e.Err)
				mu.Unlock()
			}
		}))
		stop := b.consume(t, url, func(_ context.Context, m *sqsconsumer.Message) error {
			customer := strings.Split(m.Body, "/")[1] // a bug: the body has no "/"
			_ = customer
			return nil
		}, observer)

		time.Sleep(time.Second)
		mu.Lock()
		require.Len(t, failed, 1)
		require.ErrorIs(t, failed[0], queuesdk.ErrPanic)
		var pe *sqsconsumer.PanicError
		require.ErrorAs(t, failed[0], &pe)
		require.Contains(t, fmt.Sprint(pe.Value), "index out of range")
		mu.Unlock()
		st, _ := b.srv.Message(url, id)
		require.True(t, st.InFlight)
		require.Equal(t, queuesdk.PanicRetry, last(t, st.VisibilityChanges).Timeout)

		panicked := b.log.find(t, "queuesdk: handler panicked")
		require.Len(t, panicked, 1)
		require.Equal(t, "ERROR", panicked[0]["level"])
		require.Equal(t, id, panicked[0]["message_id"])
		require.Equal(t, url, panicked[0]["queue_url"])
		require.Contains(t, panicked[0]["site"], "queuesdk_test.go")
		require.Contains(t, panicked[0]["stack"], "goroutine")
		require.Empty(t, b.log.find(t, "sqsconsumer: handler panicked"), "the policy logs it, not the library")
		require.Equal(t, "panic", first(t, b.log.find(t, "queuesdk: message handled"))["class"])

		time.Sleep(queuesdk.PanicRetry)
		st, _ = b.srv.Message(url, id)
		require.Equal(t, 2, st.ReceiveCount, "back after PanicRetry")
		time.Sleep(2 * queuesdk.PanicRetry)
		st, _ = b.srv.Message(url, id)
		require.True(t, st.MovedToDLQ, "the redrive policy took it after 3 receives")
		require.Equal(t, dlq, st.MovedTo)

		require.NoError(t, stop())
		require.NoError(t, b.sdk.Close())
	})
}

// The error classes end where the company says: a validation error in the
// dead-letter queue at once (the team's middleware sees it Permanent), a
// transient one back after TransientRetry.
func TestErrorClasses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t)
		url, dlq := b.queue(t, "orders")
		var sawPermanent atomic.Bool
		teamMetrics := sqsconsumer.WithMiddleware(func(next sqsconsumer.Handler) sqsconsumer.Handler {
			return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
				err := next.HandleMessage(ctx, m)
				if sqsconsumer.IsPermanent(err) {
					sawPermanent.Store(true)
				}
				return err
			})
		})
		var transientCalls atomic.Int32
		stop := b.consume(t, url, func(_ context.Context, m *sqsconsumer.Message) error {
			switch {
			case m.Body == "not json":
				return fmt.Errorf("order: %w", queuesdk.ErrValidation)
			case m.Body == "flaky" && transientCalls.Add(1) <= 2:
				return fmt.Errorf("ledger timed out: %w", queuesdk.ErrTransient)
			}
			return nil
		}, teamMetrics)
		ids := b.send(t, url, "not json", "flaky")
		time.Sleep(2 * time.Minute)

		bad, _ := b.srv.Message(url, ids[0])
		require.True(t, bad.Deleted, "moved by the Consumer: sent to the DLQ, then deleted")
		require.Equal(t, 1, bad.ReceiveCount, "at once, not after the redrive's 3 receives")
		moved := b.srv.Messages(dlq)
		require.Len(t, moved, 1)
		require.Equal(t, "not json", moved[0].Body)
		require.True(t, sawPermanent.Load(), "the team's middleware sees the class")

		flaky, _ := b.srv.Message(url, ids[1])
		require.True(t, flaky.Deleted)
		require.Len(t, flaky.Receives, 3)
		for i := 1; i < 3; i++ {
			gap := flaky.Receives[i].At.Sub(flaky.Receives[i-1].At)
			require.GreaterOrEqual(t, gap, queuesdk.TransientRetry)
			require.Less(t, gap, queuesdk.TransientRetry+2*time.Second)
		}

		classes := map[string]int{}
		for _, l := range b.log.find(t, "queuesdk: message handled") {
			classes[l["class"].(string)]++
		}
		require.Equal(t, map[string]int{"validation": 1, "transient": 2, "ok": 1}, classes)
		require.NoError(t, stop())
		require.NoError(t, b.sdk.Close())
	})
}

// A downstream that answers 429 with Retry-After 45 until t = 100 s: the
// queue stops taking work for 45 s at each refusal (back pressure: three
// calls refused, 45 s apart, not one per message), the breaker stays
// closed, nothing reaches the dead-letter queue. The same downstream
// failing with ErrTransient instead opens the breaker: the control that
// shows the difference.
func TestRateLimitedIsBackPressure(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		fail  error
		calls int    // refused calls, for the rate-limited case
		open  bool   // the breaker opened
		class string // in the log
	}{
		{name: "rate limited", fail: queuesdk.RateLimited("payments", "45"), calls: 3, class: "rate_limited"},
		{name: "transient", fail: fmt.Errorf("payments: %w", queuesdk.ErrTransient), open: true, class: "transient"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := newBed(t)
				url, dlq := b.queue(t, "orders")
				ids := b.send(t, url, "1", "2", "3", "4", "5", "6")
				start := time.Now()
				var mu sync.Mutex
				var refused []time.Time
				stop := b.consume(t, url, func(context.Context, *sqsconsumer.Message) error {
					mu.Lock()
					defer mu.Unlock()
					if time.Since(start) < 100*time.Second {
						refused = append(refused, time.Now())
						return tt.fail
					}
					return nil
				}, sqsconsumer.WithConcurrency(1))

				opened := false
				for range 60 { // 5 minutes
					time.Sleep(5 * time.Second)
					_, body := b.get(t, "/healthz")
					opened = opened || breakers(body)[0] == "open"
				}
				require.Equal(t, tt.open, opened)
				require.Equal(t, tt.class, first(t, b.log.find(t, "queuesdk: message handled"))["class"])
				if !tt.open {
					mu.Lock()
					require.Len(t, refused, tt.calls)
					for i := 1; i < len(refused); i++ {
						require.GreaterOrEqual(t, refused[i].Sub(refused[i-1]), 45*time.Second)
					}
					mu.Unlock()
					for _, id := range ids {
						st, _ := b.srv.Message(url, id)
						require.True(t, st.Deleted, "message %s", st.Body)
					}
					require.Empty(t, b.srv.Messages(dlq))
				}
				require.NoError(t, stop())
				require.NoError(t, b.sdk.Close())
			})
		})
	}
}

// Three queues whose Consume is called at different times appear in one
// /healthz, /readyz and /scaling, and leave them as their Consume returns;
// the task is protected once for all three (one Protector), and cleared
// at Close.
func TestThreeQueuesOneEndpoint(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t)
		code, body := b.get(t, "/healthz")
		require.Equal(t, http.StatusServiceUnavailable, code, "no queue yet")
		require.Contains(t, fmt.Sprint(body["problems"]), "no Consumer")

		names := []string{"orders", "emails", "reports"}
		var urls []string
		for _, n := range names {
			u, _ := b.queue(t, n)
			urls = append(urls, u)
		}
		feeding, stopFeeding := context.WithCancel(context.Background())
		var feeder sync.WaitGroup
		t.Cleanup(func() { stopFeeding(); feeder.Wait() })
		feeder.Go(func() { // 2 messages a second to each queue
			for feeding.Err() == nil {
				for _, u := range urls {
					b.send(t, u, "job")
				}
				time.Sleep(500 * time.Millisecond)
			}
		})
		work := func(context.Context, *sqsconsumer.Message) error {
			time.Sleep(100 * time.Millisecond)
			return nil
		}

		var stops []func() error
		for i, u := range urls {
			stops = append(stops, b.consume(t, u, work))
			time.Sleep(time.Minute) // the next team's queue comes a minute later
			code, body := b.get(t, "/healthz")
			require.Equal(t, http.StatusOK, code, "%v", body)
			listed := queues(body)
			require.Len(t, listed, i+1)
			for j, q := range listed {
				require.Equal(t, urls[j], q["queue"])
			}
		}
		code, body = b.get(t, "/scaling")
		require.Equal(t, http.StatusOK, code, "%v", body)
		require.Equal(t, true, body["known"])
		require.Equal(t, 1.0, body["replicas"], "3 × 2 msg/s × 0.1 s on 64 slots")
		require.Equal(t, float64(queuesdk.DefaultBudget), body["budget"])
		require.Len(t, queues(body), 3)
		code, _ = b.get(t, "/readyz")
		require.Equal(t, http.StatusOK, code)

		stopFeeding()
		feeder.Wait()
		for i, stop := range stops {
			require.NoError(t, stop())
			_, body := b.get(t, "/healthz")
			require.Len(t, queues(body), len(urls)-i-1, "a queue leaves as its Consume returns")
		}
		require.Equal(t, []bool{true}, b.agent.calls(), "protected once, for the three queues")
		require.NoError(t, b.sdk.Close())
		require.Equal(t, []bool{true, false}, b.agent.calls(), "cleared at Close")
		require.ErrorContains(t, b.sdk.Consume(context.Background(), urls[0], ok), "after Close")
	})
}

// A handler's own line and the SDK's line per message carry the message's
// fields and the service.
func TestMessageLogLine(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t)
		url, _ := b.queue(t, "orders")
		id := b.send(t, url, `{"order_id":"o-1","amount_cents":2599}`)[0]
		stop := b.consume(t, url, func(ctx context.Context, m *sqsconsumer.Message) error {
			sqsconsumer.Logger(ctx).Info("charging", "amount_cents", 2599)
			return nil
		})
		time.Sleep(time.Second)
		require.NoError(t, stop())
		require.NoError(t, b.sdk.Close())

		for _, msg := range []string{"charging", "queuesdk: message handled"} {
			lines := b.log.find(t, msg)
			require.Len(t, lines, 1, msg)
			l := lines[0]
			require.Equal(t, id, l["message_id"], msg)
			require.Equal(t, url, l["queue_url"], msg)
			require.Equal(t, 1.0, l["receive_count"], msg)
			require.Equal(t, "billing", l["service"], msg)
		}
		handled := first(t, b.log.find(t, "queuesdk: message handled"))
		require.Equal(t, "ok", handled["class"])
		require.Contains(t, handled, "took")
	})
}

// A shutdown while three queues work (short jobs, a 5 s job, a long job
// that watches Draining): every Consume returns nil once its handlers
// have finished, the long job saves its progress and hands its message
// back at once, Close returns, and no message is left in flight, lost or
// in a dead-letter queue.
func TestShutdownStrandsNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t)
		orders, ordersDLQ := b.queue(t, "orders")
		emails, emailsDLQ := b.queue(t, "emails")
		reports, reportsDLQ := b.queue(t, "reports")
		feeding, stopFeeding := context.WithCancel(context.Background())
		var feeder sync.WaitGroup
		t.Cleanup(func() { stopFeeding(); feeder.Wait() })
		feeder.Go(func() {
			for feeding.Err() == nil {
				b.send(t, orders, "order")
				time.Sleep(200 * time.Millisecond)
			}
		})
		b.send(t, emails, "email")
		report := b.send(t, reports, "report")[0]

		var mu sync.Mutex
		saved := map[string]int{} // message ID -> steps done, the long job's checkpoint
		stops := []func() error{
			b.consume(t, orders, func(context.Context, *sqsconsumer.Message) error {
				time.Sleep(100 * time.Millisecond)
				return nil
			}),
			b.consume(t, emails, func(ctx context.Context, _ *sqsconsumer.Message) error {
				time.Sleep(17 * time.Second) // still running at the shutdown
				return ctx.Err()
			}),
			b.consume(t, reports, func(ctx context.Context, m *sqsconsumer.Message) error {
				for step := 0; step < 600; step++ {
					select {
					case <-sqsconsumer.Draining(ctx):
						mu.Lock()
						saved[m.ID] = step
						mu.Unlock()
						return fmt.Errorf("report %s at step %d: %w", m.ID, step, queuesdk.ErrInterrupted)
					case <-time.After(time.Second):
					}
				}
				return nil
			}),
		}
		time.Sleep(15 * time.Second)
		stopFeeding()
		feeder.Wait()

		shutdown := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(stops))
		for i, stop := range stops {
			wg.Go(func() { errs[i] = stop() })
		}
		wg.Wait()
		took := time.Since(shutdown)
		require.NoError(t, errors.Join(errs...))
		require.NoError(t, b.sdk.Close())
		// A queue's Consume returns when its long polls in flight do: the
		// idle ones are cancelled, one sent less than a second before the
		// shutdown is not (WithCancelIdlePollsAtShutdown) and may wait out
		// its 20 s, within ECS's 30 s stopTimeout.
		require.LessOrEqual(t, took, 20*time.Second)

		for _, q := range []string{orders, emails, reports} {
			for _, st := range b.srv.Messages(q) {
				require.False(t, st.InFlight, "%s: %s stranded in flight", q, st.Body)
			}
		}
		for _, dlq := range []string{ordersDLQ, emailsDLQ, reportsDLQ} {
			require.Empty(t, b.srv.Messages(dlq))
		}
		for _, q := range []string{orders, emails} {
			for _, st := range b.srv.Messages(q) {
				require.True(t, st.Deleted, "%s: %s finished within the budget", q, st.Body)
			}
		}
		mu.Lock()
		require.Equal(t, 15, saved[report], "the checkpoint: 15 steps of 1 s")
		mu.Unlock()
		st, _ := b.srv.Message(reports, report)
		require.False(t, st.Deleted)
		release := last(t, st.VisibilityChanges)
		require.Zero(t, release.Timeout, "handed back at once")
		// Its queue's long polls were idle and cancelled (the company's
		// WithCancelIdlePollsAtShutdown), so nothing held the release up.
		require.Less(t, release.At.Sub(shutdown), time.Second, "at the shutdown, not at the budget's end")
		require.Equal(t, 1, st.ReceiveCount, "no poll in flight took it again")
		for _, l := range b.log.find(t, "queuesdk: message handled") {
			if l["queue_url"] == reports {
				require.Equal(t, "interrupted", l["class"])
			}
		}
		require.Equal(t, false, last(t, b.agent.calls()), "protection cleared")
	})
}

// TestClassify pins the mapping, for a team's unit tests of its errors.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err   error
		class string
		check func(error) bool
	}{
		{nil, "ok", func(err error) bool { return err == nil }},
		{fmt.Errorf("x: %w", queuesdk.ErrValidation), "validation", sqsconsumer.IsPermanent},
		{queuesdk.RateLimited("payments", "7"), "rate_limited", func(err error) bool {
			d, ok := sqsconsumer.RetryDelay(err)
			return sqsconsumer.IsThrottled(err) && ok && d == 7*time.Second
		}},
		{fmt.Errorf("x: %w", queuesdk.ErrRateLimited), "rate_limited", sqsconsumer.IsThrottled},
		{fmt.Errorf("x: %w", queuesdk.ErrTransient), "transient", func(err error) bool {
			d, ok := sqsconsumer.RetryDelay(err)
			return ok && d == queuesdk.TransientRetry && !sqsconsumer.IsNeutral(err)
		}},
		{fmt.Errorf("x: %w", queuesdk.ErrInterrupted), "interrupted", func(err error) bool {
			d, ok := sqsconsumer.RetryDelay(err)
			return ok && d == 0 && sqsconsumer.IsNeutral(err)
		}},
		{errors.New("unknown"), "error", func(err error) bool { return err.Error() == "unknown" }},
	} {
		class, out := queuesdk.Classify(tt.err)
		require.Equal(t, tt.class, class, "%v", tt.err)
		require.True(t, tt.check(out), "%v -> %v", tt.err, out)
	}
	require.ErrorIs(t, queuesdk.RateLimited("payments", ""), queuesdk.ErrRateLimited)
}

// first is s's first element; the test fails if there is none.
func first[T any](t *testing.T, s []T) T {
	t.Helper()
	require.NotEmpty(t, s)
	return s[0]
}

// last is s's last element; the test fails if there is none.
func last[T any](t *testing.T, s []T) T {
	t.Helper()
	require.NotEmpty(t, s)
	return s[len(s)-1]
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// find decodes the JSON lines written so far whose msg is msg.
func (s *syncBuffer) find(t *testing.T, msg string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "log line %q is not JSON", sc.Text())
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// agent answers as the ECS agent's task scale-in protection endpoint does,
// in memory, and records what it was asked.
type agent struct {
	mu  sync.Mutex
	got []bool // ProtectionEnabled of each call
}

func (a *agent) calls() []bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]bool(nil), a.got...)
}

func (a *agent) RoundTrip(req *http.Request) (*http.Response, error) {
	var in struct {
		ProtectionEnabled bool
		ExpiresInMinutes  int
	}
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.got = append(a.got, in.ProtectionEnabled)
	a.mu.Unlock()
	exp := time.Now().Add(time.Duration(in.ExpiresInMinutes) * time.Minute).UTC().Format(time.RFC3339)
	body := fmt.Sprintf(`{"protection":{"ProtectionEnabled":%t,"ExpirationDate":%q,"TaskArn":"arn:aws:ecs:us-east-1:123456789012:task/c/1"}}`,
		in.ProtectionEnabled, exp)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}
