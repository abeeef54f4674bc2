package sqstest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// BenchmarkDrain fills a queue with n messages (not timed) and times draining it the
// way bench/throughput's raw loop does: receive 10, delete them in one batch, repeat.
// n=20000 is what bench/throughput drains per round; n=2000 shows how the cost per
// message grows with the queue (it should not). "handler" calls Server.Handler
// directly (server cost only, no SDK); "sdk" goes through Server.Client, the
// in-memory transport. FIFO messages are spread over 100 groups; so are "grouped"
// ones, a standard queue whose messages carry MessageGroupId (a fair queue: its
// noisy-group detection and quiet-first delivery run on every call). One op is one
// whole drain; µs/msg is the cost per message.
//
//	go test ./sqstest -run '^$' -bench Drain -benchtime 3x
func BenchmarkDrain(b *testing.B) {
	for _, kind := range []string{"standard", "fifo", "grouped"} {
		for _, n := range []int{2_000, 20_000} {
			name := fmt.Sprintf("%s/n=%d", kind, n)
			b.Run(name+"/handler", func(b *testing.B) { benchDrain(b, kind, n, drainHandler) })
			b.Run(name+"/sdk", func(b *testing.B) { benchDrain(b, kind, n, drainSDK) })
		}
	}
}

type drainFunc func(b *testing.B, srv *sqstest.Server, url string) int

func benchDrain(b *testing.B, kind string, drainSize int, drain drainFunc) {
	fifo := kind == "fifo"
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		srv := sqstest.NewServer()
		name, attrs := "drain", map[string]string(nil)
		if fifo {
			name, attrs = "drain.fifo", map[string]string{"ContentBasedDeduplication": "true"}
		}
		url, err := srv.CreateQueue(name, attrs)
		if err != nil {
			b.Fatal(err)
		}
		for i := range drainSize {
			var opts []sqstest.SendOption
			if kind != "standard" {
				opts = append(opts, sqstest.WithGroupID("g"+strconv.Itoa(i%100)))
			}
			if _, err := srv.Send(url, "message "+strconv.Itoa(i), opts...); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if n := drain(b, srv, url); n != drainSize {
			b.Fatalf("drained %d messages, want %d", n, drainSize)
		}
		b.StopTimer()
		srv.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*drainSize), "µs/msg")
}

// drainHandler drains through Server.Handler with hand-written requests.
func drainHandler(b *testing.B, srv *sqstest.Server, url string) int {
	h := srv.Handler()
	call := func(action string, in, out any) {
		body, err := json.Marshal(in)
		if err != nil {
			b.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%s: %d %s", action, rec.Code, rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			b.Fatal(err)
		}
	}
	type entry struct{ Id, ReceiptHandle string }
	n := 0
	for {
		var got struct {
			Messages []struct{ ReceiptHandle string }
		}
		call("ReceiveMessage", map[string]any{"QueueUrl": url, "MaxNumberOfMessages": 10}, &got)
		if len(got.Messages) == 0 {
			return n
		}
		entries := make([]entry, len(got.Messages))
		for i, m := range got.Messages {
			entries[i] = entry{Id: strconv.Itoa(i), ReceiptHandle: m.ReceiptHandle}
		}
		var del struct{ Successful, Failed []json.RawMessage }
		call("DeleteMessageBatch", map[string]any{"QueueUrl": url, "Entries": entries}, &del)
		if len(del.Failed) > 0 {
			b.Fatalf("delete failed: %s", del.Failed[0])
		}
		n += len(del.Successful)
	}
}

// drainSDK drains through the SDK client on the in-memory transport.
func drainSDK(b *testing.B, srv *sqstest.Server, url string) int {
	ctx := context.Background()
	c := srv.Client()
	n := 0
	for {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
		if err != nil {
			b.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return n
		}
		entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
		for i, m := range out.Messages {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
		}
		del, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: entries})
		if err != nil {
			b.Fatal(err)
		}
		if len(del.Failed) > 0 {
			b.Fatalf("delete failed: %s", aws.ToString(del.Failed[0].Message))
		}
		n += len(del.Successful)
	}
}
