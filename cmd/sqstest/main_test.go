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

func TestBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{name: "unknown flag", args: []string{"-nope"}},
		{name: "stray argument", args: []string{"extra"}},
		{name: "bad queue name", args: []string{"-listen", "127.0.0.1:0", "-queue", "no spaces"}},
		{name: "bad address", args: []string{"-listen", "not an address"}},
		{name: "negative history", args: []string{"-listen", "127.0.0.1:0", "-history", "-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Error(t, run(t.Context(), tt.args, io.Discard, io.Discard))
		})
	}
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
