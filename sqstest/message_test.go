package sqstest_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func str(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// MD5 test vectors: digests real AWS returned (recorded in LocalStack's AWS-validated
// SQS tests) or that the npm package aws-md5-of-message-attributes computes.
func TestMD5Vectors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		body     string
		attrs    map[string]types.MessageAttributeValue
		sys      map[string]types.MessageSystemAttributeValue
		wantBody string
		wantAttr string
		wantSys  string
	}{
		{name: "body message-1", body: "message-1", wantBody: "3d6b824fd8c1520e9a047d21fee6fb1f"},
		{name: "body hello", body: "hello", wantBody: "5d41402abc4b2a76b9719d911017c592"},
		{name: "one string", body: "x", attrs: map[string]types.MessageAttributeValue{"MyAttribute": str("foobar")},
			wantAttr: "adb59cd4678ea5a855436b949cd07ab6"},
		{name: "Hello", body: "x", attrs: map[string]types.MessageAttributeValue{"Hello": str("There")},
			wantAttr: "a311262e065454b75da111d535b8dacd"},
		{name: "two sorted", body: "x", attrs: map[string]types.MessageAttributeValue{"Hello": str("There"), "General": str("Kenobi")},
			wantAttr: "fca026605781cb4126a1e9044df24232"},
		{name: "three", body: "x", attrs: map[string]types.MessageAttributeValue{"Hello": str("There"), "General": str("Kenobi"), "Help.Me": str("Me")},
			wantAttr: "4c360f3fdafd970e05fae2f149d997f5"},
		{name: "binary", body: "x", attrs: map[string]types.MessageAttributeValue{"binaryAttribute": {
			DataType: aws.String("Binary"), BinaryValue: []byte("Hello binary world!")}},
			wantAttr: "31a92b15d92f8db860eda32aceb656c3"},
		{name: "custom number type", body: "x", attrs: map[string]types.MessageAttributeValue{"customNumberTypeAttrib": {
			DataType: aws.String("Number.float"), StringValue: aws.String("4563442423554324324264524243.32543234")}},
			wantAttr: "9fe1b90bbd9965bdf77bac517c7d2495"},
		{name: "system trace header", body: "x", sys: map[string]types.MessageSystemAttributeValue{"AWSTraceHeader": {
			DataType: aws.String("String"), StringValue: aws.String("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")}},
			wantSys: "5ae4d5d7636402d80f4eb6d213245a88"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				url := b.queue(t, "q", nil)
				out := b.send(t, url, tt.body, func(in *sqs.SendMessageInput) {
					in.MessageAttributes = tt.attrs
					in.MessageSystemAttributes = tt.sys
				})
				if tt.wantBody != "" {
					require.Equal(t, tt.wantBody, aws.ToString(out.MD5OfMessageBody))
				}
				require.Equal(t, tt.wantAttr, aws.ToString(out.MD5OfMessageAttributes), "send MD5OfMessageAttributes")
				require.Equal(t, tt.wantSys, aws.ToString(out.MD5OfMessageSystemAttributes), "send MD5OfMessageSystemAttributes")
				got := b.receive(t, url, withAllAttributes)
				require.Len(t, got, 1)
				require.Equal(t, tt.wantAttr, aws.ToString(got[0].MD5OfMessageAttributes), "receive MD5OfMessageAttributes")
				require.Equal(t, tt.attrs, nilIfEmpty(got[0].MessageAttributes))
			})
		})
	}
}

func nilIfEmpty(m map[string]types.MessageAttributeValue) map[string]types.MessageAttributeValue {
	if len(m) == 0 {
		return nil
	}
	return m
}

