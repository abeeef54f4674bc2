package sqsconsumer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

const testQueue = "https://sqs.us-east-1.amazonaws.com/123456789012/work"

func TestAdaptiveVisibility(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		p99, lo, hi time.Duration
		want        time.Duration
	}{
		{"no data gives the lower bound", 0, 30 * time.Second, time.Hour, 30 * time.Second},
		{"negative p99 gives the lower bound", -time.Second, 30 * time.Second, time.Hour, 30 * time.Second},
		{"twice p99", 5 * time.Minute, 10 * time.Second, time.Hour, 10 * time.Minute},
		{"rounded up to whole seconds", 7200 * time.Millisecond, 10 * time.Second, time.Hour, 15 * time.Second},
		{"clamped to hi", 50 * time.Minute, 10 * time.Second, time.Hour, time.Hour},
		{"clamped to lo", 2 * time.Second, 20 * time.Second, time.Hour, 20 * time.Second},
		{"fast work meets the floor", 100 * time.Millisecond, 0, time.Hour, MinAdaptiveVisibility},
		{"lo below the floor is raised", time.Second, 3 * time.Second, time.Hour, MinAdaptiveVisibility},
		{"fractional lo rounds up", 0, 12500 * time.Millisecond, time.Hour, 13 * time.Second},
		{"fractional hi rounds down", time.Hour, 10 * time.Second, 90500 * time.Millisecond, 90 * time.Second},
		{"hi below lo: lo wins", time.Hour, 30 * time.Second, 5 * time.Second, 30 * time.Second},
		{"hi 0: lo wins", time.Hour, 30 * time.Second, 0, 30 * time.Second},
		{"hi above 12 h is capped", 20 * time.Hour, 10 * time.Second, 100 * time.Hour, MaxVisibilityTimeout},
		{"huge p99 does not overflow", time.Duration(math.MaxInt64), 10 * time.Second, 2 * time.Hour, 2 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := AdaptiveVisibility(tt.p99, tt.lo, tt.hi)
			require.Equal(t, tt.want, got, "AdaptiveVisibility(%v, %v, %v)", tt.p99, tt.lo, tt.hi)
			require.Zero(t, got%time.Second, "whole seconds")
		})
	}
}

func TestSeverityText(t *testing.T) {
	t.Parallel()
	for _, s := range []Severity{SeverityInfo, SeverityWarn, SeverityError} {
		b, err := json.Marshal(s)
		require.NoError(t, err)
		var back Severity
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, s, back, "round trip of %s", b)
	}
	require.Equal(t, `"warn"`, mustJSON(t, SeverityWarn))
	var s Severity
	require.NoError(t, s.UnmarshalText([]byte("warning")))
	require.Equal(t, SeverityWarn, s)
	require.Error(t, s.UnmarshalText([]byte("fatal")))
	_, err := Severity(7).MarshalText()
	require.Error(t, err)
	require.Equal(t, "severity(7)", Severity(7).String())
	require.Equal(t, "ERROR", SeverityError.Level().String())
	require.Equal(t, "INFO", Severity(7).Level().String())
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestQueueSettingsFromAttributes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		attrs map[string]string
		want  QueueSettings
	}{
		{"empty", nil, QueueSettings{}},
		{"plain", map[string]string{"VisibilityTimeout": "120", "MessageRetentionPeriod": "345600"},
			QueueSettings{VisibilityTimeout: 2 * time.Minute, RetentionPeriod: 96 * time.Hour}},
		{"redrive with a number", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":3}`},
			QueueSettings{MaxReceiveCount: 3}},
		{"redrive with a string", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":"42"}`},
			QueueSettings{MaxReceiveCount: 42}},
		{"malformed values stay zero", map[string]string{"VisibilityTimeout": "soon", "MessageRetentionPeriod": "-5", "RedrivePolicy": `{"maxReceiveCount":`},
			QueueSettings{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, QueueSettingsFromAttributes(tt.attrs))
		})
	}
}

// ev makes an event of message id at virtual second sec.
func ev(kind EventKind, id string, since time.Duration) Event {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return Event{Kind: kind, QueueURL: testQueue, MessageID: id, ReceiveCount: 1, Time: base.Add(since), SinceReceive: since}
}

// transcoding returns n durations whose p50, p90, p99 and p99.9 are those
// of a video-transcoding service (22 s, 95 s, 310 s, 540 s): the quantile
// function is interpolated log-linearly between those points (from 2 s at
// q=0 to 600 s at q=1) and sampled at evenly spaced q, so the sample's
// percentiles are those figures by construction.
func transcoding(n int) []time.Duration {
	knots := []struct{ q, sec float64 }{{0, 2}, {0.5, 22}, {0.9, 95}, {0.99, 310}, {0.999, 540}, {1, 600}}
	out := make([]time.Duration, n)
	for i := range out {
		u := (float64(i) + 0.5) / float64(n)
		k := 1
		for knots[k].q < u {
			k++
		}
		a, b := knots[k-1], knots[k]
		f := (u - a.q) / (b.q - a.q)
		sec := math.Exp(math.Log(a.sec) + f*(math.Log(b.sec)-math.Log(a.sec)))
		out[i] = time.Duration(sec * float64(time.Second))
	}
	return out
}

