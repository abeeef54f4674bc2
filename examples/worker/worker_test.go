package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadSettings(t *testing.T) {
	t.Parallel()
	const url = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
	tests := []struct {
		name    string
		env     map[string]string
		want    settings
		wantErr []string
	}{
		{
			name: "defaults",
			env:  map[string]string{"SQS_QUEUE_URL": url},
			want: settings{queueURL: url, concurrency: 10, stopTimeout: 30 * time.Second, shutdownTimeout: 25 * time.Second, idempotencyTTL: 24 * time.Hour},
		},
		{
			name: "everything set",
			env: map[string]string{
				"SQS_QUEUE_URL": url, "WORKER_CONCURRENCY": "40", "WORKER_VISIBILITY_TIMEOUT": "2m",
				"WORKER_STOP_TIMEOUT": "120s", "WORKER_SHUTDOWN_TIMEOUT": "100s", "WORKER_IDEMPOTENCY_TTL": "96h",
				"LOG_LEVEL": "debug", "WORKER_HTTP_ADDR": ":8080", "WORKER_SCALING_TARGET": "30s", "WORKER_EMF_NAMESPACE": "Orders/Worker",
			},
			want: settings{queueURL: url, concurrency: 40, visibility: 2 * time.Minute, stopTimeout: 120 * time.Second, shutdownTimeout: 100 * time.Second, idempotencyTTL: 96 * time.Hour, logLevel: -4,
				httpAddr: ":8080", scalingTarget: 30 * time.Second, emfNamespace: "Orders/Worker"},
		},
		{
			name: "shutdown budget follows the stop timeout",
			env:  map[string]string{"SQS_QUEUE_URL": url, "WORKER_STOP_TIMEOUT": "60s"},
			want: settings{queueURL: url, concurrency: 10, stopTimeout: time.Minute, shutdownTimeout: 55 * time.Second, idempotencyTTL: 24 * time.Hour},
		},
		{
			name: "short stop timeout keeps half for the handlers",
			env:  map[string]string{"SQS_QUEUE_URL": url, "WORKER_STOP_TIMEOUT": "6s"},
			want: settings{queueURL: url, concurrency: 10, stopTimeout: 6 * time.Second, shutdownTimeout: 3 * time.Second, idempotencyTTL: 24 * time.Hour},
		},
		{name: "missing queue URL", env: map[string]string{}, wantErr: []string{"SQS_QUEUE_URL is required"}},
		{name: "blank queue URL", env: map[string]string{"SQS_QUEUE_URL": "  "}, wantErr: []string{"SQS_QUEUE_URL is required"}},
		{
			name:    "budget not below SIGKILL",
			env:     map[string]string{"SQS_QUEUE_URL": url, "WORKER_SHUTDOWN_TIMEOUT": "30s"},
			wantErr: []string{"WORKER_SHUTDOWN_TIMEOUT (30s) must be below WORKER_STOP_TIMEOUT (30s)"},
		},
		{
			name:    "idempotency TTL too short",
			env:     map[string]string{"SQS_QUEUE_URL": url, "WORKER_IDEMPOTENCY_TTL": "500ms"},
			wantErr: []string{"WORKER_IDEMPOTENCY_TTL (500ms): must be from 1s to 8784h0m0s"},
		},
		{
			name:    "idempotency TTL too long",
			env:     map[string]string{"SQS_QUEUE_URL": url, "WORKER_IDEMPOTENCY_TTL": "9000h"},
			wantErr: []string{"WORKER_IDEMPOTENCY_TTL (9000h0m0s): must be from 1s to 8784h0m0s"},
		},
		{
			name:    "EMF without the signal",
			env:     map[string]string{"SQS_QUEUE_URL": url, "WORKER_EMF_NAMESPACE": "Orders/Worker"},
			wantErr: []string{`WORKER_EMF_NAMESPACE="Orders/Worker" needs WORKER_SCALING_TARGET`},
		},
		{
			name: "every bad value reported",
			env: map[string]string{
				"WORKER_CONCURRENCY": "0", "WORKER_VISIBILITY_TIMEOUT": "soon", "WORKER_STOP_TIMEOUT": "-1s", "LOG_LEVEL": "loud",
				"WORKER_IDEMPOTENCY_TTL": "forever", "WORKER_SCALING_TARGET": "0s",
			},
			wantErr: []string{"SQS_QUEUE_URL", `WORKER_CONCURRENCY="0"`, `WORKER_VISIBILITY_TIMEOUT="soon"`, `WORKER_STOP_TIMEOUT="-1s"`, `LOG_LEVEL="loud"`, `WORKER_IDEMPOTENCY_TTL="forever"`, `WORKER_SCALING_TARGET="0s"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadSettings(env(tt.env))
			if len(tt.wantErr) > 0 {
				for _, w := range tt.wantErr {
					require.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
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

// lines decodes the JSON log lines written so far.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "log line %q is not JSON", sc.Text())
		out = append(out, m)
	}
	return out
}

func messages(lines []map[string]any, msg string) int {
	n := 0
	for _, l := range lines {
		if l["msg"] == msg {
			n++
		}
	}
	return n
}

func TestRunConfigErrors(t *testing.T) {
	t.Parallel()
	noClient := func(context.Context) (sqsconsumer.Client, error) {
		t.Error("the client must not be built when the configuration is invalid")
		return nil, nil
	}
	var out syncBuffer
	code := run(context.Background(), env(nil), &out, noClient)
	require.Equal(t, exitConfig, code)
	lines := out.lines(t)
	require.Len(t, lines, 1)
	require.Equal(t, "ERROR", lines[0]["level"])
	require.Contains(t, lines[0]["error"], "SQS_QUEUE_URL is required")
}

// TestRunShutsDownOnSignal runs the worker against an in-memory SQS: it
// processes the orders, fails the malformed one, and exits 0 once its
// context is cancelled as SIGTERM would.
func TestRunShutsDownOnSignal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("orders", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		for _, b := range []string{`{"order_id":"a","amount_cents":100}`, `{"order_id":"b","amount_cents":250}`, `not json`} {
			_, err := srv.Send(url, b)
			require.NoError(t, err)
		}

		ctx, sigterm := context.WithCancel(context.Background())
		var out syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, env(map[string]string{"SQS_QUEUE_URL": url, "LOG_LEVEL": "debug"}), &out,
				func(context.Context) (sqsconsumer.Client, error) { return srv.Client(), nil })
		}()
		time.Sleep(2 * time.Second) // virtual: ample for three 50 ms handlers, short of the retry backoff
		sigterm()
		require.Equal(t, exitOK, <-done)

		var deleted int
		for _, st := range srv.Messages(url) {
			if st.Deleted {
				require.Equal(t, 1, st.ReceiveCount, "message %q", st.Body)
				deleted++
				continue
			}
			require.Equal(t, "not json", st.Body)
			// It waits out its backoff (about 5 s). The shutdown lets the
			// receives in flight return rather than abandon them, and one
			// takes the message when its backoff ends: it is handed back,
			// unstarted, once they have all returned (not at once, when
			// the next would take it again).
			require.Equal(t, 2, st.ReceiveCount)
			require.False(t, st.InFlight, "released by the shutdown")
		}
		require.Equal(t, 2, deleted)

		lines := out.lines(t)
		require.Equal(t, 1, messages(lines, "worker started"))
		require.Equal(t, 2, messages(lines, "order processed"))
		require.Equal(t, 1, messages(lines, "message failed"))
		require.Equal(t, 2, messages(lines, "message deleted"))
		require.Equal(t, 1, messages(lines, "worker stopped cleanly"))
		for _, l := range lines {
			if l["msg"] == "message failed" {
				// The idempotency key is read from the body, so a malformed
				// order fails before the handler runs.
				require.Contains(t, l["error"], "cannot derive the idempotency key")
				require.Contains(t, l["error"], "malformed order")
			}
		}
	})
}

// TestRunShutdownBudget checks that a handler still running at SIGTERM
// gets the shutdown timeout, is then cancelled with ErrShutdown, and its
// message is handed back at once.
func TestRunShutdownBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("orders", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		id, err := srv.Send(url, `{"order_id":"slow"}`)
		require.NoError(t, err)

		ctx, sigterm := context.WithCancel(context.Background())
		var out syncBuffer
		done := make(chan int, 1)
		slow := func(context.Context) (sqsconsumer.Client, error) { return srv.Client(), nil }
		go func() {
			done <- runWith(ctx, env(map[string]string{"SQS_QUEUE_URL": url}), &out, slow, time.Hour, net.Listen)
		}()
		time.Sleep(time.Second)
		sigterm()
		start := time.Now()
		require.Equal(t, exitOK, <-done)
		require.Equal(t, 25*time.Second, time.Since(start).Truncate(time.Second), "default budget")

		st, ok := srv.Message(url, id)
		require.True(t, ok)
		require.False(t, st.Deleted)
		require.False(t, st.InFlight, "handed back at once")
		lines := out.lines(t)
		require.Equal(t, 1, messages(lines, "message failed"))
		for _, l := range lines {
			if l["msg"] == "message failed" {
				require.Contains(t, l["error"], sqsconsumer.ErrShutdown.Error())
			}
		}
	})
}

func TestRunPermanentError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		var out syncBuffer
		code := run(context.Background(), env(map[string]string{"SQS_QUEUE_URL": srv.BaseURL() + "/123456789012/missing"}), &out,
			func(context.Context) (sqsconsumer.Client, error) { return srv.Client(), nil })
		require.Equal(t, exitFailed, code)
		require.Equal(t, 1, messages(out.lines(t), "worker stopped on an error"))
	})
}

// TestRunProcessesEachOrderOnce delivers the same order twice, once as two
// messages (a producer that sent it again) and once as one message
// delivered again after its delete failed: the order is processed once,
// the duplicate is skipped and deleted.
func TestRunProcessesEachOrderOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		bodies []string
		// prepare runs before the worker starts.
		prepare func(srv *sqstest.Server)
		// receives is the total number of receives of the queue's messages.
		receives int
	}{
		{
			name:     "sent twice",
			bodies:   []string{`{"order_id":"o-1","amount_cents":100}`, `{"order_id":"o-1","amount_cents":100,"retry":true}`},
			receives: 3, // the second message waits while the first holds the order, then is received again and skipped
		},
		{
			name:   "delivered again after a failed delete",
			bodies: []string{`{"order_id":"o-1","amount_cents":100}`},
			prepare: func(srv *sqstest.Server) {
				// The delete is refused, as for a worker that died between
				// the work and the delete: the message returns when its
				// visibility timeout ends.
				srv.FailNextEntries("DeleteMessageBatch", 1, sqstest.FaultReceiptHandleIsInvalid)
			},
			receives: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				srv := sqstest.New(t)
				url, err := srv.CreateQueue("orders", map[string]string{"VisibilityTimeout": "30"})
				require.NoError(t, err)
				for _, b := range tt.bodies {
					_, err := srv.Send(url, b)
					require.NoError(t, err)
				}
				if tt.prepare != nil {
					tt.prepare(srv)
				}

				ctx, sigterm := context.WithCancel(context.Background())
				var out syncBuffer
				done := make(chan int, 1)
				go func() {
					done <- run(ctx, env(map[string]string{"SQS_QUEUE_URL": url}), &out,
						func(context.Context) (sqsconsumer.Client, error) { return srv.Client(), nil })
				}()
				time.Sleep(2 * time.Minute) // virtual: past the 30 s visibility timeout and the retry
				sigterm()
				require.Equal(t, exitOK, <-done)

				receives := 0
				for _, st := range srv.Messages(url) {
					require.True(t, st.Deleted, "message %q", st.Body)
					receives += st.ReceiveCount
				}
				require.Equal(t, tt.receives, receives)
				lines := out.lines(t)
				require.Equal(t, 1, messages(lines, "order processed"), "the effect ran once")
				require.Equal(t, 1, messages(lines, "duplicate order skipped"))
				for _, l := range lines {
					if l["msg"] == "duplicate order skipped" {
						require.Equal(t, "o-1", l["order_id"])
					}
				}
			})
		})
	}
}

// pipeListener is an in-memory net.Listener: each dial is a net.Pipe, so
// the worker's HTTP server runs inside a synctest bubble.
type pipeListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// get fetches path from the worker's server and decodes its JSON body.
func get(t *testing.T, hc *http.Client, path string) (int, map[string]any) {
	t.Helper()
	resp, err := hc.Get("http://worker:8080" + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), "%s: %q", path, body)
	return resp.StatusCode, m
}

// TestRunServesScaling runs the worker with WORKER_HTTP_ADDR,
// WORKER_SCALING_TARGET and WORKER_EMF_NAMESPACE against the in-memory
// SQS, 5 orders a second: /scaling answers the figure KEDA reads at
// "replicas" as soon as a handler has finished (Run's first reading is
// figured then, not 30 s later); every known reading is one EMF line
// carrying the same figure, with LOG_LEVEL=warn; the probes answer; the
// server is gone after shutdown.
func TestRunServesScaling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("orders", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		// An order waits before Run's first reading: a reading of an empty
		// queue would be known at once (the floor of 1 replica).
		_, err = srv.Send(url, `{"order_id":"first"}`)
		require.NoError(t, err)
		ctx, sigterm := context.WithCancel(context.Background())
		var producer sync.WaitGroup
		producer.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				_, err := srv.Send(url, fmt.Sprintf(`{"order_id":"o-%d","amount_cents":100}`, i))
				require.NoError(t, err)
				time.Sleep(200 * time.Millisecond)
			}
		})

		ln := newPipeListener()
		listen := func(network, addr string) (net.Listener, error) {
			require.Equal(t, "tcp", network)
			require.Equal(t, ":8080", addr)
			return ln, nil
		}
		var out syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- runWith(ctx, env(map[string]string{
				"SQS_QUEUE_URL": url, "WORKER_HTTP_ADDR": ":8080",
				"WORKER_SCALING_TARGET": "30s", "WORKER_EMF_NAMESPACE": "Orders/Worker",
				"LOG_LEVEL": "warn", // the EMF lines do not go through the logger
			}), &out, func(context.Context) (sqsconsumer.Client, error) { return srv.Client(), nil }, 50*time.Millisecond, listen)
		}()
		hc := &http.Client{Transport: &http.Transport{DialContext: ln.dial, DisableKeepAlives: true}}

		time.Sleep(time.Second)
		code, body := get(t, hc, "/scaling")
		require.Equal(t, http.StatusOK, code, "the first completion figures Run's first reading: %v", body)
		require.Equal(t, true, body["known"])
		require.Equal(t, 1.0, body["replicas"])
		code, _ = get(t, hc, "/healthz")
		require.Equal(t, http.StatusOK, code)
		code, _ = get(t, hc, "/readyz")
		require.Equal(t, http.StatusOK, code)

		time.Sleep(time.Minute) // readings at 30 and 60 s are known
		code, body = get(t, hc, "/scaling")
		require.Equal(t, http.StatusOK, code, "%v", body)
		require.Equal(t, true, body["known"])
		require.Equal(t, 1.0, body["replicas"], "5 orders a second on 10 slots of 50 ms: %v", body)
		require.Equal(t, 30.0, body["target_seconds"])

		sigterm()
		producer.Wait()
		require.Equal(t, exitOK, <-done)
		_, err = hc.Get("http://worker:8080/healthz")
		require.ErrorIs(t, err, net.ErrClosed, "the server is shut down with the worker")

		var emf []map[string]any
		for _, l := range out.lines(t) {
			if _, ok := l["_aws"]; ok {
				emf = append(emf, l)
			}
		}
		require.Len(t, emf, 2, "the known readings at 30 and 60 s")
		for _, l := range emf {
			require.Equal(t, "orders", l["QueueName"])
			require.Equal(t, 1.0, l["DesiredReplicas"])
			cw := l["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
			require.Equal(t, "Orders/Worker", cw["Namespace"])
			require.Equal(t, []any{[]any{"QueueName"}}, cw["Dimensions"])
		}
	})
}

func TestRunListenError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("orders", nil)
		require.NoError(t, err)
		var out syncBuffer
		code := runWith(context.Background(), env(map[string]string{"SQS_QUEUE_URL": url, "WORKER_HTTP_ADDR": ":8080"}), &out,
			func(context.Context) (sqsconsumer.Client, error) { return srv.Client(), nil }, time.Millisecond,
			func(string, string) (net.Listener, error) { return nil, errors.New("address already in use") })
		require.Equal(t, exitConfig, code)
		lines := out.lines(t)
		require.Equal(t, 1, messages(lines, "cannot listen on WORKER_HTTP_ADDR"))
		require.Equal(t, 0, messages(lines, "worker started"))
	})
}
