package s3payload

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// What the Java extended client puts in the body for an object it stored
// (its PayloadS3Pointer serialised by Jackson with default typing, compact,
// bucket before key), with a bucket and key of our own.
const javaPointer = `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"orders-payloads","s3Key":"0b6f2c1e-8a4d-4f7b-9e3c-5d2a1b0c9f8e"}]`

func TestPointerBytesMatchJava(t *testing.T) {
	t.Parallel()
	p := Pointer{Bucket: "orders-payloads", Key: "0b6f2c1e-8a4d-4f7b-9e3c-5d2a1b0c9f8e"}
	require.Equal(t, javaPointer, p.String())
	got, err := ParsePointer(javaPointer)
	require.NoError(t, err)
	require.Equal(t, p, got)
	// With a key prefix, as the Java client's s3KeyPrefix makes them.
	require.Equal(t, `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b.example","s3Key":"tenant-1/big/x_y.z-0"}]`,
		Pointer{Bucket: "b.example", Key: "tenant-1/big/x_y.z-0"}.String())
}

// Jackson escapes only the quote, the backslash and control characters;
// '/', non-ASCII and HTML characters stay as they are.
func TestPointerEscapesLikeJackson(t *testing.T) {
	t.Parallel()
	p := Pointer{Bucket: "b", Key: "a\"b\\c/d<&>é\n\t\x01\x1f\b\f\r"}
	require.Equal(t, `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"a\"b\\c/d<&>é\n\t\u0001\u001F\b\f\r"}]`, p.String())
	got, err := ParsePointer(p.String())
	require.NoError(t, err)
	require.Equal(t, p, got)
}

func TestParsePointer(t *testing.T) {
	t.Parallel()
	// The old Java client's class name and extra members are accepted,
	// white space too.
	got, err := ParsePointer(` [ "com.amazon.sqs.javamessaging.MessageS3Pointer" , {"s3Key":"k","s3BucketName":"b","version":2} ] `)
	require.NoError(t, err)
	require.Equal(t, Pointer{Bucket: "b", Key: "k"}, got)

	for _, tt := range []struct{ body, want string }{
		{`hello`, "the body is not an S3 pointer"},
		{`{"s3BucketName":"b","s3Key":"k"}`, "the body is not an S3 pointer"},
		{`["software.amazon.payloadoffloading.PayloadS3Pointer"]`, "has 1 elements, want 2"},
		{`[1,{"s3BucketName":"b","s3Key":"k"}]`, "first element is not a class name"},
		{`["java.lang.Runtime",{"s3BucketName":"b","s3Key":"k"}]`, `class is "java.lang.Runtime"`},
		{`["software.amazon.payloadoffloading.PayloadS3Pointer",[]]`, "second element is not an object"},
		{`["software.amazon.payloadoffloading.PayloadS3Pointer",null]`, "second element is not an object"},
		{`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3Key":"k"}]`, "has no s3BucketName"},
		{`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b"}]`, "has no s3Key"},
		{`["software.amazon.payloadoffloading.PayloadS3Pointer",{"S3BUCKETNAME":"b","s3Key":"k"}]`, "has no s3BucketName"},
		{`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"","s3Key":"k"}]`, `s3BucketName is "", want a non-empty string`},
		{`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":7}]`, "s3Key is 7, want a non-empty string"},
	} {
		_, err := ParsePointer(tt.body)
		require.ErrorContains(t, err, tt.want, "body %s", tt.body)
	}
}

// FuzzPointerRoundTrip: whatever the bucket and key, the body Sender
// writes reads back as the same pointer.
func FuzzPointerRoundTrip(f *testing.F) {
	f.Add("orders-payloads", "0b6f2c1e-8a4d-4f7b-9e3c-5d2a1b0c9f8e")
	f.Add("b", "a\"b\\c\n\u2028")
	f.Fuzz(func(t *testing.T, bucket, key string) {
		if bucket == "" || key == "" || !utf8.ValidString(bucket) || !utf8.ValidString(key) {
			return
		}
		p := Pointer{Bucket: bucket, Key: key}
		got, err := ParsePointer(p.String())
		if err != nil {
			t.Fatalf("%q: %v", p.String(), err)
		}
		if got != p {
			t.Fatalf("round trip of %+v gave %+v", p, got)
		}
		if !strings.HasPrefix(p.String(), `["`+PointerClass+`",{"s3BucketName":"`) {
			t.Fatalf("unexpected form %q", p.String())
		}
	})
}
