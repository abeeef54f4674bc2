package s3payload

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer"
)

// PutClient is the part of the S3 API a Sender uses; *s3.Client satisfies it.
type PutClient interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

// SendClient is the SQS call Sender.SendMessage makes; *sqs.Client
// satisfies it.
type SendClient interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Threshold limits.
const (
	// DefaultThreshold is the size above which Sender offloads a message:
	// 256 KiB, the Java and Python clients' default. The size counts the
	// body and the message attributes as those clients do (see Prepare).
	DefaultThreshold = 262144
	// MaxThreshold is the largest threshold: SQS's 1 MiB message limit.
	MaxThreshold = 1048576
	// maxKeyPrefix is the longest key prefix: S3's 1,024-byte key limit
	// less the 36 characters of the UUID (the Java client's limit).
	maxKeyPrefix = 1024 - 36
	// maxAttributes is how many attributes an offloaded message may bring:
	// SQS allows 10 and the size attribute takes one.
	maxAttributes = 9
)

// SenderOption configures NewSender.
type SenderOption func(*senderConfig) error

type senderConfig struct {
	threshold int
	always    bool
	prefix    string
	attribute string
}

// WithThreshold offloads messages larger than n bytes (default
// DefaultThreshold; 1 to MaxThreshold).
func WithThreshold(n int) SenderOption {
	return func(c *senderConfig) error {
		if n < 1 || n > MaxThreshold {
			return fmt.Errorf("WithThreshold(%d): want 1 to %d bytes", n, MaxThreshold)
		}
		c.threshold = n
		return nil
	}
}

// WithAlwaysOffload offloads every message, whatever its size (the Java
// client's alwaysThroughS3).
func WithAlwaysOffload() SenderOption {
	return func(c *senderConfig) error { c.always = true; return nil }
}

// WithKeyPrefix puts offloaded objects under prefix (e.g. "payloads/"):
// the key is prefix followed by a random UUID. The rules are the Java
// client's: at most 988 bytes of letters, digits, '.', '/', '_' and '-',
// not starting with '.' or '/', without "..".
func WithKeyPrefix(prefix string) SenderOption {
	return func(c *senderConfig) error {
		switch {
		case len(prefix) > maxKeyPrefix:
			return fmt.Errorf("WithKeyPrefix: the prefix has %d bytes, want at most %d", len(prefix), maxKeyPrefix)
		case strings.HasPrefix(prefix, ".") || strings.HasPrefix(prefix, "/"):
			return fmt.Errorf("WithKeyPrefix(%q): must not start with '.' or '/'", prefix)
		case strings.Contains(prefix, ".."):
			return fmt.Errorf("WithKeyPrefix(%q): must not contain \"..\"", prefix)
		}
		for _, r := range prefix {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("./_-", r)) {
				return fmt.Errorf("WithKeyPrefix(%q): %q is not allowed; use letters, digits, '.', '/', '_' and '-'", prefix, r)
			}
		}
		c.prefix = prefix
		return nil
	}
}

// WithSizeAttribute names the size attribute Sender writes: LegacySizeAttribute
// (the default, as the Java client writes by default) or SizeAttribute (as
// the Python client writes by default). Both clients, and Reader, read
// either.
func WithSizeAttribute(name string) SenderOption {
	return func(c *senderConfig) error {
		if name != SizeAttribute && name != LegacySizeAttribute {
			return fmt.Errorf("WithSizeAttribute(%q): want %q or %q", name, LegacySizeAttribute, SizeAttribute)
		}
		c.attribute = name
		return nil
	}
}

// Sender offloads large message bodies to S3 in the extended clients'
// format, so that Java and Python consumers (and Reader) read them. It is
// safe for concurrent use.
type Sender struct {
	client PutClient
	bucket string
	cfg    senderConfig
}

