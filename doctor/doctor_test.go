package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	info  = SeverityInfo
	warn  = SeverityWarn
	fail  = SeverityError
	days  = 24 * 3600
	week2 = 14 * days
)

func arn(name string) string {
	return "arn:aws:sqs:" + sqstest.DefaultRegion + ":" + sqstest.DefaultAccountID + ":" + name
}

func redrive(dlq string, n int) string {
	return fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, arn(dlq), n)
}

func secs(n int) string { return strconv.Itoa(n) }

// queueSpec is a queue to create on the fake: name and attributes.
type queueSpec struct {
	name  string
	attrs map[string]string
}

// healthy is a source whose every queue-level check passes: long polling,
// a DLQ with 14 days' retention, time to DLQ 150 s.
func healthy(extra map[string]string) []queueSpec {
	src := map[string]string{"VisibilityTimeout": "30", "ReceiveMessageWaitTimeSeconds": "20", "RedrivePolicy": redrive("work-dlq", 5)}
	for k, v := range extra {
		src[k] = v
	}
	return []queueSpec{{"work-dlq", map[string]string{"MessageRetentionPeriod": secs(week2)}}, {"work", src}}
}

// TestCheckFindings has one case per finding, each against queues on the
// in-memory SQS configured to trigger it.
func TestCheckFindings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		queues   []queueSpec // the last one is checked
		opts     Options
		check    CheckName
		severity Severity
		contains string
	}{
		{"no DLQ on a standard queue", []queueSpec{{"work", map[string]string{"ReceiveMessageWaitTimeSeconds": "20"}}},
			Options{}, CheckRedrivePolicy, fail, "no redrive policy"},
		{"no DLQ on a FIFO queue", []queueSpec{{"work.fifo", map[string]string{"ReceiveMessageWaitTimeSeconds": "20"}}},
			Options{}, CheckRedrivePolicy, warn, "blocks its message group"},
		{"DLQ that does not exist", []queueSpec{{"work", map[string]string{"RedrivePolicy": redrive("gone", 5)}}},
			Options{}, CheckRedrivePolicy, fail, "does not exist"},
		{"DLQ present", healthy(nil), Options{}, CheckRedrivePolicy, info, "work-dlq after 5 receives"},
		{"maxReceiveCount 1", healthy(map[string]string{"RedrivePolicy": redrive("work-dlq", 1)}),
			Options{}, CheckMaxReceiveCount, warn, "maxReceiveCount 1"},
		{"time to DLQ beyond retention", healthy(map[string]string{"VisibilityTimeout": "43200", "RedrivePolicy": redrive("work-dlq", 10)}),
			Options{}, CheckTimeToDLQ, fail, "maxReceiveCount 10 × VisibilityTimeout 12h = 5d to the DLQ is above MessageRetentionPeriod 4d (1.25×)"},
		{"time to DLQ over a quarter of retention", healthy(map[string]string{"VisibilityTimeout": "10800", "RedrivePolicy": redrive("work-dlq", 10)}),
			Options{}, CheckTimeToDLQ, warn, "30h to the DLQ (a lower bound: a message received three times may be moved to the back of the queue) is below MessageRetentionPeriod 4d (31%), not under a quarter"},
		{"time to DLQ far below retention", healthy(nil), Options{}, CheckTimeToDLQ, info, "far below MessageRetentionPeriod 4d (0.043%)"},
		{"the retention trap", []queueSpec{{"work-dlq", nil}, {"work", map[string]string{"RedrivePolicy": redrive("work-dlq", 5)}}},
			Options{}, CheckDLQRetention, fail, "equal to the source's 4d"},
		{"DLQ keeps messages longer", healthy(nil), Options{}, CheckDLQRetention, info, "at least 10d there"},
		{"FIFO DLQ retention", []queueSpec{{"work-dlq.fifo", nil}, {"work.fifo", map[string]string{"RedrivePolicy": redrive("work-dlq.fifo", 5)}}},
			Options{}, CheckDLQRetention, info, "reset the enqueue time"},
		{"retention below a working day's outage", healthy(map[string]string{"MessageRetentionPeriod": "43200"}),
			Options{}, CheckRetention, fail, "MessageRetentionPeriod 12h is below 1d"},
		{"retention below a weekend's outage", healthy(map[string]string{"MessageRetentionPeriod": secs(2 * days)}),
			Options{}, CheckRetention, warn, "MessageRetentionPeriod 2d is below 4d: an outage from Friday evening to Monday morning (63h) expires every message"},
		{"retention outlasts a weekend", healthy(nil), Options{}, CheckRetention, info, "4d outlasts an outage"},
		{"short polling", []queueSpec{{"work", nil}}, Options{}, CheckLongPolling, warn, "short polling"},
		{"long polling", healthy(nil), Options{}, CheckLongPolling, info, "wait up to 20s"},
		{"visibility below p99", healthy(nil), Options{P99: time.Minute}, CheckVisibilityP99, fail, "below p99 1m: at least 1%"},
		{"visibility below p99 × 2", healthy(nil), Options{P99: 20 * time.Second}, CheckVisibilityP99, warn, "below p99 × 2 = 40s"},
		{"visibility covers p99 × 2", healthy(nil), Options{P99: 10 * time.Second}, CheckVisibilityP99, info, "covers p99 × 2 = 20s"},
		{"heartbeat lease too short", healthy(map[string]string{"VisibilityTimeout": "5"}), Options{P99: time.Minute, Heartbeat: true},
			CheckVisibilityP99, warn, "below 10s"},
		{"heartbeat lease far too long", healthy(map[string]string{"VisibilityTimeout": "3600"}), Options{P99: 10 * time.Second, Heartbeat: true},
			CheckVisibilityP99, warn, "lease 1h is 180× the 20s the work needs (p99 10s × 2 = 20s): a crashed consumer's messages stay invisible up to 1h instead of 20s"},
		{"heartbeat lease too long for a short p99", healthy(map[string]string{"VisibilityTimeout": "30"}), Options{P99: time.Second, Heartbeat: true},
			CheckVisibilityP99, warn, "lease 30s is 3× the 10s the work needs (p99 1s × 2 = 2s, raised to the 10s floor)"},
		{"heartbeat lease fine", healthy(nil), Options{P99: time.Minute, Heartbeat: true}, CheckVisibilityP99, info, "live on renewals"},
		{"Lambda: below 6 × timeout + window", healthy(map[string]string{"VisibilityTimeout": "60"}),
			Options{LambdaTimeout: 30 * time.Second, BatchingWindow: 2 * time.Second}, CheckLambda, fail, "at least 182 seconds"},
		{"Lambda: covered", healthy(map[string]string{"VisibilityTimeout": "182"}),
			Options{LambdaTimeout: 30 * time.Second, BatchingWindow: 2 * time.Second}, CheckLambda, info, "= 182s"},
		{"shutdown longer than the lease", healthy(nil), Options{ShutdownTimeout: time.Minute}, CheckShutdown, warn, "only duplicates work"},
		{"shutdown longer than the lease with renewals", healthy(nil), Options{ShutdownTimeout: time.Minute, Heartbeat: true}, CheckShutdown, info, "fits"},
		{"shutdown below p99", healthy(map[string]string{"VisibilityTimeout": "120"}), Options{ShutdownTimeout: 20 * time.Second, P99: 40 * time.Second},
			CheckShutdown, warn, "below p99 (40s)"},
		{"shutdown fits", healthy(nil), Options{ShutdownTimeout: 20 * time.Second}, CheckShutdown, info, "fits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := sqstest.New(t)
			var url string
			for _, q := range tt.queues {
				var err error
				url, err = srv.CreateQueue(q.name, q.attrs)
				require.NoError(t, err, "creating %s", q.name)
			}
			rep, err := Check(context.Background(), srv.Client(), url, tt.opts)
			require.NoError(t, err)
			for _, f := range rep.Findings {
				t.Log(f)
			}
			var got []Finding
			for _, f := range rep.Findings {
				if f.Check == tt.check {
					got = append(got, f)
				}
			}
			require.NotEmpty(t, got, "no %s finding", tt.check)
			found := false
			for _, f := range got {
				if f.Severity == tt.severity && strings.Contains(f.Message, tt.contains) {
					found = true
				}
			}
			require.True(t, found, "want a %s %s finding containing %q, got %v", tt.severity, tt.check, tt.contains, got)
			require.Equal(t, tt.severity == fail || rep.Worst() == fail, rep.Err() != nil)
		})
	}
}

