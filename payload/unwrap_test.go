package payload

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
)

// call runs m through Unwrap(layers...) and reports what the handler saw:
// the message and envelope, or nil if it was not called.
func call(t *testing.T, layers []Format, m *sqsconsumer.Message) (*sqsconsumer.Message, *Envelope, error) {
	t.Helper()
	mw, err := Unwrap(layers...)
	require.NoError(t, err)
	var got *sqsconsumer.Message
	var env *Envelope
	err = mw(sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		got, env = m, FromContext(ctx)
		return nil
	})).HandleMessage(context.Background(), m)
	return got, env, err
}

func msg(body string) *sqsconsumer.Message {
	return &sqsconsumer.Message{ID: "sqs-id-1", Body: body, ReceiveCount: 2, GroupID: "g", Attributes: map[string]string{"SentTimestamp": "1"}}
}

func TestUnwrapSNS(t *testing.T) {
	t.Parallel()
	for _, layers := range [][]Format{{SNS}, {Auto}} {
		t.Run(layers[0].String(), func(t *testing.T) {
			m := msg(snsOrder)
			m.MessageAttributes = map[string]types.MessageAttributeValue{
				"sqs-side": {DataType: aws.String("String"), StringValue: aws.String("kept")},
			}
			got, env, err := call(t, layers, m)
			require.NoError(t, err)
			require.Equal(t, `{"order_id":"o-77","amount_cents":1250,"note":"café \"deluxe\""}`, got.Body)
			require.Equal(t, "sqs-id-1", got.ID)
			require.Equal(t, 2, got.ReceiveCount)
			require.Equal(t, "g", got.GroupID)
			require.Equal(t, m.Attributes, got.Attributes)
			require.Same(t, m, env.Original)
			require.Equal(t, snsOrder, m.Body, "the original is untouched")
			require.Len(t, m.MessageAttributes, 1, "the original's attributes are untouched")

			require.Equal(t, []Format{SNS}, env.Layers)
			n := env.SNS
			require.Equal(t, "6b1f0a52-41d7-5c3e-9a0e-2f7c1d9e8b40", n.MessageID)
			require.Equal(t, "arn:aws:sns:eu-west-1:210987654321:orders", n.TopicARN)
			require.Equal(t, "order placed", n.Subject)
			require.Equal(t, time.Date(2026, 3, 14, 9, 26, 53, 589e6, time.UTC), n.Timestamp)
			require.Equal(t, "1", n.SignatureVersion)
			require.True(t, strings.HasPrefix(n.UnsubscribeURL, "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe"))

			a := got.MessageAttributes
			require.Len(t, a, 4)
			require.Equal(t, "kept", aws.ToString(a["sqs-side"].StringValue))
			require.Equal(t, "String", aws.ToString(a["tenant"].DataType))
			require.Equal(t, "acme", aws.ToString(a["tenant"].StringValue))
			require.Equal(t, "Number", aws.ToString(a["priority"].DataType))
			require.Equal(t, "3", aws.ToString(a["priority"].StringValue))
			require.Equal(t, "Binary", aws.ToString(a["checksum"].DataType))
			require.Equal(t, []byte{1, 2, 3}, a["checksum"].BinaryValue)
			require.Nil(t, a["checksum"].StringValue)
		})
	}
}

func TestUnwrapSNSFIFO(t *testing.T) {
	t.Parallel()
	got, env, err := call(t, []Format{SNS}, msg(snsFIFO))
	require.NoError(t, err)
	require.Equal(t, "entry 3", got.Body)
	require.Equal(t, "10000000000000003000", env.SNS.SequenceNumber)
	require.Empty(t, env.SNS.Subject)
	require.Nil(t, got.MessageAttributes, "no attributes on either side")
}

func TestUnwrapSNSRaw(t *testing.T) {
	t.Parallel()
	m := msg(`{"order_id":"o-1"}`)
	m.MessageAttributes = map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}
	got, env, err := call(t, []Format{SNSRaw}, m)
	require.NoError(t, err)
	require.Equal(t, m.Body, got.Body)
	require.Equal(t, m.MessageAttributes, got.MessageAttributes)
	require.Equal(t, []Format{SNSRaw}, env.Layers)
	require.Nil(t, env.SNS)

	// A queue declared raw that receives envelopes: raw delivery is off.
	_, _, err = call(t, []Format{SNSRaw}, msg(snsOrder))
	requireMalformed(t, err, SNSRaw, "raw message delivery is off")

	// Raw delivery of an EventBridge event published to the topic.
	got, env, err = call(t, []Format{SNSRaw, EventBridge}, msg(ebEvent))
	require.NoError(t, err)
	require.Equal(t, `{"invoice_id":"inv-9","amount_cents":4200}`, got.Body)
	require.Equal(t, []Format{SNSRaw, EventBridge}, env.Layers)
}