// TestAdviceTranscoding runs that transcoding workload through a
// simulated consumer (50 workers, a 120 s lease renewed every 40 s) under
// synctest and checks the advice: heartbeating with a lease near p90, not a
// 10-minute constant, and the time to DLQ for maxReceiveCount 3.
func TestAdviceTranscoding(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		durations := transcoding(10_000)
		// Interleave long and short jobs the way uploads arrive.
		for i := range durations {
			j := (i * 7919) % len(durations)
			durations[i], durations[j] = durations[j], durations[i]
		}
		rec := newStatsRecorder()
		const workers, lease = 50, 120 * time.Second
		jobs := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range jobs {
					id := strconv.Itoa(i)
					start := time.Now()
					emit := func(k EventKind) {
						rec.Observe(Event{Kind: k, QueueURL: testQueue, MessageID: id, ReceiveCount: 1, Time: time.Now(), SinceReceive: time.Since(start)})
					}
					emit(EventReceived)
					emit(EventStarted)
					end := start.Add(durations[i])
					for next := start.Add(lease / 3); next.Before(end); next = next.Add(lease / 3) {
						time.Sleep(time.Until(next))
						emit(EventRenewed)
					}
					time.Sleep(time.Until(end))
					emit(EventSucceeded)
					emit(EventDeleted)
				}
			})
		}
		for i := range durations {
			jobs <- i
		}
		close(jobs)
		wg.Wait()

		st := rec.Stats()
		require.Equal(t, int64(len(durations)), st.Processed)
		for _, c := range []struct {
			name      string
			got, want time.Duration
		}{{"p50", st.P50, 22 * time.Second}, {"p90", st.P90, 95 * time.Second}, {"p99", st.P99, 310 * time.Second}, {"p99.9", st.P999, 540 * time.Second}} {
			require.InEpsilon(t, float64(c.want), float64(c.got), 0.04, "%s: got %v, want %v", c.name, c.got, c.want)
		}
		// Renewals start a third into the lease (40 s): about a third of the
		// jobs renew at all, and few more than once.
		require.InDelta(t, st.ShareAbove(40*time.Second), st.RenewedShare, 0.02, "jobs longer than 40 s are renewed")
		require.Less(t, st.RenewedShare, 0.5, "most jobs never renew")
		require.Less(t, st.ShareAbove(120*time.Second), 0.10, "about 90 %% finish inside the first lease")

		adv := st.Advise(QueueSettings{
			VisibilityTimeout: 10 * time.Minute, // a generous constant, sized for the tail
			MaxReceiveCount:   3,
			RetentionPeriod:   4 * 24 * time.Hour,
			ShutdownTimeout:   defaultShutdownTimeout,
		})
		t.Log("\n" + adv.String())

		require.True(t, adv.Heartbeat, "a long tail calls for heartbeating")
		require.Equal(t, 120*time.Second, adv.VisibilityTimeout, "a lease near p90 (95 s) with headroom")
		require.Equal(t, 6*time.Minute, adv.TimeToDLQ, "3 × 120 s")

		hb := find(t, adv, TopicHeartbeat)
		m := regexp.MustCompile(`rather than a constant lease of (\S+) \(p99 (\S+) × 2 = (\S+), rounded up to (\S+)\)`).FindStringSubmatch(hb.Message)
		require.NotNil(t, m, "names the constant it avoids, p99 × 2 rounded up to 10 s: %s", hb.Message)
		constant, p99, twice, up := parseDur(t, m[1]), parseDur(t, m[2]), parseDur(t, m[3]), parseDur(t, m[4])
		require.Equal(t, 2*p99, twice, "the arithmetic holds for the figures shown")
		require.Equal(t, constant, up)
		require.Equal(t, roundLease(twice), up)
		require.InDelta(t, 625, up.Seconds(), 5, "620 s or 630 s")
		require.Equal(t, 120*time.Second, hb.Value)

		vis := find(t, adv, TopicVisibility)
		require.Equal(t, SeverityWarn, vis.Severity, "a 10-minute lease is too long: %s", vis.Message)
		require.Equal(t, 120*time.Second, vis.Value)

		dlq := find(t, adv, TopicTimeToDLQ)
		require.Equal(t, SeverityInfo, dlq.Severity)
		require.Equal(t, 6*time.Minute, dlq.Value)
		require.Contains(t, dlq.Message, "maxReceiveCount 3 × the current 10m lease = 30m (at the recommended 2m lease: 6m)")

		sd := find(t, adv, TopicShutdown)
		require.Equal(t, SeverityWarn, sd.Severity, "a 20 s budget cuts most long transcodes: %s", sd.Message)

		require.Equal(t, SeverityInfo, find(t, adv, TopicRedelivery).Severity)
		require.Equal(t, SeverityWarn, adv.Worst())
	})
}

func find(t *testing.T, a Advice, topic Topic) Recommendation {
	t.Helper()
	for _, r := range a.Recommendations {
		if r.Topic == topic {
			return r
		}
	}
	require.Failf(t, "no recommendation", "topic %s missing from:\n%s", topic, a)
	return Recommendation{}
}

func hasTopic(a Advice, topic Topic) bool {
	for _, r := range a.Recommendations {
		if r.Topic == topic {
			return true
		}
	}
	return false
}