func TestCheckHealthyQueue(t *testing.T) {
	t.Parallel()
	srv := sqstest.New(t)
	var url string
	for _, q := range healthy(nil) {
		var err error
		url, err = srv.CreateQueue(q.name, q.attrs)
		require.NoError(t, err)
	}
	rep, err := Check(context.Background(), srv.Client(), url, Options{P99: 10 * time.Second, ShutdownTimeout: 20 * time.Second})
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.Equal(t, info, rep.Worst(), "%v", rep.Findings)
	require.NotNil(t, rep.DLQ)
	require.Equal(t, 14*24*time.Hour, rep.DLQ.RetentionPeriod)
	require.Equal(t, arn("work"), rep.Queue.ARN)
	require.Equal(t, 3, srv.CallCount("GetQueueAttributes")+srv.CallCount("GetQueueUrl"), "source attributes, DLQ URL, DLQ attributes")
	require.Equal(t, 0, rep.Count(warn))
}

func TestCheckErrors(t *testing.T) {
	t.Parallel()
	srv := sqstest.New(t)
	_, err := Check(context.Background(), srv.Client(), srv.BaseURL()+"/"+sqstest.DefaultAccountID+"/nope", Options{})
	require.Error(t, err, "a queue that cannot be read is an error, not a finding")
	require.True(t, isNotExist(err))

	// A DLQ that cannot be read (access denied) is a warning; the other checks still run.
	var url string
	for _, q := range healthy(nil) {
		url, err = srv.CreateQueue(q.name, q.attrs)
		require.NoError(t, err)
	}
	srv.FailNext("GetQueueUrl", 1, sqstest.Fault{Status: 403, Type: "AccessDenied", QueryCode: "AccessDenied", Message: "not allowed"})
	rep, err := Check(context.Background(), srv.Client(), url, Options{})
	require.NoError(t, err)
	require.Nil(t, rep.DLQ)
	require.Equal(t, warn, rep.Worst())
	require.Contains(t, rep.Findings[0].Message, "could not read the dead-letter queue")
}

