package ecsprotect_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/ecsprotect"
)

const (
	testURI = "http://169.254.170.2/api/0123456789abcdef-1111"
	taskArn = "arn:aws:ecs:us-west-2:111122223333:task/my-cluster/0123456789abcdef"
)

// agentCall is one PUT the fake agent received.
type agentCall struct {
	At      time.Time
	Enable  bool
	Minutes int // ExpiresInMinutes asked; 0 when omitted
}

// agent answers as the ECS agent's task scale-in protection endpoint does
// (see the package doc for the documented shapes): a "protection" object
// with status 200 on success, a "failure" object with status 200 when ECS
// refused the task, an "error" object with a 4xx or 5xx status otherwise.
type agent struct {
	mu      sync.Mutex
	mode    string // "", "error", "failure", "garbage", "hang"
	enabled bool
	expires time.Time
	calls   []agentCall
}

func (a *agent) setMode(m string) {
	a.mu.Lock()
	a.mode = m
	a.mu.Unlock()
}

// protectedAt reports the agent's view: protected and not yet lapsed.
func (a *agent) protectedAt(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.enabled && now.Before(a.expires)
}

func (a *agent) Calls() []agentCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]agentCall(nil), a.calls...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func agentError(code, msg string) map[string]any {
	return map[string]any{"requestID": "12345-abc-6789-0123-abc",
		"error": map[string]any{"Arn": taskArn, "Code": code, "Message": msg}}
}

func (a *agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/0123456789abcdef-1111/task-protection/v1/state" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPut {
		writeJSON(w, http.StatusMethodNotAllowed, agentError("InvalidParameterException", "method "+r.Method))
		return
	}
	var req struct {
		ProtectionEnabled *bool
		ExpiresInMinutes  *int
	}
	if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&req) != nil || req.ProtectionEnabled == nil {
		writeJSON(w, http.StatusBadRequest, agentError("InvalidParameterException", "Invalid request: does not contain 'ProtectionEnabled' field"))
		return
	}
	call := agentCall{At: time.Now(), Enable: *req.ProtectionEnabled}
	if req.ExpiresInMinutes != nil {
		call.Minutes = *req.ExpiresInMinutes
	}
	a.mu.Lock()
	a.calls = append(a.calls, call)
	mode := a.mode
	a.mu.Unlock()
	switch mode {
	case "hang":
		<-r.Context().Done()
		return
	case "error":
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": map[string]any{
			"Arn": taskArn, "Code": "RequestCanceled", "Message": "Timed out calling Amazon ECS Task Protection API"}})
		return
	case "denied":
		writeJSON(w, http.StatusBadRequest, agentError("AccessDeniedException", "not authorized to perform: ecs:UpdateTaskProtection"))
		return
	case "failure":
		writeJSON(w, http.StatusOK, map[string]any{"failure": map[string]any{"Arn": taskArn, "Detail": nil, "Reason": "TASK_NOT_VALID"}})
		return
	case "garbage":
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html>bad gateway</html>"))
		return
	}
	if call.Enable && call.Minutes != 0 && (call.Minutes < 1 || call.Minutes > 2880) {
		writeJSON(w, http.StatusBadRequest, agentError("InvalidParameterException", "expiresInMinutes out of range"))
		return
	}
	a.mu.Lock()
	a.enabled = call.Enable
	var exp any
	if call.Enable {
		m := call.Minutes
		if m == 0 {
			m = 120
		}
		a.expires = call.At.Add(time.Duration(m) * time.Minute).Truncate(time.Second)
		exp = a.expires.UTC().Format(time.RFC3339)
	} else {
		a.expires = time.Time{}
	}
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"protection": map[string]any{
		"ExpirationDate": exp, "ProtectionEnabled": call.Enable, "TaskArn": taskArn}})
}

// memTransport serves requests with an http.Handler in memory, with no
// socket, so it can run inside a synctest bubble. With down set it fails
// as a refused connection does.
type memTransport struct {
	h    http.Handler
	mu   sync.Mutex
	down bool
}

func (m *memTransport) setDown(d bool) {
	m.mu.Lock()
	m.down = d
	m.mu.Unlock()
}

func (m *memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	m.mu.Lock()
	down := m.down
	m.mu.Unlock()
	if down {
		return nil, errors.New("dial tcp 169.254.170.2:80: connect: connection refused")
	}
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.h.ServeHTTP(rec, req)
	}()
	select {
	case <-done:
		return rec.Result(), nil
	case <-req.Context().Done():
		<-done // the handler returns once the request's context is done
		return nil, req.Context().Err()
	}
}

// logBuffer is a slog destination safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) count(level string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), "level="+level+" ")
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// rig is a Protector wired to a fake agent in memory.
type rig struct {
	p     *ecsprotect.Protector
	agent *agent
	tr    *memTransport
	logs  *logBuffer
}

func newRig(t *testing.T, opts ...ecsprotect.Option) *rig {
	t.Helper()
	r := &rig{agent: &agent{}, logs: &logBuffer{}}
	r.tr = &memTransport{h: r.agent}
	logger := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	all := append([]ecsprotect.Option{
		ecsprotect.WithAgentURI(testURI),
		ecsprotect.WithHTTPClient(&http.Client{Transport: r.tr}),
		ecsprotect.WithLogger(logger),
	}, opts...)
	p, err := ecsprotect.New(all...)
	require.NoError(t, err)
	require.NoError(t, p.Start())
	r.p = p
	return r
}

func (r *rig) String() string { return fmt.Sprintf("calls %+v\nlogs:\n%s", r.agent.Calls(), r.logs) }

func slogTo(b *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