// NewSender returns a Sender that stores payloads in bucket with client.
// Errors wrap sqsconsumer.ErrInvalidOption.
func NewSender(client PutClient, bucket string, opts ...SenderOption) (*Sender, error) {
	if client == nil || isNil(client) {
		return nil, fmt.Errorf("%w: s3payload.NewSender: client is nil", sqsconsumer.ErrInvalidOption)
	}
	if err := checkBucketName(bucket); err != nil {
		return nil, fmt.Errorf("%w: s3payload.NewSender: %v", sqsconsumer.ErrInvalidOption, err)
	}
	cfg := senderConfig{threshold: DefaultThreshold, attribute: LegacySizeAttribute}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: s3payload.NewSender: nil option", sqsconsumer.ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("%w: s3payload.NewSender: %v", sqsconsumer.ErrInvalidOption, err)
		}
	}
	return &Sender{client: client, bucket: bucket, cfg: cfg}, nil
}

// checkBucketName applies S3's naming rules for general purpose buckets
// (3 to 63 characters of lower-case letters, digits, '.' and '-', starting
// and ending with a letter or digit).
func checkBucketName(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q: want 3 to 63 characters", b)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && c != '.' && c != '-' || (!alnum && (i == 0 || i == len(b)-1)) {
			return fmt.Errorf("bucket name %q: use lower-case letters, digits, '.' and '-', starting and ending with a letter or digit", b)
		}
	}
	return nil
}

// messageSize is the size the extended clients compare with the
// threshold: the body's bytes plus, for each attribute, its name, its data
// type and its string or binary value.
func messageSize(body string, attrs map[string]types.MessageAttributeValue) int {
	n := len(body)
	for k, v := range attrs {
		n += len(k)
		if v.DataType != nil {
			n += len(*v.DataType)
		}
		if v.StringValue != nil {
			n += len(*v.StringValue)
		}
		n += len(v.BinaryValue)
	}
	return n
}

// Prepare returns the body and attributes to send for body and attrs. A
// message within the threshold comes back as it is. A larger one (or any,
// with WithAlwaysOffload) is stored in S3 under a new key and comes back
// as a pointer body with the size attribute added (attrs itself is not
// modified). It fails, storing nothing, when attrs already has a size
// attribute or more than 9 attributes (SQS allows 10 and the pointer takes
// one), when body is empty, or when PutObject fails.
func (s *Sender) Prepare(ctx context.Context, body string, attrs map[string]types.MessageAttributeValue) (string, map[string]types.MessageAttributeValue, error) {
	if !s.cfg.always && messageSize(body, attrs) <= s.cfg.threshold {
		return body, attrs, nil
	}
	if body == "" {
		return "", nil, errors.New("s3payload: an empty body cannot be offloaded")
	}
	for _, name := range []string{SizeAttribute, LegacySizeAttribute} {
		if _, ok := attrs[name]; ok {
			return "", nil, fmt.Errorf("s3payload: message attribute %s is reserved for the offloaded payload's size", name)
		}
	}
	if len(attrs) > maxAttributes {
		return "", nil, fmt.Errorf("s3payload: an offloaded message may have at most %d attributes, this one has %d", maxAttributes, len(attrs))
	}
	key := s.cfg.prefix + uuid()
	size := int64(len(body))
	if _, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &key, Body: strings.NewReader(body), ContentLength: &size,
	}); err != nil {
		return "", nil, fmt.Errorf("s3payload: storing the payload in s3://%s/%s: %w", s.bucket, key, err)
	}
	out := maps.Clone(attrs)
	if out == nil {
		out = map[string]types.MessageAttributeValue{}
	}
	dt, v := "Number", strconv.FormatInt(size, 10)
	out[s.cfg.attribute] = types.MessageAttributeValue{DataType: &dt, StringValue: &v}
	return Pointer{Bucket: s.bucket, Key: key}.String(), out, nil
}

// SendMessage sends in with client, offloading its body first when Prepare
// says so. in is not modified.
func (s *Sender) SendMessage(ctx context.Context, client SendClient, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if in == nil || in.MessageBody == nil {
		return nil, errors.New("s3payload: SendMessage: no input or no MessageBody")
	}
	body, attrs, err := s.Prepare(ctx, *in.MessageBody, in.MessageAttributes)
	if err != nil {
		return nil, err
	}
	cp := *in
	cp.MessageBody, cp.MessageAttributes = &body, attrs
	return client.SendMessage(ctx, &cp, optFns...)
}

// uuid returns a random (version 4) UUID, as the Java client's keys are.
func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&0xf])
	}
	return string(out)
}

func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Interface, reflect.Slice, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
