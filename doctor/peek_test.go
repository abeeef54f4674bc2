package doctor

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// peekFixture is a source queue "jobs" (visibility 5 s) redriving to "jobs-dlq"
// after maxReceiveCount receives, with three messages in jobs, one of them
// received once, and two in jobs-dlq that SQS moved there.
type peekFixture struct {
	srv       *sqstest.Server
	c         *sqs.Client
	src, dlq  string
	maxRecv   int
	srcBodies []string
}

func newPeekFixture(t *testing.T, maxReceiveCount int) *peekFixture {
	t.Helper()
	f := &peekFixture{srv: sqstest.New(t), maxRecv: maxReceiveCount}
	f.c = f.srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })
	var err error
	f.dlq, err = f.srv.CreateQueue("jobs-dlq", map[string]string{"MessageRetentionPeriod": "1209600"})
	require.NoError(t, err)
	f.src, err = f.srv.CreateQueue("jobs", map[string]string{"VisibilityTimeout": "5", "RedrivePolicy": redrive("jobs-dlq", maxReceiveCount)})
	require.NoError(t, err)
	send := func(body string) {
		_, err := f.c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: &f.src, MessageBody: aws.String(body)})
		require.NoError(t, err)
	}
	// Two messages fail until SQS moves them to the DLQ.
	for _, b := range []string{"dead-1", "dead-2"} {
		send(b)
	}
	for range maxReceiveCount + 1 {
		_, err := f.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &f.src, MaxNumberOfMessages: 10})
		require.NoError(t, err)
		time.Sleep(6 * time.Second)
	}
	require.Len(t, present(f.srv, f.dlq), 2)
	// Three live messages, one of them received once.
	for _, b := range []string{"live-1", "live-2", "live-3"} {
		send(b)
	}
	_, err = f.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &f.src, MaxNumberOfMessages: 1})
	require.NoError(t, err)
	time.Sleep(6 * time.Second)
	f.srcBodies = present(f.srv, f.src)
	require.Len(t, f.srcBodies, 3)
	return f
}

// msgState is what a refused or dry run must not change about a message.
type msgState struct {
	ReceiveCount int
	Present      bool
}

// states snapshots every message of both queues, by queue and body.
func (f *peekFixture) states() map[string]msgState {
	out := map[string]msgState{}
	for _, url := range []string{f.src, f.dlq} {
		for _, m := range f.srv.Messages(url) {
			gone := m.Deleted || m.MovedToDLQ || m.Redriven || m.Expired || m.Purged
			out[url+" "+m.Body] = msgState{ReceiveCount: m.ReceiveCount, Present: !gone}
		}
	}
	return out
}

// A dry run on the source queue, or an inspect of it, would have moved messages:
// each receive counts toward its maxReceiveCount. Both are refused before any
// receive, saying why and what the receives would cost, and every message keeps
// its queue and receive count. -force (Force) overrides; on the DLQ a dry run
// changes exactly what it announced beforehand.
func TestPeekRefusesQueuesItCouldMoveMessagesFrom(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("maxReceiveCount %d", n), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newPeekFixture(t, n)
				before := f.states()
				f.srv.ResetCalls()

				_, err := InspectDLQ(t.Context(), f.c, f.src, InspectOptions{BeforePeek: func(PeekPlan) { t.Error("BeforePeek called on a refused queue") }})
				require.ErrorIs(t, err, ErrUnsafePeek)
				var ref *PeekRefusal
				require.True(t, errors.As(err, &ref))
				require.True(t, ref.NotDLQ)
				require.Equal(t, &RedrivePolicy{DeadLetterTargetARN: arn("jobs-dlq"), MaxReceiveCount: n}, ref.Redrive)
				require.Len(t, ref.Reasons, 2)
				require.Equal(t, PeekPlan{URL: f.src, Visible: 3, Max: DefaultInspectMax, HiddenFor: DefaultPeekVisibility}, ref.Peek)
				require.ErrorContains(t, err, "it is not a dead-letter queue: no queue's RedrivePolicy names it")
				require.ErrorContains(t, err, fmt.Sprintf("it has a RedrivePolicy of its own (maxReceiveCount %d, to jobs-dlq)", n))
				require.ErrorContains(t, err, "every one of the 3 visible messages of "+f.src+": each one's ApproximateReceiveCount would rise by 1 and it would be hidden for up to 2m")

				for _, dry := range []bool{true, false} {
					res, err := Replay(t.Context(), f.c, f.src, ReplayOptions{DryRun: dry, Destination: f.dlq})
					require.ErrorIs(t, err, ErrUnsafePeek, "dry run %v", dry)
					require.ErrorContains(t, err, "hidden for up to 15m")
					require.Zero(t, res)
				}
				require.Zero(t, f.srv.CallCount("ReceiveMessage"), "refused before any receive")
				require.Equal(t, before, f.states(), "every message keeps its queue and receive count")

				// Counters only (no peek) are harmless on any queue.
				rep, err := InspectDLQ(t.Context(), f.c, f.src, InspectOptions{Max: -1})
				require.NoError(t, err)
				require.EqualValues(t, 3, rep.Visible)
				require.Equal(t, before, f.states())

				// Force peeks all the same, and says beforehand what it overrode.
				var plan PeekPlan
				rep, err = InspectDLQ(t.Context(), f.c, f.src, InspectOptions{Force: true, BeforePeek: func(p PeekPlan) {
					require.Zero(t, f.srv.CallCount("ReceiveMessage"), "BeforePeek comes before the first receive")
					plan = p
				}})
				require.NoError(t, err)
				require.Len(t, plan.Forced, 2)
				// What the refusal warned of: a message already received
				// maxReceiveCount times moves to the DLQ instead of being peeked.
				moved := 0
				for _, b := range f.srcBodies {
					st := before[f.src+" "+b]
					if st.ReceiveCount >= n {
						moved++
						require.True(t, f.states()[f.dlq+" "+b].Present, "%s moved by the forced peek", b)
						continue
					}
					require.Equal(t, st.ReceiveCount+1, f.states()[f.src+" "+b].ReceiveCount, "peeked once: %s", b)
				}
				require.Equal(t, map[int]int{1: 1, 2: 0}[n], moved)
				require.Equal(t, 3-moved, rep.Peeked)
			})
		})
	}
}

