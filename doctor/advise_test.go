package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
)

const day = 24 * time.Hour

// dlqPolicy is a redrive policy with the given maxReceiveCount.
func dlqPolicy(n int) *RedrivePolicy {
	return &RedrivePolicy{DeadLetterTargetARN: "arn:aws:sqs:us-east-1:123456789012:work-dlq", MaxReceiveCount: n}
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
	b, err := json.Marshal(SeverityWarn)
	require.NoError(t, err)
	require.Equal(t, `"warn"`, string(b))
	var s Severity
	require.NoError(t, s.UnmarshalText([]byte("warning")))
	require.Equal(t, SeverityWarn, s)
	require.EqualError(t, s.UnmarshalText([]byte("fatal")), `doctor: unknown severity "fatal" (want info, warn or error)`)
	_, err = Severity(7).MarshalText()
	require.EqualError(t, err, "doctor: unknown severity 7")
	require.Equal(t, "severity(7)", Severity(7).String())
	require.Equal(t, "ERROR", SeverityError.Level().String())
	require.Equal(t, "WARN", SeverityWarn.Level().String())
	require.Equal(t, "INFO", Severity(7).Level().String())
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

// TestAdviceTranscoding runs that transcoding workload through a Consumer
// (a 120 s lease renewed every 40 s) and checks the advice: heartbeating
// with a lease near p90, not a 10-minute constant, and the time to DLQ for
// maxReceiveCount 3.
func TestAdviceTranscoding(t *testing.T) {
	t.Parallel()
	durations := transcoding(4000)
	st := measure(t, durations, sqsconsumer.WithVisibilityTimeout(120*time.Second))
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

	adv := Advise(st, Queue{
		VisibilityTimeout: 10 * time.Minute, // a generous constant, sized for the tail
		RetentionPeriod:   4 * day,
		ReceiveWaitTime:   20 * time.Second,
		Redrive:           dlqPolicy(3),
	}, Options{ShutdownTimeout: 20 * time.Second}) // the Consumer's default budget
	t.Log("\n" + adv.String())

	require.True(t, adv.Heartbeat, "a long tail calls for heartbeating")
	require.Equal(t, 120*time.Second, adv.VisibilityTimeout, "a lease near p90 (95 s) with headroom")
	require.Equal(t, 6*time.Minute, adv.TimeToDLQ, "3 × 120 s")

	hb := find(t, adv, CheckHeartbeat)
	m := regexp.MustCompile(`rather than a constant lease of (\S+) \(p99 (\S+) × 2 = (\S+), rounded up to (\S+)\)`).FindStringSubmatch(hb.Message)
	require.NotNil(t, m, "names the constant it avoids, p99 × 2 rounded up to 10 s: %s", hb.Message)
	constant, p99, twice, up := parseDur(t, m[1]), parseDur(t, m[2]), parseDur(t, m[3]), parseDur(t, m[4])
	require.Equal(t, 2*p99, twice, "the arithmetic holds for the figures shown")
	require.Equal(t, constant, up)
	require.Equal(t, roundLease(twice), up)
	require.InDelta(t, 625, up.Seconds(), 5, "620 s or 630 s")
	require.EqualValues(t, 120, hb.Values["recommended_visibility_seconds"])

	vis := find(t, adv, CheckVisibilityP99)
	require.Equal(t, SeverityWarn, vis.Severity, "a 10-minute lease is too long: %s", vis.Message)
	require.EqualValues(t, 120, vis.Values["recommended_visibility_seconds"])

	dlq := find(t, adv, CheckTimeToDLQ)
	require.Equal(t, SeverityInfo, dlq.Severity)
	require.EqualValues(t, 6*60, dlq.Values["recommended_time_to_dlq_seconds"])
	require.EqualValues(t, 30*60, dlq.Values["time_to_dlq_seconds"], "the lease in force is judged")
	require.Contains(t, dlq.Message, "maxReceiveCount 3 × the lease 10m = 30m to the DLQ, 6m at the recommended lease 2m")

	sd := find(t, adv, CheckShutdown)
	require.Equal(t, SeverityWarn, sd.Severity, "a 20 s budget cuts most long transcodes: %s", sd.Message)

	require.Equal(t, SeverityInfo, find(t, adv, CheckRedelivery).Severity)
	require.Equal(t, SeverityWarn, adv.Worst())
}

// find returns the first finding of check c in a.
func find(t *testing.T, a Advice, c CheckName) Finding {
	t.Helper()
	for _, f := range a.Findings {
		if f.Check == c {
			return f
		}
	}
	require.Failf(t, "no finding", "check %s missing from:\n%s", c, a)
	return Finding{}
}

func hasCheck(a Advice, c CheckName) bool {
	for _, f := range a.Findings {
		if f.Check == c {
			return true
		}
	}
	return false
}

func with(s sqsconsumer.Stats, f func(*sqsconsumer.Stats)) sqsconsumer.Stats {
	f(&s)
	return s
}

func TestAdvise(t *testing.T) {
	t.Parallel()
	narrow := measure(t, spread(2000, 5*time.Second, 10*time.Second)) // p99 ≈ 10 s, no tail
	stepped := measure(t, steps())                                    // p90 1 s, p99 5 s, p99.9 20 s
	tests := []struct {
		name  string
		stats sqsconsumer.Stats
		q     Queue
		opts  Options
		check func(t *testing.T, a Advice)
	}{
		{"nothing processed", sqsconsumer.Stats{}, Queue{VisibilityTimeout: 30 * time.Second, RetentionPeriod: 4 * day, ReceiveWaitTime: 20 * time.Second, Redrive: dlqPolicy(5)}, Options{},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityInfo, find(t, a, CheckData).Severity)
				require.Zero(t, a.VisibilityTimeout)
				require.Zero(t, a.TimeToDLQ)
				require.EqualValues(t, 150, find(t, a, CheckTimeToDLQ).Values["time_to_dlq_seconds"], "the current lease still gives a time to DLQ")
				require.False(t, hasCheck(a, CheckVisibilityP99))
			}},
		{"few samples are flagged", measure(t, spread(20, time.Second, 2*time.Second)), Queue{}, Options{},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityWarn, find(t, a, CheckData).Severity)
			}},
		{"narrow distribution: p99 × 2, no heartbeat", narrow, Queue{VisibilityTimeout: 20 * time.Second, RetentionPeriod: 4 * day, ReceiveWaitTime: 20 * time.Second, Redrive: dlqPolicy(5)}, Options{},
			func(t *testing.T, a Advice) {
				require.False(t, a.Heartbeat)
				require.False(t, hasCheck(a, CheckHeartbeat))
				require.Equal(t, 20*time.Second, a.VisibilityTimeout)
				require.Equal(t, SeverityInfo, find(t, a, CheckVisibilityP99).Severity)
				require.Equal(t, 100*time.Second, a.TimeToDLQ)
				require.False(t, hasCheck(a, CheckShutdown), "unknown budget: no check")
				require.Equal(t, SeverityInfo, a.Worst(), "a healthy queue and fitting lease: %s", a)
			}},
		{"fast work meets the floor", measure(t, spread(500, time.Millisecond, 50*time.Millisecond)), Queue{}, Options{},
			func(t *testing.T, a Advice) {
				require.Equal(t, sqsconsumer.MinAdaptiveVisibility, a.VisibilityTimeout)
			}},
		{"a lease far too short", narrow, Queue{VisibilityTimeout: 5 * time.Second}, Options{},
			func(t *testing.T, a Advice) {
				r := find(t, a, CheckVisibilityP99)
				require.Equal(t, SeverityWarn, r.Severity)
				require.Contains(t, r.Message, "renewals")
			}},
		{"a long lease", narrow, Queue{VisibilityTimeout: 5 * time.Minute}, Options{},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityWarn, find(t, a, CheckVisibilityP99).Severity)
			}},
		{"no redrive policy", narrow, Queue{VisibilityTimeout: 20 * time.Second, RetentionPeriod: 4 * day}, Options{},
			func(t *testing.T, a Advice) {
				r := find(t, a, CheckRedrivePolicy)
				require.Equal(t, SeverityError, r.Severity)
				require.Contains(t, r.Message, "no redrive policy")
				require.Contains(t, r.Message, "until retention (4d)")
				require.False(t, hasCheck(a, CheckTimeToDLQ))
			}},
		{"queue attributes unknown: no queue checks", narrow, Queue{VisibilityTimeout: 20 * time.Second}, Options{},
			func(t *testing.T, a Advice) {
				for _, c := range []CheckName{CheckRedrivePolicy, CheckTimeToDLQ, CheckRetention, CheckLongPolling} {
					require.False(t, hasCheck(a, c), "%s", c)
				}
			}},
		{"time to DLQ beyond retention", narrow, Queue{VisibilityTimeout: 12 * time.Hour, RetentionPeriod: 4 * day, Redrive: dlqPolicy(10)}, Options{},
			func(t *testing.T, a Advice) {
				r := find(t, a, CheckTimeToDLQ)
				require.Equal(t, SeverityError, r.Severity, r.Message)
				require.Contains(t, r.Message, "expire before they reach the DLQ")
				require.Equal(t, SeverityError, a.Findings[0].Severity, "most severe first")
			}},
		{"time to DLQ above a quarter of retention", narrow, Queue{VisibilityTimeout: 3 * time.Hour, RetentionPeriod: 4 * day, Redrive: dlqPolicy(10)}, Options{},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityWarn, find(t, a, CheckTimeToDLQ).Severity)
			}},
		{"shutdown budget covers p99", narrow, Queue{}, Options{ShutdownTimeout: 30 * time.Second},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityInfo, find(t, a, CheckShutdown).Severity)
			}},
		{"shutdown budget between p90 and p99", stepped, Queue{}, Options{ShutdownTimeout: 3 * time.Second},
			func(t *testing.T, a Advice) {
				r := find(t, a, CheckShutdown)
				require.Equal(t, SeverityWarn, r.Severity)
				require.Contains(t, r.Message, "is below p99 (5.12s): about 10% of messages take longer than the budget")
			}},
		{"ceiling hits", with(narrow, func(s *sqsconsumer.Stats) { s.CeilingHits = 2 }), Queue{}, Options{},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityWarn, find(t, a, CheckCeiling).Severity)
			}},
		{"work beyond the ceiling", measure(t, spread(200, 7*time.Hour, 10*time.Hour), sqsconsumer.WithVisibilityTimeout(time.Hour)), Queue{}, Options{},
			func(t *testing.T, a Advice) {
				require.Equal(t, sqsconsumer.MaxVisibilityTimeout, a.VisibilityTimeout)
				require.Equal(t, SeverityWarn, find(t, a, CheckCeiling).Severity)
			}},
		{"first deliveries only", narrow, Queue{}, Options{},
			func(t *testing.T, a Advice) {
				r := find(t, a, CheckRedelivery)
				require.Equal(t, SeverityInfo, r.Severity)
				require.Contains(t, r.Message, "every receive was a first delivery (receive counts 1:2000)")
			}},
		{"redeliveries explained by releases", with(narrow, func(s *sqsconsumer.Stats) {
			s.ReceiveCounts = map[int]int64{1: 1990, 2: 10}
			s.Released = 12
		}), Queue{}, Options{},
			func(t *testing.T, a Advice) {
				require.Equal(t, SeverityInfo, find(t, a, CheckRedelivery).Severity)
			}},
		{"unexplained redeliveries: the earliest sign of overrun", with(narrow, func(s *sqsconsumer.Stats) {
			s.ReceiveCounts = map[int]int64{1: 1960, 2: 38, 3: 2}
			s.Released = 3
		}), Queue{}, Options{},
			func(t *testing.T, a Advice) {
				r := find(t, a, CheckRedelivery)
				require.Equal(t, SeverityWarn, r.Severity)
				require.Contains(t, r.Message, "2% of receives")
				require.Contains(t, r.Message, "1:1960 2:38 3:2")
			}},
		{"lapsed leases", with(narrow, func(s *sqsconsumer.Stats) {
			s.Adopted, s.LeasesLost = 3, 1
		}), Queue{}, Options{},
			func(t *testing.T, a Advice) {
				r := find(t, a, CheckRedelivery)
				require.Equal(t, SeverityWarn, r.Severity)
				require.Contains(t, r.Message, "4 leases lapsed")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := Advise(tt.stats, tt.q, tt.opts)
			t.Log("\n" + a.String())
			tt.check(t, a)
			for i, f := range a.Findings {
				require.NotEmpty(t, f.Message)
				require.True(t, strings.HasPrefix(f.String(), f.Severity.String()+" "+string(f.Check)+": "))
				if i > 0 {
					require.LessOrEqual(t, f.Severity, a.Findings[i-1].Severity, "most severe first")
				}
			}
		})
	}
}

