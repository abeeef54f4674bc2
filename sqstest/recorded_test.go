package sqstest_test

// Tests whose expectations are answers real AWS gave, as recorded by LocalStack's
// AWS-validated SQS tests (repository localstack/localstack, files
// tests/aws/services/sqs/test_sqs.snapshot.json with test_sqs.validation.json; the
// test named in each comment, JSON protocol). interop/recorded_test.go replays the
// same recordings as one table against sqstest and fauxqs.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
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

// rawH is raw with extra HTTP headers.
func rawH(t *testing.T, srv *sqstest.Server, action, body string, hdr map[string]string) rawAnswer {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	a := rawAnswer{status: rec.Code, queryError: rec.Header().Get("x-amzn-query-error")}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a.body), "answer is JSON: %s", rec.Body)
	a.typ, _ = a.body["__type"].(string)
	a.msg, _ = a.body["message"].(string)
	return a
}

func jsonBody(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func queueAttrs(t *testing.T, b bundle, url string, names ...types.QueueAttributeName) map[string]string {
	t.Helper()
	out, err := b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	require.NoError(t, err)
	return out.Attributes
}

// A FIFO send with DelaySeconds=0 is accepted and the queue's delay applies
// (test_fifo_queue_send_message_with_zero_delay_defaults_to_queue_delay[sqs],
// recorded 2025-07-31). The Go SDK leaves a zero DelaySeconds out, so the request is
// written by hand, as boto3 sends it.
func TestRecordedFIFOZeroDelay(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := fifoQueue(t, b, map[string]string{"DelaySeconds": "2"})
		send := rawH(t, b.srv, "SendMessage", jsonBody(t, map[string]any{
			"QueueUrl": url, "MessageBody": "message-1", "MessageGroupId": "1", "DelaySeconds": 0}), nil)
		require.Equal(t, 200, send.status, "answer %v", send.body)
		require.Equal(t, "3d6b824fd8c1520e9a047d21fee6fb1f", send.body["MD5OfMessageBody"])
		require.NotEmpty(t, send.body["SequenceNumber"])
		require.Empty(t, b.receive(t, url, withWait(1)), "the queue's 2 s delay applies")
		time.Sleep(2 * time.Second)
		require.Equal(t, []string{"message-1"}, bodies(b.receive(t, url, withMax(1))))

		// Any other per-message delay is still refused
		// (test_fifo_queue_send_message_with_delay_seconds_fails[sqs]).
		bad := rawH(t, b.srv, "SendMessage", jsonBody(t, map[string]any{
			"QueueUrl": url, "MessageBody": "m", "MessageGroupId": "1", "DelaySeconds": 2}), nil)
		require.Equal(t, 400, bad.status)
		require.Equal(t, "Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.", bad.msg)
	})
}

// On a FIFO queue, a SendMessageBatch entry without MessageGroupId, or without
// MessageDeduplicationId when content-based deduplication is off, fails the whole
// call with 400 InvalidParameterValue
// (test_send_batch_missing_message_group_id_for_fifo_queue[sqs],
// test_send_batch_missing_deduplication_id_for_fifo_queue[sqs], recorded 2024-04-30);
// the valid entry beside it is not enqueued either (our choice, unconfirmed.go).
func TestFIFOBatchWholeCallFailures(t *testing.T) {
	t.Parallel()
	good := types.SendMessageBatchRequestEntry{Id: aws.String("good"), MessageBody: aws.String("messageBody"),
		MessageGroupId: aws.String("test-group"), MessageDeduplicationId: aws.String("dedup-1")}
	tests := []struct {
		name    string
		bad     types.SendMessageBatchRequestEntry
		wantMsg string
	}{
		{"no deduplication id", types.SendMessageBatchRequestEntry{Id: aws.String("bad"), MessageBody: aws.String("messageBody"),
			MessageGroupId: aws.String("test-group")},
			"The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"},
		{"no group id", types.SendMessageBatchRequestEntry{Id: aws.String("bad"), MessageBody: aws.String("messageBody"),
			MessageDeduplicationId: aws.String("dedup-2")},
			"The request must contain the parameter MessageGroupId."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				url := fifoQueue(t, b, map[string]string{"ContentBasedDeduplication": "false"})
				out, err := b.c.SendMessageBatch(b.ctx, &sqs.SendMessageBatchInput{QueueUrl: &url,
					Entries: []types.SendMessageBatchRequestEntry{good, tt.bad}})
				requireAPIError(t, err, "InvalidParameterValue", tt.wantMsg)
				require.Nil(t, out)
				require.Empty(t, b.srv.Messages(url), "no entry was enqueued")
			})
		})
	}
}

