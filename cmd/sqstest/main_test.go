package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestServe runs the command on a real loopback socket, which is its whole point, so
// it cannot use synctest: it uses short real timeouts instead (a few seconds at most).
// The client uses sqstest.RebufferingTransport, as the command's documentation says a
// Go client should.
func TestServe(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-queue", "jobs", "-queue", "jobs.fifo"}, pw, io.Discard)
		pw.Close()
	}()

	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "sqstest listening on ")
	require.True(t, ok, "first line: %q", line)
	go io.Copy(io.Discard, pr) //nolint:errcheck // drain until the pipe closes

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := sqs.New(sqs.Options{
		HTTPClient:   &http.Client{Transport: sqstest.RebufferingTransport(tr)},
		Region:       "us-east-1",
		BaseEndpoint: aws.String(base),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "x", SecretAccessKey: "y"}, nil
		}),
	})
	callCtx, callCancel := context.WithTimeout(ctx, 5*time.Second)
	defer callCancel()
	list, err := c.ListQueues(callCtx, &sqs.ListQueuesInput{})
	require.NoError(t, err)
	require.Equal(t, []string{base + "/123456789012/jobs", base + "/123456789012/jobs.fifo"}, list.QueueUrls,
		"queue URLs use the listen address")

	url := list.QueueUrls[0]
	_, err = c.SendMessage(callCtx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("over the wire")})
	require.NoError(t, err)
	got, err := c.ReceiveMessage(callCtx, &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 1})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	require.Equal(t, "over the wire", *got.Messages[0].Body)

	// A 20 s long poll open at shutdown ends promptly (whether or not it reached the
	// server before the cancel; sqstest's own tests check Close ending long polls).
	polled := make(chan error, 1)
	go func() {
		_, err := c.ReceiveMessage(callCtx, &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 20},
			func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
		polled <- err
	}()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	select {
	case <-polled:
	case <-time.After(5 * time.Second):
		t.Fatal("long poll still open after shutdown")
	}
}

// Bad flags are one line on stderr and a pointer to -h, exit status 2; the
// whole usage is printed for -h only.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		code int
	}{
		{name: "unknown flag", args: []string{"-nope"}, code: 2},
		{name: "stray argument", args: []string{"extra"}, code: 2},
		{name: "bad queue name", args: []string{"-listen", "127.0.0.1:0", "-queue", "no spaces"}, code: 2},
		{name: "negative history", args: []string{"-listen", "127.0.0.1:0", "-history", "-1"}, code: 2},
		{name: "dlq out of range", args: []string{"-listen", "127.0.0.1:0", "-queue", "jobs,dlq=0"}, code: 2},
		{name: "dlq not a number", args: []string{"-listen", "127.0.0.1:0", "-queue", "jobs,dlq=five"}, code: 2},
		{name: "bare word", args: []string{"-listen", "127.0.0.1:0", "-queue", "jobs,dlq"}, code: 2},
		{name: "unknown attribute", args: []string{"-listen", "127.0.0.1:0", "-queue", "jobs,Colour=blue"}, code: 2},
		{name: "bad address", args: []string{"-listen", "not an address"}, code: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var flagOut, errOut strings.Builder
			err := run(t.Context(), tt.args, io.Discard, &flagOut)
			require.Error(t, err)
			require.Empty(t, flagOut.String(), "no usage dump")
			require.Equal(t, tt.code, exitCode(err, &errOut))
			lines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
			if tt.code == 2 {
				require.Len(t, lines, 2, errOut.String())
				require.Equal(t, "Run sqstest -h for usage.", lines[1])
			} else {
				require.Len(t, lines, 1, errOut.String())
			}
			require.True(t, strings.HasPrefix(lines[0], "sqstest: "), lines[0])
		})
	}
}

// -h prints the usage and exits 0 (it used to end with "flag: help requested"
// and exit status 1).
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"-h", "-help", "--help"} {
		var errOut strings.Builder
		err := run(t.Context(), []string{h}, io.Discard, &errOut)
		require.NoError(t, err, h)
		require.Equal(t, 0, exitCode(err, io.Discard))
		require.Contains(t, errOut.String(), "Usage: sqstest")
		require.Contains(t, errOut.String(), "-any-host")
		require.NotContains(t, errOut.String(), "help requested")
	}
}

// startServer runs the command on a loopback socket with args and returns its base
// URL and a client for it; the server stops at the end of the test.
func startServer(t *testing.T, args ...string) (string, *sqs.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-listen", "127.0.0.1:0"}, args...), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	base := strings.TrimPrefix(strings.TrimSpace(line), "sqstest listening on ")
	go io.Copy(io.Discard, pr) //nolint:errcheck // drain until the pipe closes
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		require.NoError(t, <-done)
	})
	return base, sqs.New(sqs.Options{
		HTTPClient:   &http.Client{Transport: sqstest.RebufferingTransport(tr)},
		Region:       "us-east-1",
		BaseEndpoint: aws.String(base),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "x", SecretAccessKey: "y"}, nil
		}),
		RetryMaxAttempts: 1,
	})
}