// MessageAttributeNames filtering, and MD5OfMessageAttributes over the returned set
// (as real AWS answered in LocalStack's AWS-validated test
// test_receive_message_message_attribute_names_filters).
func TestReceiveAttributeFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		names   []string
		want    []string
		wantMD5 string
	}{
		{name: "none", names: nil},
		{name: "All", names: []string{"All"}, want: []string{"General", "Hello", "Help.Me"}, wantMD5: "4c360f3fdafd970e05fae2f149d997f5"},
		{name: ".*", names: []string{".*"}, want: []string{"General", "Hello", "Help.Me"}, wantMD5: "4c360f3fdafd970e05fae2f149d997f5"},
		{name: "*", names: []string{"*"}, want: []string{"General", "Hello", "Help.Me"}, wantMD5: "4c360f3fdafd970e05fae2f149d997f5"},
		{name: "exact", names: []string{"Hello"}, want: []string{"Hello"}, wantMD5: "a311262e065454b75da111d535b8dacd"},
		{name: "two exact", names: []string{"Hello", "General"}, want: []string{"General", "Hello"}, wantMD5: "fca026605781cb4126a1e9044df24232"},
		{name: "prefix", names: []string{"Hel.*"}, want: []string{"Hello", "Help.Me"}},
		{name: "unknown", names: []string{"Nope"}},
		{name: "illegal", names: []string{"AWS.", "..foo"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				url := b.queue(t, "q", nil)
				b.send(t, url, "x", func(in *sqs.SendMessageInput) {
					in.MessageAttributes = map[string]types.MessageAttributeValue{
						"Hello": str("There"), "General": str("Kenobi"), "Help.Me": str("Me")}
				})
				got := b.receive(t, url, func(in *sqs.ReceiveMessageInput) { in.MessageAttributeNames = tt.names })
				require.Len(t, got, 1)
				var names []string
				for n := range got[0].MessageAttributes {
					names = append(names, n)
				}
				require.ElementsMatch(t, tt.want, names)
				if tt.want == nil {
					require.Nil(t, got[0].MD5OfMessageAttributes, "no attributes returned: no digest")
				} else {
					require.NotNil(t, got[0].MD5OfMessageAttributes)
				}
				if tt.wantMD5 != "" {
					require.Equal(t, tt.wantMD5, *got[0].MD5OfMessageAttributes)
				}
			})
		})
	}
}

func TestReceiveSystemAttributes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", map[string]string{"VisibilityTimeout": "5"})
		sent := time.Now()
		b.send(t, url, "x")
		time.Sleep(3 * time.Second)
		first := time.Now()
		got := b.receive(t, url, func(in *sqs.ReceiveMessageInput) {
			in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}
		})
		require.Len(t, got, 1)
		a := got[0].Attributes
		require.Equal(t, strconv.FormatInt(sent.UnixMilli(), 10), a["SentTimestamp"])
		require.Equal(t, strconv.FormatInt(first.UnixMilli(), 10), a["ApproximateFirstReceiveTimestamp"])
		require.Equal(t, "1", a["ApproximateReceiveCount"])
		require.NotEmpty(t, a["SenderId"])
		require.NotContains(t, a, "SequenceNumber", "standard queue: no SequenceNumber")

		time.Sleep(5 * time.Second)
		got = b.receive(t, url, func(in *sqs.ReceiveMessageInput) {
			//lint:ignore SA1019 the deprecated member is still honoured by SQS, and tested here
			in.AttributeNames = []types.QueueAttributeName{"ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp"}
		})
		require.Len(t, got, 1)
		require.Equal(t, map[string]string{
			"ApproximateReceiveCount":          "2",
			"ApproximateFirstReceiveTimestamp": strconv.FormatInt(first.UnixMilli(), 10),
		}, got[0].Attributes)

		time.Sleep(5 * time.Second)
		got = b.receive(t, url)
		require.Len(t, got, 1)
		require.Nil(t, got[0].Attributes, "no names asked: no attributes")
	})
}

