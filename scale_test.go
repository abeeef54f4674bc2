package sqsconsumer

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// TestRenewalsCoalesce: 1,000 leases received within the same second renew
// through ChangeMessageVisibilityBatch at ≤ 0.11 calls per renewal.
func TestRenewalsCoalesce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		calls := newCoalescedCalls(b.client, b.url, 0, nil)
		defer calls.close()
		cfg, err := defaultSettingsWith(WithVisibilityTimeout(30 * time.Second)).leaseConfig(30 * time.Second)
		require.NoError(t, err)
		const n = 1000
		for i := range n {
			_, err := b.srv.Send(b.url, fmt.Sprint(i))
			require.NoError(t, err)
		}
		var leases []*Lease
		for len(leases) < n {
			sent := time.Now()
			out, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
				QueueUrl: &b.url, MaxNumberOfMessages: 10, VisibilityTimeout: 30,
			})
			require.NoError(t, err)
			for _, m := range out.Messages {
				l := newTestLease(calls, b.url, m, sent, &cfg)
				l.Start(context.Background())
				leases = append(leases, l)
			}
			time.Sleep(time.Second / 100) // 100 receives spread over one second
		}
		b.srv.ResetCalls()
		time.Sleep(5 * time.Minute)
		renewals := 0
		for _, st := range b.srv.Messages(b.url) {
			require.Equal(t, 1, st.ReceiveCount)
			for _, vc := range st.VisibilityChanges {
				require.Empty(t, vc.Err)
				renewals++
			}
		}
		for _, l := range leases {
			l.Stop()
		}
		perRenewal := float64(b.srv.CallCount("ChangeMessageVisibilityBatch")) / float64(renewals)
		t.Logf("1,000 leases due within one second: %d renewals, %d batch calls, %.4f calls per renewal",
			renewals, b.srv.CallCount("ChangeMessageVisibilityBatch"), perRenewal)
		require.LessOrEqual(t, perRenewal, 0.11)
	})
}

// slowSQS answers batch visibility changes after a fixed latency and
// checks each renewal arrives before the lease's deadline.
type slowSQS struct {
	latency  time.Duration
	calls    atomic.Int64
	entries  atomic.Int64
	mu       sync.Mutex
	deadline map[string]time.Time // handle -> visibility end SQS granted
	late     atomic.Int64
}

func TestManyLeasesRenewOnTime(t *testing.T) {
	t.Parallel()
	n := 120_000
	if raceEnabled || testing.Short() {
		n = 6_000 // the race detector allows 8128 live goroutines
	}
	synctest.Test(t, func(t *testing.T) {
		fake := &slowSQS{latency: 50 * time.Millisecond, deadline: make(map[string]time.Time, n)}
		vis := newFakeBatcher(fake)
		defer vis.close()
		cfg, err := defaultSettingsWith(WithVisibilityTimeout(30 * time.Second)).leaseConfig(30 * time.Second)
		require.NoError(t, err)

		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		goroutines := runtime.NumGoroutine()
		leases := make([]*Lease, n)
		start := time.Now()
		for i := range leases {
			h := fmt.Sprintf("handle-%06d", i)
			m := types.Message{MessageId: aws.String(fmt.Sprintf("id-%06d", i)), ReceiptHandle: aws.String(h)}
			at := start.Add(time.Duration(i) * 10 * time.Second / time.Duration(n)) // received over 10 s
			fake.mu.Lock()
			fake.deadline[h] = at.Add(30 * time.Second)
			fake.mu.Unlock()
			leases[i] = newTestLease(vis, "q", m, at, &cfg)
			leases[i].Start(context.Background())
		}
		synctest.Wait()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heapPer := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
		stackPer := float64(after.StackInuse-before.StackInuse) / float64(n)
		t.Logf("%d leases: heap %.0f B/lease, goroutine stacks %.0f B/lease, %d goroutines",
			n, heapPer, stackPer, runtime.NumGoroutine()-goroutines)

		time.Sleep(2 * time.Minute)
		for _, l := range leases {
			require.NoError(t, l.Err())
		}
		for _, l := range leases {
			l.Stop()
		}
		renewals := fake.entries.Load()
		t.Logf("%d renewals in 2 virtual minutes, %d batch calls (%.3f per renewal), %d late",
			renewals, fake.calls.Load(), float64(fake.calls.Load())/float64(renewals), fake.late.Load())
		require.Zero(t, fake.late.Load(), "every renewal landed before its deadline")
		require.GreaterOrEqual(t, renewals, int64(n*21/2), "11 or 12 renewals per lease in 2 minutes")
		require.LessOrEqual(t, heapPer, 4096.0, "heap per lease")
	})
}

// newFakeBatcher coalesces like a Consumer's leases but answers from s.
func newFakeBatcher(s *slowSQS) *coalescedCalls {
	return newCoalescedCalls(&fakeClient{s: s}, "q", 0, nil)
}

// fakeClient answers ChangeMessageVisibilityBatch after s.latency, checking
// each entry's handle still had visibility left; other calls succeed.
type fakeClient struct {
	Client
	s *slowSQS
}

func (f *fakeClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	f.s.calls.Add(1)
	select {
	case <-time.After(f.s.latency):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	now := time.Now()
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	for _, e := range in.Entries {
		h := aws.ToString(e.ReceiptHandle)
		if !now.Before(f.s.deadline[h]) {
			f.s.late.Add(1)
		}
		f.s.deadline[h] = now.Add(time.Duration(e.VisibilityTimeout) * time.Second)
		f.s.entries.Add(1)
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func defaultSettingsWith(opts ...Option) *settings {
	s := defaultSettings()
	for _, o := range opts {
		o.apply(&s)
	}
	return &s
}
