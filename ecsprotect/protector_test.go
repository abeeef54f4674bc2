package ecsprotect_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/ecsprotect"
)

// The first message held protects the task with one call, made at once,
// asking for the default ExpiresInMinutes; more messages cost nothing.
func TestBusyProtectsWithinOneCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		defer r.p.Close()
		start := time.Now()
		r.p.Acquire()
		synctest.Wait()
		calls := r.agent.Calls()
		require.Len(t, calls, 1, r)
		require.Equal(t, ecsprotectCall(start, true, 60), calls[0])
		require.True(t, r.agent.protectedAt(time.Now()))
		for range 50 {
			r.p.Acquire()
		}
		synctest.Wait()
		require.Len(t, r.agent.Calls(), 1, "more messages held cost no call")
		st := r.p.Stats()
		require.True(t, st.Available)
		require.True(t, st.Protected)
		require.EqualValues(t, 51, st.Held)
		require.EqualValues(t, 1, st.Calls)
		require.EqualValues(t, 1, st.Enables)
		require.Equal(t, start.Add(60*time.Minute).Truncate(time.Second).UTC(), st.ExpiresAt.UTC())
		require.NoError(t, st.LastError)
	})
}

func ecsprotectCall(at time.Time, enable bool, minutes int) agentCall {
	return agentCall{At: at, Enable: enable, Minutes: minutes}
}

// Idle for the quiet period clears the protection, not before; a trickle
// whose gaps are shorter than the quiet period keeps it without a call.
func TestIdleClearsAfterQuietPeriod(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		defer r.p.Close()
		// A trickle: one 5 s message every 90 s for 24 minutes (a renewal
		// is due at 30).
		for range 16 {
			r.p.Acquire()
			time.Sleep(5 * time.Second)
			r.p.Release()
			time.Sleep(85 * time.Second)
		}
		synctest.Wait()
		require.Len(t, r.agent.Calls(), 1, "a trickle inside the quiet period does not flap: %v", r)
		require.True(t, r.agent.protectedAt(time.Now()))

		r.p.Acquire()
		time.Sleep(time.Second)
		r.p.Release()
		idle := time.Now()
		time.Sleep(ecsprotect.DefaultQuietPeriod - time.Second)
		synctest.Wait()
		require.Len(t, r.agent.Calls(), 1, "not cleared before the quiet period")
		require.True(t, r.p.Stats().Protected)
		time.Sleep(time.Second)
		synctest.Wait()
		calls := r.agent.Calls()
		require.Len(t, calls, 2, r)
		require.Equal(t, ecsprotectCall(idle.Add(ecsprotect.DefaultQuietPeriod), false, 0), calls[1])
		require.False(t, r.agent.protectedAt(time.Now()))
		st := r.p.Stats()
		require.False(t, st.Protected)
		require.True(t, st.ExpiresAt.IsZero())
		require.EqualValues(t, 1, st.Clears)

		// With a quiet period of 0 it clears at once.
		q := newRig(t, ecsprotect.WithQuietPeriod(0))
		defer q.p.Close()
		q.p.Acquire()
		synctest.Wait()
		q.p.Release()
		synctest.Wait()
		require.Len(t, q.agent.Calls(), 2)
		require.False(t, q.agent.protectedAt(time.Now()))
	})
}

