package s3payload

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// realS3 starts gofakes3, an S3 implementation we did not write, in
// process on a loopback listener, and returns an SDK client for it with
// the buckets made. The S3 half of the end-to-end test needs a socket, so
// that test runs outside a synctest bubble, in real time, and waits on
// events with a bound instead of sleeping.
func realS3(t *testing.T, buckets ...string) *s3.Client {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	transport := &http.Transport{}
	t.Cleanup(func() {
		transport.CloseIdleConnections()
		srv.Close()
	})
	client := s3.New(s3.Options{
		Region:                     "us-east-1",
		BaseEndpoint:               aws.String(srv.URL),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider("local", "local", ""),
		HTTPClient:                 &http.Client{Transport: transport, Timeout: 10 * time.Second},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	for _, b := range buckets {
		_, err := client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(b)})
		require.NoError(t, err)
	}
	return client
}

// countingS3 counts GetObject calls and reports each finished
// DeleteObject.
type countingS3 struct {
	*s3.Client
	gets    atomic.Int64
	deleted chan Pointer
}

func (c *countingS3) GetObject(ctx context.Context, in *s3.GetObjectInput, o ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	c.gets.Add(1)
	return c.Client.GetObject(ctx, in, o...)
}

func (c *countingS3) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, o ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	out, err := c.Client.DeleteObject(ctx, in, o...)
	c.deleted <- Pointer{*in.Bucket, *in.Key}
	return out, err
}

func getObject(t *testing.T, c *s3.Client, p Pointer) (string, error) {
	t.Helper()
	out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &p.Bucket, Key: &p.Key})
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	require.NoError(t, err)
	return string(b), nil
}

// events collects a Consumer's settled messages.
type events struct {
	mu      sync.Mutex
	deleted map[string]bool
	failed  map[string]error
	changed chan struct{}
}