func TestUnwrapEventBridge(t *testing.T) {
	t.Parallel()
	for _, layers := range [][]Format{{EventBridge}, {Auto}} {
		got, env, err := call(t, layers, msg(ebEvent))
		require.NoError(t, err)
		require.Equal(t, `{"invoice_id":"inv-9","amount_cents":4200}`, got.Body)
		e := env.Event
		require.Equal(t, &Event{
			Version: "0", ID: "5e9a1c3b-2d4f-6a8b-0c1e-3f5a7b9d1e2f", DetailType: "Invoice Paid", Source: "com.example.billing",
			Account: "210987654321", Region: "ap-southeast-2", Time: time.Date(2026, 3, 14, 10, 15, 30, 0, time.UTC),
			Resources: []string{"arn:aws:billing::210987654321:invoice/inv-9"}, Detail: got.Body,
		}, e)
		require.Equal(t, []Format{EventBridge}, env.Layers)
	}
}

func TestUnwrapS3(t *testing.T) {
	t.Parallel()
	for _, layers := range [][]Format{{S3Events}, {Auto}} {
		got, env, err := call(t, layers, msg(s3Put))
		require.NoError(t, err)
		require.Equal(t, s3Put, got.Body, "the notification is the payload")
		require.Len(t, env.S3.Records, 1)
		r := env.S3.Records[0]
		require.Equal(t, "ObjectCreated:Put", r.EventName)
		require.Equal(t, "incoming-scans", r.Bucket.Name)
		require.Equal(t, "arn:aws:s3:::incoming-scans", r.Bucket.ARN)
		require.Equal(t, "2026/red flower+leaf.jpg", r.Object.Key)
		require.Equal(t, "2026/red+flower%2Bleaf.jpg", r.Object.RawKey)
		require.Equal(t, int64(52431), r.Object.Size)
		require.Equal(t, "0055AED6DCD90281E5", r.Object.Sequencer)
		require.Equal(t, "198.51.100.7", r.SourceIP)
		require.Equal(t, time.Date(2026, 3, 14, 11, 0, 0, 123e6, time.UTC), r.EventTime)
	}
}

// An S3 notification sent through an SNS topic: two layers.
func TestUnwrapS3ThroughSNS(t *testing.T) {
	t.Parallel()
	wrapped := snsWrap(t, s3Put, "Amazon S3 Notification")
	for _, layers := range [][]Format{{SNS, S3Events}, {Auto}} {
		got, env, err := call(t, layers, msg(wrapped))
		require.NoError(t, err)
		require.Equal(t, s3Put, got.Body)
		require.Equal(t, []Format{SNS, S3Events}, env.Layers)
		require.Equal(t, "Amazon S3 Notification", env.SNS.Subject)
		require.Equal(t, "incoming-scans", env.S3.Records[0].Bucket.Name)
	}
	// And an EventBridge event through a topic.
	got, env, err := call(t, []Format{Auto}, msg(snsWrap(t, ebEvent, "")))
	require.NoError(t, err)
	require.Equal(t, []Format{SNS, EventBridge}, env.Layers)
	require.Equal(t, `{"invoice_id":"inv-9","amount_cents":4200}`, got.Body)
}

// The S3 test event is acknowledged: nil, and the handler is not called.
func TestUnwrapS3TestEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		layers []Format
		body   string
	}{
		{[]Format{S3Events}, s3Test},
		{[]Format{Auto}, s3Test},
		{[]Format{SNS, S3Events}, snsWrap(t, s3Test, "Amazon S3 Notification")},
		{[]Format{Auto}, snsWrap(t, s3Test, "Amazon S3 Notification")},
	} {
		got, _, err := call(t, tc.layers, msg(tc.body))
		require.NoError(t, err)
		require.Nil(t, got, "%v: the handler must not see the test event", tc.layers)
	}
	// Under SNS alone the test event is the payload like any other.
	got, _, err := call(t, []Format{SNS}, msg(snsWrap(t, s3Test, "")))
	require.NoError(t, err)
	require.Equal(t, s3Test, got.Body)
}