// Through a 3-hour job the task never goes unprotected: the Protector
// renews at half of ExpiresInMinutes, 2 calls an hour with the default 60.
func TestRenewedBeforeExpiryThroughThreeHourJob(t *testing.T) {
	t.Parallel()
	for _, minutes := range []int{ecsprotect.DefaultExpiresInMinutes, 1, 2880} {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, ecsprotect.WithExpiresInMinutes(minutes))
			defer r.p.Close()
			r.p.Acquire()
			start := time.Now()
			for time.Since(start) < 3*time.Hour {
				time.Sleep(10 * time.Second)
				synctest.Wait()
				require.True(t, r.agent.protectedAt(time.Now()), "lapsed at %v", time.Since(start))
				require.True(t, r.p.Stats().Protected)
			}
			busy := len(r.agent.Calls())
			r.p.Release()
			time.Sleep(ecsprotect.DefaultQuietPeriod)
			synctest.Wait()
			calls := r.agent.Calls()
			if time.Duration(minutes)*time.Minute > ecsprotect.DefaultQuietPeriod {
				require.False(t, calls[len(calls)-1].Enable, "cleared after the quiet period")
			} else {
				require.Len(t, calls, busy, "lapsed by itself within the quiet period: no clear")
			}
			require.False(t, r.agent.protectedAt(time.Now()))
			require.False(t, r.p.Stats().Protected)
			perHour := float64(busy) / 3
			t.Logf("ExpiresInMinutes %d: %d calls while busy for 3 h (%.1f an hour), %d with the clear",
				minutes, busy, perHour, len(calls))
			want := 1 + int(180/(float64(minutes)/2)) // the enable, then one renewal per half-life
			if minutes*30 >= 180*60 {
				want = 1
			}
			require.InDelta(t, want, busy, 1)
			st := r.p.Stats()
			require.EqualValues(t, 1, st.Enables)
			require.EqualValues(t, busy-1, st.Renewals)
			require.Zero(t, st.Failures)
		})
	}
}

// An agent that refuses connections, or answers an error, does not touch
// Acquire and Release; the first failure is logged at WARN, the next ones
// at most once per five minutes; all are counted; it recovers.
func TestAgentDownWorkUnaffected(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		defer r.p.Close()
		r.tr.setDown(true)
		start := time.Now()
		for range 1000 {
			r.p.Acquire()
		}
		for range 999 {
			r.p.Release()
		}
		require.Equal(t, start, time.Now(), "Acquire and Release take no time")
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		st := r.p.Stats()
		require.False(t, st.Protected)
		require.GreaterOrEqual(t, st.Failures, uint64(5), "retried after 1 s, doubling")
		require.Equal(t, st.Calls, st.Failures)
		require.ErrorContains(t, st.LastError, "connection refused")
		require.Equal(t, 1, r.logs.count("WARN"), r)

		r.tr.setDown(false)
		r.agent.setMode("error")
		time.Sleep(4 * time.Minute)
		synctest.Wait()
		require.Equal(t, 2, r.logs.count("WARN"), "rate-limited to one per 5 minutes: %v", r)
		var ae *ecsprotect.AgentError
		require.ErrorAs(t, r.p.Stats().LastError, &ae)
		require.Equal(t, "RequestCanceled", ae.Code)
		// Retries are capped at one a minute.
		require.LessOrEqual(t, r.p.Stats().Calls, uint64(7+4+1))

		r.agent.setMode("")
		time.Sleep(time.Minute)
		synctest.Wait()
		require.True(t, r.agent.protectedAt(time.Now()), r)
		require.True(t, r.p.Stats().Protected)
		require.Equal(t, 1, r.logs.count("INFO"), "recovery is logged once")

		r.p.Release()
		require.Zero(t, r.p.Stats().Held)
	})
}

// Each of the agent's answer shapes becomes an *AgentError in Stats.
func TestAgentErrorShapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		want ecsprotect.AgentError
	}{
		{"error", ecsprotect.AgentError{Status: 500, Arn: taskArn, Code: "RequestCanceled",
			Message: "Timed out calling Amazon ECS Task Protection API"}},
		{"denied", ecsprotect.AgentError{Status: 400, RequestID: "12345-abc-6789-0123-abc", Arn: taskArn,
			Code: "AccessDeniedException", Message: "not authorized to perform: ecs:UpdateTaskProtection"}},
		{"failure", ecsprotect.AgentError{Status: 200, Arn: taskArn, Reason: "TASK_NOT_VALID"}},
		{"garbage", ecsprotect.AgentError{Status: 502, Message: "<html>bad gateway</html>"}},
	} {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t)
			defer r.p.Close()
			r.agent.setMode(tc.mode)
			r.p.Acquire()
			synctest.Wait()
			st := r.p.Stats()
			require.EqualValues(t, 1, st.Failures)
			var ae *ecsprotect.AgentError
			require.ErrorAs(t, st.LastError, &ae, tc.mode)
			require.Equal(t, tc.want, *ae)
			require.Contains(t, r.logs.String(), "level=WARN")
			require.False(t, st.Protected)
			r.p.Release()
		})
	}
}

