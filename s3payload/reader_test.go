package s3payload

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/payload"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// memS3 is an in-memory S3 for the tests that run in a synctest bubble
// (no sockets there); the end-to-end test uses gofakes3 over HTTP.
type memS3 struct {
	mu      sync.Mutex
	objects map[Pointer]string
	gets    int
	deletes []Pointer
	getErr  error // returned by every GetObject when set
}

func newMemS3() *memS3 { return &memS3{objects: map[Pointer]string{}} }

func (s *memS3) GetObject(ctx context.Context, in *s3.GetObjectInput, _ ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	if s.getErr != nil {
		return nil, s.getErr
	}
	body, ok := s.objects[Pointer{*in.Bucket, *in.Key}]
	if !ok {
		return nil, &s3types.NoSuchKey{Message: aws.String("The specified key does not exist.")}
	}
	return &s3.GetObjectOutput{Body: io.NopCloser(strings.NewReader(body))}, nil
}

func (s *memS3) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, _ ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := Pointer{*in.Bucket, *in.Key}
	s.deletes = append(s.deletes, p)
	delete(s.objects, p)
	return &s3.DeleteObjectOutput{}, nil
}

func (s *memS3) PutObject(ctx context.Context, in *s3.PutObjectInput, _ ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	b, err := io.ReadAll(in.Body)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[Pointer{*in.Bucket, *in.Key}] = string(b)
	return &s3.PutObjectOutput{}, nil
}

func (s *memS3) has(p Pointer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.objects[p]
	return ok
}

func numberAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(v)}
}

// run calls the Reader's middleware on m and returns what the handler saw.
func run(t *testing.T, r *Reader, m *sqsconsumer.Message) (*sqsconsumer.Message, *Offloaded, error) {
	t.Helper()
	var got *sqsconsumer.Message
	var off *Offloaded
	err := r.Middleware()(sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		got, off = m, FromContext(ctx)
		return nil
	})).HandleMessage(context.Background(), m)
	return got, off, err
}

func TestReaderFetches(t *testing.T) {
	t.Parallel()
	s := newMemS3()
	p := Pointer{"payloads", "k1"}
	s.objects[p] = "the payload"
	r, err := NewReader(s, WithBuckets("payloads"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close(context.Background())) })
	for _, attr := range []string{SizeAttribute, LegacySizeAttribute} {
		m := &sqsconsumer.Message{ID: "m1", Body: p.String(), MessageAttributes: map[string]types.MessageAttributeValue{
			attr: numberAttr("11"), "tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")},
		}}
		got, off, err := run(t, r, m)
		require.NoError(t, err)
		require.Equal(t, "the payload", got.Body)
		require.Equal(t, "m1", got.ID)
		require.Equal(t, []string{"tenant"}, keys(got.MessageAttributes), "the size attribute is removed")
		require.Len(t, m.MessageAttributes, 2, "the original is untouched")
		require.Equal(t, &Offloaded{Pointer: p, Size: 11, Original: m}, off)
	}
	// A message without the attribute passes through, even with a
	// pointer body, and costs no S3 call.
	m := &sqsconsumer.Message{ID: "m2", Body: p.String()}
	got, off, err := run(t, r, m)
	require.NoError(t, err)
	require.Same(t, m, got)
	require.Nil(t, off)
	require.Equal(t, 2, s.gets)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestReaderFailures(t *testing.T) {
	t.Parallel()
	s := newMemS3()
	s.objects[Pointer{"payloads", "big"}] = strings.Repeat("x", 101)
	s.objects[Pointer{"secrets", "k"}] = "not yours"
	tests := []struct {
		name      string
		body      string
		size      string
		getErr    error
		permanent bool
		reason    string
		gets      int
	}{
		{"other bucket", Pointer{"secrets", "k"}.String(), "9", nil, true, `bucket "secrets" is not among the allowed buckets`, 0},
		{"missing object", Pointer{"payloads", "gone"}.String(), "5", nil, true, "the object does not exist", 1},
		{"declared too large", Pointer{"payloads", "big"}.String(), "101", nil, true, "the payload has 101 bytes (ExtendedPayloadSize), over the limit of 100", 0},
		{"object too large", Pointer{"payloads", "big"}.String(), "50", nil, true, "the object is larger than the limit of 100 bytes", 1},
		{"not a pointer", `{"order":1}`, "5", nil, true, "its body is not a pointer", 0},
		{"bad size", Pointer{"payloads", "big"}.String(), "many", nil, true, `the ExtendedPayloadSize attribute is "many"`, 0},
		{"negative size", Pointer{"payloads", "big"}.String(), "-1", nil, true, `the ExtendedPayloadSize attribute is "-1"`, 0},
		{"network", Pointer{"payloads", "big"}.String(), "5", errors.New("connection reset"), false, "GetObject failed; the message will be retried", 1},
		{"access denied", Pointer{"payloads", "big"}.String(), "5", &smithy.GenericAPIError{Code: "AccessDenied", Message: "Access Denied"}, false, "GetObject failed", 1},
		{"no such bucket", Pointer{"payloads", "big"}.String(), "5", &smithy.GenericAPIError{Code: "NoSuchBucket"}, true, "the bucket does not exist", 1},
		{"archived", Pointer{"payloads", "big"}.String(), "5", &s3types.InvalidObjectState{}, true, "the object is archived", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.mu.Lock()
			s.gets, s.getErr = 0, tt.getErr
			s.mu.Unlock()
			r, err := NewReader(s, WithBuckets("payloads"), WithMaxSize(100))
			require.NoError(t, err)
			m := &sqsconsumer.Message{ID: "m", Body: tt.body, MessageAttributes: map[string]types.MessageAttributeValue{SizeAttribute: numberAttr(tt.size)}}
			got, _, err := run(t, r, m)
			require.Nil(t, got, "the handler must not be called")
			var fe *FetchError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.permanent, sqsconsumer.IsPermanent(err), "%v", err)
			require.Contains(t, fe.Reason, tt.reason)
			require.Equal(t, tt.gets, s.gets)
			if tt.getErr != nil {
				require.ErrorIs(t, err, tt.getErr)
			}
			require.NoError(t, r.Close(context.Background()))
		})
	}
}

