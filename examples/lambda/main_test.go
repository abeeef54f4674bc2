package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer/lambdasqs"
	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(msg string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == msg {
			n++
		}
	}
	return n
}

// One event with two messages about one order and a malformed one: the
// order is processed once, the duplicate succeeds, the malformed record is
// reported failed.
func TestHandlerProcessesEachOrderOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("orders", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		for _, b := range []string{`{"order_id":"o-1","amount_cents":100}`, `not json`, `{"order_id":"o-1","amount_cents":100,"retry":true}`} {
			_, err := srv.Send(url, b)
			require.NoError(t, err)
		}
		client := srv.Client()
		out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		require.NoError(t, err)
		require.Len(t, out.Messages, 3)
		var logs syncBuffer
		env := map[string]string{"LOG_LEVEL": "debug"}
		h, err := newHandler(client, func(k string) string { return env[k] }, &logs)
		require.NoError(t, err)
		resp, err := h(context.Background(), lambdasqs.Event("arn:aws:sqs:us-east-1:123456789012:orders", "us-east-1", out.Messages))
		require.NoError(t, err)
		require.Len(t, resp.BatchItemFailures, 2, "the malformed one, and the duplicate that waited on the order in progress")
		require.Equal(t, 1, logs.count("order processed"))
	})
}

func TestNewHandlerRejectsBadSettings(t *testing.T) {
	for k, v := range map[string]string{"SQS_VISIBILITY_TIMEOUT": "2s", "BATCHING_WINDOW": "soon", "LOG_LEVEL": "loud"} {
		_, err := newHandler(&sqs.Client{}, func(n string) string {
			if n == k {
				return v
			}
			return ""
		}, &bytes.Buffer{})
		require.ErrorContains(t, err, v, k)
	}
}