// statsOf records durations as deleted messages and returns the stats.
func statsOf(durations ...time.Duration) Stats {
	r := newStatsRecorder()
	for i, d := range durations {
		id := strconv.Itoa(i)
		r.Observe(ev(EventReceived, id, 0))
		r.Observe(ev(EventStarted, id, 0))
		r.Observe(ev(EventDeleted, id, d))
	}
	return r.Stats()
}

// spread returns n durations evenly spread from lo to hi.
func spread(n int, lo, hi time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = lo + time.Duration(float64(hi-lo)*float64(i)/float64(max(n-1, 1)))
	}
	return out
}

func TestAdvise(t *testing.T) {
	t.Parallel()
	narrow := statsOf(spread(2000, 5*time.Second, 10*time.Second)...) // p99 ≈ 10 s, no tail
	// steps: p90 1 s, p99 5 s, p99.9 20 s.
	steps := statsOf(append(append(spread(900, time.Second, time.Second), spread(90, 5*time.Second, 5*time.Second)...), spread(10, 20*time.Second, 20*time.Second)...)...)
	day := 24 * time.Hour
	tests := []struct {
		name  string
		stats Stats
		q     QueueSettings
		check func(t *testing.T, a Advice)
	}{
		{"nothing processed", newStatsRecorder().Stats(), QueueSettings{VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 5},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityInfo, find(t, a, TopicData).Severity)
				require.Zero(t, a.VisibilityTimeout)
				require.Zero(t, a.TimeToDLQ)
				require.Equal(t, 150*time.Second, find(t, a, TopicTimeToDLQ).Value, "the current lease still gives a time to DLQ")
				require.False(t, hasTopic(a, TopicVisibility))
			}},
		{"few samples are flagged", statsOf(spread(20, time.Second, 2*time.Second)...), QueueSettings{},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityWarn, find(t, a, TopicData).Severity)
			}},
		{"narrow distribution: p99 × 2, no heartbeat", narrow, QueueSettings{VisibilityTimeout: 20 * time.Second, MaxReceiveCount: 5, RetentionPeriod: 4 * day},
			func(t *testing.T, a Advice) {
				require.False(t, a.Heartbeat)
				require.False(t, hasTopic(a, TopicHeartbeat))
				require.Equal(t, 20*time.Second, a.VisibilityTimeout)
				require.Equal(t, SeverityInfo, find(t, a, TopicVisibility).Severity)
				require.Equal(t, 100*time.Second, a.TimeToDLQ)
				require.False(t, hasTopic(a, TopicShutdown), "unknown budget: no check")
			}},
		{"fast work meets the floor", statsOf(spread(500, time.Millisecond, 50*time.Millisecond)...), QueueSettings{},
			func(t *testing.T, a Advice) {
				require.Equal(t, MinAdaptiveVisibility, a.VisibilityTimeout)
			}},
		{"a lease far too short", narrow, QueueSettings{VisibilityTimeout: 5 * time.Second},
			func(t *testing.T, a Advice) {
				r := find(t, a, TopicVisibility)
				require.Equal(t, SeverityWarn, r.Severity)
				require.Contains(t, r.Message, "renewals")
			}},
		{"a long lease", narrow, QueueSettings{VisibilityTimeout: 5 * time.Minute},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityWarn, find(t, a, TopicVisibility).Severity)
			}},
		{"no redrive policy", narrow, QueueSettings{VisibilityTimeout: 20 * time.Second, RetentionPeriod: 4 * day},
			func(t *testing.T, a Advice) {
				r := find(t, a, TopicTimeToDLQ)
				require.Equal(t, SeverityWarn, r.Severity)
				require.Contains(t, r.Message, "no redrive policy")
				require.Contains(t, r.Message, "until retention (96h)")
			}},
		{"queue attributes unknown: no DLQ check", narrow, QueueSettings{VisibilityTimeout: 20 * time.Second},
			func(t *testing.T, a Advice) {
				require.False(t, hasTopic(a, TopicTimeToDLQ))
			}},
		{"time to DLQ beyond retention", narrow, QueueSettings{VisibilityTimeout: 12 * time.Hour, MaxReceiveCount: 10, RetentionPeriod: 4 * day},
			func(t *testing.T, a Advice) {
				r := find(t, a, TopicTimeToDLQ)
				require.Equal(t, SeverityError, r.Severity, r.Message)
				require.Contains(t, r.Message, "expire before they reach the DLQ")
				require.Equal(t, SeverityError, a.Recommendations[0].Severity, "most severe first")
			}},
		{"time to DLQ above a quarter of retention", narrow, QueueSettings{VisibilityTimeout: 3 * time.Hour, MaxReceiveCount: 10, RetentionPeriod: 4 * day},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityWarn, find(t, a, TopicTimeToDLQ).Severity)
			}},
		{"shutdown budget covers p99", narrow, QueueSettings{ShutdownTimeout: 30 * time.Second},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityInfo, find(t, a, TopicShutdown).Severity)
			}},
		{"shutdown budget between p90 and p99", steps, QueueSettings{ShutdownTimeout: 3 * time.Second},
			func(t *testing.T, a Advice) {
				r := find(t, a, TopicShutdown)
				require.Equal(t, SeverityInfo, r.Severity)
				require.Contains(t, r.Message, "below p99")
			}},
		{"ceiling hits", with(narrow, func(s *Stats) { s.CeilingHits = 2 }), QueueSettings{},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityWarn, find(t, a, TopicCeiling).Severity)
			}},
		{"work beyond the ceiling", statsOf(spread(200, 7*time.Hour, 10*time.Hour)...), QueueSettings{},
			func(t *testing.T, a Advice) {
				require.Equal(t, MaxVisibilityTimeout, a.VisibilityTimeout)
				require.Equal(t, SeverityWarn, find(t, a, TopicCeiling).Severity)
			}},
		{"first deliveries only", with(narrow, func(s *Stats) { s.ReceiveCounts = map[int]int64{1: 2000} }), QueueSettings{},
			func(t *testing.T, a Advice) {
				r := find(t, a, TopicRedelivery)
				require.Equal(t, SeverityInfo, r.Severity)
				require.Contains(t, r.Message, "1:2000")
			}},
		{"redeliveries explained by releases", with(narrow, func(s *Stats) {
			s.ReceiveCounts = map[int]int64{1: 1990, 2: 10}
			s.Released = 12
		}), QueueSettings{},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityInfo, find(t, a, TopicRedelivery).Severity)
			}},
		{"unexplained redeliveries: the earliest sign of overrun", with(narrow, func(s *Stats) {
			s.ReceiveCounts = map[int]int64{1: 1960, 2: 38, 3: 2}
			s.Released = 3
		}), QueueSettings{},
			func(t *testing.T, a Advice) {
				r := find(t, a, TopicRedelivery)
				require.Equal(t, SeverityWarn, r.Severity)
				require.Contains(t, r.Message, "2% of receives")
				require.Contains(t, r.Message, "1:1960 2:38 3:2")
			}},
		{"lapsed leases", with(narrow, func(s *Stats) {
			s.ReceiveCounts = map[int]int64{1: 2000}
			s.Adopted, s.LeasesLost = 3, 1
		}), QueueSettings{},
			func(t *testing.T, a Advice) {
				r := find(t, a, TopicRedelivery)
				require.Equal(t, SeverityWarn, r.Severity)
				require.Contains(t, r.Message, "4 leases lapsed")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := tt.stats.Advise(tt.q)
			t.Log("\n" + a.String())
			tt.check(t, a)
			for _, r := range a.Recommendations {
				require.NotEmpty(t, r.Message)
				require.True(t, strings.HasPrefix(r.String(), r.Severity.String()+" "+string(r.Topic)+": "))
			}
		})
	}
}