// "True" and "False" (Python's str(True)) are accepted for FifoQueue and
// ContentBasedDeduplication and read back in lower case
// (test_fifo_delete_after_visibility_timeout[sqs], recorded 2025-03-28;
// test_sqs_fifo_same_dedup_id_different_message_groups[sqs], 2024-04-30).
func TestRecordedCapitalisedBooleans(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "caps.fifo", map[string]string{"VisibilityTimeout": "1", "FifoQueue": "True", "ContentBasedDeduplication": "True"})
		got := queueAttrs(t, b, url, "FifoQueue", "ContentBasedDeduplication")
		require.Equal(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}, got)
		b.send(t, url, "foobar", withGroup("1")) // no dedup id: content-based deduplication is on
		msgs := b.receive(t, url, withWait(5))
		require.Len(t, msgs, 1)
		time.Sleep(time.Second)
		// The rest of the recording: a FIFO delete after the lease lapsed is refused.
		requireAPIError(t, b.deleteMessage(url, *msgs[0].ReceiptHandle), "InvalidParameterValue",
			"Value "+*msgs[0].ReceiptHandle+" for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.")

		off := b.queue(t, "off.fifo", map[string]string{"FifoQueue": "True", "ContentBasedDeduplication": "False"})
		require.Equal(t, "false", queueAttrs(t, b, off, "ContentBasedDeduplication")["ContentBasedDeduplication"])
		b.send(t, off, "Test", withGroup("group1"), withDedup("same-dedup"))
		require.Len(t, b.receive(t, off), 1)
		b.send(t, off, "Test", withGroup("group2"), withDedup("same-dedup"))
		require.Empty(t, b.receive(t, off), "deduplicated across groups (queue scope)")
	})
}

// FifoQueue on SetQueueAttributes and CreateQueue, and the FIFO-only attributes on a
// standard queue, as AWS answered (test_set_unsupported_attribute_fifo[sqs] and
// test_set_unsupported_attribute_standard[sqs], recorded 2024-05-14;
// test_create_standard_queue_with_fifo_attribute_raises_error[sqs], 2024-05-15).
func TestRecordedFifoQueueAttribute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		create   bool // CreateQueue of a standard queue; else SetQueueAttributes
		fifo     bool // SetQueueAttributes on a FIFO queue
		attrs    map[string]string
		wantCode string
		wantMsg  string
	}{
		{name: "set FifoQueue=true on a FIFO queue", fifo: true, attrs: map[string]string{"FifoQueue": "true"}},
		{name: "set FifoQueue=false on a FIFO queue", fifo: true, attrs: map[string]string{"FifoQueue": "false"},
			wantCode: "InvalidAttributeValue", wantMsg: "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported."},
		{name: "set FifoQueue=true on a standard queue", attrs: map[string]string{"FifoQueue": "true"},
			wantCode: "InvalidAttributeName", wantMsg: "Unknown Attribute FifoQueue."},
		{name: "set FifoQueue=false on a standard queue", attrs: map[string]string{"FifoQueue": "false"},
			wantCode: "InvalidAttributeName", wantMsg: "Unknown Attribute FifoQueue."},
		{name: "create standard with FifoQueue=false", create: true, attrs: map[string]string{"FifoQueue": "false"},
			wantCode: "InvalidAttributeName", wantMsg: "Unknown Attribute FifoQueue."},
		{name: "create standard with ContentBasedDeduplication", create: true, attrs: map[string]string{"ContentBasedDeduplication": "false"},
			wantCode: "InvalidAttributeName", wantMsg: "Unknown Attribute ContentBasedDeduplication."},
		{name: "create standard with DeduplicationScope", create: true, attrs: map[string]string{"DeduplicationScope": "queue"},
			wantCode: "InvalidAttributeName", wantMsg: "You can specify the DeduplicationScope only when FifoQueue is set to true."},
		{name: "create standard with FifoThroughputLimit", create: true, attrs: map[string]string{"FifoThroughputLimit": "perQueue"},
			wantCode: "InvalidAttributeName", wantMsg: "You can specify the FifoThroughputLimit only when FifoQueue is set to true."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				var err error
				switch {
				case tt.create:
					_, err = b.c.CreateQueue(b.ctx, &sqs.CreateQueueInput{QueueName: aws.String("plain"), Attributes: tt.attrs})
				case tt.fifo:
					url := fifoQueue(t, b, nil)
					_, err = b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url, Attributes: tt.attrs})
					require.Equal(t, "true", queueAttrs(t, b, url, "FifoQueue")["FifoQueue"])
				default:
					url := b.queue(t, "plain", nil)
					_, err = b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url, Attributes: tt.attrs})
				}
				if tt.wantCode == "" {
					require.NoError(t, err)
					return
				}
				requireAPIError(t, err, tt.wantCode, tt.wantMsg)
				_, exists := b.srv.QueueURL("plain")
				require.False(t, exists && tt.create, "no queue was created")
			})
		})
	}
}