// Long polling returns as soon as one message is available; it does not wait to fill
// MaxNumberOfMessages (Amazon SQS Developer Guide, "Amazon SQS short and long
// polling").
func TestLongPollReturnsEarly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		queueAt  time.Duration // when the message is sent (or becomes visible)
		how      string
		wantWait time.Duration
		wantN    int
	}{
		{name: "send during poll", queueAt: 7 * time.Second, how: "send", wantWait: 7 * time.Second, wantN: 1},
		{name: "already queued", queueAt: 0, how: "send", wantWait: 0, wantN: 1},
		{name: "delay ends during poll", queueAt: 4 * time.Second, how: "delay", wantWait: 4 * time.Second, wantN: 1},
		{name: "lease lapses during poll", queueAt: 9 * time.Second, how: "lease", wantWait: 9 * time.Second, wantN: 1},
		{name: "released with visibility 0", queueAt: 6 * time.Second, how: "release", wantWait: 6 * time.Second, wantN: 1},
		{name: "empty queue waits the full time", how: "none", wantWait: 20 * time.Second, wantN: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				url := b.queue(t, "q", nil)
				switch tt.how {
				case "send":
					go func() {
						time.Sleep(tt.queueAt)
						_, err := b.srv.Send(url, "m")
						require.NoError(t, err)
					}()
				case "delay":
					_, err := b.srv.Send(url, "m", sqstest.WithDelay(tt.queueAt))
					require.NoError(t, err)
				case "lease":
					_, err := b.srv.Send(url, "m")
					require.NoError(t, err)
					require.Len(t, b.receive(t, url, withVisibility(int32(tt.queueAt/time.Second))), 1)
				case "release":
					_, err := b.srv.Send(url, "m")
					require.NoError(t, err)
					got := b.receive(t, url, withVisibility(600))
					require.Len(t, got, 1)
					go func() {
						time.Sleep(tt.queueAt)
						require.NoError(t, b.changeVisibility(url, *got[0].ReceiptHandle, 0))
					}()
				}
				start := time.Now()
				got := b.receive(t, url, withWait(20), withMax(10))
				require.Equal(t, tt.wantWait, time.Since(start), "time spent in the long poll")
				require.Len(t, got, tt.wantN)
			})
		})
	}
}

// Omitted WaitTimeSeconds uses the queue's ReceiveMessageWaitTimeSeconds.
func TestLongPollQueueDefault(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", map[string]string{"ReceiveMessageWaitTimeSeconds": "12"})
		start := time.Now()
		require.Empty(t, b.receive(t, url))
		require.Equal(t, 12*time.Second, time.Since(start))
	})
}

func TestLongPollCancelled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
		defer cancel()
		start := time.Now()
		_, err := b.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 20})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 3*time.Second, time.Since(start))
		_, err = b.srv.Send(url, "m")
		require.NoError(t, err)
		require.Len(t, b.receive(t, url), 1, "a cancelled poll takes nothing")
	})
}

func TestCloseEndsLongPolls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		go func() {
			time.Sleep(2 * time.Second)
			b.srv.Close()
		}()
		start := time.Now()
		require.Empty(t, b.receive(t, url, withWait(20)))
		require.Equal(t, 2*time.Second, time.Since(start))
		_, err := b.c.GetQueueUrl(b.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("q")},
			func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
		code, _ := apiError(t, err)
		require.Equal(t, "ServiceUnavailable", code)
	})
}