func with(s Stats, f func(*Stats)) Stats {
	f(&s)
	return s
}

func TestAdaptiveFollowsShift(t *testing.T) {
	t.Parallel()
	r := newStatsRecorder()
	const lo, hi, fallback = 15 * time.Second, 30 * time.Minute, 45 * time.Second
	settle := func(i int, d time.Duration) {
		id := strconv.Itoa(i)
		r.Observe(ev(EventReceived, id, 0))
		r.Observe(ev(EventStarted, id, 0))
		r.Observe(ev(EventDeleted, id, d))
	}
	require.Equal(t, fallback, r.adaptiveVisibility(lo, hi, fallback), "no data: the fallback")
	require.Equal(t, hi, r.adaptiveVisibility(lo, hi, time.Hour), "the fallback is clamped")
	i := 0
	for ; i < adaptiveMinSamples-1; i++ {
		settle(i, 2*time.Second)
	}
	require.Equal(t, fallback, r.adaptiveVisibility(lo, hi, fallback), "too few samples: the fallback")
	for ; i < 1000; i++ {
		settle(i, 2*time.Second)
	}
	require.Equal(t, lo, r.adaptiveVisibility(lo, hi, fallback), "fast work: the lower bound")

	// The work turns slow: the lease follows within a few messages.
	n := 0
	for ; r.adaptiveVisibility(lo, hi, fallback) < 4*time.Minute; n++ {
		require.Less(t, n, 10, "the lease did not follow slow work")
		settle(i, 2*time.Minute)
		i++
	}
	require.Equal(t, 4*time.Minute, AdaptiveVisibility(r.Stats().RecentP99, lo, hi))
	t.Logf("the lease followed slow work after %d messages", n)

	// Fast again: it comes back down within the window (at most 512).
	n = 0
	for ; r.adaptiveVisibility(lo, hi, fallback) > lo; n++ {
		require.Less(t, n, 2*recentHalf, "the lease did not come back down")
		settle(i, 2*time.Second)
		i++
	}
	t.Logf("the lease came back down after %d messages", n)
}