// Two Consumers of a fleet share one Protector: one protection for the
// task, enabled once while either holds a message, cleared once the last
// has been idle for the quiet period.
func TestFleetSharesOneProtector(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		defer r.p.Close()
		var wg sync.WaitGroup
		holder := func(first, every, hold time.Duration, n int) {
			defer wg.Done()
			time.Sleep(first)
			for range n {
				r.p.Acquire()
				time.Sleep(hold)
				r.p.Release()
				time.Sleep(every - hold)
			}
		}
		wg.Add(2)
		go holder(0, 10*time.Second, 8*time.Second, 60)              // 10 minutes
		go holder(5*time.Minute, 20*time.Second, 15*time.Second, 45) // from 5 to 20 minutes
		wg.Wait()
		last := time.Now().Add(-5 * time.Second) // the second holder's last Release
		synctest.Wait()
		require.Len(t, r.agent.Calls(), 1, r)
		time.Sleep(ecsprotect.DefaultQuietPeriod)
		synctest.Wait()
		calls := r.agent.Calls()
		require.Len(t, calls, 2, r)
		require.Equal(t, ecsprotectCall(last.Add(ecsprotect.DefaultQuietPeriod), false, 0), calls[1])
	})
}

// A hanging agent costs one call timeout per call, on the Protector's
// goroutine only; Acquire and Release return at once meanwhile.
func TestCallTimeoutBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, ecsprotect.WithCallTimeout(2*time.Second))
		r.agent.setMode("hang")
		start := time.Now()
		r.p.Acquire()
		synctest.Wait() // the call hangs
		require.Len(t, r.agent.Calls(), 1)
		r.p.Acquire()
		r.p.Release()
		require.Equal(t, start, time.Now(), "Acquire and Release do not wait for a hanging call")
		time.Sleep(2*time.Second - time.Millisecond)
		synctest.Wait()
		require.Zero(t, r.p.Stats().Failures)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		st := r.p.Stats()
		require.EqualValues(t, 1, st.Failures)
		require.ErrorIs(t, st.LastError, context.DeadlineExceeded)

		// Close cancels the call in flight and clears, bounded by one call
		// timeout: the clear hangs too, and fails.
		time.Sleep(time.Second + time.Millisecond) // the retry is in flight
		synctest.Wait()
		require.Len(t, r.agent.Calls(), 2)
		closing := time.Now()
		err := r.p.Close()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 2*time.Second, time.Since(closing))
		calls := r.agent.Calls()
		require.Len(t, calls, 3)
		require.False(t, calls[2].Enable)
		require.EqualValues(t, 2, r.p.Stats().Failures, "the call cancelled by Close is no failure")
		require.NoError(t, r.p.Close(), "a second Close does nothing")
	})
}

// Close clears a protection that is set, after the holders drained; Start
// after Close fails; Acquire and Release still count.
func TestCloseClears(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.p.Acquire()
		synctest.Wait()
		require.True(t, r.agent.protectedAt(time.Now()))
		r.p.Release()
		require.NoError(t, r.p.Close())
		require.False(t, r.agent.protectedAt(time.Now()))
		calls := r.agent.Calls()
		require.Len(t, calls, 2)
		require.False(t, calls[1].Enable)
		require.False(t, r.p.Stats().Protected)
		require.ErrorIs(t, r.p.Start(), ecsprotect.ErrClosed)
		r.p.Acquire()
		r.p.Release()
		synctest.Wait()
		require.Len(t, r.agent.Calls(), 2, "no call after Close")

		// Never protected: Close makes no call.
		q := newRig(t)
		require.NoError(t, q.p.Close())
		require.Empty(t, q.agent.Calls())
	})
}