// AWS sets AWSTraceHeader from the sender's X-Amzn-Trace-Id HTTP header
// (test_aws_trace_header_propagation[sqs], recorded 2025-06-27), for every message of
// a SendMessage or SendMessageBatch; a MessageSystemAttributes AWSTraceHeader wins
// over the header (AWS X-Ray Developer Guide, "Amazon SQS and AWS X-Ray").
func TestRecordedTraceHeaderFromHTTP(t *testing.T) {
	t.Parallel()
	const trace = "Root=1-3152b799-8954dae64eda91bc9a23a7e8;Parent=7fa8c0f79203be72;Sampled=1"
	const own = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	hdr := map[string]string{"X-Amzn-Trace-Id": trace}
	tests := []struct {
		name   string
		action string
		body   map[string]any
		want   []string // AWSTraceHeader of the received messages, in order
	}{
		{"SendMessage", "SendMessage", map[string]any{"MessageBody": "test",
			"MessageAttributes": map[string]any{"timestamp": map[string]any{"StringValue": "1493147359900", "DataType": "Number"}}},
			[]string{trace}},
		{"system attribute wins", "SendMessage", map[string]any{"MessageBody": "test",
			"MessageSystemAttributes": map[string]any{"AWSTraceHeader": map[string]any{"DataType": "String", "StringValue": own}}},
			[]string{own}},
		{"SendMessageBatch", "SendMessageBatch", map[string]any{"Entries": []any{
			map[string]any{"Id": "a", "MessageBody": "a"},
			map[string]any{"Id": "b", "MessageBody": "b", "MessageSystemAttributes": map[string]any{"AWSTraceHeader": map[string]any{"DataType": "String", "StringValue": own}}},
		}}, []string{trace, own}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				url := b.queue(t, "q", nil)
				tt.body["QueueUrl"] = url
				a := rawH(t, b.srv, tt.action, jsonBody(t, tt.body), hdr)
				require.Equal(t, 200, a.status, "answer %v", a.body)
				msgs := b.receive(t, url, func(in *sqs.ReceiveMessageInput) {
					in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{"SentTimestamp", "AWSTraceHeader"}
					in.MessageAttributeNames = []string{"All"}
				})
				var got []string
				for _, m := range msgs {
					got = append(got, m.Attributes["AWSTraceHeader"])
				}
				require.Equal(t, tt.want, got)
				if tt.name == "SendMessage" {
					require.Equal(t, "235c5c510d26fb653d073faed50ae77c", *msgs[0].MD5OfMessageAttributes)
				}
			})
		})
	}
}

// Server-side encryption attributes (test_sse_queue_attributes[sqs] and
// test_sse_kms_and_sqs_are_mutually_exclusive[sqs], recorded 2024-04-30;
// test_set_queue_attributes_default_values[sqs], recorded 2025-12-10).
func TestRecordedEncryptionAttributes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		set := func(attrs map[string]string) error {
			_, err := b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url, Attributes: attrs})
			return err
		}
		all := func() map[string]string { return queueAttrs(t, b, url, types.QueueAttributeNameAll) }
		sse := []types.QueueAttributeName{"KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled"}

		require.Equal(t, "true", all()["SqsManagedSseEnabled"])
		require.NotContains(t, all(), "KmsMasterKeyId")

		require.NoError(t, set(map[string]string{"KmsMasterKeyId": "testKeyId", "KmsDataKeyReusePeriodSeconds": "6000"}))
		require.Equal(t, map[string]string{"KmsMasterKeyId": "testKeyId", "KmsDataKeyReusePeriodSeconds": "6000", "SqsManagedSseEnabled": "false"},
			queueAttrs(t, b, url, sse...), "a KMS key turns SQS-managed encryption off")

		require.NoError(t, set(map[string]string{"KmsMasterKeyId": "", "KmsDataKeyReusePeriodSeconds": "300"}))
		got := all()
		require.NotContains(t, got, "KmsMasterKeyId")
		require.NotContains(t, got, "KmsDataKeyReusePeriodSeconds")
		require.Equal(t, "false", got["SqsManagedSseEnabled"])

		other := b.queue(t, "other", nil)
		_, err := b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &other,
			Attributes: map[string]string{"KmsMasterKeyId": "testKeyId", "SqsManagedSseEnabled": "true"}})
		requireAPIError(t, err, "InvalidAttributeName",
			"You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE.")
		require.Equal(t, map[string]string{"SqsManagedSseEnabled": "true"}, queueAttrs(t, b, other, sse...))
	})
}