func TestParseAttributes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		url     string
		attrs   map[string]string
		want    Queue
		wantErr string
	}{
		{"defaults", "u", nil, Queue{URL: "u", VisibilityTimeout: 30 * time.Second, RetentionPeriod: 96 * time.Hour}, ""},
		{"all", "u", map[string]string{"QueueArn": "a", "FifoQueue": "true", "VisibilityTimeout": "60", "MessageRetentionPeriod": "60", "ReceiveMessageWaitTimeSeconds": "20",
			"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:r:1:d","maxReceiveCount":"7"}`},
			Queue{URL: "u", ARN: "a", FIFO: true, VisibilityTimeout: time.Minute, RetentionPeriod: time.Minute, ReceiveWaitTime: 20 * time.Second,
				Redrive: &RedrivePolicy{DeadLetterTargetARN: "arn:aws:sqs:r:1:d", MaxReceiveCount: 7}}, ""},
		{"fifo from the name", "https://q/1/w.fifo", nil, Queue{URL: "https://q/1/w.fifo", FIFO: true, VisibilityTimeout: 30 * time.Second, RetentionPeriod: 96 * time.Hour}, ""},
		{"bad number", "u", map[string]string{"VisibilityTimeout": "x"}, Queue{}, "VisibilityTimeout"},
		{"bad redrive", "u", map[string]string{"RedrivePolicy": "{"}, Queue{}, "not JSON"},
		{"redrive without a count", "u", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"a"}`}, Queue{}, "maxReceiveCount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseAttributes(tt.url, tt.attrs)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestReportJSON(t *testing.T) {
	t.Parallel()
	rep := Report{
		Queue:    Queue{URL: "u", VisibilityTimeout: 30 * time.Second, RetentionPeriod: 4 * 24 * time.Hour, Redrive: &RedrivePolicy{"arn:aws:sqs:r:1:d", 3}},
		Findings: []Finding{{CheckLongPolling, warn, "m", nil}},
	}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	require.JSONEq(t, `{"queue":{"url":"u","fifo":false,"visibility_timeout_seconds":30,"message_retention_period_seconds":345600,
		"receive_message_wait_time_seconds":0,"redrive_policy":{"dead_letter_target_arn":"arn:aws:sqs:r:1:d","max_receive_count":3}},
		"findings":[{"check":"long_polling","severity":"warn","message":"m"}]}`, string(b))
	var back Report
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, rep, back)
}