// TestAdviseSharesAnalyzeRules: the checks of a queue's own settings
// give the same findings whether Analyze or Advise runs them.
func TestAdviseSharesAnalyzeRules(t *testing.T) {
	t.Parallel()
	st := figures(8 * time.Second)
	for _, q := range []Queue{
		{URL: "u", VisibilityTimeout: 16 * time.Second, RetentionPeriod: 4 * day, ReceiveWaitTime: 20 * time.Second, Redrive: dlqPolicy(5)},
		{URL: "u", VisibilityTimeout: 16 * time.Second, RetentionPeriod: 12 * time.Hour},
		{URL: "u.fifo", FIFO: true, VisibilityTimeout: 16 * time.Second, RetentionPeriod: 2 * day, Redrive: dlqPolicy(1)},
		{URL: "u", VisibilityTimeout: 16 * time.Second, RetentionPeriod: 80 * time.Second, Redrive: dlqPolicy(5)},
	} {
		analyzed := Analyze(q, nil, Options{P99: st.P99, Heartbeat: true, ShutdownTimeout: time.Minute})
		advised := Advise(st, q, Options{ShutdownTimeout: time.Minute})
		for _, c := range []CheckName{CheckRedrivePolicy, CheckMaxReceiveCount, CheckTimeToDLQ, CheckRetention, CheckLongPolling, CheckVisibilityP99, CheckShutdown} {
			var want []Finding
			for _, f := range analyzed {
				if f.Check == c {
					want = append(want, f)
				}
			}
			var got []Finding
			for _, f := range advised.Findings {
				if f.Check == c {
					got = append(got, f)
				}
			}
			if c == CheckTimeToDLQ {
				for i := range got { // Advise names the lease the consumers ask for
					got[i].Message = strings.Replace(got[i].Message, "× the lease ", "× VisibilityTimeout ", 1)
				}
			}
			require.Equal(t, want, got, "%s of %+v", c, q)
		}
	}
}

