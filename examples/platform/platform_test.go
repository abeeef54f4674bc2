package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/examples/platform/queuesdk"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// TestRunInMemory runs the example for two virtual minutes: the three
// queues join 20 s apart, every error class shows up where it should, the
// breaker never opens, and after the shutdown no message is held by a
// lease: each is handled, dead-lettered (only the malformed orders),
// visible, or waiting out the delay its class asked for.
func TestRunInMemory(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, err := memoryBackend()
		require.NoError(t, err)
		defer b.srv.Close()
		var out, logs syncBuffer
		cfg := runConfig{SQS: "memory", For: 2 * time.Minute, Rate: 5, Later: 20 * time.Second}
		require.NoError(t, run(context.Background(), cfg, b, &out, &logs))

		report := out.String()
		require.Contains(t, report, "GET /healthz: 200")
		for _, url := range b.urls {
			require.Contains(t, report, url)
		}
		require.Contains(t, report, "queue    sent  handled  dead-lettered")

		lines := logs.lines(t)
		var joined []time.Time
		classes := map[string]int{}
		for _, l := range lines {
			switch l["msg"] {
			case "sqsconsumer: running":
				at, err := time.Parse(time.RFC3339Nano, l["time"].(string))
				require.NoError(t, err)
				joined = append(joined, at)
			case "queuesdk: message handled":
				classes[l["class"].(string)]++
			}
			require.NotContains(t, l["msg"], "circuit breaker open", "%v", l)
			require.Equal(t, "shop", l["service"], "%v", l)
		}
		require.Len(t, joined, 3)
		require.Equal(t, 20*time.Second, joined[1].Sub(joined[0]).Round(time.Second))
		require.Equal(t, 20*time.Second, joined[2].Sub(joined[1]).Round(time.Second))
		for _, c := range []string{"ok", "validation", "rate_limited", "transient", "panic", "interrupted"} {
			require.Positive(t, classes[c], "class %s: %v", c, classes)
		}

		malformed := 0
		for _, st := range b.srv.Messages(b.urls[0]) {
			if st.Body == "not json" {
				malformed++
			}
		}
		dead := b.srv.Messages(b.dlqs[0])
		require.Len(t, dead, malformed)
		require.Equal(t, classes["validation"], malformed)
		for _, st := range dead {
			require.Equal(t, "not json", st.Body)
		}
		require.Empty(t, b.srv.Messages(b.dlqs[1]), "a transient failure succeeds at its retry, a crash is retried after 5 minutes: none dead-lettered")
		require.Empty(t, b.srv.Messages(b.dlqs[2]))

		delays := map[time.Duration]bool{queuesdk.TransientRetry: true, queuesdk.PanicRetry: true}
		for _, url := range b.urls {
			for _, st := range b.srv.Messages(url) {
				if !st.InFlight {
					continue
				}
				require.NotEmpty(t, st.VisibilityChanges, "%s: %q held by a receive nobody answered", url, st.Body)
				last := st.VisibilityChanges[len(st.VisibilityChanges)-1]
				require.True(t, delays[last.Timeout], "%s: %q invisible for %v", url, st.Body, last.Timeout)
			}
		}
	})
}

// A queue without a dead-letter queue is refused: run stops the others and
// fails naming it.
func TestRunRefusesQueueWithoutDLQ(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		b := &backend{client: srv.Client(), srv: srv, send: func(context.Context, string, string) error { return nil }}
		for _, name := range queueNames {
			var url, dlq string
			var err error
			if name == "emails" {
				url, err = srv.CreateQueue(name, nil)
				dlq, _ = srv.CreateQueue("unused-dlq", nil)
			} else {
				url, dlq, err = srv.CreateQueueWithDLQ(name, 3, nil)
			}
			require.NoError(t, err)
			b.urls, b.dlqs = append(b.urls, url), append(b.dlqs, dlq)
		}
		var out, logs syncBuffer
		start := time.Now()
		err := run(context.Background(), runConfig{SQS: "memory", For: time.Hour, Later: time.Second}, b, &out, &logs)
		require.ErrorIs(t, err, sqsconsumer.ErrInvalidOption)
		require.ErrorContains(t, err, "emails: ")
		require.ErrorContains(t, err, "RedrivePolicy")
		require.Less(t, time.Since(start), time.Minute, "stopped at once, not after -for")
	})
}

// The client of an endpoint has static credentials: the environment's, or
// "local".
func TestEndpointClient(t *testing.T) {
	for _, tt := range []struct{ key, secret, want string }{{"", "", "local"}, {"AKIDEXAMPLE", "secret", "AKIDEXAMPLE"}} {
		t.Setenv("AWS_ACCESS_KEY_ID", tt.key)
		t.Setenv("AWS_SECRET_ACCESS_KEY", tt.secret)
		c, err := endpointClient("http://127.0.0.1:9324", "eu-west-1")
		require.NoError(t, err)
		o := c.Options()
		require.Equal(t, "eu-west-1", o.Region)
		require.Equal(t, "http://127.0.0.1:9324", *o.BaseEndpoint)
		creds, err := o.Credentials.Retrieve(context.Background())
		require.NoError(t, err)
		require.Equal(t, tt.want, creds.AccessKeyID)
	}
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

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines decodes the JSON log lines written so far.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "log line %q is not JSON", sc.Text())
		out = append(out, m)
	}
	return out
}