func TestReaderOptions(t *testing.T) {
	t.Parallel()
	s := newMemS3()
	for _, tt := range []struct {
		client Client
		opts   []ReaderOption
		want   string
	}{
		{nil, []ReaderOption{WithBuckets("b")}, "client is nil"},
		{(*memS3)(nil), []ReaderOption{WithBuckets("b")}, "client is nil"},
		{s, nil, "no bucket allowed"},
		{s, []ReaderOption{WithBuckets("")}, "empty bucket name"},
		{s, []ReaderOption{WithBuckets("b"), WithMaxSize(0)}, "WithMaxSize(0): want 1 to 2147483648 bytes"},
		{s, []ReaderOption{WithBuckets("b"), WithMaxSize(MaxMaxSize + 1)}, "WithMaxSize(2147483649)"},
		{s, []ReaderOption{WithBuckets("b"), WithLogger(nil)}, "WithLogger: logger is nil"},
		{s, []ReaderOption{WithBuckets("b"), nil}, "nil option"},
	} {
		r, err := NewReader(tt.client, tt.opts...)
		require.Nil(t, r)
		require.ErrorIs(t, err, sqsconsumer.ErrInvalidOption)
		require.ErrorContains(t, err, tt.want)
	}
}

// With WithDeleteAfterDelete, an object is deleted only after SQS
// confirmed its message's deletion: not when the handler failed, and not
// when the delete was refused (the message comes back, and needs its
// object). Runs in a bubble against sqstest and an in-memory S3.
func TestReaderDeletesAfterSQSDelete(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("big", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		s := newMemS3()
		sender, err := NewSender(s, "payloads", WithAlwaysOffload(), WithSizeAttribute(SizeAttribute))
		require.NoError(t, err)
		send := func(body string) (string, Pointer) {
			out, err := sender.SendMessage(t.Context(), srv.Client(), &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &body})
			require.NoError(t, err)
			st, _ := srv.Message(url, *out.MessageId)
			p, err := ParsePointer(st.Body)
			require.NoError(t, err)
			return *out.MessageId, p
		}
		okID, okPtr := send("ok")
		failID, failPtr := send("fail")
		refusedID, refusedPtr := send("refused")

		r, err := NewReader(s, WithBuckets("payloads"), WithDeleteAfterDelete())
		require.NoError(t, err)
		var mu sync.Mutex
		seen := map[string]string{}
		h := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
			mu.Lock()
			seen[m.ID] = m.Body
			mu.Unlock()
			if m.Body == "fail" {
				return errors.New("not today")
			}
			return nil
		})
		// The delete of "refused" is refused once, as SQS does for a stale
		// receipt handle.
		srv.FailNextEntries("DeleteMessageBatch", 1, sqstest.FaultReceiptHandleIsInvalid)
		ctx, stop := context.WithCancel(context.Background())
		c, err := sqsconsumer.New(srv.Client(), url, h, sqsconsumer.WithMiddleware(r.Middleware()), sqsconsumer.WithObserver(r),
			sqsconsumer.WithBatchSize(1), sqsconsumer.WithConcurrency(1))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(3 * time.Second) // virtual: all three handled once, short of any redelivery
		stop()
		require.NoError(t, <-done)
		require.NoError(t, r.Close(context.Background()))

		require.Equal(t, map[string]string{okID: "ok", failID: "fail", refusedID: "refused"}, seen)
		deleted := map[string]bool{}
		for _, st := range srv.Messages(url) {
			deleted[st.ID] = st.Deleted
		}
		// Which of ok and refused met the refused delete depends on the
		// order of receipt; the other was deleted.
		var gone, kept Pointer
		switch {
		case deleted[okID] && !deleted[refusedID]:
			gone, kept = okPtr, refusedPtr
		case deleted[refusedID] && !deleted[okID]:
			gone, kept = refusedPtr, okPtr
		default:
			t.Fatalf("want exactly one of the two successes deleted, got %v", deleted)
		}
		require.False(t, s.has(gone), "deleted after its message")
		require.True(t, s.has(kept), "its message's delete was refused: it comes back and needs the object")
		require.True(t, s.has(failPtr), "its handler failed")
		require.Equal(t, []Pointer{gone}, s.deletes)
		require.False(t, deleted[failID])
	})
}