// figures returns Stats with the given p99 (p50 and p90 below it, no
// tail), built by hand: no distribution behind them.
func figures(p99 time.Duration) sqsconsumer.Stats {
	return sqsconsumer.Stats{Processed: 500, P50: p99 / 4, P90: p99 / 2, P99: p99, P999: p99, Max: p99}
}

// parseDur reads a duration as the findings print it: Go's syntax, and
// days ("4d", "2d12h").
func parseDur(t *testing.T, s string) time.Duration {
	t.Helper()
	var days time.Duration
	if d, rest, ok := strings.Cut(s, "d"); ok && !strings.Contains(d, ".") {
		n, err := strconv.Atoi(d)
		require.NoError(t, err, "%q is a duration", s)
		days, s = time.Duration(n)*day, rest
		if s == "" {
			return days
		}
	}
	d, err := time.ParseDuration(s)
	require.NoError(t, err, "%q is a duration", s)
	return days + d
}

// TestAdviceWording pins the words of the lease findings: how a lease in
// force compares with the recommended one at several ratios, and how the
// recommended lease is derived when it is exact, rounded up, raised to the
// floor or capped at the ceiling.
func TestAdviceWording(t *testing.T) {
	t.Parallel()
	const crashed = "; a crashed consumer's messages come back after at most that long"
	// The histogram reads the p99 of steps as 5.12 s (percentiles are
	// within about 3 %).
	stepped := measure(t, steps())
	fiveToTen := measure(t, spread(1000, 5*time.Second, 10*time.Second))
	tests := []struct {
		name  string
		stats sqsconsumer.Stats
		cur   time.Duration
		check CheckName
		sev   Severity
		want  string
	}{
		{"floor, no lease in force", figures(3 * time.Millisecond), 0, CheckVisibilityP99, SeverityInfo,
			"lease 10s (p99 3ms × 2 = 6ms, raised to the 10s floor)" + crashed},
		{"floor, a lease 3× it", figures(3 * time.Millisecond), 30 * time.Second, CheckVisibilityP99, SeverityWarn,
			"lease 30s is 3× the 10s the work needs (p99 3ms × 2 = 6ms, raised to the 10s floor): a crashed consumer's messages stay invisible up to 30s instead of 10s, and time to DLQ grows with it; use 10s"},
		{"below the floor", figures(12 * time.Second), 5 * time.Second, CheckVisibilityP99, SeverityWarn,
			"lease 5s is below 10s: renewals at a third of the lease leave too little time for a renewal to land; use 24s (p99 12s × 2 = 24s)"},
		{"under half, outlived by a few: the p99 bounds the share", figures(12 * time.Second), 11 * time.Second, CheckVisibilityP99, SeverityInfo,
			"lease 11s is 45% of the 24s recommended (p99 12s × 2 = 24s); at least 1% of messages take longer than it and live on renewals"},
		{"just below, none measured longer", figures(8 * time.Second), 15 * time.Second, CheckVisibilityP99, SeverityInfo,
			"lease 15s is 93% of the 16s recommended (p99 8s × 2 = 16s); no message measured took longer than it, but on a slower day some would live on renewals"},
		{"equal", figures(8 * time.Second), 16 * time.Second, CheckVisibilityP99, SeverityInfo,
			"lease 16s is the one recommended (p99 8s × 2 = 16s)"},
		{"1.88× is info", figures(8 * time.Second), 30 * time.Second, CheckVisibilityP99, SeverityInfo,
			"lease 30s is 1.88× the 16s recommended (p99 8s × 2 = 16s): a crashed consumer's messages stay invisible up to 30s instead of 16s"},
		{"twice is still info", figures(8 * time.Second), 32 * time.Second, CheckVisibilityP99, SeverityInfo,
			"lease 32s is 2× the 16s recommended (p99 8s × 2 = 16s): a crashed consumer's messages stay invisible up to 32s instead of 16s"},
		{"rounded up to a whole second", figures(8400 * time.Millisecond), 0, CheckVisibilityP99, SeverityInfo,
			"lease 17s (p99 8.4s × 2 = 16.8s, rounded up to 17s)" + crashed},
		{"the figure is rounded up as shown", figures(8433 * time.Millisecond), 0, CheckVisibilityP99, SeverityInfo,
			"lease 17s (p99 8.44s × 2 = 16.88s, rounded up to 17s)" + crashed},
		{"10 s steps above a minute", figures(96 * time.Second), 0, CheckVisibilityP99, SeverityInfo,
			"lease 200s (p99 96s × 2 = 192s, rounded up to 200s)" + crashed},
		{"whole minutes above 15 minutes", figures(481 * time.Second), 0, CheckVisibilityP99, SeverityInfo,
			"lease 17m (p99 481s × 2 = 962s, rounded up to 17m)" + crashed},
		{"capped at the ceiling", figures(7 * time.Hour), 0, CheckVisibilityP99, SeverityInfo,
			"lease 12h (p99 7h × 2 = 14h, capped at the 12h maximum)" + crashed},
		{"the ceiling is named", figures(7 * time.Hour), 0, CheckCeiling, SeverityWarn,
			"p99 × 2 (14h) exceeds the 12h limit of a lease: the slowest work cannot be held by one message; record it as a job and delete the message early"},
		{"a short lease most work outlives", fiveToTen, 4 * time.Second, CheckVisibilityP99, SeverityWarn,
			"lease 4s is 20% of the 20s recommended (p99 9.7s × 2 = 19.4s, rounded up to 20s), and about 100% of messages take longer than it: those live on renewals, each one a chance to lose the lease; use 20s"},
		{"a short lease with renewals measured", with(fiveToTen, func(s *sqsconsumer.Stats) { s.RenewalsPerMessage = 1.46 }), 4 * time.Second, CheckVisibilityP99, SeverityWarn,
			"lease 4s is 20% of the 20s recommended (p99 9.7s × 2 = 19.4s, rounded up to 20s), and about 100% of messages take longer than it: those live on renewals (1.5 renewals per message measured), each one a chance to lose the lease; use 20s"},
		{"a long tail raised to the floor", stepped, 0, CheckHeartbeat, SeverityInfo,
			// The measured p90 is the 1 s handler plus its delete's round
			// trip, which lands in the histogram's 1 s or 1.04 s bucket
			// depending on how the goroutines were scheduled.
			"re:^" + regexp.QuoteMeta("p99.9 (20s) is 3.91× p99 (5.12s), a long tail: rather than a constant lease of 11s (p99 5.12s × 2 = 10.24s, rounded up to 11s), which leaves a crashed consumer's messages invisible that long, lease 10s (p90 ") +
				`(1s × 1\.25 = 1\.25s|1\.04s × 1\.25 = 1\.3s)` +
				regexp.QuoteMeta(", raised to the 10s floor) and let renewals every third of the lease carry the tail; about 1% of messages outlive the first lease") + "$"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := find(t, Advise(tt.stats, Queue{VisibilityTimeout: tt.cur}, Options{}), tt.check)
			require.Equal(t, tt.sev, f.Severity, f.Message)
			if re, ok := strings.CutPrefix(tt.want, "re:"); ok {
				require.Regexp(t, re, f.Message)
				return
			}
			require.Equal(t, tt.want, f.Message)
		})
	}
}