// Without ECS_AGENT_URI the Protector counts, makes no call, says once at
// WARN that protection is unavailable, and reports it in Stats.
func TestNoAgent(t *testing.T) {
	t.Setenv(ecsprotect.EnvAgentURI, "")
	r := &rig{agent: &agent{}, logs: &logBuffer{}}
	r.tr = &memTransport{h: r.agent}
	p, err := ecsprotect.New(
		ecsprotect.WithHTTPClient(&http.Client{Transport: r.tr}),
		ecsprotect.WithLogger(slogTo(r.logs)))
	require.NoError(t, err)
	require.NoError(t, p.Start())
	require.NoError(t, p.Start())
	for range 3 {
		p.Acquire()
		p.Release()
	}
	p.Acquire()
	st := p.Stats()
	require.False(t, st.Available)
	require.EqualValues(t, 1, st.Held)
	require.ErrorIs(t, st.LastError, ecsprotect.ErrNoAgent)
	require.Zero(t, st.Calls)
	require.NoError(t, p.Close())
	require.Equal(t, 1, r.logs.count("WARN"), r)
	require.Empty(t, r.agent.Calls())
}

// ECS_AGENT_URI is read by default, and the state path appended to it.
func TestAgentURIFromEnvironment(t *testing.T) {
	t.Setenv(ecsprotect.EnvAgentURI, testURI+"/")
	a := &agent{}
	synctest.Test(t, func(t *testing.T) {
		p, err := ecsprotect.New(ecsprotect.WithHTTPClient(&http.Client{Transport: &memTransport{h: a}}),
			ecsprotect.WithLogger(slogTo(&logBuffer{})))
		require.NoError(t, err)
		require.NoError(t, p.Start())
		p.Acquire()
		synctest.Wait()
		require.True(t, p.Stats().Protected, p.Stats().LastError)
		p.Release()
		require.NoError(t, p.Close())
		require.Len(t, a.Calls(), 2)
	})
	t.Setenv(ecsprotect.EnvAgentURI, "169.254.170.2/api/x")
	_, err := ecsprotect.New()
	require.ErrorContains(t, err, "ECS_AGENT_URI")
}

// Over a real socket with the default client (outside any bubble).
func TestOverHTTP(t *testing.T) {
	t.Parallel()
	a := &agent{}
	srv := httptest.NewServer(a)
	defer srv.Close()
	p, err := ecsprotect.New(ecsprotect.WithAgentURI(srv.URL+"/api/0123456789abcdef-1111"),
		ecsprotect.WithLogger(slogTo(&logBuffer{})))
	require.NoError(t, err)
	require.NoError(t, p.Start())
	p.Acquire()
	require.Eventually(t, func() bool { return p.Stats().Protected }, 5*time.Second, 5*time.Millisecond)
	p.Release()
	require.NoError(t, p.Close())
	require.False(t, a.protectedAt(time.Now()))
	require.Len(t, a.Calls(), 2)
}

func TestOptionValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opt  ecsprotect.Option
		want string // "" when valid
	}{
		{ecsprotect.WithExpiresInMinutes(0), "ecsprotect.WithExpiresInMinutes(0): must be from 1 to 2880"},
		{ecsprotect.WithExpiresInMinutes(2881), "ecsprotect.WithExpiresInMinutes(2881): must be from 1 to 2880"},
		{ecsprotect.WithExpiresInMinutes(1), ""},
		{ecsprotect.WithExpiresInMinutes(2880), ""},
		{ecsprotect.WithQuietPeriod(-time.Second), "ecsprotect.WithQuietPeriod(-1s): must be from 0 to 1h0m0s"},
		{ecsprotect.WithQuietPeriod(time.Hour + 1), "ecsprotect.WithQuietPeriod(1h0m0.000000001s)"},
		{ecsprotect.WithQuietPeriod(0), ""},
		{ecsprotect.WithCallTimeout(0), "ecsprotect.WithCallTimeout(0s): must be above 0 and at most 30s"},
		{ecsprotect.WithCallTimeout(31 * time.Second), "ecsprotect.WithCallTimeout(31s)"},
		{ecsprotect.WithCallTimeout(30 * time.Second), ""},
		{ecsprotect.WithHTTPClient(nil), "ecsprotect.WithHTTPClient(nil)"},
		{ecsprotect.WithAgentURI("169.254.170.2/api"), `ecsprotect.WithAgentURI "169.254.170.2/api": must be an absolute http or https URI`},
		{ecsprotect.WithAgentURI("ftp://169.254.170.2/api"), "ecsprotect.WithAgentURI"},
		{ecsprotect.WithAgentURI(""), ""},
	} {
		p, err := ecsprotect.New(ecsprotect.WithAgentURI(""), tc.opt)
		if tc.want == "" {
			require.NoError(t, err)
			require.NotNil(t, p)
			continue
		}
		require.ErrorContains(t, err, tc.want)
		require.Nil(t, p)
	}
	// Every invalid option is named, not only the first.
	_, err := ecsprotect.New(ecsprotect.WithExpiresInMinutes(0), ecsprotect.WithCallTimeout(0))
	require.ErrorContains(t, err, "WithExpiresInMinutes")
	require.ErrorContains(t, err, "WithCallTimeout")
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	t.Parallel()
	p, err := ecsprotect.New(ecsprotect.WithAgentURI(""), ecsprotect.WithLogger(slogTo(&logBuffer{})))
	require.NoError(t, err)
	require.PanicsWithValue(t, "ecsprotect: Release without Acquire", p.Release)
	p.Acquire()
	p.Release()
	require.Zero(t, p.Stats().Held)
	require.True(t, errors.Is(p.Stats().LastError, ecsprotect.ErrNoAgent))
}