// snsWrap puts message into an SNS envelope, as a topic would.
func snsWrap(t *testing.T, message, subject string) string {
	t.Helper()
	env := map[string]any{
		"Type": "Notification", "MessageId": "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a", "TopicArn": "arn:aws:sns:us-west-2:210987654321:scans",
		"Message": message, "Timestamp": "2026-03-14T11:00:01.000Z", "SignatureVersion": "1", "Signature": "eHl6",
		"SigningCertURL": "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-x.pem",
		"UnsubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe",
	}
	if subject != "" {
		env["Subject"] = subject
	}
	b, err := json.Marshal(env)
	require.NoError(t, err)
	return string(b)
}

func requireMalformed(t *testing.T, err error, f Format, reason string) {
	t.Helper()
	require.Error(t, err)
	require.True(t, sqsconsumer.IsPermanent(err), "want a permanent error, got %v", err)
	var ee *EnvelopeError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, f, ee.Format)
	require.Contains(t, ee.Reason, reason)
}

// Bodies that claim to be an envelope, or that the queue declares to be
// one, but are not valid: permanent errors with reasons.
func TestUnwrapMalformed(t *testing.T) {
	t.Parallel()
	replace := func(s, old, new string) string {
		require.Contains(t, s, old)
		return strings.Replace(s, old, new, 1)
	}
	tests := []struct {
		name   string
		layers []Format
		body   string
		format Format
		reason string
	}{
		{"plain text declared SNS", []Format{SNS}, "hello", SNS, "want a JSON object"},
		{"plain JSON declared SNS", []Format{SNS}, `{"order_id":"o-1"}`, SNS, `no "Type", "MessageId", "TopicArn", "Timestamp" fields; is raw message delivery on?`},
		{"truncated SNS", []Format{SNS}, snsOrder[:200], SNS, "invalid JSON at byte"},
		{"SNS without Message", []Format{Auto}, replace(snsFIFO, `"Message":"entry 3",`, ""), SNS, `no "Message" field`},
		{"SNS Message not a string", []Format{Auto}, replace(snsFIFO, `"entry 3"`, `{"a":1}`), SNS, `field "Message" is an object, want a string`},
		{"SNS bad timestamp", []Format{SNS}, replace(snsFIFO, `2026-03-14T09:30:00.001Z`, `yesterday`), SNS, `Timestamp "yesterday" is not an RFC 3339 time`},
		{"SNS bad topic ARN", []Format{Auto}, replace(snsFIFO, `arn:aws:sns:us-east-2:210987654321:ledger.fifo"`, `orders"`), SNS, `TopicArn "orders" is not an SNS topic ARN`},
		{"SNS unknown type", []Format{SNS}, replace(snsFIFO, `"Notification"`, `"Note"`), SNS, `Type is "Note"`},
		{"SNS subscription confirmation", []Format{SNS}, snsConfirmation, SNS, `Type is "SubscriptionConfirmation": confirm or remove the subscription of arn:aws:sns:us-east-1:210987654321:shared by hand`},
		{"SNS bad binary attribute", []Format{SNS}, replace(snsOrder, `"AQID"`, `"not base64!"`), SNS, `message attribute "checksum" of type Binary is not base64`},
		{"SNS attribute without type", []Format{SNS}, replace(snsOrder, `{"Type":"String","Value":"acme"}`, `{"Value":"acme"}`), SNS, `message attribute "tenant" has no Type`},
		{"SNS, inner not S3", []Format{SNS, S3Events}, snsOrder, S3Events, `no "Records" field`},
		{"SNS, inner not JSON", []Format{SNS, EventBridge}, snsFIFO, EventBridge, `invalid JSON at byte 0: want a JSON object, found 'e'`},
		{"EventBridge missing fields", []Format{EventBridge}, `{"detail-type":"x","source":"y","detail":{}}`, EventBridge, `no "version", "id", "account", "time", "region", "resources" fields`},
		{"EventBridge detail not an object", []Format{Auto}, replace(ebEvent, `"detail":{"invoice_id":"inv-9","amount_cents":4200}`, `"detail":"paid"`), EventBridge, "detail is a string, want an object"},
		{"EventBridge resources not strings", []Format{EventBridge}, replace(ebEvent, `["arn:aws:billing::210987654321:invoice/inv-9"]`, `[1]`), EventBridge, "resources[0] is a number"},
		{"EventBridge bad time", []Format{Auto}, replace(ebEvent, `2026-03-14T10:15:30Z`, `10:15`), EventBridge, `time "10:15" is not an RFC 3339 time`},
		{"S3 without bucket", []Format{Auto}, replace(s3Put, `"bucket":{"name":"incoming-scans",`, `"bucket":{`), S3Events, "Records[0] names no bucket and key"},
		{"S3 bad key encoding", []Format{S3Events}, replace(s3Put, `2026/red+flower%2Bleaf.jpg`, `100%`), S3Events, `s3.object.key "100%" is not URL-encoded`},
		{"S3 wrong source", []Format{S3Events}, replace(s3Put, `"aws:s3"`, `"aws:sqs"`), S3Events, `eventSource is "aws:sqs"`},
		{"S3 no records", []Format{S3Events}, `{"Records":[]}`, S3Events, "no Records"},
		{"S3 declared, plain JSON", []Format{S3Events}, `{"id":1}`, S3Events, `no "Records" field`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := call(t, tt.layers, msg(tt.body))
			require.Nil(t, got, "the handler must not be called")
			requireMalformed(t, err, tt.format, tt.reason)
		})
	}
}