// TestAdviceTimeToDLQWording pins how the time to DLQ is set against
// retention, at the recommended lease when none is in force: far below
// under a quarter, a warning from a quarter, an error from equality.
func TestAdviceTimeToDLQWording(t *testing.T) {
	t.Parallel()
	const tail = "; a handler that hangs is renewed on every attempt up to the maximum lease duration, so bound handlers with WithHandlerTimeout"
	const head = "maxReceiveCount 5 × the recommended lease 16s = 80s to the DLQ"
	const quarter = ", not under a quarter of it: a message that fails for a while expires before it reaches the DLQ, and a poison message holds a worker on every attempt; shorten the lease (heartbeat instead) or lower maxReceiveCount"
	const expire = ": messages expire before they reach the DLQ, taking the evidence with them; shorten the lease (heartbeat instead) or lower maxReceiveCount"
	tests := []struct {
		name      string
		retention time.Duration
		sev       Severity
		want      string
	}{
		{"far below", time.Hour, SeverityInfo, head + ", far below MessageRetentionPeriod 1h (2.2%)" + tail},
		{"a quarter exactly", 320 * time.Second, SeverityWarn, head + " is below MessageRetentionPeriod 320s (25%)" + quarter + tail},
		{"over a quarter", 300 * time.Second, SeverityWarn, head + " is below MessageRetentionPeriod 5m (26%)" + quarter + tail},
		{"equal", 80 * time.Second, SeverityError, head + " is equal to MessageRetentionPeriod 80s" + expire + tail},
		{"above", 60 * time.Second, SeverityError, head + " is above MessageRetentionPeriod 1m (1.34×)" + expire + tail},
		{"just above", 79 * time.Second, SeverityError, head + " is above MessageRetentionPeriod 79s (1.02×)" + expire + tail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := Advise(figures(8*time.Second), Queue{FIFO: true, RetentionPeriod: tt.retention, Redrive: dlqPolicy(5)}, Options{})
			f := find(t, a, CheckTimeToDLQ)
			require.Equal(t, tt.sev, f.Severity, f.Message)
			require.Equal(t, tt.want, f.Message)
			require.Equal(t, 80*time.Second, a.TimeToDLQ)
		})
	}
}