func TestAnalyzeWithoutDLQAttributes(t *testing.T) {
	t.Parallel()
	src := Queue{URL: "u", VisibilityTimeout: 30 * time.Second, RetentionPeriod: 96 * time.Hour, ReceiveWaitTime: 20 * time.Second,
		Redrive: &RedrivePolicy{"arn:aws:sqs:r:1:d", 3}}
	fs := Analyze(src, nil, Options{})
	for _, f := range fs {
		require.NotEqual(t, CheckDLQRetention, f.Check, "no DLQ attributes, no retention check")
		require.Equal(t, info, f.Severity, "%v", f)
	}
}

// TestRetentionThresholds pins CheckRetention's severities to
// MinRetention and RecommendedRetention, one second either side.
func TestRetentionThresholds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		retention time.Duration
		severity  Severity
		contains  string
	}{
		{time.Minute, fail, "MessageRetentionPeriod 1m is below 1d"},
		{MinRetention - time.Second, fail, "raise it to at least 1d (86400)"},
		{MinRetention, warn, "expires every message sent as it begins"},
		{63 * time.Hour, warn, "expires every message sent as it begins"},
		{3 * 24 * time.Hour, warn, "leaves 9h to fix the consumers"},
		{RecommendedRetention - time.Second, warn, "raise it to 4d (345600) or more"},
		{RecommendedRetention, info, "4d outlasts an outage"},
		{14 * 24 * time.Hour, info, "14d outlasts an outage"},
	}
	for _, tt := range tests {
		t.Run(tt.retention.String(), func(t *testing.T) {
			t.Parallel()
			src := Queue{URL: "u", VisibilityTimeout: 30 * time.Second, RetentionPeriod: tt.retention, ReceiveWaitTime: 20 * time.Second}
			f := only(t, Analyze(src, nil, Options{}), CheckRetention)
			require.Equal(t, tt.severity, f.Severity, "%v", f)
			require.Contains(t, f.Message, tt.contains)
			require.Equal(t, map[string]float64{"retention_seconds": tt.retention.Seconds(), "min_retention_seconds": 86400,
				"recommended_retention_seconds": 345600}, f.Values)
		})
	}
}

// only returns the one finding of check c in fs.
func only(t *testing.T, fs []Finding, c CheckName) Finding {
	t.Helper()
	var got []Finding
	for _, f := range fs {
		if f.Check == c {
			got = append(got, f)
		}
	}
	require.Len(t, got, 1, "findings of %s in %v", c, fs)
	return got[0]
}

// TestTimeToDLQFollowsTheRatio moves time to DLQ across a quarter of
// retention and across retention itself: "far below" and the info
// severity end exactly at a quarter, the error starts exactly at
// retention, and the message states the ratio.
func TestTimeToDLQFollowsTheRatio(t *testing.T) {
	t.Parallel()
	const ret = 96 * time.Hour // 4 receives × 6h is a quarter
	tests := []struct {
		vis      time.Duration
		severity Severity
		contains string
		ratio    float64
	}{
		{6*time.Hour - time.Second, info, "= 23h59m56s to the DLQ, far below MessageRetentionPeriod 4d (24%)", float64(6*3600-1) / (24 * 3600)},
		{6 * time.Hour, warn, "= 1d to the DLQ is below MessageRetentionPeriod 4d (25%), not under a quarter of it", 0.25},
		{24*time.Hour - time.Second, warn, "is below MessageRetentionPeriod 4d (99%)", float64(24*3600-1) / (24 * 3600)},
		{24 * time.Hour, fail, "= 4d to the DLQ is equal to MessageRetentionPeriod 4d: messages expire", 1},
		{24*time.Hour + time.Second, fail, "is above MessageRetentionPeriod 4d (1.01×)", float64(24*3600+1) / (24 * 3600)},
	}
	for _, tt := range tests {
		t.Run(tt.vis.String(), func(t *testing.T) {
			t.Parallel()
			src := Queue{URL: "u", FIFO: true, VisibilityTimeout: tt.vis, RetentionPeriod: ret, ReceiveWaitTime: 20 * time.Second,
				Redrive: &RedrivePolicy{"arn:aws:sqs:r:1:d.fifo", 4}}
			f := only(t, Analyze(src, nil, Options{}), CheckTimeToDLQ)
			require.Equal(t, tt.severity, f.Severity, "%v", f)
			require.Contains(t, f.Message, tt.contains)
			require.InDelta(t, tt.ratio, f.Values["ratio"], 1e-12)
			require.Equal(t, (4 * tt.vis).Seconds(), f.Values["time_to_dlq_seconds"])
			require.Equal(t, ret.Seconds(), f.Values["retention_seconds"])
			require.EqualValues(t, 4, f.Values["max_receive_count"])
		})
	}
}

