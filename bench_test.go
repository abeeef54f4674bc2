package sqsconsumer

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// BenchmarkPlan is the heartbeat's per-wakeup scheduling decision.
func BenchmarkPlan(b *testing.B) {
	now := time.Now()
	s := schedule{lease: 30 * time.Second, interval: 10 * time.Second, grace: 10 * time.Second,
		ceiling: now.Add(12 * time.Hour), deadline: now.Add(20 * time.Second), nextRenew: now}
	b.ReportAllocs()
	for b.Loop() {
		_ = plan(now, s)
	}
}

// BenchmarkRenewalLibrary is the library's own cost of one renewal: the
// request through the batch coalescer and the confirmation, against a
// client that answers at once. Many goroutines keep batches full, as
// thousands of leases do.
func BenchmarkRenewalLibrary(b *testing.B) {
	fake := &slowSQS{deadline: map[string]time.Time{}}
	calls := newCoalescedCalls(&fakeClient{s: fake}, "q", 0, nil)
	defer calls.close()
	cfg, _ := defaultSettingsWith(WithVisibilityTimeout(30 * time.Second)).leaseConfig(30 * time.Second)
	cfg.calls, cfg.events.queueURL = calls, "q"
	b.ReportAllocs()
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		now := time.Now()
		l := &newDelivery(types.Message{MessageId: aws.String("m"), ReceiptHandle: aws.String("h")}, now, now, &cfg).lease
		for pb.Next() {
			now := time.Now()
			if err := calls.changeVisibility(context.Background(), "h", 30); err != nil {
				b.Fatal(err)
			}
			l.confirmVisibility(now, 30*time.Second)
		}
	})
	b.ReportMetric(float64(fake.calls.Load())/float64(b.N), "calls/renewal")
}

// BenchmarkRenewalSDK adds the AWS SDK's serialization and signing and the
// in-memory sqstest server: the whole CPU cost of a batched renewal.
func BenchmarkRenewalSDK(b *testing.B) {
	srv := sqstest.NewServer()
	defer srv.Close()
	url, err := srv.CreateQueue("bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	client := srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })
	handles := make(chan string, 1000)
	for range 64 * 4 {
		if _, err := srv.Send(url, "x"); err != nil {
			b.Fatal(err)
		}
	}
	for len(handles) < 64*4 {
		out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: 3600})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range out.Messages {
			handles <- *m.ReceiptHandle
		}
	}
	calls := newCoalescedCalls(client, url, 0, nil)
	defer calls.close()
	srv.ResetCalls()
	b.ReportAllocs()
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		h := <-handles
		for pb.Next() {
			if err := calls.changeVisibility(context.Background(), h, 3600); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(srv.CallCount("ChangeMessageVisibilityBatch"))/float64(b.N), "calls/renewal")
}
