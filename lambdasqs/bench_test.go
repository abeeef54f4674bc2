//go:build unix

package lambdasqs

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
)

// noCalls is a client for benchmarks whose leases end before any renewal.
type noCalls struct{ sqsconsumer.Client }

// BenchmarkAdapterOverhead is what the adapter adds per record over
// calling the handler directly: a lease (made, started, stopped), a
// goroutine, the Message, the response. Events of 10 records, a no-op
// handler, no SQS call (nothing lives long enough to be renewed).
func BenchmarkAdapterOverhead(b *testing.B) {
	const n = 10
	msgs := make([]types.Message, n)
	for i := range msgs {
		id := fmt.Sprintf("id-%d", i)
		msgs[i] = types.Message{MessageId: aws.String(id), ReceiptHandle: aws.String("rh-" + id), Body: aws.String("body"),
			Attributes: map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000"}}
	}
	ev := Event("arn:aws:sqs:us-east-1:123456789012:q", "us-east-1", msgs)
	noop := sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuTime()
		for b.Loop() {
			for i := range ev.Records {
				r := &ev.Records[i]
				m := &sqsconsumer.Message{ID: r.MessageId, Body: r.Body, Attributes: r.Attributes}
				if err := noop.HandleMessage(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N*n), "cpu-ns/record")
	})
	for _, tc := range []struct {
		name string
		wrap func() (Handler, error)
	}{
		{"Wrap", func() (Handler, error) { return Wrap(noCalls{}, noop) }},
		{"WrapBatch", func() (Handler, error) {
			return WrapBatch(noCalls{}, func(context.Context, []*sqsconsumer.Message) error { return nil })
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h, err := tc.wrap()
			require.NoError(b, err)
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				resp, err := h(ctx, ev)
				if err != nil || len(resp.BatchItemFailures) != 0 {
					b.Fatal(err, resp)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N*n), "cpu-ns/record")
		})
	}
}

// cpuTime is the process's CPU time so far (user + system, every thread),
// in nanoseconds: on a machine shared with other work, wall time per
// record also counts waiting for a core.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