// On the DLQ (a RedrivePolicy names it, it has none of its own) a dry run is
// allowed and changes only what BeforePeek announced: each message's receive
// count rises by one, and every message stays where it was.
func TestDryRunOnDLQChangesOnlyWhatItAnnounced(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("maxReceiveCount %d", n), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newPeekFixture(t, n)
				before := f.states()
				var plan *PeekPlan
				res, err := Replay(t.Context(), f.c, f.dlq, ReplayOptions{DryRun: true, BeforePeek: func(p PeekPlan) { plan = &p }})
				require.NoError(t, err)
				require.Equal(t, ReplayResult{Examined: 2, Matched: 2, WouldReplay: 2, Released: 2}, res)
				require.NotNil(t, plan)
				require.Equal(t, PeekPlan{URL: f.dlq, Visible: 2, HiddenFor: DefaultReplayLease}, *plan)
				after := f.states()
				for k, b := range before {
					a := after[k]
					require.Equal(t, b.Present, a.Present, "%s stays where it was", k)
					if a.Present && k[:len(f.dlq)] == f.dlq {
						require.Equal(t, b.ReceiveCount+1, a.ReceiveCount, "%s: raised by one, as announced", k)
					} else {
						require.Equal(t, b.ReceiveCount, a.ReceiveCount, "%s: untouched", k)
					}
				}
				require.Equal(t, [3]int{2, 0, 0}, counters(t, f.c, f.dlq), "visible again")
			})
		})
	}
}

// A DLQ with a RedrivePolicy of its own is refused too; a queue no policy names
// and without one is refused as no DLQ.
func TestPeekRefusalReasons(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newPeekFixture(t, 2)
		spare, err := f.srv.CreateQueue("spare", nil)
		require.NoError(t, err)
		other, err := f.srv.CreateQueue("other", nil)
		require.NoError(t, err)
		_, err = f.c.SetQueueAttributes(t.Context(), &sqs.SetQueueAttributesInput{QueueUrl: &f.dlq,
			Attributes: map[string]string{"RedrivePolicy": redrive("spare", 3)}})
		require.NoError(t, err)

		_, err = InspectDLQ(t.Context(), f.c, f.dlq, InspectOptions{Max: 5})
		var ref *PeekRefusal
		require.True(t, errors.As(err, &ref), "%v", err)
		require.False(t, ref.NotDLQ)
		require.Len(t, ref.Reasons, 1)
		require.Contains(t, ref.Reasons[0], "maxReceiveCount 3, to spare")
		require.Contains(t, err.Error(), "the 2 visible messages", "Max 5 above the 2 visible")
		_, err = InspectDLQ(t.Context(), f.c, spare, InspectOptions{})
		require.NoError(t, err, "spare is jobs-dlq's DLQ now, without a policy of its own")

		_, err = Replay(t.Context(), f.c, other, ReplayOptions{DryRun: true})
		require.True(t, errors.As(err, &ref))
		require.True(t, ref.NotDLQ)
		require.Nil(t, ref.Redrive)
		require.ErrorContains(t, err, "the messages that become visible (none is now)")

		// A failed ListDeadLetterSourceQueues cannot tell: refused.
		f.srv.FailNext("ListDeadLetterSourceQueues", 1, sqstest.FaultAccessDenied)
		_, err = Replay(t.Context(), f.c, other, ReplayOptions{DryRun: true})
		require.True(t, errors.As(err, &ref), "%v", err)
		require.NotEmpty(t, ref.SourcesError)
		require.ErrorContains(t, err, "it cannot be told whether it is a dead-letter queue")
	})
}
