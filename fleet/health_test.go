package fleet_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/fleet"
)

// healthGet asks f's HealthHandler with method and returns the status code
// and the decoded body (nil for no body).
func healthGet(t *testing.T, f *fleet.Fleet, method string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	f.HealthHandler().ServeHTTP(rec, httptest.NewRequest(method, "/healthz", nil))
	if rec.Body.Len() == 0 {
		return rec.Code, nil
	}
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return rec.Code, body
}

// problemsAbout returns the problems that name the queue url.
func problemsAbout(h fleet.Health, url string) []string {
	var out []string
	for _, p := range h.Problems {
		if strings.HasPrefix(p, "queue "+url+": ") {
			out = append(out, p)
		}
	}
	return out
}

// The fleet's health follows its queues': not started before Run, starting
// and running with them, unhealthy while one queue stalls (the problem
// names that queue, and only it), healthy again when it recovers, draining
// while handlers finish after the stop, stopped after. The handler answers
// 503 exactly when Health is unhealthy.
func TestHealthFollowsTheQueues(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "orders", "emails")
		orders, emails := b.urls[0], b.urls[1]
		f, err := fleet.New(4)
		require.NoError(t, err)
		require.NoError(t, f.Add(b.consumer(t, 0, b.handler(0, 8*time.Second), sqsconsumer.WithShutdownTimeout(time.Minute))))
		require.NoError(t, f.Add(b.consumer(t, 1, b.handler(1, time.Second))))

		h := f.Health()
		require.False(t, h.Healthy)
		require.Equal(t, "not started", h.Status)
		require.Equal(t, []string{"fleet.Run has not been called"}, h.Problems)
		require.Len(t, h.Queues, 2)
		require.Equal(t, orders, h.Queues[0].Queue)
		require.Equal(t, emails, h.Queues[1].Queue)
		require.Equal(t, "not started", h.Queues[1].Health.Status)
		code, body := healthGet(t, f, http.MethodGet)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, false, body["healthy"])
		require.Equal(t, "not started", body["status"])
		require.False(t, h.Ready)
		require.Equal(t, http.StatusServiceUnavailable, h.ReadyHTTPStatus())

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		synctest.Wait() // both read their queue's attributes, a round trip
		require.Equal(t, "starting", f.Health().Status)

		time.Sleep(time.Second)
		h = f.Health()
		require.True(t, h.Healthy, h.Problems)
		require.Equal(t, "running", h.Status)
		require.True(t, h.Ready, "every queue takes messages")
		rec := httptest.NewRecorder()
		f.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		code, body = healthGet(t, f, http.MethodGet)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, true, body["healthy"])
		queues := body["queues"].([]any)
		require.Len(t, queues, 2)
		require.Equal(t, emails, queues[1].(map[string]any)["queue"])
		require.Equal(t, "running", queues[1].(map[string]any)["health"].(map[string]any)["status"])

		b.clients[1].down.Store(true) // emails cannot reach SQS
		time.Sleep(3 * time.Minute)
		h = f.Health()
		require.False(t, h.Healthy)
		require.False(t, h.Ready)
		require.Equal(t, "running", h.Status)
		require.Len(t, h.Problems, 1, h.Problems)
		require.Len(t, problemsAbout(h, emails), 1, "the problem names the stalled queue")
		require.Contains(t, h.Problems[0], "connection refused")
		require.Empty(t, problemsAbout(h, orders))
		require.True(t, h.Queues[0].Health.Healthy)
		require.False(t, h.Queues[1].Health.Healthy)
		code, body = healthGet(t, f, http.MethodGet)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, false, body["healthy"])
		require.Contains(t, body["problems"].([]any)[0], "queue "+emails+": ")
		code, body = healthGet(t, f, http.MethodHead)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Nil(t, body, "HEAD has no body")

		b.clients[1].down.Store(false)
		time.Sleep(time.Minute) // the receive backoff ends and a receive is answered
		h = f.Health()
		require.True(t, h.Healthy, h.Problems)

		b.fill(t, 0, 1) // an 8 s handler, running at the stop
		time.Sleep(2 * time.Second)
		cancel()
		synctest.Wait()
		h = f.Health()
		require.Equal(t, "draining", h.Status)
		require.True(t, h.Healthy, h.Problems)
		require.NoError(t, <-done)
		h = f.Health()
		require.Equal(t, "stopped", h.Status)
		require.True(t, h.Healthy, h.Problems)
		code, _ = healthGet(t, f, http.MethodGet)
		require.Equal(t, http.StatusOK, code)
	})
}

// Once a queue's Run failed, the fleet is failed and unhealthy, with the
// problem naming that queue; the queue the fleet stopped because of it,
// still starting, is not named, as in Run's error.
func TestHealthAfterAQueueFailed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 200*time.Millisecond, "healthy")
		f, err := fleet.New(4)
		require.NoError(t, err)
		h := b.handler(0, time.Second)
		healthy, err := sqsconsumer.New(b.clients[0], b.urls[0], h) // reads its VisibilityTimeout at Run
		require.NoError(t, err)
		require.NoError(t, f.Add(healthy))
		missing := b.urls[0] + "-missing"
		c, err := sqsconsumer.New(&latency{Client: b.srv.Client(), rtt: 10 * time.Millisecond}, missing, h)
		require.NoError(t, err)
		require.NoError(t, f.Add(c))

		runErr := f.Run(context.Background())
		require.Error(t, runErr)
		fh := f.Health()
		require.False(t, fh.Healthy)
		require.Equal(t, "failed", fh.Status)
		require.Len(t, fh.Problems, 1, fh.Problems)
		require.Len(t, problemsAbout(fh, missing), 1)
		require.Contains(t, fh.Problems[0], "does not exist")
		require.Empty(t, problemsAbout(fh, b.urls[0]), "the queue the fleet stopped is not a problem")
		require.Equal(t, runErr, fh.Err)
		code, body := healthGet(t, f, http.MethodGet)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "failed", body["status"])
		require.Equal(t, runErr.Error(), body["error"])
	})
}

func TestHealthEdges(t *testing.T) {
	t.Parallel()
	t.Run("no queue", func(t *testing.T) {
		t.Parallel()
		f, err := fleet.New(4)
		require.NoError(t, err)
		h := f.Health()
		require.False(t, h.Healthy)
		require.Equal(t, "not started", h.Status)
		require.Equal(t, []string{"no Consumer is in the fleet"}, h.Problems)
		require.NotNil(t, h.Queues)
		code, body := healthGet(t, f, http.MethodGet)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, []any{}, body["queues"])
	})
	t.Run("other methods", func(t *testing.T) {
		t.Parallel()
		f, err := fleet.New(4)
		require.NoError(t, err)
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			rec := httptest.NewRecorder()
			f.HealthHandler().ServeHTTP(rec, httptest.NewRequest(m, "/healthz", nil))
			require.Equal(t, http.StatusMethodNotAllowed, rec.Code, m)
			require.Equal(t, "GET, HEAD", rec.Header().Get("Allow"))
		}
	})
}
