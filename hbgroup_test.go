package sqsconsumer

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// groupedLeases receives n messages in one request and starts their
// leases in one heartbeat group, as a Consumer does.
func groupedLeases(t *testing.T, b bundle, n int, owner *sync.WaitGroup) ([]*Lease, *hbGroup, *batchedCalls) {
	t.Helper()
	for range n {
		_, err := b.srv.Send(b.url, "x")
		require.NoError(t, err)
	}
	sent := time.Now()
	out, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(b.url), MaxNumberOfMessages: int32(n), VisibilityTimeout: 30,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	require.NoError(t, err)
	require.Len(t, out.Messages, n)
	calls := newBatchedCalls(b.client, b.url, 0, nil)
	cfg, err := (&settings{maxLease: MaxVisibilityTimeout}).leaseConfig(30 * time.Second)
	require.NoError(t, err)
	g := newHBGroup(owner)
	leases := make([]*Lease, n)
	for i, m := range out.Messages {
		leases[i] = newTestLease(calls, b.url, m, sent, &cfg)
		leases[i].start(context.Background(), g)
	}
	return leases, g, calls
}

// One timer starts the heartbeats of a receive's leases at their shared
// first renewal; leases settled before then never start one, and when all
// are settled the timer is stopped.
func TestHeartbeatGroupStartsWaitingLeasesOnly(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		var owner sync.WaitGroup
		leases, g, calls := groupedLeases(t, b, 10, &owner)
		defer calls.close()
		start := time.Now()
		require.Equal(t, start.Add(10*time.Second), g.fireAt(), "a third into the 30 s lease")

		for _, l := range leases[:7] {
			require.NoError(t, l.Delete(context.Background()))
			l.Stop()
		}
		time.Sleep(15 * time.Second)
		synctest.Wait()
		for i, l := range leases {
			l.mu.Lock()
			running := l.hbRunning
			l.mu.Unlock()
			require.Equal(t, i >= 7, running, "lease %d", i)
			st := b.state(t, l.msg.ID)
			if i >= 7 {
				require.Len(t, st.VisibilityChanges, 1, "lease %d renewed once, at +10 s", i)
				require.Equal(t, start.Add(10*time.Second+batchWindow), st.VisibilityChanges[0].At)
			}
		}
		for _, l := range leases[7:] {
			require.NoError(t, l.Delete(context.Background()))
			l.Stop()
		}
		owner.Wait() // the fired timer's call has returned
	})

	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		var owner sync.WaitGroup
		leases, g, calls := groupedLeases(t, b, 3, &owner)
		defer calls.close()
		for _, l := range leases {
			require.NoError(t, l.Delete(context.Background()))
			l.Stop()
		}
		owner.Wait() // returns at once: the last lease to leave stopped the timer
		g.mu.Lock()
		fired := g.fired
		g.mu.Unlock()
		require.False(t, fired)
	})
}

// A lease whose first renewal moves earlier than its group's (an Extend to
// less than the time left) leaves the group for a timer of its own, so
// the renewal is not late.
func TestHeartbeatGroupLeaseMovedEarlier(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		var owner sync.WaitGroup
		leases, g, calls := groupedLeases(t, b, 2, &owner)
		defer calls.close()
		defer func() {
			for _, l := range leases {
				l.Stop()
			}
			owner.Wait()
		}()
		start := time.Now()
		time.Sleep(time.Second)
		require.NoError(t, leases[0].Extend(context.Background(), 5*time.Second)) // deadline now +6 s
		synctest.Wait()
		leases[0].mu.Lock()
		group := leases[0].group
		leases[0].mu.Unlock()
		require.Nil(t, group, "left the group")
		require.Equal(t, start.Add(10*time.Second), g.fireAt(), "the other lease still waits for +10 s")

		time.Sleep(5 * time.Second) // +6 s
		synctest.Wait()
		require.False(t, leases[0].Deadline().Before(time.Now()), "renewed before its 6 s deadline, not at the group's 10 s")
		require.NoError(t, leases[0].Err(), "still active")
	})
}