// TestAdviceComparesWhatItShows: a budget compared with a percentile is
// compared with the figure printed, so "below" and "covers" are true of the
// numbers in the sentence.
func TestAdviceComparesWhatItShows(t *testing.T) {
	t.Parallel()
	below := find(t, Advise(figures(10010*time.Millisecond), Queue{}, Options{ShutdownTimeout: 10 * time.Second}), CheckShutdown)
	require.Contains(t, below.Message, "shutdown budget 10s is below p99 (10.1s): at least 1% of messages")
	covers := find(t, Advise(figures(9995*time.Millisecond), Queue{}, Options{ShutdownTimeout: 10 * time.Second}), CheckShutdown)
	require.Contains(t, covers.Message, "shutdown budget 10s covers p99 (10s)")
	p90 := find(t, Advise(measure(t, spread(1000, time.Second, 10*time.Second)), Queue{}, Options{ShutdownTimeout: 2 * time.Second}), CheckShutdown)
	require.Equal(t, SeverityWarn, p90.Severity)
	require.Regexp(t, `^shutdown budget 2s is below p90 \(9\.\d+s\): about (8\d|9\d)% of messages take longer than the budget, and a deploy cancels those in flight`, p90.Message)
}

// TestAdviceCounts: counts take the singular for one.
func TestAdviceCounts(t *testing.T) {
	t.Parallel()
	one := figures(time.Second)
	one.Processed, one.CeilingHits, one.Adopted = 1, 1, 1
	one.ReceiveCounts = map[int]int64{1: 1}
	a := Advise(one, Queue{}, Options{})
	require.Equal(t, "only 1 message processed: percentiles are rough until 100 (p99) and 1000 (p99.9)", find(t, a, CheckData).Message)
	require.True(t, strings.HasPrefix(find(t, a, CheckCeiling).Message, "1 message reached the maximum lease duration (12h): "))
	require.True(t, strings.HasPrefix(find(t, a, CheckRedelivery).Message, "1 lease lapsed (1 redelivery adopted while still being handled, 0 lost, 0 expired): "))

	redo := figures(time.Second)
	redo.ReceiveCounts, redo.Released = map[int]int64{1: 98, 2: 2}, 1
	require.Contains(t, find(t, Advise(redo, Queue{}, Options{}), CheckRedelivery).Message, "more than the 1 release after failures explain")
	require.Equal(t, "0 redeliveries", count(0, "redelivery"))
	require.Equal(t, "2 leases", count(2, "lease"))
}