func TestFormatting(t *testing.T) {
	t.Parallel()
	durs := []struct {
		d    time.Duration
		want string
	}{
		{250 * time.Millisecond, "250ms"}, {95 * time.Second, "95s"}, {120 * time.Second, "2m"},
		{10 * time.Minute, "10m"}, {620 * time.Second, "620s"}, {time.Hour, "1h"}, {90 * time.Minute, "1h30m"},
		{96 * time.Hour, "96h"}, {3723 * time.Second, "1h2m3s"},
	}
	for _, tt := range durs {
		require.Equal(t, tt.want, fmtDur(tt.d), "fmtDur(%v)", tt.d)
	}
	rounds := []struct{ d, want time.Duration }{
		{7300 * time.Millisecond, 8 * time.Second}, {60 * time.Second, time.Minute}, {118750 * time.Millisecond, 120 * time.Second},
		{620 * time.Second, 620 * time.Second}, {16*time.Minute + time.Second, 17 * time.Minute}, {121 * time.Minute, 125 * time.Minute}, {0, 0},
	}
	for _, tt := range rounds {
		require.Equal(t, tt.want, roundLease(tt.d), "roundLease(%v)", tt.d)
	}
	pcts := []struct {
		f    float64
		want string
	}{{0, "0%"}, {0.0004, "<0.1%"}, {0.019, "1.9%"}, {0.5, "50%"}}
	for _, tt := range pcts {
		require.Equal(t, tt.want, pct(tt.f))
	}
	require.Equal(t, "under 0.1%", about(0.0004))
	require.Equal(t, "about 1.9%", about(0.019))
	exact := []struct {
		d    time.Duration
		want string
	}{
		{6 * time.Millisecond, "6ms"}, {1250 * time.Microsecond, "1.25ms"}, {16800 * time.Millisecond, "16.8s"},
		{118750 * time.Millisecond, "118.75s"}, {962 * time.Second, "962s"}, {17 * time.Minute, "17m"},
		{20*time.Minute + 500*time.Millisecond, "20m0.5s"}, {14 * time.Hour, "14h"},
	}
	for _, tt := range exact {
		require.Equal(t, tt.want, exactDur(tt.d), "exactDur(%v)", tt.d)
	}
	figs := []struct{ d, want time.Duration }{
		{0, 0}, {-time.Second, 0}, {999 * time.Nanosecond, time.Microsecond}, {1000500 * time.Nanosecond, 1010 * time.Microsecond},
		{8433 * time.Millisecond, 8440 * time.Millisecond}, {10010 * time.Millisecond, 10100 * time.Millisecond},
		{61200 * time.Millisecond, 62 * time.Second}, {time.Hour, time.Hour},
	}
	for _, tt := range figs {
		require.Equal(t, tt.want, figure(tt.d), "figure(%v)", tt.d)
	}
	factors := []struct {
		r    float64
		want string
	}{{1.94, "1.9×"}, {2.04, "2×"}, {3, "3×"}, {9.96, "10×"}, {540, "540×"}}
	for _, tt := range factors {
		require.Equal(t, tt.want, times(tt.r), "times(%v)", tt.r)
	}
	require.Equal(t, "just over", timesOver(80*time.Second, 79*time.Second))
	require.Equal(t, "0.043", sig2(0.0432))
	require.Equal(t, "1.5", sig2(1.46))
	require.Equal(t, "12", sig2(12.3))
}

func ExampleStats_Advise() {
	rec := newStatsRecorder()
	// Simulate 1,000 messages that each took 4 to 8 s from receive to delete.
	for i := range 1000 {
		id := strconv.Itoa(i)
		since := 4*time.Second + time.Duration(i)*4*time.Millisecond
		rec.Observe(Event{Kind: EventReceived, MessageID: id, ReceiveCount: 1})
		rec.Observe(Event{Kind: EventStarted, MessageID: id})
		rec.Observe(Event{Kind: EventDeleted, MessageID: id, SinceReceive: since})
	}
	st := rec.Stats()
	fmt.Println("p99:", st.P99.Round(100*time.Millisecond))
	adv := st.Advise(QueueSettings{VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 5, RetentionPeriod: 4 * 24 * time.Hour})
	fmt.Print(adv)
	// Output:
	// p99: 8s
	// info visibility_timeout: lease 30s is 1.9× the 16s recommended (p99 8s × 2 = 16s): it works, but a crashed consumer's messages stay invisible up to 30s instead of 16s
	// info time_to_dlq: a message whose consumer crashes or times out on every attempt reaches the DLQ after maxReceiveCount 5 × the current 30s lease = 150s (at the recommended 16s lease: 80s), <0.1% of retention (96h); a handler that hangs is renewed up to the maximum lease duration on each attempt, so bound handlers with WithHandlerTimeout
	// info redelivery: every receive was a first delivery (receive counts 1:1000): no sign of overrun
}

func parseDur(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	require.NoError(t, err, "%q is a duration", s)
	return d
}

// figures returns Stats with the given p99 (p50 and p90 below it, no
// tail) and no distribution: ShareAbove is 0.
func figures(p99 time.Duration) Stats {
	return Stats{Processed: 500, P50: p99 / 4, P90: p99 / 2, P99: p99, P999: p99, Max: p99}
}

