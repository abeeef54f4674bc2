package longhandlers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

const lease = 30 * time.Second

// work is how long each handler runs: five leases, plus a second so that a
// handler never returns at the very instant one of its renewals is due.
// (At that instant the renewal can reach the server after the delete and
// be refused, and the lease then reports itself lost although the message
// was deleted: see the report of this benchmark.)
const work = 5*lease + time.Second

// scenario is one way of feeding the Consumer long-running messages.
type scenario struct {
	name        string
	messages    int
	concurrency int
	// gap is the time between two messages' arrivals; 0 sends them all
	// before the Consumer starts.
	gap time.Duration
	// maxRatio bounds renewal batch calls per renewal; 0 only reports it.
	maxRatio float64
}

// outcome is what one scenario measured.
type outcome struct {
	renewals, batchCalls, singleCalls int
	elapsed                           time.Duration
	calls                             map[string]int
}

func (o outcome) ratio() float64 { return float64(o.batchCalls) / float64(o.renewals) }

// TestLongHandlers runs each scenario with handlers of 5 × the lease and
// checks that every message was received once, handled once and deleted,
// that no lease was lost, and that renewals were batched.
func TestLongHandlers(t *testing.T) {
	t.Parallel()
	scenarios := []scenario{
		// The case: a backlog of 1,000, all in hand at once.
		{name: "backlog, 1000 at once", messages: 1000, concurrency: 1000, maxRatio: 0.11},
		// The same backlog through 100 handler slots: ten waves.
		{name: "backlog, 100 at once", messages: 1000, concurrency: 100, maxRatio: 0.11},
		// Messages trickling in one by one, 100 ms apart, so each receive
		// returns a single message and every lease has its own schedule.
		// Renewals share a call only when they fall due within the
		// batcher's 25 ms window of each other, so the ratio depends on how
		// many leases are renewing: about one renewal per call with 100
		// messages, about six with 1,000. Reported, not bounded; kept small
		// because every distinct instant costs the bubble a round over all
		// its goroutines, which the race detector makes slow.
		{name: "trickle, 100 ms apart", messages: 100, concurrency: 1000, gap: 100 * time.Millisecond},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				o := runScenario(t, sc)
				t.Logf("%d messages, handlers %v (lease %v), concurrency %d, arrivals %v apart: %v virtual",
					sc.messages, work, lease, sc.concurrency, sc.gap, o.elapsed)
				t.Logf("renewals %d (%.1f per message), ChangeMessageVisibilityBatch calls %d: %.3f batch calls per renewal (%.1f entries per call)",
					o.renewals, float64(o.renewals)/float64(sc.messages), o.batchCalls, o.ratio(), 1/o.ratio())
				t.Logf("API calls %v", o.calls)
				require.Zero(t, o.singleCalls, "ChangeMessageVisibility calls outside batches")
				if sc.maxRatio > 0 {
					require.LessOrEqual(t, o.ratio(), sc.maxRatio, "renewal batch calls per renewal")
				}
			})
		})
	}
}

// runScenario runs sc to completion and checks that nothing was handled
// twice or lost.
func runScenario(t *testing.T, sc scenario) outcome {
	t.Helper()
	srv := sqstest.New(t)
	url, err := srv.CreateQueue("long", map[string]string{"VisibilityTimeout": "30"})
	require.NoError(t, err)

	var (
		mu       sync.Mutex // guards the maps and counters below
		handled  = map[string]int{}
		deleted  int
		renewals int
		trouble  []string
		done     = make(chan struct{})
	)
	handler := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		mu.Lock()
		handled[m.ID]++
		mu.Unlock()
		select {
		case <-time.After(work):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	observer := sqsconsumer.ObserverFunc(func(e sqsconsumer.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case sqsconsumer.EventRenewed:
			renewals++
		case sqsconsumer.EventDeleted:
			deleted++
			if deleted == sc.messages {
				close(done)
			}
		case sqsconsumer.EventFailed, sqsconsumer.EventRenewalFailed, sqsconsumer.EventLeaseLost,
			sqsconsumer.EventLeaseExpired, sqsconsumer.EventCeilingReached, sqsconsumer.EventAdopted:
			trouble = append(trouble, fmt.Sprintf("%s %s: %v", e.Kind, e.MessageID, e.Err))
		}
	})
	c, err := sqsconsumer.New(srv.Client(), url, handler,
		sqsconsumer.WithVisibilityTimeout(lease),
		sqsconsumer.WithConcurrency(sc.concurrency),
		sqsconsumer.WithObserver(observer))
	require.NoError(t, err)

	send := func() {
		_, err := srv.Send(url, "work")
		require.NoError(t, err)
	}
	if sc.gap == 0 {
		for range sc.messages {
			send()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	start := time.Now()
	go func() { ran <- c.Run(ctx) }()
	if sc.gap > 0 {
		for i := range sc.messages {
			if i > 0 {
				time.Sleep(sc.gap)
			}
			send()
		}
	}
	select {
	case <-done:
	case <-time.After(24 * time.Hour):
		t.Error("not every message was deleted within a virtual day")
	}
	elapsed := time.Since(start)
	cancel()
	require.NoError(t, <-ran)

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, trouble, "failures, lost leases or redeliveries")
	require.Len(t, handled, sc.messages, "messages handled")
	for id, n := range handled {
		require.Equal(t, 1, n, "handler calls for %s", id)
	}
	states := srv.Messages(url)
	require.Len(t, states, sc.messages)
	changes := 0
	for _, st := range states {
		require.Equal(t, 1, st.ReceiveCount, "receives of %s", st.ID)
		require.True(t, st.Deleted, "%s deleted", st.ID)
		for _, vc := range st.VisibilityChanges {
			require.Empty(t, vc.Err, "visibility change of %s", st.ID)
			changes++
		}
	}
	require.Equal(t, renewals, changes, "renewals seen by the observer and by the server")
	calls := srv.Calls()
	return outcome{
		renewals:    renewals,
		batchCalls:  calls["ChangeMessageVisibilityBatch"],
		singleCalls: calls["ChangeMessageVisibility"],
		elapsed:     elapsed,
		calls:       calls,
	}
}
