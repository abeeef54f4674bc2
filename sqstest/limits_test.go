package sqstest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// rawAnswer is a response to a hand-made request.
type rawAnswer struct {
	status     int
	queryError string
	typ, msg   string
	body       map[string]any
}

// raw posts body as action straight to the server's handler (no socket, synchronous).
func raw(t *testing.T, srv *sqstest.Server, action, body string) rawAnswer {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	if action != "" {
		req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	a := rawAnswer{status: rec.Code, queryError: rec.Header().Get("x-amzn-query-error")}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a.body), "answer is JSON: %s", rec.Body)
	a.typ, _ = a.body["__type"].(string)
	a.msg, _ = a.body["message"].(string)
	return a
}

func TestLimitsRaw(t *testing.T) {
	t.Parallel()
	const q = `"QueueUrl":"http://sqstest.local/123456789012/q"`
	tests := []struct {
		name, action, body string
		wantStatus         int
		wantType           string // short name after com.amazonaws.sqs#, or a full __type
		wantQuery          string
		wantMsg            string
	}{
		{name: "unknown action", action: "Frobnicate", body: `{}`, wantStatus: 400,
			wantType: "com.amazon.coral.service#UnknownOperationException"},
		{name: "no target", action: "", body: `{}`, wantStatus: 400,
			wantType: "com.amazon.coral.service#UnknownOperationException"},
		{name: "not JSON", action: "SendMessage", body: `{"QueueUrl":`, wantStatus: 400,
			wantType: "com.amazon.coral.service#SerializationException"},
		{name: "wrong type", action: "ReceiveMessage", body: `{` + q + `,"MaxNumberOfMessages":"ten"}`, wantStatus: 400,
			wantType: "com.amazon.coral.service#SerializationException"},
		{name: "beyond int32", action: "ReceiveMessage", body: `{` + q + `,"WaitTimeSeconds":99999999999}`, wantStatus: 400,
			wantType: "com.amazon.coral.service#SerializationException"},
		{name: "array body", action: "ListQueues", body: `[]`, wantStatus: 400,
			wantType: "com.amazon.coral.service#SerializationException"},
		{name: "empty body is {}", action: "ListQueues", body: ``, wantStatus: 200},
		{name: "missing QueueUrl", action: "ReceiveMessage", body: `{}`, wantStatus: 400,
			wantType: "MissingRequiredParameterException", wantQuery: "MissingParameter;Sender",
			wantMsg: "The request must contain the parameter QueueUrl."},
		{name: "unknown queue", action: "ReceiveMessage", body: `{"QueueUrl":"http://sqstest.local/123456789012/nope"}`, wantStatus: 400,
			wantType: "QueueDoesNotExist", wantQuery: "AWS.SimpleQueueService.NonExistentQueue;Sender",
			wantMsg: "The specified queue does not exist."},
		{name: "max 0", action: "ReceiveMessage", body: `{` + q + `,"MaxNumberOfMessages":0}`, wantStatus: 400,
			wantType: "InvalidParameterValueException", wantQuery: "InvalidParameterValue;Sender",
			wantMsg: "Value 0 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."},
		{name: "max 11", action: "ReceiveMessage", body: `{` + q + `,"MaxNumberOfMessages":11}`, wantStatus: 400,
			wantType: "InvalidParameterValueException",
			wantMsg:  "Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."},
		{name: "wait 21", action: "ReceiveMessage", body: `{` + q + `,"WaitTimeSeconds":21}`, wantStatus: 400,
			wantType: "InvalidParameterValueException",
			wantMsg:  "Value 21 for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."},
		{name: "wait -1", action: "ReceiveMessage", body: `{` + q + `,"WaitTimeSeconds":-1}`, wantStatus: 400,
			wantType: "InvalidParameterValueException"},
		{name: "receive visibility 43201", action: "ReceiveMessage", body: `{` + q + `,"VisibilityTimeout":43201}`, wantStatus: 400,
			wantType: "InvalidParameterValueException"},
		{name: "receive visibility 0 allowed", action: "ReceiveMessage", body: `{` + q + `,"VisibilityTimeout":0}`, wantStatus: 200},
		{name: "change visibility missing timeout", action: "ChangeMessageVisibility", body: `{` + q + `,"ReceiptHandle":"h"}`, wantStatus: 400,
			wantType: "MissingRequiredParameterException", wantMsg: "The request must contain the parameter VisibilityTimeout."},
		{name: "delete missing handle", action: "DeleteMessage", body: `{` + q + `}`, wantStatus: 400,
			wantType: "MissingRequiredParameterException", wantMsg: "The request must contain the parameter ReceiptHandle."},
		{name: "entries missing", action: "DeleteMessageBatch", body: `{` + q + `}`, wantStatus: 400,
			wantType: "EmptyBatchRequest", wantQuery: "AWS.SimpleQueueService.EmptyBatchRequest;Sender"},
		{name: "entry without id", action: "DeleteMessageBatch", body: `{` + q + `,"Entries":[{"ReceiptHandle":"h"}]}`, wantStatus: 400,
			wantType: "InvalidBatchEntryId"},
		{name: "send without body", action: "SendMessage", body: `{` + q + `}`, wantStatus: 400,
			wantType: "MissingRequiredParameterException", wantMsg: "The request must contain the parameter MessageBody."},
		{name: "send invalid characters", action: "SendMessage", body: `{` + q + `,"MessageBody":"a\u0000b"}`, wantStatus: 400,
			wantType: "InvalidMessageContents"},
		{name: "binary attribute not base64", action: "SendMessage",
			body: `{` + q + `,"MessageBody":"x","MessageAttributes":{"b":{"DataType":"Binary","BinaryValue":"%%%"}}}`, wantStatus: 400,
			wantType: "com.amazon.coral.service#SerializationException"},
		{name: "unimplemented SQS action", action: "AddPermission", body: `{}`, wantStatus: 400,
			wantType: "UnsupportedOperation", wantQuery: "AWS.SimpleQueueService.UnsupportedOperation;Sender"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				srv := sqstest.New(t)
				_, err := srv.CreateQueue("q", nil)
				require.NoError(t, err)
				a := raw(t, srv, tt.action, tt.body)
				require.Equal(t, tt.wantStatus, a.status, "status; body %v", a.body)
				if tt.wantType != "" {
					want := tt.wantType
					if !strings.Contains(want, "#") {
						want = "com.amazonaws.sqs#" + want
					}
					require.Equal(t, want, a.typ)
				}
				if tt.wantQuery != "" {
					require.Equal(t, tt.wantQuery, a.queryError)
				}
				if tt.wantMsg != "" {
					require.Equal(t, tt.wantMsg, a.msg)
				}
			})
		})
	}
}