// TestAdviceWording pins the words of the lease recommendations: how a
// lease in force compares with the recommended one at several ratios, and
// how the recommended lease is derived when it is exact, rounded up,
// raised to the floor or capped at the ceiling.
func TestAdviceWording(t *testing.T) {
	t.Parallel()
	const crashed = "; a crashed consumer's messages come back after at most that long"
	// steps: p90 1 s, p99 5 s, p99.9 20 s, over 1,000 messages (the
	// histogram reads p99 as 5.12 s: percentiles are within about 3 %).
	steps := statsOf(append(append(spread(900, time.Second, time.Second), spread(90, 5*time.Second, 5*time.Second)...), spread(10, 20*time.Second, 20*time.Second)...)...)
	tests := []struct {
		name  string
		stats Stats
		cur   time.Duration
		topic Topic
		sev   Severity
		want  string
	}{
		{"floor, no lease in force", figures(3 * time.Millisecond), 0, TopicVisibility, SeverityInfo,
			"lease 10s (p99 3ms × 2 = 6ms, raised to the 10s floor)" + crashed},
		{"floor, a lease 3× it", figures(3 * time.Millisecond), 30 * time.Second, TopicVisibility, SeverityWarn,
			"lease 30s is 3× the 10s the work needs (p99 3ms × 2 = 6ms, raised to the 10s floor): a crashed consumer's messages stay invisible up to 30s instead of 10s, and time to DLQ grows with it; use 10s"},
		{"a fifth of the lease is not close", figures(12 * time.Second), 5 * time.Second, TopicVisibility, SeverityInfo,
			"lease 5s is 21% of the 24s recommended (p99 12s × 2 = 24s); no message measured took longer than it, but on a slower day some would live on renewals"},
		{"just below is close", figures(8 * time.Second), 15 * time.Second, TopicVisibility, SeverityInfo,
			"lease 15s is close to the 16s recommended (p99 8s × 2 = 16s)"},
		{"equal", figures(8 * time.Second), 16 * time.Second, TopicVisibility, SeverityInfo,
			"lease 16s is the one recommended (p99 8s × 2 = 16s)"},
		{"1.9× is not close", figures(8 * time.Second), 30 * time.Second, TopicVisibility, SeverityInfo,
			"lease 30s is 1.9× the 16s recommended (p99 8s × 2 = 16s): it works, but a crashed consumer's messages stay invisible up to 30s instead of 16s"},
		{"twice is still info", figures(8 * time.Second), 32 * time.Second, TopicVisibility, SeverityInfo,
			"lease 32s is 2× the 16s recommended (p99 8s × 2 = 16s): it works, but a crashed consumer's messages stay invisible up to 32s instead of 16s"},
		{"rounded up to a whole second", figures(8400 * time.Millisecond), 0, TopicVisibility, SeverityInfo,
			"lease 17s (p99 8.4s × 2 = 16.8s, rounded up to 17s)" + crashed},
		{"the figure is rounded up as shown", figures(8433 * time.Millisecond), 0, TopicVisibility, SeverityInfo,
			"lease 17s (p99 8.44s × 2 = 16.88s, rounded up to 17s)" + crashed},
		{"10 s steps above a minute", figures(96 * time.Second), 0, TopicVisibility, SeverityInfo,
			"lease 200s (p99 96s × 2 = 192s, rounded up to 200s)" + crashed},
		{"whole minutes above 15 minutes", figures(481 * time.Second), 0, TopicVisibility, SeverityInfo,
			"lease 17m (p99 481s × 2 = 962s, rounded up to 17m)" + crashed},
		{"capped at the ceiling", figures(7 * time.Hour), 0, TopicVisibility, SeverityInfo,
			"lease 12h (p99 7h × 2 = 14h, capped at the 12h maximum)" + crashed},
		{"the ceiling is named", figures(7 * time.Hour), 0, TopicCeiling, SeverityWarn,
			"p99 × 2 (14h) exceeds the 12h limit of a lease: the slowest work cannot be held by one message; record it as a job and delete the message early"},
		{"a short lease most work outlives", statsOf(spread(1000, 5*time.Second, 10*time.Second)...), 4 * time.Second, TopicVisibility, SeverityWarn,
			"lease 4s is 20% of the 20s recommended (p99 9.7s × 2 = 19.4s, rounded up to 20s), and about 100% of messages take longer than it: those live on renewals, each one a chance to lose the lease; use 20s"},
		{"a short lease with renewals measured", with(statsOf(spread(1000, 5*time.Second, 10*time.Second)...), func(s *Stats) { s.RenewalsPerMessage = 1.46 }), 4 * time.Second, TopicVisibility, SeverityWarn,
			"lease 4s is 20% of the 20s recommended (p99 9.7s × 2 = 19.4s, rounded up to 20s), and about 100% of messages take longer than it: those live on renewals (1.5 renewals per message measured), each one a chance to lose the lease; use 20s"},
		{"a long tail raised to the floor", steps, 0, TopicHeartbeat, SeverityInfo,
			"p99.9 (20s) is 3.9× p99 (5.12s), a long tail: rather than a constant lease of 11s (p99 5.12s × 2 = 10.24s, rounded up to 11s), which leaves a crashed consumer's messages invisible that long, lease 10s (p90 1s × 1.25 = 1.25s, raised to the 10s floor) and let renewals every third of the lease carry the tail; about 1% of messages outlive the first lease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := find(t, tt.stats.Advise(QueueSettings{VisibilityTimeout: tt.cur}), tt.topic)
			require.Equal(t, tt.sev, r.Severity, r.Message)
			require.Equal(t, tt.want, r.Message)
		})
	}
}

