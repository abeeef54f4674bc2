package sqstest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is what most tests need: a server, an SDK client wired to it, a context.
type bundle struct {
	srv *sqstest.Server
	c   *sqs.Client
	ctx context.Context
}

// setup must be called inside the synctest bubble that runs the test.
func setup(t *testing.T) bundle {
	t.Helper()
	srv := sqstest.New(t)
	return bundle{srv: srv, c: srv.Client(), ctx: t.Context()}
}

// queue creates a queue through the SDK and returns its URL.
func (b bundle) queue(t *testing.T, name string, attrs map[string]string) string {
	t.Helper()
	out, err := b.c.CreateQueue(b.ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(t, err)
	return *out.QueueUrl
}

func (b bundle) send(t *testing.T, url, body string, mod ...func(*sqs.SendMessageInput)) *sqs.SendMessageOutput {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}
	for _, f := range mod {
		f(in)
	}
	out, err := b.c.SendMessage(b.ctx, in)
	require.NoError(t, err)
	return out
}

func (b bundle) receive(t *testing.T, url string, mod ...func(*sqs.ReceiveMessageInput)) []types.Message {
	t.Helper()
	in := &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10}
	for _, f := range mod {
		f(in)
	}
	out, err := b.c.ReceiveMessage(b.ctx, in)
	require.NoError(t, err)
	return out.Messages
}

func (b bundle) changeVisibility(url, handle string, seconds int32) error {
	_, err := b.c.ChangeMessageVisibility(b.ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: aws.String(handle), VisibilityTimeout: seconds})
	return err
}

func (b bundle) deleteMessage(url, handle string) error {
	_, err := b.c.DeleteMessage(b.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String(handle)})
	return err
}

// apiError asserts err is an SDK API error and returns its code and message.
func apiError(t *testing.T, err error) (code, msg string) {
	t.Helper()
	require.Error(t, err)
	var ae smithy.APIError
	require.True(t, errors.As(err, &ae), "want a smithy.APIError, got %T: %v", err, err)
	return ae.ErrorCode(), ae.ErrorMessage()
}

func requireAPIError(t *testing.T, err error, wantCode, wantMsg string) {
	t.Helper()
	code, msg := apiError(t, err)
	require.Equal(t, wantCode, code, "error code (err: %v)", err)
	if wantMsg != "" {
		require.Equal(t, wantMsg, msg, "error message")
	}
}

func withWait(s int32) func(*sqs.ReceiveMessageInput) {
	return func(in *sqs.ReceiveMessageInput) { in.WaitTimeSeconds = s }
}

func withMax(n int32) func(*sqs.ReceiveMessageInput) {
	return func(in *sqs.ReceiveMessageInput) { in.MaxNumberOfMessages = n }
}

func withVisibility(s int32) func(*sqs.ReceiveMessageInput) {
	return func(in *sqs.ReceiveMessageInput) { in.VisibilityTimeout = s }
}

func withAllAttributes(in *sqs.ReceiveMessageInput) {
	in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}
	in.MessageAttributeNames = []string{"All"}
}

func withGroup(g string) func(*sqs.SendMessageInput) {
	return func(in *sqs.SendMessageInput) { in.MessageGroupId = aws.String(g) }
}

func withDedup(d string) func(*sqs.SendMessageInput) {
	return func(in *sqs.SendMessageInput) { in.MessageDeduplicationId = aws.String(d) }
}

func bodies(ms []types.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = *m.Body
	}
	return out
}
