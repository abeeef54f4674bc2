package s3payload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
)

func TestSenderThreshold(t *testing.T) {
	t.Parallel()
	s := newMemS3()
	sender, err := NewSender(s, "payloads", WithThreshold(20))
	require.NoError(t, err)
	ctx := context.Background()
	attrs := map[string]types.MessageAttributeValue{"ab": {DataType: aws.String("String"), StringValue: aws.String("cd")}}

	// 12 bytes of body + 2 + 6 + 2 of attribute = 22 > 20: offloaded, as
	// the Java client counts.
	body, out, err := sender.Prepare(ctx, "0123456789ab", attrs)
	require.NoError(t, err)
	p, err := ParsePointer(body)
	require.NoError(t, err)
	require.Equal(t, "payloads", p.Bucket)
	require.Equal(t, "0123456789ab", s.objects[p])
	require.Equal(t, "12", *out[LegacySizeAttribute].StringValue, "the Java client's default name")
	require.Equal(t, "Number", *out[LegacySizeAttribute].DataType)
	require.Equal(t, "cd", *out["ab"].StringValue)
	require.Len(t, attrs, 1, "the caller's map is untouched")

	// 10 + 10 = 20: not over the threshold, sent as it is.
	body, out, err = sender.Prepare(ctx, "0123456789", attrs)
	require.NoError(t, err)
	require.Equal(t, "0123456789", body)
	require.Equal(t, attrs, out)
	require.Len(t, s.objects, 1)

	// UTF-8 bytes, not characters.
	body, out, err = sender.Prepare(ctx, strings.Repeat("é", 11), nil)
	require.NoError(t, err)
	require.Equal(t, "22", *out[LegacySizeAttribute].StringValue)
	_, err = ParsePointer(body)
	require.NoError(t, err)
}

func TestSenderOptionsAndErrors(t *testing.T) {
	t.Parallel()
	s := newMemS3()
	ctx := context.Background()
	sender, err := NewSender(s, "payloads", WithAlwaysOffload(), WithSizeAttribute(SizeAttribute), WithKeyPrefix("team-a/large_payloads.v1/"))
	require.NoError(t, err)
	body, out, err := sender.Prepare(ctx, "x", nil)
	require.NoError(t, err)
	p, _ := ParsePointer(body)
	require.True(t, strings.HasPrefix(p.Key, "team-a/large_payloads.v1/"), p.Key)
	require.Len(t, p.Key, len("team-a/large_payloads.v1/")+36)
	require.Equal(t, "1", *out[SizeAttribute].StringValue)
	_, legacy := out[LegacySizeAttribute]
	require.False(t, legacy)

	_, _, err = sender.Prepare(ctx, "", nil)
	require.ErrorContains(t, err, "an empty body cannot be offloaded")
	_, _, err = sender.Prepare(ctx, "x", map[string]types.MessageAttributeValue{LegacySizeAttribute: numberAttr("1")})
	require.ErrorContains(t, err, "message attribute SQSLargePayloadSize is reserved")
	ten := map[string]types.MessageAttributeValue{}
	for i := range 10 {
		ten[fmt.Sprint("a", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	_, _, err = sender.Prepare(ctx, "x", ten)
	require.ErrorContains(t, err, "at most 9 attributes, this one has 10")

	failing, err := NewSender(putFails{}, "payloads", WithAlwaysOffload())
	require.NoError(t, err)
	_, _, err = failing.Prepare(ctx, "x", nil)
	require.ErrorContains(t, err, "storing the payload in s3://payloads/")
	require.ErrorContains(t, err, "slow down")

	for _, tt := range []struct {
		client PutClient
		bucket string
		opts   []SenderOption
		want   string
	}{
		{nil, "payloads", nil, "client is nil"},
		{s, "ab", nil, `bucket name "ab": want 3 to 63 characters`},
		{s, "Payloads", nil, "use lower-case letters"},
		{s, "-payloads", nil, "starting and ending with a letter or digit"},
		{s, "payloads", []SenderOption{WithThreshold(0)}, "WithThreshold(0): want 1 to 1048576 bytes"},
		{s, "payloads", []SenderOption{WithThreshold(MaxThreshold + 1)}, "WithThreshold(1048577)"},
		{s, "payloads", []SenderOption{WithKeyPrefix("/abs")}, "must not start with '.' or '/'"},
		{s, "payloads", []SenderOption{WithKeyPrefix("a/../b")}, `must not contain ".."`},
		{s, "payloads", []SenderOption{WithKeyPrefix("a b")}, `' ' is not allowed`},
		{s, "payloads", []SenderOption{WithKeyPrefix(strings.Repeat("a", 989))}, "the prefix has 989 bytes, want at most 988"},
		{s, "payloads", []SenderOption{WithSizeAttribute("Size")}, `WithSizeAttribute("Size")`},
		{s, "payloads", []SenderOption{nil}, "nil option"},
	} {
		snd, err := NewSender(tt.client, tt.bucket, tt.opts...)
		require.Nil(t, snd)
		require.ErrorIs(t, err, sqsconsumer.ErrInvalidOption)
		require.ErrorContains(t, err, tt.want)
	}
}

type putFails struct{}

func (putFails) PutObject(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	return nil, errors.New("slow down")
}

func TestUUID(t *testing.T) {
	t.Parallel()
	a, b := uuid(), uuid()
	require.NotEqual(t, a, b)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, a)
}