// Without WithDeleteAfterDelete nothing is ever deleted: other consumers
// of a fan-out may share the object.
func TestReaderKeepsObjectsByDefault(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("big", nil)
		require.NoError(t, err)
		s := newMemS3()
		sender, err := NewSender(s, "payloads", WithAlwaysOffload())
		require.NoError(t, err)
		body := "payload"
		out, err := sender.SendMessage(t.Context(), srv.Client(), &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &body})
		require.NoError(t, err)
		r, err := NewReader(s, WithBuckets("payloads"))
		require.NoError(t, err)
		ctx, stop := context.WithCancel(context.Background())
		c, err := sqsconsumer.New(srv.Client(), url, sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil }),
			sqsconsumer.WithMiddleware(r.Middleware()), sqsconsumer.WithObserver(r))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(time.Second)
		stop()
		require.NoError(t, <-done)
		require.NoError(t, r.Close(context.Background()))
		st, _ := srv.Message(url, *out.MessageId)
		require.True(t, st.Deleted)
		require.Len(t, s.objects, 1)
		require.Empty(t, s.deletes)
	})
}

// A message an SNS extended client published, delivered without raw
// delivery: the pointer is the envelope's Message and the size attribute
// one of its attributes. Unwrap (outer) then the Reader (inner) give the
// handler the payload.
func TestReaderAfterSNSUnwrap(t *testing.T) {
	t.Parallel()
	s := newMemS3()
	p := Pointer{"payloads", "sns-1"}
	s.objects[p] = `{"big":"yes"}`
	r, err := NewReader(s, WithBuckets("payloads"))
	require.NoError(t, err)
	unwrap, err := payload.Unwrap(payload.SNS)
	require.NoError(t, err)
	env, err := json.Marshal(map[string]any{
		"Type": "Notification", "MessageId": "4f3e2d1c-0000-4000-8000-000000000002", "TopicArn": "arn:aws:sns:us-east-1:210987654321:big",
		"Message": p.String(), "Timestamp": "2026-03-14T12:00:00.000Z",
		"MessageAttributes": map[string]any{SizeAttribute: map[string]string{"Type": "Number", "Value": "13"}},
	})
	require.NoError(t, err)
	var got string
	var topic string
	h := sqsconsumer.Chain(sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		got, topic = m.Body, payload.FromContext(ctx).SNS.TopicARN
		require.NotContains(t, m.MessageAttributes, SizeAttribute)
		return nil
	}), unwrap, r.Middleware())
	require.NoError(t, h.HandleMessage(context.Background(), &sqsconsumer.Message{ID: "m", Body: string(env)}))
	require.Equal(t, `{"big":"yes"}`, got)
	require.Equal(t, "arn:aws:sns:us-east-1:210987654321:big", topic)
	require.NoError(t, r.Close(context.Background()))
}
