package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer/doctor"
	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	srv     *sqstest.Server
	healthy string // a queue with no warning
	broken  string // no DLQ, short polling
	fifo    string // FIFO with no DLQ: a warning only
}

func setup(t *testing.T) bundle {
	t.Helper()
	srv := sqstest.New(t)
	create := func(name string, attrs map[string]string) string {
		u, err := srv.CreateQueue(name, attrs)
		require.NoError(t, err)
		return u
	}
	create("ok-dlq", map[string]string{"MessageRetentionPeriod": "1209600"})
	return bundle{
		srv: srv,
		healthy: create("ok", map[string]string{"ReceiveMessageWaitTimeSeconds": "20",
			"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:ok-dlq","maxReceiveCount":5}`}),
		broken: create("broken", nil),
		fifo:   create("lonely.fifo", map[string]string{"ReceiveMessageWaitTimeSeconds": "20"}),
	}
}

// inMemory returns a client factory that ignores the endpoint and region
// and reaches srv in memory.
func inMemory(srv *sqstest.Server) newClientFunc {
	return func(context.Context, string, string) (doctor.Client, error) { return srv.Client(), nil }
}

func runCLI(t *testing.T, mk newClientFunc, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb, mk)
	return code, out.String(), errb.String()
}

func TestCLIText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"healthy queue", []string{"-queue-url", b.healthy}, exitOK,
			[]string{"queue  " + b.healthy + " (standard; visibility 30s, retention 4d, wait 20s, DLQ ok-dlq after 5 receives)", "dlq    ", "INFO   dlq_retention", "0 error(s), 0 warning(s)"}},
		{"errors exit 1", []string{"-queue-url", b.broken}, exitFindings,
			[]string{"ERROR  redrive_policy", "WARN   long_polling", "1 error(s), 1 warning(s)"}},
		{"p99 and shutdown flags run their checks", []string{"-queue-url", b.healthy, "-p99", "1m", "-shutdown", "45s"}, exitFindings,
			[]string{"ERROR  visibility_p99", "WARN   shutdown"}},
		{"lambda flags", []string{"-queue-url", b.healthy, "-lambda-timeout", "30s", "-batching-window", "2s"}, exitFindings,
			[]string{"ERROR  lambda_visibility", "at least 182 seconds"}},
		{"warnings alone exit 0", []string{"-queue-url", b.fifo}, exitOK, []string{"WARN   redrive_policy"}},
		{"warnings exit 1 with -strict", []string{"-strict", "-queue-url", b.fifo}, exitFindings, []string{"WARN   redrive_policy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runCLI(t, inMemory(b.srv), tt.args...)
			t.Log("\n" + out)
			require.Equal(t, tt.code, code, "exit code; stderr: %s", errOut)
			require.Empty(t, errOut)
			for _, c := range tt.contains {
				require.Contains(t, out, c)
			}
			// Findings come most severe first.
			rank := map[string]int{"ERROR": 3, "WARN": 2, "INFO": 1}
			last := 3
			for _, line := range strings.Split(out, "\n") {
				if r, ok := rank[strings.Fields(line + " x")[0]]; ok {
					require.LessOrEqual(t, r, last, "out of order: %s", line)
					last = r
				}
			}
		})
	}
}

func TestCLIJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, out, _ := runCLI(t, inMemory(b.srv), "-json", "-queue-url", b.broken)
	require.Equal(t, exitFindings, code)

	var got struct {
		Queue    map[string]any   `json:"queue"`
		DLQ      map[string]any   `json:"dlq"`
		Findings []map[string]any `json:"findings"`
		Counts   map[string]int   `json:"counts"`
		ExitCode int              `json:"exit_code"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, b.broken, got.Queue["url"])
	require.Equal(t, false, got.Queue["fifo"])
	require.EqualValues(t, 30, got.Queue["visibility_timeout_seconds"])
	require.EqualValues(t, 345600, got.Queue["message_retention_period_seconds"])
	require.EqualValues(t, 0, got.Queue["receive_message_wait_time_seconds"])
	require.NotContains(t, got.Queue, "redrive_policy")
	require.Nil(t, got.DLQ)
	require.Equal(t, map[string]any{"visible": 0.0, "in_flight": 0.0}, got.Queue["counts"])
	require.Equal(t, map[string]int{"error": 1, "warn": 1, "info": 2}, got.Counts)
	require.Equal(t, exitFindings, got.ExitCode)
	require.Len(t, got.Findings, 4)
	require.Equal(t, map[string]any{"check": "redrive_policy", "severity": "error", "message": got.Findings[0]["message"],
		"values": map[string]any{"retention_seconds": 345600.0}}, got.Findings[0])
	require.Equal(t, "long_polling", got.Findings[1]["check"])
	require.Equal(t, map[string]any{"receive_wait_seconds": 0.0}, got.Findings[1]["values"])
	require.Equal(t, "retention", got.Findings[2]["check"])
	require.Equal(t, "in_flight_quota", got.Findings[3]["check"])

	code, out, _ = runCLI(t, inMemory(b.srv), "-json", "-queue-url", b.healthy)
	require.Equal(t, exitOK, code)
	var ok doctor.Report
	require.NoError(t, json.Unmarshal([]byte(out), &ok))
	require.NotNil(t, ok.DLQ)
	require.NotNil(t, ok.Queue.Redrive)
	require.Equal(t, 5, ok.Queue.Redrive.MaxReceiveCount)
	require.NoError(t, ok.Err())
	var ttd doctor.Finding
	for _, f := range ok.Findings {
		if f.Check == doctor.CheckTimeToDLQ {
			ttd = f
		}
	}
	require.Equal(t, map[string]float64{"max_receive_count": 5, "visibility_timeout_seconds": 30, "time_to_dlq_seconds": 150,
		"retention_seconds": 345600, "ratio": 150.0 / 345600}, ttd.Values, "the figures behind the finding")
}

// TestCLIJSONErrors checks that with -json every exit code prints one
// JSON object on stdout, the reason without a prefix when the queue was
// not checked, while stderr still says why.
func TestCLIJSONErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	broken := func(context.Context, string, string) (doctor.Client, error) {
		return nil, errors.New("loading the AWS configuration: no region")
	}
	tests := []struct {
		name     string
		mk       newClientFunc
		args     []string
		code     int
		contains string
	}{
		{"missing flag", inMemory(b.srv), []string{"-json"}, exitUsage, "-queue-url is required"},
		{"two problems", inMemory(b.srv), []string{"-json", "-queue-url", "q", "-timeout", "0s"}, exitUsage, `-queue-url "q" is not a URL; -timeout must be positive`},
		{"bad duration before -json", inMemory(b.srv), []string{"-p99", "soon", "-queue-url", b.healthy, "-json"}, exitUsage, `invalid value "soon" for flag -p99`},
		{"unknown flag before -json", inMemory(b.srv), []string{"-queue", b.healthy, "--json=true"}, exitUsage, "flag provided but not defined: -queue"},
		{"missing queue", inMemory(b.srv), []string{"-json", "-queue-url", b.srv.BaseURL() + "/123456789012/nope"}, exitRead, "reading the attributes of"},
		{"no client", broken, []string{"-json", "-queue-url", b.healthy}, exitRead, "loading the AWS configuration: no region"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runCLI(t, tt.mk, tt.args...)
			require.Equal(t, tt.code, code, "stderr: %s", errOut)
			var got map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &got), "stdout: %q", out)
			require.Equal(t, []string{"error", "exit_code"}, slices.Sorted(maps.Keys(got)))
			require.EqualValues(t, tt.code, got["exit_code"])
			msg := got["error"].(string)
			require.Contains(t, msg, tt.contains)
			require.False(t, strings.HasPrefix(msg, "doctor:") || strings.HasPrefix(msg, "sqsdoctor:"), "no prefix in JSON: %q", msg)
			for _, part := range strings.Split(tt.contains, "; ") {
				require.Contains(t, errOut, part, "stderr says why too")
			}
		})
	}
}