// TestAdviceArithmetic sweeps p99 from 1 µs to 20 h and checks that what the
// visibility finding says holds for the numbers it prints: the p99 shown
// is the measured one rounded up by less than its precision, twice it is
// the product shown, the rounding, floor or ceiling named is the one that
// applied, and the lease is the one the exact p99 gives.
func TestAdviceArithmetic(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`\(p99 (\S+) × 2 = (\S+?)(?:, (rounded up to|raised to the|capped at the) (\S+?)(?: floor| maximum)?)?\)`)
	n := 0
	for p99 := time.Microsecond; p99 < 20*time.Hour; p99 = p99*21/20 + 7919 {
		n++
		a := Advise(figures(p99), Queue{}, Options{})
		f := find(t, a, CheckVisibilityP99)
		m := re.FindStringSubmatch(f.Message)
		require.NotNil(t, m, "p99 %v: %s", p99, f.Message)
		shown, twice := parseDur(t, m[1]), parseDur(t, m[2])
		require.GreaterOrEqual(t, shown, p99, "p99 %v shown as %s: rounded up", p99, m[1])
		require.Less(t, shown-p99, figureStep(p99), "p99 %v shown as %s: within its precision", p99, m[1])
		if p99 >= 100*time.Microsecond {
			require.LessOrEqual(t, float64(shown-p99)/float64(p99), 1/60.0, "p99 %v shown as %s", p99, m[1])
		}
		require.Equal(t, 2*shown, twice, "p99 %v: %s", p99, f.Message)

		exact := min(max(roundLease(2*p99), sqsconsumer.MinAdaptiveVisibility), sqsconsumer.MaxVisibilityTimeout)
		require.Equal(t, exact, a.VisibilityTimeout, "p99 %v: the lease the exact p99 gives", p99)
		require.Equal(t, a.VisibilityTimeout.Seconds(), f.Values["recommended_visibility_seconds"])
		switch m[3] {
		case "":
			require.Equal(t, twice, a.VisibilityTimeout, f.Message)
		case "rounded up to":
			require.Equal(t, a.VisibilityTimeout, parseDur(t, m[4]), f.Message)
			require.Greater(t, a.VisibilityTimeout, twice, f.Message)
			require.Equal(t, roundLease(twice), a.VisibilityTimeout, f.Message)
		case "raised to the":
			require.Equal(t, sqsconsumer.MinAdaptiveVisibility, parseDur(t, m[4]), f.Message)
			require.Equal(t, sqsconsumer.MinAdaptiveVisibility, a.VisibilityTimeout, f.Message)
			require.Less(t, twice, sqsconsumer.MinAdaptiveVisibility, f.Message)
		case "capped at the":
			require.Equal(t, sqsconsumer.MaxVisibilityTimeout, parseDur(t, m[4]), f.Message)
			require.Equal(t, sqsconsumer.MaxVisibilityTimeout, a.VisibilityTimeout, f.Message)
			require.Greater(t, twice, sqsconsumer.MaxVisibilityTimeout, f.Message)
			require.Contains(t, find(t, a, CheckCeiling).Message, "p99 × 2 ("+m[2]+") exceeds the 12h limit")
		}
	}
	t.Logf("%d p99 values checked", n)
}