func TestLimitsSDK(t *testing.T) {
	t.Parallel()
	entries := func(n int, id func(i int) string) []types.DeleteMessageBatchRequestEntry {
		es := make([]types.DeleteMessageBatchRequestEntry, n)
		for i := range es {
			es[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(id(i)), ReceiptHandle: aws.String("h")}
		}
		return es
	}
	seq := func(i int) string { return fmt.Sprint("e", i) }
	attrs := func(n int) map[string]types.MessageAttributeValue {
		m := map[string]types.MessageAttributeValue{}
		for i := range n {
			m[fmt.Sprint("a", i)] = str("v")
		}
		return m
	}
	mib := 1 << 20
	tests := []struct {
		name     string
		call     func(b bundle, url string) error
		wantCode string
		wantMsg  string
	}{
		{name: "11 entries", call: func(b bundle, url string) error {
			_, err := b.c.DeleteMessageBatch(b.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: entries(11, seq)})
			return err
		}, wantCode: "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", wantMsg: "Maximum number of entries per request are 10. You have sent 11."},
		{name: "empty batch", call: func(b bundle, url string) error {
			_, err := b.c.ChangeMessageVisibilityBatch(b.ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &url, Entries: []types.ChangeMessageVisibilityBatchRequestEntry{}})
			return err
		}, wantCode: "AWS.SimpleQueueService.EmptyBatchRequest"},
		{name: "ids not distinct", call: func(b bundle, url string) error {
			_, err := b.c.DeleteMessageBatch(b.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: entries(2, func(int) string { return "same" })})
			return err
		}, wantCode: "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"},
		{name: "bad entry id", call: func(b bundle, url string) error {
			_, err := b.c.DeleteMessageBatch(b.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: entries(1, func(int) string { return "no spaces" })})
			return err
		}, wantCode: "AWS.SimpleQueueService.InvalidBatchEntryId",
			wantMsg: "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long."},
		{name: "batch over 1 MiB", call: func(b bundle, url string) error {
			half := strings.Repeat("x", mib/2)
			_, err := b.c.SendMessageBatch(b.ctx, &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: []types.SendMessageBatchRequestEntry{
				{Id: aws.String("a"), MessageBody: aws.String(half)}, {Id: aws.String("b"), MessageBody: aws.String(half + "x")}}})
			return err
		}, wantCode: "AWS.SimpleQueueService.BatchRequestTooLong", wantMsg: "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes."},
		{name: "message over 1 MiB", call: func(b bundle, url string) error {
			_, err := b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(strings.Repeat("x", mib+1))})
			return err
		}, wantCode: "InvalidParameterValue", wantMsg: "One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes."},
		{name: "attributes count toward size", call: func(b bundle, url string) error {
			_, err := b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(strings.Repeat("x", mib-7)),
				MessageAttributes: map[string]types.MessageAttributeValue{"a": str("v")}})
			return err
		}, wantCode: "InvalidParameterValue"},
		{name: "exactly 1 MiB is fine", call: func(b bundle, url string) error {
			_, err := b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(strings.Repeat("x", mib))})
			return err
		}},
		{name: "11 attributes", call: func(b bundle, url string) error {
			_, err := b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x"), MessageAttributes: attrs(11)})
			return err
		}, wantCode: "InvalidParameterValue"},
		{name: "empty string attribute", call: func(b bundle, url string) error {
			_, err := b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x"),
				MessageAttributes: map[string]types.MessageAttributeValue{"ErrorDetails": str("")}})
			return err
		}, wantCode: "InvalidParameterValue", wantMsg: "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'."},
		{name: "reserved attribute name", call: func(b bundle, url string) error {
			_, err := b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x"),
				MessageAttributes: map[string]types.MessageAttributeValue{"AWS.x": str("v")}})
			return err
		}, wantCode: "InvalidParameterValue"},
		{name: "delay 901", call: func(b bundle, url string) error {
			_, err := b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x"), DelaySeconds: 901})
			return err
		}, wantCode: "InvalidParameterValue"},
		{name: "dedup id on standard", call: func(b bundle, url string) error {
			_, err := b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("d")})
			return err
		}, wantCode: "InvalidParameterValue"},
		{name: "visibility 43201", call: func(b bundle, url string) error {
			return b.changeVisibility(url, "h", 43201)
		}, wantCode: "ReceiptHandleIsInvalid"}, // the handle is checked first
		{name: "visibility -1 on a live handle", call: func(b bundle, url string) error {
			_, err := b.srv.Send(url, "x")
			if err != nil {
				return err
			}
			out, err := b.c.ReceiveMessage(b.ctx, &sqs.ReceiveMessageInput{QueueUrl: &url})
			if err != nil {
				return err
			}
			return b.changeVisibility(url, *out.Messages[0].ReceiptHandle, -1)
		}, wantCode: "InvalidParameterValue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				url := b.queue(t, "q", nil)
				err := tt.call(b, url)
				if tt.wantCode == "" {
					require.NoError(t, err)
					return
				}
				requireAPIError(t, err, tt.wantCode, tt.wantMsg)
			})
		})
	}
}