// A steady busy service (ten handlers, each message 2 s, a new one as soon
// as a slot frees, with moments where none is held between messages)
// costs the enable and then 2 calls an hour with the defaults.
func TestCallsPerHourSteadyBusy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		defer r.p.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 6*time.Hour)
		defer cancel()
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 200 * time.Millisecond)
				for ctx.Err() == nil {
					r.p.Acquire()
					time.Sleep(2 * time.Second)
					r.p.Release()
					time.Sleep(time.Duration(i%3) * time.Second) // gaps: at times nothing is held
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		calls := len(r.agent.Calls())
		perHour := float64(calls-1) / 6
		t.Logf("steady busy for 6 h: %d calls, the enable then %.1f an hour", calls, perHour)
		require.Equal(t, 1+12, calls, r)
		require.Zero(t, r.p.Stats().Failures)
	})
}

// A renewal that fails is retried while the protection still runs: five
// minutes of errors at the renewal do not let it lapse.
func TestRenewalRetriedBeforeLapse(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		defer r.p.Close()
		r.p.Acquire()
		time.Sleep(29 * time.Minute)
		r.agent.setMode("error")
		for range 6 * 5 {
			time.Sleep(10 * time.Second)
			synctest.Wait()
			require.True(t, r.agent.protectedAt(time.Now()))
		}
		require.Greater(t, r.p.Stats().Failures, uint64(3))
		r.agent.setMode("")
		time.Sleep(time.Minute)
		synctest.Wait()
		st := r.p.Stats()
		require.EqualValues(t, 1, st.Renewals, r)
		require.True(t, st.ExpiresAt.After(time.Now().Add(55*time.Minute)), "renewed for another hour")
		r.p.Release()
	})
}

// A message released while the enable is in flight still starts the quiet
// period; one acquired while the clear is in flight protects again.
func TestCountChangesDuringCalls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, ecsprotect.WithCallTimeout(time.Second))
		defer r.p.Close()
		r.agent.setMode("hang")
		r.p.Acquire()
		synctest.Wait()
		r.p.Release() // during the hanging enable
		r.agent.setMode("")
		time.Sleep(ecsprotect.DefaultQuietPeriod)
		synctest.Wait()
		calls := r.agent.Calls()
		require.Len(t, calls, 2, "the enable that may have landed is cleared: %v", r)
		require.False(t, calls[1].Enable)

		r.p.Acquire()
		synctest.Wait()
		r.p.Release()
		r.agent.setMode("hang")
		time.Sleep(ecsprotect.DefaultQuietPeriod)
		synctest.Wait() // the clear hangs
		r.p.Acquire()
		r.agent.setMode("")
		time.Sleep(2 * time.Second) // the clear's timeout, then the retry's 1 s
		synctest.Wait()
		calls = r.agent.Calls()
		require.Len(t, calls, 5, r)
		require.True(t, calls[4].Enable, "the clear may have landed: enabled again")
		require.True(t, r.agent.protectedAt(time.Now()), r)
		require.True(t, r.p.Stats().Protected)
		r.p.Release()
	})
}