// TestFindingLog logs findings through slog's JSON handler: check,
// severity, message, and the values as a group when there are any.
func TestFindingLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	f := Finding{Check: CheckVisibilityP99, Severity: SeverityWarn, Message: "use 20s", Values: map[string]float64{"recommended_visibility_seconds": 20}}
	log.Log(t.Context(), f.Severity.Level(), "advice", "finding", f)
	log.Info("advice", "finding", Finding{Check: CheckRedelivery, Message: "fine"})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	var got struct {
		Level   string         `json:"level"`
		Finding map[string]any `json:"finding"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &got), lines[0])
	require.Equal(t, "WARN", got.Level)
	require.Equal(t, map[string]any{"check": "visibility_p99", "severity": "warn", "message": "use 20s",
		"values": map[string]any{"recommended_visibility_seconds": 20.0}}, got.Finding)
	got.Finding = nil
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &got), lines[1])
	require.Equal(t, map[string]any{"check": "redelivery", "severity": "info", "message": "fine"}, got.Finding, "no values: none logged")
}

func TestFormatting(t *testing.T) {
	t.Parallel()
	durs := []struct {
		d    time.Duration
		want string
	}{
		{250 * time.Millisecond, "250ms"}, {6 * time.Millisecond, "6ms"}, {1250 * time.Microsecond, "1.25ms"},
		{16800 * time.Millisecond, "16.8s"}, {118750 * time.Millisecond, "118.75s"}, {30 * time.Second, "30s"},
		{95 * time.Second, "95s"}, {120 * time.Second, "2m"}, {620 * time.Second, "620s"}, {962 * time.Second, "962s"},
		{10 * time.Minute, "10m"}, {17 * time.Minute, "17m"}, {20*time.Minute + 500*time.Millisecond, "20m0.5s"},
		{time.Hour, "1h"}, {90 * time.Minute, "1h30m"}, {3723 * time.Second, "1h2m3s"}, {12 * time.Hour, "12h"},
		{14 * time.Hour, "14h"}, {30 * time.Hour, "30h"}, {day, "1d"}, {60 * time.Hour, "2d12h"}, {96 * time.Hour, "4d"},
	}
	for _, tt := range durs {
		require.Equal(t, tt.want, fmtDur(tt.d), "fmtDur(%v)", tt.d)
		require.Equal(t, tt.d, parseDur(t, tt.want), "%s reads back", tt.want)
	}
	require.Equal(t, "8.44s", fmtFig(8436*time.Millisecond), "a figure to its precision, rounded to nearest")
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
	figs := []struct{ d, want time.Duration }{
		{0, 0}, {-time.Second, 0}, {999 * time.Nanosecond, time.Microsecond}, {1000500 * time.Nanosecond, 1010 * time.Microsecond},
		{8433 * time.Millisecond, 8440 * time.Millisecond}, {10010 * time.Millisecond, 10100 * time.Millisecond},
		{61200 * time.Millisecond, 62 * time.Second}, {time.Hour, time.Hour},
	}
	for _, tt := range figs {
		require.Equal(t, tt.want, figure(tt.d), "figure(%v)", tt.d)
	}
	require.Equal(t, "0.043", sig2(0.0432))
	require.Equal(t, "1.5", sig2(1.46))
	require.Equal(t, "12", sig2(12.3))
}

// Advise judges a Consumer's figures against its queue. Here the figures
// are written by hand; in a service they come from Consumer.Stats, and the
// queue from Check or ParseAttributes.
func ExampleAdvise() {
	st := sqsconsumer.Stats{
		Processed: 1000, P50: 6 * time.Second, P90: 7600 * time.Millisecond, P99: 8 * time.Second, P999: 8 * time.Second, Max: 8 * time.Second,
		ReceiveCounts: map[int]int64{1: 1000},
	}
	q := Queue{
		URL:               "https://sqs.us-east-1.amazonaws.com/123456789012/work",
		VisibilityTimeout: 30 * time.Second, // the lease the consumers ask for
		RetentionPeriod:   4 * 24 * time.Hour,
		ReceiveWaitTime:   20 * time.Second,
		Redrive:           &RedrivePolicy{DeadLetterTargetARN: "arn:aws:sqs:us-east-1:123456789012:work-dlq", MaxReceiveCount: 5},
	}
	adv := Advise(st, q, Options{ShutdownTimeout: 20 * time.Second})
	fmt.Println("lease:", adv.VisibilityTimeout)
	fmt.Print(adv)
	// Output:
	// lease: 16s
	// info redrive_policy: dead-letter queue work-dlq after 5 receives
	// info time_to_dlq: maxReceiveCount 5 × the lease 30s = 150s to the DLQ, 80s at the recommended lease 16s (a lower bound: a message received three times may be moved to the back of the queue), far below MessageRetentionPeriod 4d (0.043%); a handler that hangs is renewed on every attempt up to the maximum lease duration, so bound handlers with WithHandlerTimeout
	// info retention: MessageRetentionPeriod 4d outlasts an outage from Friday evening to Monday morning (63h)
	// info long_polling: long polling: receives wait up to 20s for messages
	// info visibility_p99: lease 30s is 1.88× the 16s recommended (p99 8s × 2 = 16s): a crashed consumer's messages stay invisible up to 30s instead of 16s
	// info shutdown: shutdown budget 20s covers p99 (8s); leases stay renewed while handlers drain, so a budget longer than the lease fits, but the orchestrator must wait longer than the budget before it kills the process
	// info redelivery: every receive was a first delivery (receive counts 1:1000): no sign of overrun
}