// A queue URL naming another host or port is answered as SQS answers a queue that
// does not exist, unless -any-host. Real loopback socket: every call has a 5 s
// ceiling and nothing waits.
func TestForeignQueueURL(t *testing.T) {
	t.Parallel()
	base, c := startServer(t, "-queue", "jobs")
	port := base[strings.LastIndexByte(base, ':')+1:]
	other := "1"
	if port == "1" {
		other = "2"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	send := func(c *sqs.Client, url string) error {
		_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x")})
		return err
	}
	require.NoError(t, send(c, base+"/123456789012/jobs"))
	for _, url := range []string{
		"http://127.0.0.1:" + other + "/123456789012/jobs",
		"http://127.0.0.2:" + port + "/123456789012/jobs",
		"https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
	} {
		err := send(c, url)
		var dne *types.QueueDoesNotExist
		require.ErrorAs(t, err, &dne, url)
		require.ErrorContains(t, err, "AWS.SimpleQueueService.NonExistentQueue")
	}

	anyBase, anyClient := startServer(t, "-queue", "jobs", "-any-host")
	require.NoError(t, send(anyClient, "http://127.0.0.2:1/123456789012/jobs"), "-any-host routes by account and name: %s", anyBase)
}

// TestHistoryFlag checks that -history bounds what the server remembers of deleted
// messages: with -history 1 a repeated delete with the handle of the last deleted
// message still succeeds (as in SQS), one with the handle of an earlier one is
// answered as never issued. Real loopback socket, so real time: every call has a 5 s
// ceiling and nothing waits (no long poll).
func TestHistoryFlag(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-queue", "jobs", "-history", "1"}, pw, io.Discard)
		pw.Close()
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	base := strings.TrimPrefix(strings.TrimSpace(line), "sqstest listening on ")
	go io.Copy(io.Discard, pr) //nolint:errcheck // drain until the pipe closes

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := sqs.New(sqs.Options{
		HTTPClient:   &http.Client{Transport: sqstest.RebufferingTransport(tr)},
		Region:       "us-east-1",
		BaseEndpoint: aws.String(base),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "x", SecretAccessKey: "y"}, nil
		}),
		RetryMaxAttempts: 1,
	})
	callCtx, callCancel := context.WithTimeout(ctx, 5*time.Second)
	defer callCancel()
	url := base + "/123456789012/jobs"
	var handles []string
	for i := range 2 {
		_, err := c.SendMessage(callCtx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(strconv.Itoa(i))})
		require.NoError(t, err)
		got, err := c.ReceiveMessage(callCtx, &sqs.ReceiveMessageInput{QueueUrl: &url})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		handles = append(handles, *got.Messages[0].ReceiptHandle)
		_, err = c.DeleteMessage(callCtx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &handles[i]})
		require.NoError(t, err)
	}
	_, err = c.DeleteMessage(callCtx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &handles[1]})
	require.NoError(t, err, "the last deleted message is remembered: deleting it again succeeds")
	_, err = c.DeleteMessage(callCtx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &handles[0]})
	var invalid *types.ReceiptHandleIsInvalid
	require.ErrorAs(t, err, &invalid, "the first one is forgotten")
}

// -queue NAME,dlq=N makes the queue and its dead-letter queue (NAME-dlq, of the
// same type, 14 days of retention) with a RedrivePolicy of N receives; other pairs
// are the queue's attributes; conflicts and repeats are refused, naming both.
func TestQueueFlagWithDLQ(t *testing.T) {
	t.Parallel()
	srv := sqstest.NewServer()
	defer srv.Close()
	require.NoError(t, createQueue(srv, "jobs,dlq=5,VisibilityTimeout=30"))
	require.NoError(t, createQueue(srv, "orders.fifo,dlq=3"))
	require.NoError(t, createQueue(srv, "plain,DelaySeconds=2"))

	ctx := t.Context()
	c := srv.Client()
	attrs := func(name string) map[string]string {
		t.Helper()
		url, ok := srv.QueueURL(name)
		require.True(t, ok, name)
		out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		require.NoError(t, err)
		return out.Attributes
	}
	jobs, dlq := attrs("jobs"), attrs("jobs-dlq")
	require.Equal(t, "30", jobs["VisibilityTimeout"])
	require.JSONEq(t, `{"deadLetterTargetArn":"`+dlq["QueueArn"]+`","maxReceiveCount":5}`, jobs["RedrivePolicy"])
	require.Equal(t, "1209600", dlq["MessageRetentionPeriod"])
	fifo, fifoDLQ := attrs("orders.fifo"), attrs("orders-dlq.fifo")
	require.Equal(t, "true", fifoDLQ["FifoQueue"])
	require.JSONEq(t, `{"deadLetterTargetArn":"`+fifoDLQ["QueueArn"]+`","maxReceiveCount":3}`, fifo["RedrivePolicy"])
	require.Equal(t, "2", attrs("plain")["DelaySeconds"])
	_, ok := srv.QueueURL("plain-dlq")
	require.False(t, ok, "no dlq= makes no dead-letter queue")

	for spec, want := range map[string]string{
		"x,dlq=2,dlq=3":                   "dlq given twice",
		"x,DelaySeconds=1,DelaySeconds=2": "attribute DelaySeconds given twice",
		"x,dlq=2,RedrivePolicy=y":         "dlq=N and RedrivePolicy",
		"x,=1":                            "want dlq=N or Attribute=Value",
	} {
		require.ErrorContains(t, createQueue(srv, spec), want, spec)
	}
	_, ok = srv.QueueURL("x-dlq")
	require.False(t, ok, "a refused flag makes nothing")
}
