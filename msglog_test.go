package sqsconsumer

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// testQueueURL is a queue URL for Consumers that never call SQS.
const testQueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"

// noop is a handler that succeeds.
var noop = HandlerFunc(func(context.Context, *Message) error { return nil })

// syncLog is a log buffer the Consumer's goroutines may write at once.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *syncLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// jsonLines decodes the JSON log lines with msg.
func jsonLines(t *testing.T, logs string, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

type ctxMark struct{}

// A handler's Logger carries the Consumer's logger with the message's
// fields, through middleware that derives its own context.
func TestLoggerPerMessage(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var attrs map[string]string
			var send []sqstest.SendOption
			if fifo {
				attrs = map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}
				send = []sqstest.SendOption{sqstest.WithGroupID("tenant-1")}
			}
			b := setup(t, attrs)
			ids := b.send(t, 2, send...)
			var logs syncLog
			mw := func(next Handler) Handler {
				return HandlerFunc(func(ctx context.Context, m *Message) error {
					return next.HandleMessage(context.WithValue(ctx, ctxMark{}, 1), m)
				})
			}
			c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
				Logger(ctx).Info("handling", "step", "parse")
				return nil
			}), WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))), WithMiddleware(mw))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Minute)
			require.NoError(t, stop())
			lines := jsonLines(t, logs.String(), "handling")
			require.Len(t, lines, 2)
			var got []any
			for _, l := range lines {
				require.Equal(t, b.url, l["queue_url"])
				got = append(got, l["message_id"])
				require.EqualValues(t, 1, l["receive_count"])
				require.Equal(t, "parse", l["step"])
				if fifo {
					require.Equal(t, "tenant-1", l["group_id"])
				} else {
					require.NotContains(t, l, "group_id", "only when the message has a group")
				}
			}
			require.ElementsMatch(t, []any{ids[0], ids[1]}, got)
		})
	}
}

// Without a logger, or outside the library's contexts, Logger discards:
// never nil, and free.
func TestLoggerDiscardsWithoutLogger(t *testing.T) {
	t.Parallel()
	for _, l := range []*slog.Logger{Logger(context.Background()), (*Message)(nil).Logger(), (&Message{ID: "x"}).Logger()} {
		require.NotNil(t, l)
		require.False(t, l.Enabled(context.Background(), slog.LevelError))
	}
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 1)
		var allocs float64
		var enabled bool
		var mu sync.Mutex
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			defer mu.Unlock()
			enabled = Logger(ctx).Enabled(ctx, slog.LevelError)
			allocs = testing.AllocsPerRun(100, func() { Logger(ctx).Info("nothing") })
			return nil
		}))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Second)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.False(t, enabled)
		require.Zero(t, allocs, "no logger: Logger costs no allocation")
	})
}

// A BatchHandler's context logs about the call; each message's Logger
// about the message.
func TestLoggerBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 3)
		var logs syncLog
		h, err := Batch(func(ctx context.Context, msgs []*Message) error {
			Logger(ctx).Info("batch")
			for _, m := range msgs {
				m.Logger().Info("item")
			}
			return nil
		}, 3, time.Second)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		batch := jsonLines(t, logs.String(), "batch")
		require.Len(t, batch, 1)
		require.Equal(t, b.url, batch[0]["queue_url"])
		require.EqualValues(t, 3, batch[0]["batch_size"])
		require.NotContains(t, batch[0], "message_id")
		var got []string
		for _, l := range jsonLines(t, logs.String(), "item") {
			require.Equal(t, b.url, l["queue_url"])
			got = append(got, l["message_id"].(string))
		}
		require.ElementsMatch(t, ids, got)
	})
}

// The context a NewLease's Start returns carries the lease's logger.
func TestLoggerNewLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		var logs syncLog
		l := b.lease(t, msg, sent, WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		parent := context.WithValue(context.Background(), ctxMark{}, "kept")
		ctx := l.Start(parent)
		require.Equal(t, "kept", ctx.Value(ctxMark{}), "the parent's values stay")
		Logger(ctx).Info("lambda")
		l.Stop()
		lines := jsonLines(t, logs.String(), "lambda")
		require.Len(t, lines, 1)
		require.Equal(t, b.url, lines[0]["queue_url"])
		require.Equal(t, *msg.MessageId, lines[0]["message_id"])
	})
}

// A lease started on a cancellable context is still cancelled with it.
func TestLeaseContextFollowsItsParent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 30*time.Second)
		l := b.lease(t, msg, sent)
		parent, cancel := context.WithCancel(context.Background())
		ctx := l.Start(parent)
		cancel()
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), context.Canceled)
		l.Stop()
	})
}