// TestCompareWording pins the comparative words and the printed ratio to
// the ratio of the two durations, at every boundary.
func TestCompareWording(t *testing.T) {
	t.Parallel()
	const h = time.Hour
	tests := []struct {
		x, y time.Duration
		want string
	}{
		{0, h, "far below Y (<0.01%)"},
		{150 * time.Second, 96 * h, "far below Y (0.043%)"},
		{h, 1000 * h, "far below Y (0.1%)"},
		{h - 1, 4 * h, "far below Y (24%)"},
		{h, 4 * h, "below Y (25%)"},
		{30 * h, 100 * h, "below Y (30%)"},
		{999 * h, 1000 * h, "below Y (99%)"},
		{h, h, "equal to Y"},
		{1001 * h, 1000 * h, "above Y (1.01×)"},
		{11 * h, 10 * h, "above Y (1.1×)"},
		{4 * h, h, "above Y (4×)"},
		{4*h + 1, h, "far above Y (4.01×)"},
		{95 * h, 10 * h, "far above Y (9.5×)"},
		{901 * h, 10 * h, "far above Y (91×)"},
		{maxDuration, 1, "far above Y (9223372036854775807×)"},
		{1, maxDuration, "far below Y (<0.01%)"},
		{maxDuration - 1, maxDuration, "below Y (99%)"},
		{h, 0, "far above Y"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, compare(tt.x, tt.y, "Y"), "compare(%v, %v)", tt.x, tt.y)
	}
}

