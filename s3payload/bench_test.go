package s3payload

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer"
)

// BenchmarkReaderPassThrough is the Reader's cost for a message that was
// not offloaded: two map lookups, no S3 call.
func BenchmarkReaderPassThrough(b *testing.B) {
	s := newMemS3()
	r, err := NewReader(s, WithBuckets("payloads"))
	if err != nil {
		b.Fatal(err)
	}
	h := r.Middleware()(sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil }))
	m := &sqsconsumer.Message{ID: "m", Body: `{"order_id":"o-1"}`, MessageAttributes: map[string]types.MessageAttributeValue{
		"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")},
	}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := h.HandleMessage(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	if s.gets != 0 {
		b.Fatalf("%d GetObject calls for messages that were not offloaded", s.gets)
	}
}