// A bare queue name works as QueueUrl, and a RedrivePolicy may name the queue
// itself (test_set_empty_redrive_policy[sqs], validated 2024-08-20).
func TestRecordedBareNameAndSelfRedrive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "dl-queue", nil)
		arn := queueArn(t, b, url)
		_, err := b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String("dl-queue"),
			Attributes: map[string]string{"RedrivePolicy": ""}})
		require.NoError(t, err)
		require.NotContains(t, queueAttrs(t, b, "dl-queue", types.QueueAttributeNameAll), "RedrivePolicy")

		_, err = b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url,
			Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":"42"}`}})
		require.NoError(t, err, "a queue may be its own dead-letter queue")
		require.Contains(t, queueAttrs(t, b, url, types.QueueAttributeNameAll)["RedrivePolicy"], arn)

		_, err = b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url,
			Attributes: map[string]string{"RedrivePolicy": ""}})
		require.NoError(t, err)
		require.NotContains(t, queueAttrs(t, b, url, types.QueueAttributeNameAll), "RedrivePolicy")

		// Other actions take a name too; an unknown name is an unknown queue.
		b.send(t, "dl-queue", "by name")
		require.Equal(t, []string{"by name"}, bodies(b.receive(t, "dl-queue")))
		_, err = b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: aws.String("nope"), MessageBody: aws.String("x")})
		requireAPIError(t, err, "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
	})
}

// A message past maxReceiveCount on a queue that is its own DLQ stays and is
// delivered as usual (UNCONFIRMED, unconfirmed.go: selfRedriveMoves).
func TestSelfRedriveKeepsMessage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "self", map[string]string{"VisibilityTimeout": "0"})
		_, err := b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url,
			Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + queueArn(t, b, url) + `","maxReceiveCount":1}`}})
		require.NoError(t, err)
		b.send(t, url, "m")
		for i := range 3 {
			got := b.receive(t, url, withAllAttributes)
			require.Len(t, got, 1, "receive %d", i)
			require.Equal(t, "m", *got[0].Body)
		}
	})
}

// A RedrivePolicy naming a queue that does not exist is refused by the actions; the
// Server.CreateQueue helper accepts it (for tests of a missing DLQ).
func TestRedrivePolicyMissingTarget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		policy := `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:missing","maxReceiveCount":3}`
		_, err := b.c.CreateQueue(b.ctx, &sqs.CreateQueueInput{QueueName: aws.String("src"),
			Attributes: map[string]string{"RedrivePolicy": policy}})
		requireAPIError(t, err, "InvalidParameterValue",
			"Value "+policy+" for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.")
		url := b.queue(t, "src", nil)
		_, err = b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url,
			Attributes: map[string]string{"RedrivePolicy": policy}})
		requireAPIError(t, err, "InvalidParameterValue",
			"Value "+policy+" for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.")

		// The count is checked first, as before.
		_, err = b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url,
			Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:missing","maxReceiveCount":0}`}})
		code, msg := apiError(t, err)
		require.Equal(t, "InvalidParameterValue", code)
		require.Contains(t, msg, "Invalid value for maxReceiveCount: 0")

		helper, err := b.srv.CreateQueue("helper", map[string]string{"RedrivePolicy": policy})
		require.NoError(t, err, "the helper accepts a missing DLQ")
		require.Contains(t, queueAttrs(t, b, helper, "RedrivePolicy")["RedrivePolicy"], "missing")
	})
}

