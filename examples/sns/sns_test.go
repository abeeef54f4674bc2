package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "log line %q", sc.Text())
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// notification is what SNS puts in a subscribed queue (raw delivery off)
// for message published to the prices topic with a store attribute.
func notification(t *testing.T, message string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"Type": "Notification", "MessageId": "1b2c3d4e-0000-4000-8000-000000000001",
		"TopicArn": "arn:aws:sns:us-east-1:123456789012:prices", "Subject": "price change",
		"Message": message, "Timestamp": "2026-03-14T12:00:00.000Z", "SignatureVersion": "1",
		"Signature": "c2ln", "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
		"UnsubscribeURL":    "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
		"MessageAttributes": map[string]any{"store": map[string]string{"Type": "String", "Value": "berlin"}},
	})
	require.NoError(t, err)
	return string(b)
}

// runFor runs the program against srv's queue for two virtual seconds (all
// messages handled once, short of any retry) and returns its log.
func runFor(t *testing.T, srv *sqstest.Server, vars map[string]string) *syncBuffer {
	t.Helper()
	ctx, sigterm := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, env(vars), &out, func(context.Context) (sqsconsumer.Client, error) { return srv.Client(), nil })
	}()
	time.Sleep(2 * time.Second)
	sigterm()
	require.Equal(t, exitOK, <-done)
	return &out
}

// An SNS-subscribed queue: the typed handler gets the price change, the
// attribute and the envelope; the bad messages fail permanently and stay
// in the queue.
func TestRunSNS(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("prices", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		good, err := srv.Send(url, notification(t, `{"sku":"A-1","old_cents":1999,"new_cents":1499}`))
		require.NoError(t, err)
		for _, b := range []string{
			notification(t, `{"sku":"A-1","old_cents":"a lot"}`), // does not decode
			notification(t, `{"old_cents":1,"new_cents":2}`),     // no sku
			`{"sku":"A-1","old_cents":1999,"new_cents":1499}`,    // raw, but the queue gets envelopes
		} {
			_, err := srv.Send(url, b)
			require.NoError(t, err)
		}

		out := runFor(t, srv, map[string]string{"SQS_QUEUE_URL": url})

		changed := out.lines(t, "price changed")
		require.Len(t, changed, 1)
		l := changed[0]
		require.Equal(t, "A-1", l["sku"])
		require.EqualValues(t, 1499, l["new_cents"])
		require.Equal(t, "berlin", l["store"])
		require.Equal(t, "arn:aws:sns:us-east-1:123456789012:prices", l["topic_arn"])
		require.Equal(t, "price change", l["subject"])
		require.Equal(t, "1b2c3d4e-0000-4000-8000-000000000001", l["sns_message_id"])
		require.Equal(t, good, l["message_id"])

		failed := out.lines(t, "message failed")
		require.Len(t, failed, 3)
		var reasons []string
		for _, f := range failed {
			require.Equal(t, true, f["permanent"])
			reasons = append(reasons, f["error"].(string))
		}
		require.ElementsMatch(t, []string{
			`permanent: payload: cannot decode the body as main.priceChange (field "old_cents", byte 32): json: cannot unmarshal string into Go struct field priceChange.old_cents of type int64`,
			"permanent: price change without a sku",
			`permanent: payload: body is not a valid SNS envelope: no "Type", "MessageId", "TopicArn", "Timestamp" fields; is raw message delivery on? Then declare SNSRaw`,
		}, reasons)
		for _, st := range srv.Messages(url) {
			require.Equal(t, st.ID == good, st.Deleted, "only the good message is deleted: %s", st.Body)
		}
	})
}

// A subscription with raw delivery: the body is the price change and the
// attribute an SQS attribute; an envelope means raw delivery is off.
func TestRunSNSRaw(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("prices", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		_, err = srv.Send(url, `{"sku":"B-2","old_cents":500,"new_cents":450}`, sqstest.WithStringAttribute("store", "lyon"))
		require.NoError(t, err)
		_, err = srv.Send(url, notification(t, `{"sku":"B-2"}`))
		require.NoError(t, err)

		out := runFor(t, srv, map[string]string{"SQS_QUEUE_URL": url, "SNS_RAW_DELIVERY": "true"})

		changed := out.lines(t, "price changed")
		require.Len(t, changed, 1)
		require.Equal(t, "B-2", changed[0]["sku"])
		require.Equal(t, "lyon", changed[0]["store"])
		require.NotContains(t, changed[0], "topic_arn", "raw delivery carries no envelope")
		failed := out.lines(t, "message failed")
		require.Len(t, failed, 1)
		require.Contains(t, failed[0]["error"], "raw message delivery is off")
	})
}

func TestLoadSettings(t *testing.T) {
	t.Parallel()
	s, err := loadSettings(env(map[string]string{"SQS_QUEUE_URL": "u", "SNS_RAW_DELIVERY": "true"}))
	require.NoError(t, err)
	require.Equal(t, settings{queueURL: "u", raw: true}, s)
	_, err = loadSettings(env(map[string]string{"SNS_RAW_DELIVERY": "sometimes", "LOG_LEVEL": "loud"}))
	require.ErrorContains(t, err, "SQS_QUEUE_URL is required")
	require.ErrorContains(t, err, `SNS_RAW_DELIVERY="sometimes"`)
	require.ErrorContains(t, err, `LOG_LEVEL="loud"`)
	var out syncBuffer
	require.Equal(t, exitConfig, run(context.Background(), env(nil), &out, nil))
}
