package sqstest_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// The fair-queue tests follow "How Amazon SQS fair queues work" in AWS's SQS
// developer guide; the choices it leaves open are sqstest's (unconfirmed.go). Unless
// a test sleeps, everything happens at one instant, where no processing time has
// passed, so only the concurrency rule (more than 10% of the queue's in-flight
// messages and at least 30 of the group's own) can make a group noisy.

func fairQueue(t *testing.T, b bundle) string {
	t.Helper()
	return b.queue(t, "fair", map[string]string{"VisibilityTimeout": "300"})
}

// sendGroup sends n messages of group g (bodies g-0, g-1, ...), from first on.
func sendGroup(t *testing.T, b bundle, url, g string, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		b.send(t, url, fmt.Sprintf("%s-%d", g, i), withGroup(g))
	}
}

// receiveN receives n messages in receives of up to 10.
func receiveN(t *testing.T, b bundle, url string, n int) []types.Message {
	t.Helper()
	var out []types.Message
	for len(out) < n {
		got := b.receive(t, url, withMax(int32(min(10, n-len(out)))))
		require.NotEmpty(t, got)
		out = append(out, got...)
	}
	return out
}

// A group is noisy once it has 30 messages in flight and more than 10% of the
// queue's; a quiet group's message and a message without a group, sent after its
// backlog, are then delivered before it; the noisy backlog follows, none of it
// dropped or held back.
func TestFairQuietOvertakesNoisyBacklog(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := fairQueue(t, b)
		sendGroup(t, b, url, "n", 0, 100)
		require.Equal(t, []string{"n-0", "n-1", "n-2", "n-3", "n-4", "n-5", "n-6", "n-7", "n-8", "n-9"}, bodies(b.receive(t, url)),
			"a lone group is delivered in arrival order")
		receiveN(t, b, url, 19)
		require.Empty(t, b.srv.NoisyGroups(url), "29 in flight: under the documented 30")
		require.Equal(t, []string{"n-29"}, bodies(b.receive(t, url, withMax(1))))
		require.Equal(t, []string{"n"}, b.srv.NoisyGroups(url), "30 in flight, all of the queue's")

		b.send(t, url, "q-0", withGroup("q"))
		b.send(t, url, "loose-0")
		b.send(t, url, "q-1", withGroup("q"))
		require.Equal(t, []string{"q-0", "loose-0", "q-1", "n-30", "n-31", "n-32", "n-33", "n-34", "n-35", "n-36"}, bodies(b.receive(t, url)),
			"quiet tenants first, in arrival order, then the noisy backlog")

		// The rest of the backlog is delivered, in order.
		var rest []string
		for _, m := range receiveN(t, b, url, 63) {
			rest = append(rest, *m.Body)
		}
		for i, body := range rest {
			require.Equal(t, fmt.Sprintf("n-%d", 37+i), body)
		}
		require.Empty(t, b.receive(t, url))
		for _, st := range b.srv.Messages(url) {
			require.Len(t, st.Receives, 1, st.Body)
		}
	})
}

// Without fair queueing the same sends would be delivered in arrival order; a
// standard queue whose messages carry no group still is.
func TestFairNoGroupsArrivalOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := fairQueue(t, b)
		for i := range 60 {
			b.send(t, url, fmt.Sprint(i))
		}
		got := receiveN(t, b, url, 60)
		for i, m := range got {
			require.Equal(t, fmt.Sprint(i), *m.Body)
		}
		require.Empty(t, b.srv.NoisyGroups(url))
	})
}

// Among noisy groups, the one with the fewest messages in flight is delivered first,
// counting the messages the same receive already took; ties go to the group whose
// oldest waiting message came first.
func TestFairNoisyFewestInFlightFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := fairQueue(t, b)
		sendGroup(t, b, url, "a", 0, 100)
		receiveN(t, b, url, 40) // a: 40 in flight, noisy
		sendGroup(t, b, url, "b", 0, 50)
		got := receiveN(t, b, url, 30) // b is quiet until it has 30 in flight
		require.Equal(t, "b-0", *got[0].Body)
		require.Equal(t, "b-29", *got[29].Body)
		for _, m := range got[:5] { // b stays noisy with 25
			require.NoError(t, b.deleteMessage(url, *m.ReceiptHandle))
		}
		sendGroup(t, b, url, "c", 0, 50)
		got = receiveN(t, b, url, 30)
		require.Equal(t, "c-29", *got[29].Body)
		require.Equal(t, []string{"a", "b", "c"}, b.srv.NoisyGroups(url))

		// In flight: a 40, b 25, c 30. b first, up to c's 30; then b and c in turn,
		// b first as its oldest waiting message is older.
		require.Equal(t, []string{"b-30", "b-31", "b-32", "b-33", "b-34", "b-35", "c-30", "b-36", "c-31", "b-37"}, bodies(b.receive(t, url)))
		// Now a 40, b 33, c 32.
		require.Equal(t, []string{"c-32", "b-38", "c-33", "b-39", "c-34", "b-40", "c-35", "b-41", "c-36", "b-42"}, bodies(b.receive(t, url)))
		// Now a 40, b 38, c 37; at 40 all three take turns, a's oldest waiting first.
		require.Equal(t, []string{"c-37", "b-43", "c-38", "b-44", "c-39", "a-40", "b-45", "c-40", "a-41", "b-46"}, bodies(b.receive(t, url)))
	})
}

// A noisy group becomes quiet again when its backlog has been consumed.
func TestFairQuietAgainWhenBacklogConsumed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := fairQueue(t, b)
		sendGroup(t, b, url, "n", 0, 45)
		receiveN(t, b, url, 40)
		require.Equal(t, []string{"n"}, b.srv.NoisyGroups(url))
		receiveN(t, b, url, 4)
		require.Equal(t, []string{"n"}, b.srv.NoisyGroups(url), "one message left")
		receiveN(t, b, url, 1)
		require.Empty(t, b.srv.NoisyGroups(url), "backlog consumed, 45 still in flight")
	})
}

