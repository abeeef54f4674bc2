package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	info  = sqsconsumer.SeverityInfo
	warn  = sqsconsumer.SeverityWarn
	fail  = sqsconsumer.SeverityError
	day   = 24 * 3600
	week2 = 14 * day
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
		severity sqsconsumer.Severity
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
			Options{}, CheckTimeToDLQ, fail, "maxReceiveCount 10 × VisibilityTimeout 12h = 5d to the DLQ is not below MessageRetentionPeriod 4d"},
		{"time to DLQ over a quarter of retention", healthy(map[string]string{"VisibilityTimeout": "10800", "RedrivePolicy": redrive("work-dlq", 10)}),
			Options{}, CheckTimeToDLQ, warn, "30h to the DLQ"},
		{"time to DLQ far below retention", healthy(nil), Options{}, CheckTimeToDLQ, info, "= 150s to the DLQ"},
		{"the retention trap", []queueSpec{{"work-dlq", nil}, {"work", map[string]string{"RedrivePolicy": redrive("work-dlq", 5)}}},
			Options{}, CheckDLQRetention, fail, "not longer than the source's 4d"},
		{"DLQ keeps messages longer", healthy(nil), Options{}, CheckDLQRetention, info, "at least 10d there"},
		{"FIFO DLQ retention", []queueSpec{{"work-dlq.fifo", nil}, {"work.fifo", map[string]string{"RedrivePolicy": redrive("work-dlq.fifo", 5)}}},
			Options{}, CheckDLQRetention, info, "reset the enqueue time"},
		{"short polling", []queueSpec{{"work", nil}}, Options{}, CheckLongPolling, warn, "short polling"},
		{"long polling", healthy(nil), Options{}, CheckLongPolling, info, "wait up to 20s"},
		{"visibility below p99", healthy(nil), Options{P99: time.Minute}, CheckVisibilityP99, fail, "below p99 1m: over 1%"},
		{"visibility below p99 × 2", healthy(nil), Options{P99: 20 * time.Second}, CheckVisibilityP99, warn, "below p99 × 2 = 40s"},
		{"visibility covers p99 × 2", healthy(nil), Options{P99: 10 * time.Second}, CheckVisibilityP99, info, "covers p99 × 2 = 20s"},
		{"heartbeat lease too short", healthy(map[string]string{"VisibilityTimeout": "5"}), Options{P99: time.Minute, Heartbeat: true},
			CheckVisibilityP99, warn, "below 10s"},
		{"heartbeat lease far too long", healthy(map[string]string{"VisibilityTimeout": "3600"}), Options{P99: 10 * time.Second, Heartbeat: true},
			CheckVisibilityP99, warn, "use 20s"},
		{"heartbeat lease fine", healthy(nil), Options{P99: time.Minute, Heartbeat: true}, CheckVisibilityP99, info, "with renewals"},
		{"Lambda: below 6 × timeout + window", healthy(map[string]string{"VisibilityTimeout": "60"}),
			Options{LambdaTimeout: 30 * time.Second, BatchingWindow: 2 * time.Second}, CheckLambda, fail, "at least 182 seconds"},
		{"Lambda: covered", healthy(map[string]string{"VisibilityTimeout": "182"}),
			Options{LambdaTimeout: 30 * time.Second, BatchingWindow: 2 * time.Second}, CheckLambda, info, "= 182s"},
		{"shutdown longer than the lease", healthy(nil), Options{ShutdownTimeout: time.Minute}, CheckShutdown, warn, "only duplicates work"},
		{"shutdown longer than the lease with renewals", healthy(nil), Options{ShutdownTimeout: time.Minute, Heartbeat: true}, CheckShutdown, info, "fits"},
		{"shutdown below p99", healthy(map[string]string{"VisibilityTimeout": "120"}), Options{ShutdownTimeout: 20 * time.Second, P99: 40 * time.Second},
			CheckShutdown, warn, "below p99 40s"},
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
		Findings: []Finding{{CheckLongPolling, warn, "m"}},
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

func TestFmtDur(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{500 * time.Millisecond, "500ms"}, {30 * time.Second, "30s"}, {620 * time.Second, "620s"}, {2 * time.Minute, "2m"},
		{96 * time.Hour, "4d"}, {60 * time.Hour, "2d12h"}, {30 * time.Hour, "30h"}, {90 * time.Minute, "1h30m"}, {12 * time.Hour, "12h"},
	} {
		require.Equal(t, tt.want, fmtDur(tt.d), "fmtDur(%v)", tt.d)
	}
}