// TestCLINoDoubledPrefix runs every way the command fails and checks no
// line of stderr repeats a prefix.
func TestCLINoDoubledPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	missing := b.srv.BaseURL() + "/123456789012/nope"
	failing := func(context.Context, string, string) (doctor.Client, error) {
		return nil, errors.New("loading the AWS configuration: no region")
	}
	for _, c := range []struct {
		mk   newClientFunc
		args []string
	}{
		{inMemory(b.srv), []string{"-queue-url", missing}},
		{inMemory(b.srv), []string{"-json", "-queue-url", missing}},
		{inMemory(b.srv), nil},
		{inMemory(b.srv), []string{"-queue-url", b.healthy, "-p99", "-1s"}},
		{failing, []string{"-queue-url", b.healthy}},
	} {
		_, _, errOut := runCLI(t, c.mk, c.args...)
		require.NotEmpty(t, errOut)
		for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
			if strings.HasPrefix(line, "Run sqsdoctor") {
				continue
			}
			require.True(t, strings.HasPrefix(line, "sqsdoctor: "), "%v: %q", c.args, line)
			require.NotContains(t, line, "doctor: doctor:", "%v", c.args)
			require.Equal(t, 1, strings.Count(line, "doctor:"), "%v: %q", c.args, line)
		}
	}
	_, _, errOut := runCLI(t, inMemory(b.srv), "-queue-url", missing)
	require.True(t, strings.HasPrefix(errOut, "sqsdoctor: reading the attributes of "+missing+": "), errOut)
}

func TestCLIUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"help", []string{"-help"}, exitOK, "Exit codes:"},
		{"no queue", nil, exitUsage, "-queue-url is required"},
		{"not a URL", []string{"-queue-url", "orders"}, exitUsage, "is not a URL"},
		{"bad duration", []string{"-queue-url", b.healthy, "-p99", "soon"}, exitUsage, "invalid value"},
		{"negative duration", []string{"-queue-url", b.healthy, "-shutdown", "-1s"}, exitUsage, "-shutdown must not be negative"},
		{"stray argument", []string{"-queue-url", b.healthy, "extra"}, exitUsage, "unexpected arguments: extra"},
		{"unknown flag", []string{"-queue", b.healthy}, exitUsage, "flag provided but not defined"},
		{"missing queue", []string{"-queue-url", b.srv.BaseURL() + "/123456789012/nope"}, exitRead, "The specified queue does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runCLI(t, inMemory(b.srv), tt.args...)
			require.Equal(t, tt.code, code, "stderr: %s", errOut)
			require.Empty(t, out, "nothing on stdout")
			require.Contains(t, errOut, tt.contains)
		})
	}
	_, _, help := runCLI(t, inMemory(b.srv), "-help")
	for _, want := range []string{`"visibility_timeout_seconds": int`, `"severity": "error" | "warn" | "info"`, "-batching-window duration", "lambda_visibility",
		`{"error": string, "exit_code": int}`, `"values": {string: number}`, "retention          MessageRetentionPeriod outlasts", "is its own\nendpoint"} {
		require.Contains(t, help, want, "the help documents the JSON schema, flags and checks")
	}
}

// TestCLIEndpoint runs the real client factory against sqstest served on a
// loopback socket: it exercises -endpoint with static credentials, the path
// a local server takes. It needs a real socket, so it is not in a synctest
// bubble; nothing in it waits on a timer.
func TestCLIEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ts := httptest.NewServer(b.srv.Handler())
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	code, out, errOut := runCLI(t, newClient, "-endpoint", ts.URL, "-queue-url", b.healthy, "-timeout", "10s")
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errOut, out)
	require.Contains(t, out, "DLQ ok-dlq after 5 receives")
}

// TestCLILocalURL checks that a queue URL on a loopback address, as
// cmd/sqstest serves, needs no -endpoint: the real client factory is given
// the URL's scheme and host. Like TestCLIEndpoint it needs a real socket.
func TestCLILocalURL(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := sqstest.New(t, sqstest.WithBaseURL("http://"+ln.Addr().String()))
	ts := &httptest.Server{Listener: ln, Config: &http.Server{Handler: srv.Handler()}}
	ts.Start()
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	u, err := srv.CreateQueue("jobs", map[string]string{"ReceiveMessageWaitTimeSeconds": "20"})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(u, "http://127.0.0.1:"), u)
	code, out, errOut := runCLI(t, newClient, "-queue-url", u, "-timeout", "10s")
	require.Equal(t, exitFindings, code, "stderr: %s\nstdout: %s", errOut, out)
	require.Empty(t, errOut)
	require.Contains(t, out, "ERROR  redrive_policy")
}

// TestCLIEndpointChoice records the endpoint the command asks for.
func TestCLIEndpointChoice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"AWS URL", []string{"-queue-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/q"}, ""},
		{"loopback URL", []string{"-queue-url", "http://127.0.0.1:9324/000000000000/q"}, "http://127.0.0.1:9324"},
		{"localhost URL", []string{"-queue-url", "http://localhost:4566/000000000000/q"}, "http://localhost:4566"},
		{"-endpoint wins", []string{"-endpoint", "http://127.0.0.1:1", "-queue-url", "http://localhost:4566/000000000000/q"}, "http://127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			record := func(ctx context.Context, endpoint, region string) (doctor.Client, error) {
				got = append(got, endpoint)
				return b.srv.Client(), nil
			}
			runCLI(t, record, tt.args...)
			require.Equal(t, []string{tt.want}, got)
		})
	}
}