// A noisy group becomes quiet again when none of its messages has been in flight
// for 5 minutes, backlog or not; it stays noisy until then even though it no longer
// meets either rule. Back to quiet, its messages take their place by arrival again.
func TestFairQuietAgainAfterFiveMinutesWithoutInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := fairQueue(t, b)
		sendGroup(t, b, url, "n", 0, 50)
		for _, m := range receiveN(t, b, url, 40) {
			require.NoError(t, b.deleteMessage(url, *m.ReceiptHandle))
		}
		require.Equal(t, []string{"n"}, b.srv.NoisyGroups(url), "none in flight, but still noisy")

		time.Sleep(5*time.Minute - time.Second)
		require.Equal(t, []string{"n"}, b.srv.NoisyGroups(url), "4m59s without in flight")
		b.send(t, url, "q-0", withGroup("q"))
		require.Equal(t, []string{"q-0"}, bodies(b.receive(t, url, withMax(1))), "the quiet group's message first")

		time.Sleep(time.Second)
		require.Empty(t, b.srv.NoisyGroups(url), "5 minutes without in flight")
		b.send(t, url, "q-1", withGroup("q"))
		require.Equal(t, []string{"n-40", "n-41"}, bodies(b.receive(t, url, withMax(2))), "by arrival again")
	})
}

// The processing time rule: a group with few messages in flight (under 30) is noisy
// when it has held more than 10% of the queue's time in flight recently.
func TestFairProcessingTimeShare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := fairQueue(t, b)
		sendGroup(t, b, url, "slow", 0, 5)
		sendGroup(t, b, url, "light", 0, 1)
		for i := range 20 {
			b.send(t, url, fmt.Sprintf("loose-%d", i))
		}
		receiveN(t, b, url, 26)
		require.Empty(t, b.srv.NoisyGroups(url), "no time has passed")

		time.Sleep(10 * time.Second) // slow holds 5 of 26 in flight (19%), light 1 (4%)
		b.send(t, url, "slow-5", withGroup("slow"))
		b.send(t, url, "light-1", withGroup("light"))
		b.send(t, url, "loose-20")
		require.Equal(t, []string{"slow"}, b.srv.NoisyGroups(url))
		require.Equal(t, []string{"light-1", "loose-20", "slow-5"}, bodies(b.receive(t, url)))
	})
}

// The five CloudWatch fair-queue figures, and that they are not queue attributes.
func TestFairQueueMetrics(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := fairQueue(t, b)
		m, ok := b.srv.FairQueueMetrics(url)
		require.True(t, ok)
		require.Equal(t, sqstest.FairQueueMetrics{}, m, "empty queue")

		sendGroup(t, b, url, "n", 0, 50)
		receiveN(t, b, url, 40) // n: 40 in flight, 10 visible, noisy
		time.Sleep(3 * time.Second)
		b.send(t, url, "q-fly", withGroup("q"))
		require.Equal(t, []string{"q-fly"}, bodies(b.receive(t, url, withMax(1))))
		b.send(t, url, "q-visible", withGroup("q"))
		b.send(t, url, "q-delayed", withGroup("q"), func(in *sqs.SendMessageInput) { in.DelaySeconds = 60 })
		b.send(t, url, "loose-visible")
		b.send(t, url, "n-delayed", withGroup("n"), func(in *sqs.SendMessageInput) { in.DelaySeconds = 60 })
		time.Sleep(4 * time.Second)

		m, ok = b.srv.FairQueueMetrics(url)
		require.True(t, ok)
		require.Equal(t, sqstest.FairQueueMetrics{
			NoisyGroups:                     1,
			VisibleInQuietGroups:            2, // q-visible, loose-visible
			NotVisibleInQuietGroups:         1, // q-fly
			DelayedInQuietGroups:            1, // q-delayed
			AgeOfOldestMessageInQuietGroups: 4 * time.Second,
		}, m)

		attrs, err := b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		require.NoError(t, err)
		require.Equal(t, "12", attrs.Attributes["ApproximateNumberOfMessages"]) // the whole queue's
		require.Equal(t, "41", attrs.Attributes["ApproximateNumberOfMessagesNotVisible"])
		require.Equal(t, "2", attrs.Attributes["ApproximateNumberOfMessagesDelayed"])
		for k := range attrs.Attributes {
			require.NotContains(t, k, "Quiet")
			require.NotContains(t, k, "Noisy")
		}
		_, err = b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfNoisyGroups"}})
		requireAPIError(t, err, "InvalidAttributeName", "")

		_, ok = b.srv.FairQueueMetrics(url + "-missing")
		require.False(t, ok)
	})
}

// FIFO queues are not fair queues: a group's backlog keeps its place by arrival, as
// before, and no figures are given.
func TestFairNotOnFIFO(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := fifoQueue(t, b, map[string]string{"VisibilityTimeout": "300"})
		for i := range 50 {
			b.send(t, url, fmt.Sprintf("n-%d", i), withGroup("n"))
		}
		b.send(t, url, "q-0", withGroup("q"))
		require.Equal(t, []string{"n-0", "n-1", "n-2", "n-3", "n-4", "n-5", "n-6", "n-7", "n-8", "n-9"}, bodies(b.receive(t, url)))
		require.Equal(t, []string{"q-0"}, bodies(b.receive(t, url)), "n is locked")
		require.Nil(t, b.srv.NoisyGroups(url))
		_, ok := b.srv.FairQueueMetrics(url)
		require.False(t, ok)
	})
}