// Visibility: a new handle per receive, expiry makes the message receivable with the
// count incremented, ChangeMessageVisibility counts from now, 0 releases at once.
func TestVisibility(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", map[string]string{"VisibilityTimeout": "30"})
		id, err := b.srv.Send(url, "m")
		require.NoError(t, err)

		r1 := b.receive(t, url)
		require.Len(t, r1, 1)
		require.Empty(t, b.receive(t, url), "in flight")
		time.Sleep(29 * time.Second)
		require.Empty(t, b.receive(t, url), "still in flight at 29 s")
		time.Sleep(time.Second)
		r2 := b.receive(t, url, withAllAttributes)
		require.Len(t, r2, 1, "visible again at 30 s")
		require.NotEqual(t, *r1[0].ReceiptHandle, *r2[0].ReceiptHandle, "a new handle per receive")
		require.Equal(t, "2", r2[0].Attributes["ApproximateReceiveCount"])

		time.Sleep(20 * time.Second)
		require.NoError(t, b.changeVisibility(url, *r2[0].ReceiptHandle, 15))
		time.Sleep(14 * time.Second)
		require.Empty(t, b.receive(t, url), "extension counts from the change, not the receive")
		time.Sleep(time.Second)
		r3 := b.receive(t, url, withVisibility(100))
		require.Len(t, r3, 1)
		require.NoError(t, b.changeVisibility(url, *r3[0].ReceiptHandle, 0))
		r4 := b.receive(t, url)
		require.Len(t, r4, 1, "visibility 0 releases at once")

		st, ok := b.srv.Message(url, id)
		require.True(t, ok)
		require.Equal(t, 4, st.ReceiveCount)
		require.Len(t, st.Receives, 4)
		require.Equal(t, 30*time.Second, st.Receives[0].VisibilityTimeout)
		require.Equal(t, 100*time.Second, st.Receives[2].VisibilityTimeout)
		require.True(t, st.InFlight)
		require.Equal(t, []sqstest.VisibilityChange{
			{At: st.Receives[1].At.Add(20 * time.Second), ReceiptHandle: *r2[0].ReceiptHandle, Timeout: 15 * time.Second},
			{At: st.Receives[2].At, ReceiptHandle: *r3[0].ReceiptHandle, Timeout: 0},
		}, st.VisibilityChanges)
	})
}

func TestDelay(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", map[string]string{"DelaySeconds": "10"})
		b.send(t, url, "queue delay")
		b.send(t, url, "own delay", func(in *sqs.SendMessageInput) { in.DelaySeconds = 3 })
		attrs := func() map[string]string {
			out, err := b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url,
				AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"}})
			require.NoError(t, err)
			return out.Attributes
		}
		require.Equal(t, map[string]string{"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesDelayed": "2"}, attrs())
		require.Empty(t, b.receive(t, url))
		time.Sleep(3 * time.Second)
		require.Equal(t, []string{"own delay"}, bodies(b.receive(t, url)))
		time.Sleep(7 * time.Second)
		require.Equal(t, []string{"queue delay"}, bodies(b.receive(t, url)))
	})
}

func TestRetention(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", map[string]string{"MessageRetentionPeriod": "60"})
		id, err := b.srv.Send(url, "old")
		require.NoError(t, err)
		time.Sleep(59 * time.Second)
		b.send(t, url, "new")
		time.Sleep(time.Second)
		require.Equal(t, []string{"new"}, bodies(b.receive(t, url)))
		st, _ := b.srv.Message(url, id)
		require.True(t, st.Expired)
		require.Equal(t, 0, st.ReceiveCount)
	})
}

func TestSendMessageBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", map[string]string{"MaximumMessageSize": "1024"})
		out, err := b.c.SendMessageBatch(b.ctx, &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: []types.SendMessageBatchRequestEntry{
			{Id: aws.String("a"), MessageBody: aws.String("one")},
			{Id: aws.String("b"), MessageBody: aws.String(strings.Repeat("x", 1025))},
			{Id: aws.String("c"), MessageBody: aws.String("three"), DelaySeconds: 2,
				MessageAttributes: map[string]types.MessageAttributeValue{"Hello": str("There")}},
		}})
		require.NoError(t, err)
		require.Len(t, out.Successful, 2)
		require.Equal(t, "a", *out.Successful[0].Id)
		require.Equal(t, "a311262e065454b75da111d535b8dacd", *out.Successful[1].MD5OfMessageAttributes)
		require.Equal(t, []types.BatchResultErrorEntry{{Id: aws.String("b"), SenderFault: true,
			Code:    aws.String("InvalidParameterValue"),
			Message: aws.String("One or more parameters cannot be validated. Reason: Message must be shorter than 1024 bytes.")}},
			out.Failed)
		time.Sleep(2 * time.Second)
		require.Equal(t, []string{"one", "three"}, bodies(b.receive(t, url)))
	})
}