func TestLocalEndpoint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:9324/000000000000/jobs":            "http://127.0.0.1:9324",
		"http://127.1.2.3:9324/000000000000/jobs":            "http://127.1.2.3:9324",
		"http://[::1]:9324/000000000000/jobs":                "http://[::1]:9324",
		"http://localhost:4566/000000000000/jobs":            "http://localhost:4566",
		"http://LocalHost./000000000000/jobs":                "http://LocalHost.",
		"http://sqs.localhost:4566/000000000000/jobs":        "http://sqs.localhost:4566",
		"https://localhost:9324/1/q":                         "https://localhost:9324",
		"https://sqs.us-east-1.amazonaws.com/123456789012/q": "",
		"http://sqstest.local/123456789012/q":                "",
		"http://10.0.0.1:9324/1/q":                           "",
		"http://localhost.example.com/1/q":                   "",
		"ftp://localhost/1/q":                                "",
		"::not a url":                                        "",
	} {
		require.Equal(t, want, localEndpoint(in), "localEndpoint(%q)", in)
	}
}

func TestJSONRequested(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-json"}, true},
		{[]string{"--json"}, true},
		{[]string{"-json=false"}, false},
		{[]string{"-json=true", "-json=false"}, false},
		{[]string{"-json=nonsense"}, false},
		{[]string{"-p99", "soon", "-json"}, true},
		{[]string{"-nope", "-json"}, true},
		{[]string{"-nope", "value", "-json"}, true},
		{[]string{"-queue-url", "-json"}, false}, // -json is the URL
		{[]string{"-heartbeat", "-json"}, true},  // a bool flag takes no value
		{[]string{"-queue-url", "u", "extra", "-json"}, false},
		{[]string{"--", "-json"}, false},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.String("queue-url", "", "")
		fs.Duration("p99", 0, "")
		fs.Bool("heartbeat", false, "")
		fs.Bool("json", false, "")
		require.Equal(t, tt.want, jsonRequested(fs, tt.args), "%q", tt.args)
	}
}

func TestRegionOf(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://sqs.eu-west-1.amazonaws.com/123456789012/q":     "eu-west-1",
		"https://sqs-fips.us-gov-west-1.amazonaws.com/1/q":       "us-gov-west-1",
		"https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q": "cn-north-1",
		"http://localhost:9324/000000000000/q":                   "",
		"https://vpce-1.sqs.us-east-1.vpce.amazonaws.com/1/q":    "",
		"::not a url": "",
	} {
		require.Equal(t, want, regionOf(in), "regionOf(%q)", in)
	}
}

// countsOf answers GetQueueAttributes with the given message counts, as a
// queue holding that many would (sqstest would need them all sent and
// received).
type countsOf struct {
	doctor.Client
	visible, inFlight string
}

func (c countsOf) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	out, err := c.Client.GetQueueAttributes(ctx, in, optFns...)
	if err == nil {
		out.Attributes["ApproximateNumberOfMessages"] = c.visible
		out.Attributes["ApproximateNumberOfMessagesNotVisible"] = c.inFlight
	}
	return out, err
}

// A queue near or at SQS's in-flight quota: sqsdoctor warns (or, at it
// with messages visible, reports an error), naming the cause and the ways
// out.
func TestCLIInFlightQuota(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct {
		visible, inFlight string
		code              int
		line              string
	}{
		{"2000", "110000", exitOK, `(?m)^WARN\s+in_flight_quota\s+110000 messages in flight, near SQS's in-flight quota of about 120000 per queue \(2000 visible\)`},
		{"2000", "120000", exitFindings, `(?m)^ERROR\s+in_flight_quota\s+120000 messages in flight, at SQS's in-flight quota of about 120000 per queue, with 2000 visible`},
		{"0", "500", exitOK, `(?m)^INFO\s+in_flight_quota\s+500 messages in flight, 0 visible: below SQS's in-flight quota`},
	} {
		mk := func(context.Context, string, string) (doctor.Client, error) {
			return countsOf{Client: b.srv.Client(), visible: tt.visible, inFlight: tt.inFlight}, nil
		}
		code, out, _ := runCLI(t, mk, "-queue-url", b.healthy)
		require.Equal(t, tt.code, code, out)
		require.Regexp(t, tt.line, out)
		if !strings.Contains(tt.line, "INFO") {
			require.Contains(t, out, "SQS answers long polls with nothing and no error")
			require.Contains(t, out, "the ways out:")
			require.Contains(t, out, "ask AWS Support to raise the quota")
		}
	}
}