// TestWordingAudit runs Analyze over a grid of settings and checks every
// finding: "far below" only under a quarter of the bound, "far above"
// only over four times it, both only with a ratio among the values, and
// none of the vague words whose meaning no ratio pins.
func TestWordingAudit(t *testing.T) {
	t.Parallel()
	var n int
	for _, vis := range []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute, time.Hour, 12 * time.Hour} {
		for _, ret := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 96 * time.Hour, 14 * 24 * time.Hour} {
			for _, mrc := range []int{1, 3, 10, 100} {
				for _, dret := range []time.Duration{time.Hour, 96 * time.Hour, 14 * 24 * time.Hour} {
					for _, p99 := range []time.Duration{0, time.Second, 20 * time.Second, 10 * time.Minute} {
						for _, hb := range []bool{false, true} {
							src := Queue{URL: "u", VisibilityTimeout: vis, RetentionPeriod: ret, Redrive: &RedrivePolicy{"arn:aws:sqs:r:1:d", mrc}}
							opts := Options{P99: p99, Heartbeat: hb, LambdaTimeout: time.Duration(mrc) * time.Second, ShutdownTimeout: 2 * p99}
							for _, f := range Analyze(src, &Queue{RetentionPeriod: dret}, opts) {
								n++
								r, hasRatio := f.Values["ratio"]
								if strings.Contains(f.Message, "far below") {
									require.True(t, hasRatio && r < 0.25, "%v with values %v", f, f.Values)
								}
								if strings.Contains(f.Message, "far above") {
									require.True(t, hasRatio && r > 4, "%v with values %v", f, f.Values)
								}
								for _, vague := range []string{"well below", "well above", "close to", "almost", "much ", "barely", "nearly", "way ", "far too", "slightly"} {
									require.NotContains(t, f.Message, vague, "%v", f)
								}
								b, err := json.Marshal(f)
								require.NoError(t, err, "every finding encodes: %v", f)
								var back Finding
								require.NoError(t, json.Unmarshal(b, &back))
								require.Equal(t, f, back)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d findings audited", n)
}

// TestErrorPrefix checks each error says "doctor: " once, however deep
// it was made.
func TestErrorPrefix(t *testing.T) {
	t.Parallel()
	srv := sqstest.New(t)
	_, err := Check(context.Background(), srv.Client(), srv.BaseURL()+"/"+sqstest.DefaultAccountID+"/nope", Options{})
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "doctor: reading the attributes of "), err.Error())
	require.Equal(t, 1, strings.Count(err.Error(), "doctor:"), err.Error())

	_, err = ParseAttributes("u", map[string]string{"VisibilityTimeout": "x", "MessageRetentionPeriod": "-1", "RedrivePolicy": "{"})
	require.Error(t, err)
	require.Equal(t, 1, strings.Count(err.Error(), "doctor:"), err.Error())
	require.NotContains(t, err.Error(), "\n", "one line")
	for _, want := range []string{"VisibilityTimeout", "MessageRetentionPeriod", "RedrivePolicy"} {
		require.Contains(t, err.Error(), want)
	}

	// A source whose attributes do not parse: Check's error names the
	// queue once and the package once.
	url, err := srv.CreateQueue("plain", nil)
	require.NoError(t, err)
	_, err = Check(context.Background(), badAttrs{srv.Client()}, url, Options{})
	require.Error(t, err)
	require.Equal(t, "doctor: the attributes of "+url+": attribute VisibilityTimeout: \"soon\" is not a number of seconds", err.Error())

	// A DLQ that cannot be read: the finding quotes the cause without a
	// package prefix.
	for _, q := range healthy(nil) {
		url, err = srv.CreateQueue(q.name, q.attrs)
		require.NoError(t, err)
	}
	srv.FailNext("GetQueueUrl", 1, sqstest.Fault{Status: 403, Type: "AccessDenied", QueryCode: "AccessDenied", Message: "not allowed"})
	rep, err := Check(context.Background(), srv.Client(), url, Options{})
	require.NoError(t, err)
	f := only(t, rep.Findings, CheckRedrivePolicy)
	require.NotContains(t, f.Message, "doctor:")
	require.Equal(t, 1, strings.Count(f.Message, arn("work-dlq")), f.Message)
}

// badAttrs answers GetQueueAttributes with an unparsable
// VisibilityTimeout.
type badAttrs struct{ Client }

func (c badAttrs) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	out, err := c.Client.GetQueueAttributes(ctx, in, optFns...)
	if err == nil {
		out.Attributes["VisibilityTimeout"] = "soon"
	}
	return out, err
}

// The in-flight quota: info below it, warn from nine tenths, error at it
// with messages visible (consumers idle while they wait); skipped when the
// counts are unknown. The counts round-trip through JSON.
func TestInFlightQuota(t *testing.T) {
	t.Parallel()
	find := func(fs []Finding) *Finding {
		for i := range fs {
			if fs[i].Check == CheckInFlight {
				return &fs[i]
			}
		}
		return nil
	}
	base := Queue{URL: "u", VisibilityTimeout: 30 * time.Second, RetentionPeriod: 4 * 24 * time.Hour, ReceiveWaitTime: 20 * time.Second}
	require.Nil(t, find(Analyze(base, nil, Options{})), "counts unknown")
	for _, tt := range []struct {
		visible, inFlight int64
		sev               Severity
		says              string
	}{
		{10, 1000, SeverityInfo, "below SQS's in-flight quota"},
		{0, 107_999, SeverityInfo, "below"},
		{0, 108_000, SeverityWarn, "near SQS's in-flight quota of about 120000 per queue"},
		{0, 120_000, SeverityWarn, "near"},
		{1, 120_000, SeverityError, "at SQS's in-flight quota of about 120000 per queue, with 1 visible: SQS answers long polls with nothing and no error"},
	} {
		q := base
		q.Counts = &QueueCounts{Visible: tt.visible, InFlight: tt.inFlight}
		f := find(Analyze(q, nil, Options{}))
		require.NotNil(t, f)
		require.Equal(t, tt.sev, f.Severity, "%+v", tt)
		require.Contains(t, f.Message, tt.says)
		require.Equal(t, float64(tt.inFlight), f.Values["in_flight"])
	}
	q, err := ParseAttributes("u", map[string]string{"ApproximateNumberOfMessages": "7", "ApproximateNumberOfMessagesNotVisible": "110000"})
	require.NoError(t, err)
	require.Equal(t, &QueueCounts{Visible: 7, InFlight: 110_000}, q.Counts)
	b, err := json.Marshal(q)
	require.NoError(t, err)
	require.Contains(t, string(b), `"counts":{"visible":7,"in_flight":110000}`)
	var back Queue
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, q, back)
	_, err = ParseAttributes("u", map[string]string{"ApproximateNumberOfMessagesNotVisible": "many"})
	require.ErrorContains(t, err, `attribute ApproximateNumberOfMessagesNotVisible: "many" is not a count`)
}