// SendMessageBatch with nothing failed leaves Failed out
// (test_send_message_batch_with_oversized_contents_with_updated_maximum_message_size[sqs],
// recorded 2024-04-30: two entries, one exactly at the queue's 2048-byte maximum
// counting its attribute); a failed entry is listed.
func TestRecordedBatchOmitsEmptyFailed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", map[string]string{"MaximumMessageSize": "2048"})
		body := strings.Repeat("a", 2048-len("k")-len("String")-len("x"))
		ok := rawH(t, b.srv, "SendMessageBatch", jsonBody(t, map[string]any{"QueueUrl": url, "Entries": []any{
			map[string]any{"Id": "1", "MessageBody": body, "MessageAttributes": map[string]any{"k": map[string]any{"DataType": "String", "StringValue": "x"}}},
			map[string]any{"Id": "2", "MessageBody": "a"},
		}}), nil)
		require.Equal(t, 200, ok.status)
		require.NotContains(t, ok.body, "Failed")
		succ := ok.body["Successful"].([]any)
		require.Len(t, succ, 2)
		first := succ[0].(map[string]any)
		require.Equal(t, "a45daa70926828a2f0a1db3418e6feb4", first["MD5OfMessageAttributes"])
		require.Equal(t, "f44facf5a7ee0af446ecf3e0f854441e", first["MD5OfMessageBody"])
		require.Equal(t, "0cc175b9c0f1b6a831c399e269772661", succ[1].(map[string]any)["MD5OfMessageBody"])

		bad := rawH(t, b.srv, "SendMessageBatch", jsonBody(t, map[string]any{"QueueUrl": url, "Entries": []any{
			map[string]any{"Id": "big", "MessageBody": strings.Repeat("a", 2049)},
		}}), nil)
		require.Equal(t, 200, bad.status)
		require.Len(t, bad.body["Failed"], 1)

		del := rawH(t, b.srv, "DeleteMessageBatch", jsonBody(t, map[string]any{"QueueUrl": url, "Entries": []any{
			map[string]any{"Id": "x", "ReceiptHandle": *b.receive(t, url, withMax(1))[0].ReceiptHandle}}}), nil)
		require.NotContains(t, del.body, "Failed")
	})
}

// MessageGroupId sent to a standard queue comes back as a system attribute
// (test_fair_queue_with_message_group_id[sqs], recorded 2025-08-18).
func TestRecordedGroupIDOnStandardQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "fair", nil)
		out := b.send(t, url, "message", withGroup("test"))
		require.Equal(t, "78e731027d8fd50ed642340b7c9a63b3", *out.MD5OfMessageBody)
		require.Nil(t, out.SequenceNumber)
		msgs := b.receive(t, url, withWait(5), func(in *sqs.ReceiveMessageInput) {
			//lint:ignore SA1019 the recording asked with AttributeNames, as boto3 users still do
			in.AttributeNames = []types.QueueAttributeName{types.QueueAttributeNameAll}
		})
		require.Len(t, msgs, 1)
		a := msgs[0].Attributes
		require.Equal(t, "test", a["MessageGroupId"])
		require.Equal(t, "1", a["ApproximateReceiveCount"])
		for _, k := range []string{"ApproximateFirstReceiveTimestamp", "SenderId", "SentTimestamp"} {
			require.NotEmpty(t, a[k], k)
		}
		require.Len(t, a, 5, "exactly the recorded attributes: %v", a)
	})
}

// A message SQS moves into a FIFO dead-letter queue gets its MessageId as its
// deduplication id (Amazon SQS Developer Guide, "Learn how to configure a
// dead-letter queue redrive in Amazon SQS").
func TestFIFODeadLetterDeduplicationID(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		dlq := b.queue(t, "dlq.fifo", map[string]string{"FifoQueue": "true"})
		src := fifoQueue(t, b, map[string]string{"ContentBasedDeduplication": "false", "VisibilityTimeout": "0",
			"RedrivePolicy": `{"deadLetterTargetArn":"` + queueArn(t, b, dlq) + `","maxReceiveCount":1}`})
		out := b.send(t, src, "a", withGroup("g"), withDedup("original-dedup"))
		require.Len(t, b.receive(t, src), 1)
		require.Empty(t, b.receive(t, src), "the second receive moves it")
		got := b.receive(t, dlq, withAllAttributes)
		require.Len(t, got, 1)
		require.Equal(t, *out.MessageId, got[0].Attributes["MessageDeduplicationId"])
		require.Equal(t, "g", got[0].Attributes["MessageGroupId"])
	})
}