// Auto hands every body that does not claim to be an envelope on as it
// is, however much it looks like one.
func TestAutoLeavesPlainBodiesAlone(t *testing.T) {
	t.Parallel()
	bodies := []string{
		"",
		"hello",
		"{not json",
		`[1,2,3]`,
		`"a string"`,
		`{}`,
		`{"order_id":"o-1","amount_cents":100}`,
		// SNS-like, each missing one of the four members.
		`{"Type":"Notification","MessageId":"m","TopicArn":"arn:aws:sns:r:1:t","Message":"x"}`,
		`{"Type":"Notification","TopicArn":"arn:aws:sns:r:1:t","Message":"x","Timestamp":"2026-01-01T00:00:00Z"}`,
		`{"Type":"Notification","MessageId":"m","Message":"x","Timestamp":"2026-01-01T00:00:00Z"}`,
		`{"MessageId":"m","TopicArn":"arn:aws:sns:r:1:t","Message":"x","Timestamp":"2026-01-01T00:00:00Z"}`,
		// EventBridge-like, without account and region.
		`{"version":"0","id":"1","detail-type":"t","source":"s","time":"2026-01-01T00:00:00Z","resources":[],"detail":{}}`,
		`{"detail-type":"t","source":"s","detail":{}}`,
		// S3-like.
		`{"Records":[{"eventSource":"aws:kinesis","s3":{}}]}`,
		`{"Records":[{"eventSource":"aws:s3"}],"more":1}`,
		`{"Records":[]}`,
		`{"Records":"aws:s3"}`,
		`{"Service":"Amazon S3","Event":"s3:ObjectCreated"}`,
		`{"Service":"Amazon SQS","Event":"s3:TestEvent"}`,
	}
	for _, b := range bodies {
		got, env, err := call(t, []Format{Auto}, msg(b))
		require.NoError(t, err, "body %q", b)
		require.Equal(t, b, got.Body, "body %q", b)
		require.Empty(t, env.Layers, "body %q", b)
		require.Nil(t, got.MessageAttributes)
	}
}

func TestUnwrapOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		layers []Format
		want   string
	}{
		{nil, "no format given"},
		{[]Format{Auto, SNS}, "Auto must be given alone"},
		{[]Format{S3Events, SNS}, "S3 events can only be the innermost layer"},
		{[]Format{EventBridge, S3Events}, "EventBridge can only be the innermost layer"},
		{[]Format{SNS, SNS}, "SNS can only be the outermost layer"},
		{[]Format{SNS, SNSRaw}, "SNS raw can only be the outermost layer"},
		{[]Format{Format(0)}, "unknown format Format(0) at position 0"},
		{[]Format{SNS, Format(42)}, "unknown format Format(42) at position 1"},
	} {
		mw, err := Unwrap(tt.layers...)
		require.Nil(t, mw)
		require.ErrorIs(t, err, sqsconsumer.ErrInvalidOption)
		require.ErrorContains(t, err, tt.want)
	}
}

// The handler's error comes back as it is, and Unwrap passes a nil
// message on for the handler to judge.
func TestUnwrapPassesHandlerErrors(t *testing.T) {
	t.Parallel()
	mw, err := Unwrap(SNS)
	require.NoError(t, err)
	boom := errors.New("boom")
	err = mw(sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error { return boom })).
		HandleMessage(context.Background(), msg(snsFIFO))
	require.Same(t, boom, err)
	require.False(t, sqsconsumer.IsPermanent(err))
	require.Nil(t, FromContext(context.Background()))
}