func (e *events) Observe(ev sqsconsumer.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch ev.Kind {
	case sqsconsumer.EventDeleted:
		e.deleted[ev.MessageID] = true
	case sqsconsumer.EventFailed:
		e.failed[ev.MessageID] = ev.Err
	default:
		return
	}
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds, re-checking at each event, for at most
// 20 s of real time.
func (e *events) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		e.mu.Lock()
		ok := cond()
		e.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-e.changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// The whole path against a real S3 implementation: a Go producer offloads
// with Sender, a "Java producer" message is written by hand in the Java
// client's format, and a Consumer on sqstest reads both through the
// Reader; the objects are deleted after their messages. A pointer to a
// bucket outside the allow-list, a missing object and an oversized
// payload fail permanently, are not deleted, and the first and last cost
// no S3 call.
func TestEndToEndWithRealS3(t *testing.T) {
	t.Parallel()
	s3c := realS3(t, "payloads", "other-team")
	counting := &countingS3{Client: s3c, deleted: make(chan Pointer, 16)}
	srv := sqstest.New(t)
	sqsc := srv.Client()
	url, err := srv.CreateQueue("jobs", map[string]string{"VisibilityTimeout": "30"})
	require.NoError(t, err)
	ctx := context.Background()

	// A Go producer: bodies over 1 KB go to S3.
	sender, err := NewSender(s3c, "payloads", WithThreshold(1024), WithKeyPrefix("big/"))
	require.NoError(t, err)
	large := `{"rows":"` + strings.Repeat("0123456789", 300) + `"}`
	outLarge, err := sender.SendMessage(ctx, sqsc, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &large,
		MessageAttributes: map[string]types.MessageAttributeValue{"kind": {DataType: aws.String("String"), StringValue: aws.String("report")}}})
	require.NoError(t, err)
	small := `{"rows":"few"}`
	outSmall, err := sender.SendMessage(ctx, sqsc, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &small})
	require.NoError(t, err)

	// What reached the queue is what the Java client would have sent.
	st, ok := srv.Message(url, *outLarge.MessageId)
	require.True(t, ok)
	require.Regexp(t, regexp.MustCompile(`^\["software\.amazon\.payloadoffloading\.PayloadS3Pointer",\{"s3BucketName":"payloads","s3Key":"big/[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"\}\]$`), st.Body)
	largePtr, err := ParsePointer(st.Body)
	require.NoError(t, err)
	stored, err := getObject(t, s3c, largePtr)
	require.NoError(t, err)
	require.Equal(t, large, stored)
	smallSt, _ := srv.Message(url, *outSmall.MessageId)
	require.Equal(t, small, smallSt.Body)

	// A Java producer (old class name, new attribute name), by hand.
	javaPtr := Pointer{"payloads", "7d4f1c2a-9b8e-4d3c-a1f0-6e5d4c3b2a19"}
	_, err = s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: &javaPtr.Bucket, Key: &javaPtr.Key, Body: strings.NewReader("from java: héllo")})
	require.NoError(t, err)
	legacyBody := strings.Replace(javaPtr.String(), PointerClass, LegacyPointerClass, 1)
	send := func(body, attr, size string) string {
		out, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &body,
			MessageAttributes: map[string]types.MessageAttributeValue{attr: numberAttr(size)}})
		require.NoError(t, err)
		return *out.MessageId
	}
	javaID := send(legacyBody, SizeAttribute, "17")

	// Bad ones.
	_, err = s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("other-team"), Key: aws.String("k"), Body: strings.NewReader("private")})
	require.NoError(t, err)
	otherID := send(Pointer{"other-team", "k"}.String(), LegacySizeAttribute, "7")
	missingID := send(Pointer{"payloads", "never-written"}.String(), LegacySizeAttribute, "7")
	hugeID := send(Pointer{"payloads", "huge"}.String(), LegacySizeAttribute, "10000000")

	reader, err := NewReader(counting, WithBuckets("payloads"), WithMaxSize(1<<20), WithDeleteAfterDelete())
	require.NoError(t, err)
	var mu sync.Mutex
	bodies := map[string]string{}
	kinds := map[string]string{}
	h := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		bodies[m.ID] = m.Body
		if a, ok := m.MessageAttributes["kind"]; ok {
			kinds[m.ID] = *a.StringValue
		}
		if _, ok := m.MessageAttributes[LegacySizeAttribute]; ok {
			return errors.New("the size attribute reached the handler")
		}
		return nil
	})
	ev := &events{deleted: map[string]bool{}, failed: map[string]error{}, changed: make(chan struct{}, 1)}
	runCtx, stop := context.WithCancel(ctx)
	c, err := sqsconsumer.New(sqsc, url, h,
		sqsconsumer.WithMiddleware(reader.Middleware()),
		sqsconsumer.WithObserver(sqsconsumer.Observers(reader, ev)),
		sqsconsumer.WithWaitTime(time.Second), sqsconsumer.WithShutdownTimeout(5*time.Second))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	ev.waitFor(t, "three deletes and three failures", func() bool { return len(ev.deleted) == 3 && len(ev.failed) == 3 })
	stop()
	require.NoError(t, <-done)

	// Both offloaded objects are deleted after their messages; the
	// Reader's goroutine finishes with Close.
	got := map[Pointer]bool{}
	for range 2 {
		select {
		case p := <-counting.deleted:
			got[p] = true
		case <-time.After(20 * time.Second):
			t.Fatal("timed out waiting for the object deletions")
		}
	}
	require.NoError(t, reader.Close(ctx))
	require.Equal(t, map[Pointer]bool{largePtr: true, javaPtr: true}, got)
	for _, p := range []Pointer{largePtr, javaPtr} {
		_, err := getObject(t, s3c, p)
		require.Error(t, err, "s3://%s/%s should be gone", p.Bucket, p.Key)
	}
	v, err := getObject(t, s3c, Pointer{"other-team", "k"})
	require.NoError(t, err)
	require.Equal(t, "private", v)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]string{*outLarge.MessageId: large, *outSmall.MessageId: small, javaID: "from java: héllo"}, bodies)
	require.Equal(t, map[string]string{*outLarge.MessageId: "report"}, kinds)
	for id, want := range map[string]string{
		otherID:   `bucket "other-team" is not among the allowed buckets`,
		missingID: "the object does not exist",
		hugeID:    "the payload has 10000000 bytes (SQSLargePayloadSize), over the limit of 1048576",
	} {
		err := ev.failed[id]
		require.True(t, sqsconsumer.IsPermanent(err), "%v", err)
		require.ErrorContains(t, err, want)
		st, _ := srv.Message(url, id)
		require.False(t, st.Deleted, "a message whose payload cannot be read is never deleted")
	}
	// GetObject for the large, the Java and the missing one only.
	require.Equal(t, int64(3), counting.gets.Load())
}