// TestAdviceTimeToDLQWording pins how the time to DLQ is set against
// retention: its share when below a quarter (a quarter included), over a
// quarter, equal, and the factor when above.
func TestAdviceTimeToDLQWording(t *testing.T) {
	t.Parallel()
	const tail = "; a handler that hangs is renewed up to the maximum lease duration on each attempt, so bound handlers with WithHandlerTimeout"
	const head = "a message whose consumer crashes or times out on every attempt reaches the DLQ after maxReceiveCount 5 × lease 16s = 80s"
	tests := []struct {
		name      string
		retention time.Duration
		sev       Severity
		want      string
	}{
		{"far below", time.Hour, SeverityInfo, head + ", 2.2% of retention (1h)" + tail},
		{"a quarter exactly", 320 * time.Second, SeverityInfo, head + ", 25% of retention (320s)" + tail},
		{"over a quarter", 300 * time.Second, SeverityWarn, head + "; that is 27% of retention (5m), over the quarter it should stay under: keep it far below" + tail},
		{"equal", 80 * time.Second, SeverityError, head + "; that equals retention (80s): messages expire before they reach the DLQ" + tail},
		{"above", 60 * time.Second, SeverityError, head + "; that is 1.3× retention (1m): messages expire before they reach the DLQ" + tail},
		{"just above", 79 * time.Second, SeverityError, head + "; that is just over retention (79s): messages expire before they reach the DLQ" + tail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := figures(8 * time.Second).Advise(QueueSettings{MaxReceiveCount: 5, RetentionPeriod: tt.retention})
			r := find(t, a, TopicTimeToDLQ)
			require.Equal(t, tt.sev, r.Severity, r.Message)
			require.Equal(t, tt.want, r.Message)
		})
	}
}

// TestAdviceComparesWhatItShows: a budget compared with a percentile is
// compared with the figure printed, so "below" and "covers" are true of the
// numbers in the sentence.
func TestAdviceComparesWhatItShows(t *testing.T) {
	t.Parallel()
	below := find(t, figures(10010*time.Millisecond).Advise(QueueSettings{ShutdownTimeout: 10 * time.Second}), TopicShutdown)
	require.Contains(t, below.Message, "shutdown budget 10s is below p99 (10.1s)")
	covers := find(t, figures(9995*time.Millisecond).Advise(QueueSettings{ShutdownTimeout: 10 * time.Second}), TopicShutdown)
	require.Contains(t, covers.Message, "shutdown budget 10s covers p99 (10s)")
	p90 := find(t, statsOf(spread(1000, time.Second, 10*time.Second)...).Advise(QueueSettings{ShutdownTimeout: 2 * time.Second}), TopicShutdown)
	require.Equal(t, SeverityWarn, p90.Severity)
	require.Regexp(t, `^shutdown budget 2s is below p90 \(9\.\d+s\): about (8\d|9\d)% of messages take longer than the budget, and a deploy cancels those in flight`, p90.Message)
}

// TestAdviceCounts: counts take the singular for one.
func TestAdviceCounts(t *testing.T) {
	t.Parallel()
	one := figures(time.Second)
	one.Processed, one.CeilingHits, one.Adopted = 1, 1, 1
	one.ReceiveCounts = map[int]int64{1: 1}
	a := one.Advise(QueueSettings{})
	require.Equal(t, "only 1 message processed: percentiles are rough until 100 (p99) and 1000 (p99.9)", find(t, a, TopicData).Message)
	require.True(t, strings.HasPrefix(find(t, a, TopicCeiling).Message, "1 message reached the maximum lease duration (12h): "))
	require.True(t, strings.HasPrefix(find(t, a, TopicRedelivery).Message, "1 lease lapsed (1 redelivery adopted while still being handled, 0 lost, 0 expired): "))

	redo := figures(time.Second)
	redo.ReceiveCounts, redo.Released = map[int]int64{1: 98, 2: 2}, 1
	require.Contains(t, find(t, redo.Advise(QueueSettings{}), TopicRedelivery).Message, "more than the 1 release after failures explain")
	require.Equal(t, "0 redeliveries", count(0, "redelivery"))
	require.Equal(t, "2 leases", count(2, "lease"))
}

