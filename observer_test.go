package sqsconsumer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// eventLog records every event per message, in order.
type eventLog struct {
	mu  sync.Mutex
	evs map[string][]Event
}

func (l *eventLog) Observe(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.evs == nil {
		l.evs = map[string][]Event{}
	}
	l.evs[e.MessageID] = append(l.evs[e.MessageID], e)
}

func (l *eventLog) of(id string) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.evs[id]...)
}

// Events are self-sufficient: an observer measures handler time from
// SinceStart and the delivery's end from EventDone, emitted exactly once per
// EventReceived and always last, in every way a delivery can end. Nothing
// per message has to be remembered between events.
func TestEventsAreSelfSufficient(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		handler func(ctx context.Context, m *Message) error
		stop    time.Duration // stop the consumer after this long (0: let it run 2 minutes)
		wantErr error         // EventDone's Err
		work    time.Duration // the handler's running time, as SinceStart on its return
		kinds   []EventKind   // the delivery's first events, in order
	}{
		{"success", func(ctx context.Context, m *Message) error { time.Sleep(7 * time.Second); return nil },
			0, nil, 7 * time.Second, []EventKind{EventReceived, EventStarted, EventSucceeded, EventDeleted, EventDone}},
		{"failure", func(ctx context.Context, m *Message) error {
			time.Sleep(3 * time.Second)
			return RetryAfter(errBoom, time.Hour)
		},
			0, errBoom, 3 * time.Second, []EventKind{EventReceived, EventStarted, EventFailed, EventReleased, EventDone}},
		{"renewed, then success", func(ctx context.Context, m *Message) error { time.Sleep(25 * time.Second); return nil },
			0, nil, 25 * time.Second, []EventKind{EventReceived, EventStarted, EventRenewed, EventRenewed, EventSucceeded, EventDeleted, EventDone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, map[string]string{"VisibilityTimeout": "30"})
				log := &eventLog{}
				c, err := New(b.client, b.url, HandlerFunc(tt.handler), WithVisibilityTimeout(30*time.Second),
					WithHeartbeatInterval(10*time.Second), WithObserver(log), WithConcurrency(1))
				require.NoError(t, err)
				ids := b.send(t, 1)
				stop := running(t, c)
				time.Sleep(2 * time.Minute)
				require.NoError(t, stop())

				evs := log.of(ids[0])
				kinds := make([]EventKind, len(evs))
				for i, e := range evs {
					kinds[i] = e.Kind
				}
				require.Equal(t, tt.kinds, kinds)
				done := evs[len(evs)-1]
				require.ErrorIs(t, done.Err, tt.wantErr)
				if tt.wantErr == nil {
					require.NoError(t, done.Err)
				}
				for _, e := range evs {
					switch e.Kind {
					case EventReceived:
						require.Zero(t, e.SinceStart, "before the handler started")
					case EventSucceeded, EventFailed:
						require.Equal(t, tt.work, e.SinceStart, "the handler's running time")
					}
				}
				require.GreaterOrEqual(t, done.SinceReceive, tt.work)
				require.InEpsilon(t, float64(done.SinceReceive), float64(c.Stats().Max), 0.04, "Stats measure the same span")
			})
		})
	}

	t.Run("lease lost while the handler runs: done when the handler returns", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, map[string]string{"VisibilityTimeout": "30"})
			log := &eventLog{}
			c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
				<-ctx.Done()
				time.Sleep(5 * time.Second) // cleanup after the loss
				return context.Cause(ctx)
			}), WithVisibilityTimeout(30*time.Second), WithObserver(log), WithConcurrency(1),
				WithShutdownTimeout(time.Second))
			require.NoError(t, err)
			ids := b.send(t, 1)
			b.srv.FailNextEntries("ChangeMessageVisibilityBatch", 1, sqstest.FaultReceiptHandleIsInvalid)
			stop := running(t, c)
			time.Sleep(time.Minute)
			require.NoError(t, stop())
			evs := log.of(ids[0])
			var kinds []EventKind
			for _, e := range evs {
				kinds = append(kinds, e.Kind)
			}
			lost := slices.Index(kinds, EventLeaseLost)
			require.GreaterOrEqual(t, lost, 0, "kinds: %v", kinds)
			// The first delivery: lost, then the handler's return 5 s
			// later, then done with the handler's error.
			require.Equal(t, []EventKind{EventLeaseLost, EventFailed, EventDone}, kinds[lost:lost+3])
			require.Equal(t, 5*time.Second, evs[lost+2].Time.Sub(evs[lost].Time))
			require.ErrorIs(t, evs[lost+2].Err, ErrLeaseLost)
			require.Equal(t, countKind(kinds, EventReceived), countKind(kinds, EventDone), "kinds: %v", kinds)
			require.Equal(t, EventDone, kinds[len(kinds)-1])
		})
	})

	t.Run("unstarted at shutdown: received, released, done", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, map[string]string{"VisibilityTimeout": "30"})
			log := &eventLog{}
			block := make(chan struct{})
			c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
				<-block
				return nil
			}), WithVisibilityTimeout(30*time.Second), WithObserver(log), WithConcurrency(1),
				WithShutdownTimeout(time.Second))
			require.NoError(t, err)
			b.send(t, 5)
			stop := running(t, c)
			time.Sleep(time.Second)
			close(block)
			require.NoError(t, stop())
			received, done := 0, 0
			log.mu.Lock()
			for _, evs := range log.evs {
				for _, e := range evs {
					switch e.Kind {
					case EventReceived:
						received++
					case EventDone:
						done++
					}
				}
				require.Equal(t, EventDone, evs[len(evs)-1].Kind)
			}
			log.mu.Unlock()
			require.Equal(t, received, done, "one EventDone per delivery")
		})
	})
}

func countKind(kinds []EventKind, k EventKind) int {
	n := 0
	for _, x := range kinds {
		if x == k {
			n++
		}
	}
	return n
}
