package sqsconsumer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/ecsprotect"
)

// fakeAgent answers PUT /task-protection/v1/state as the ECS agent does
// (a "protection" object with status 200), or with a 500 "error" object
// while down, and records each call: true to enable, false to clear.
type fakeAgent struct {
	mu    sync.Mutex
	down  bool
	calls []bool
	on    bool
}

func (a *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ProtectionEnabled bool
		ExpiresInMinutes  int
	}
	if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, ecsprotect.StatePath) || json.NewDecoder(r.Body).Decode(&in) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if a.down {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"requestID":"r1","error":{"Arn":"arn:aws:ecs:eu-west-1:111122223333:task/c/t","Code":"ServerException","Message":"down"}}`))
		return
	}
	a.calls = append(a.calls, in.ProtectionEnabled)
	a.on = in.ProtectionEnabled
	_ = json.NewEncoder(w).Encode(map[string]any{"requestID": "r1", "protection": map[string]any{
		"ProtectionEnabled": in.ProtectionEnabled, "TaskArn": "arn:aws:ecs:eu-west-1:111122223333:task/c/t",
		"ExpirationDate": time.Now().Add(time.Duration(in.ExpiresInMinutes) * time.Minute).UTC().Format(time.RFC3339),
	}})
}

func (a *fakeAgent) state() (calls []bool, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]bool(nil), a.calls...), a.on
}

func (a *fakeAgent) setDown(down bool) {
	a.mu.Lock()
	a.down = down
	a.mu.Unlock()
}

// handlerTransport serves requests with an http.Handler in memory: no
// socket, so the fake clock of a synctest bubble runs.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	return w.Result(), nil
}

// With WithScaleInProtection the task is protected as soon as the Consumer
// holds a message, through a 3-minute job, and cleared once it has held
// nothing for the quiet period; a Consumer that shares a Protector leaves
// its Close to the caller. A failing agent never delays the work.
func TestScaleInProtection(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		agent := &fakeAgent{}
		p, err := ecsprotect.New(ecsprotect.WithAgentURI("http://169.254.170.2/v1"),
			ecsprotect.WithHTTPClient(&http.Client{Transport: handlerTransport{agent}}),
			ecsprotect.WithQuietPeriod(time.Minute))
		require.NoError(t, err)
		done := make(chan string, 10)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.Body == "long" {
				time.Sleep(3 * time.Minute)
			}
			done <- m.Body
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithScaleInProtection(p))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		synctest.Wait()
		calls, on := agent.state()
		require.Empty(t, calls, "nothing held: no call")
		require.False(t, on)

		_, err = b.srv.Send(b.url, "long")
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		calls, on = agent.state()
		require.Equal(t, []bool{true}, calls, "protected within one call of the first message held")
		require.True(t, on)
		require.True(t, c.Stats().ScaleInProtection.Protected)

		require.Equal(t, "long", <-done)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		_, on = agent.state()
		require.True(t, on, "still protected within the quiet period")
		time.Sleep(time.Minute)
		synctest.Wait()
		calls, on = agent.state()
		require.Equal(t, []bool{true, false}, calls, "cleared once nothing was held for the quiet period, one call each")
		require.False(t, on)

		// The agent fails: the work goes on, the failure is counted.
		agent.setDown(true)
		_, err = b.srv.Send(b.url, "while down")
		require.NoError(t, err)
		select {
		case body := <-done:
			require.Equal(t, "while down", body)
		case <-time.After(5 * time.Second):
			t.Fatal("a failing agent delayed the handler")
		}
		time.Sleep(time.Second)
		st := c.Stats().ScaleInProtection
		require.NotZero(t, st.Failures, "the agent's failures are counted")
		require.Error(t, st.LastError)
		agent.setDown(false)

		require.NoError(t, stop())
		require.True(t, p.Stats().Available, "a shared Protector stays open after Run: its owner closes it")
		require.NoError(t, p.Close())
		_, on = agent.state()
		require.False(t, on)
	})
}

// A Consumer's own Protector (WithScaleInProtection(nil)) is made from
// ECS_AGENT_URI in New, started at Run and cleared after the drain.
func TestScaleInProtectionOwnClearedAtShutdown(t *testing.T) {
	// t.Setenv: not parallel.
	agent := &fakeAgent{}
	t.Setenv(ecsprotect.EnvAgentURI, "http://169.254.170.2/v1")
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		release := make(chan struct{})
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			<-release
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithScaleInProtection(nil))
		require.NoError(t, err)
		require.True(t, c.s.ownProtect)
		// The Consumer's own Protector reaches the fake agent in memory.
		swapProtectorTransport(t, c, handlerTransport{agent})
		stop := running(t, c)
		_, err = b.srv.Send(b.url, "m")
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		_, on := agent.state()
		require.True(t, on, "%+v", c.Stats().ScaleInProtection)
		close(release)
		require.NoError(t, stop())
		calls, on := agent.state()
		require.False(t, on, "cleared after the drain, without waiting for the quiet period")
		require.Equal(t, []bool{true, false}, calls)
	})
}

// swapProtectorTransport points the Consumer's own Protector at rt by
// remaking it with the same environment and an in-memory client.
func swapProtectorTransport(t *testing.T, c *Consumer, rt http.RoundTripper) {
	t.Helper()
	p, err := ecsprotect.New(ecsprotect.WithHTTPClient(&http.Client{Transport: rt}))
	require.NoError(t, err)
	c.s.protector = p
}