// TestAdviceArithmetic sweeps p99 from 1 µs to 20 h and checks that what the
// visibility recommendation says holds for the numbers it prints: the p99
// shown is the measured one rounded up by less than its precision, twice it
// is the product shown, the rounding, floor or ceiling named is the one
// that applied, and the lease is the one the exact p99 gives.
func TestAdviceArithmetic(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`\(p99 (\S+) × 2 = (\S+?)(?:, (rounded up to|raised to the|capped at the) (\S+?)(?: floor| maximum)?)?\)`)
	n := 0
	for p99 := time.Microsecond; p99 < 20*time.Hour; p99 = p99*21/20 + 7919 {
		n++
		a := figures(p99).Advise(QueueSettings{})
		r := find(t, a, TopicVisibility)
		m := re.FindStringSubmatch(r.Message)
		require.NotNil(t, m, "p99 %v: %s", p99, r.Message)
		shown, twice := parseDur(t, m[1]), parseDur(t, m[2])
		require.GreaterOrEqual(t, shown, p99, "p99 %v shown as %s: rounded up", p99, m[1])
		require.Less(t, shown-p99, figureStep(p99), "p99 %v shown as %s: within its precision", p99, m[1])
		if p99 >= 100*time.Microsecond {
			require.LessOrEqual(t, float64(shown-p99)/float64(p99), 1/60.0, "p99 %v shown as %s", p99, m[1])
		}
		require.Equal(t, 2*shown, twice, "p99 %v: %s", p99, r.Message)

		exact := min(max(roundLease(2*p99), MinAdaptiveVisibility), MaxVisibilityTimeout)
		require.Equal(t, exact, a.VisibilityTimeout, "p99 %v: the lease the exact p99 gives", p99)
		require.Equal(t, a.VisibilityTimeout, r.Value)
		switch m[3] {
		case "":
			require.Equal(t, twice, a.VisibilityTimeout, r.Message)
		case "rounded up to":
			require.Equal(t, a.VisibilityTimeout, parseDur(t, m[4]), r.Message)
			require.Greater(t, a.VisibilityTimeout, twice, r.Message)
			require.Equal(t, roundLease(twice), a.VisibilityTimeout, r.Message)
		case "raised to the":
			require.Equal(t, MinAdaptiveVisibility, parseDur(t, m[4]), r.Message)
			require.Equal(t, MinAdaptiveVisibility, a.VisibilityTimeout, r.Message)
			require.Less(t, twice, MinAdaptiveVisibility, r.Message)
		case "capped at the":
			require.Equal(t, MaxVisibilityTimeout, parseDur(t, m[4]), r.Message)
			require.Equal(t, MaxVisibilityTimeout, a.VisibilityTimeout, r.Message)
			require.Greater(t, twice, MaxVisibilityTimeout, r.Message)
			require.Contains(t, find(t, a, TopicCeiling).Message, "p99 × 2 ("+m[2]+") exceeds the 12h limit")
		}
	}
	t.Logf("%d p99 values checked", n)
}

// TestStatsLogJSON logs Stats and a Recommendation through slog's JSON
// handler and checks the shape: durations as duration strings rounded to
// the millisecond (the microsecond below one), ratios to two decimals,
// leases lost and expired apart.
func TestStatsLogJSON(t *testing.T) {
	t.Parallel()
	st := Stats{
		Received: 12, Deleted: 9, Released: 2, Failed: 2, Renewals: 4, RenewalFailures: 1,
		LeasesLost: 2, LeasesExpired: 5, CeilingHits: 1, Adopted: 1,
		Processed: 11,
		P50:       345678 * time.Nanosecond, P90: 1234567891 * time.Nanosecond, P99: 9999600 * time.Microsecond,
		P999: 40 * time.Second, Max: 3*time.Minute + 10500400*time.Microsecond, Mean: 2 * time.Second,
		ReceiveCounts:      map[int]int64{1: 10, 2: 2},
		RenewalsPerMessage: 4.0 / 11, RenewedShare: 2.0 / 3,
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("stats", "stats", st)
	log.Warn("advice", "recommendation", Recommendation{Topic: TopicVisibility, Severity: SeverityWarn, Value: 20 * time.Second, Message: "use 20s"})
	log.Info("advice", "recommendation", Recommendation{Topic: TopicRedelivery, Message: "fine"})

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3)
	var got struct {
		Stats map[string]any `json:"stats"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &got), lines[0])
	require.Equal(t, map[string]any{
		"processed": 11.0,
		"p50":       "346µs", "p90": "1.235s", "p99": "10s", "p999": "40s", "max": "3m10.5s", "mean": "2s",
		"received": 12.0, "redeliveries": 3.0, "deleted": 9.0, "released": 2.0, "failed": 2.0,
		"renewals": 4.0, "renewal_failures": 1.0, "renewals_per_message": 0.36, "renewed_share": 0.67,
		"leases_lost": 2.0, "leases_expired": 5.0, "ceiling_hits": 1.0,
	}, got.Stats)
	for _, k := range []string{"p50", "p90", "p99", "p999", "max", "mean"} {
		_, err := time.ParseDuration(got.Stats[k].(string))
		require.NoError(t, err, "%s reads back as a duration", k)
	}

	var rec struct {
		Recommendation map[string]any `json:"recommendation"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &rec), lines[1])
	require.Equal(t, map[string]any{"topic": "visibility_timeout", "severity": "warn", "value": "20s", "message": "use 20s"}, rec.Recommendation)
	rec.Recommendation = nil
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &rec), lines[2])
	require.Equal(t, map[string]any{"topic": "redelivery", "severity": "info", "message": "fine"}, rec.Recommendation, "no value: none logged")
}

// Observe feeds the recorder as a Consumer would: counts, and a
// settlement at each delete or release with the renewals counted since the
// message's receive.
func (r *statsRecorder) Observe(e Event) {
	r.countKind(e.Kind, e.ReceiveCount)
	key := fmt.Sprintf("%p/%s", r, e.MessageID)
	switch e.Kind {
	case EventRenewed:
		n, _ := testRenewals.LoadOrStore(key, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	case EventDeleted, EventReleased:
		var renewals int
		if n, ok := testRenewals.LoadAndDelete(key); ok {
			renewals = int(n.(*atomic.Int64).Load())
		}
		r.settled(e.SinceReceive, renewals)
	}
}

var testRenewals sync.Map // "recorder/message id" → *atomic.Int64
