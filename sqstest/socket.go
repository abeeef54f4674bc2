package sqstest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// RebufferingTransport returns an [http.RoundTripper] that reads each request body
// into memory, closes it, and hands base a copy of the request with a private body
// (ContentLength and GetBody set). Use it in the *http.Client of an aws-sdk-go-v2
// client that reaches a server over a real socket in tests and tools ([Server.Handler]
// behind a listener, cmd/sqstest), so that a receive's answer is never lost to the
// race described in the package documentation ("Over a real socket"):
//
//	c := sqs.New(sqs.Options{
//		Region:       "us-east-1",
//		BaseEndpoint: aws.String("http://127.0.0.1:9324"),
//		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
//		HTTPClient:   &http.Client{Transport: sqstest.RebufferingTransport(nil)},
//	})
//
// Production clients have the same race against SQS and need the same copy, but not
// from a test package and not through an *http.Client, which config.LoadDefaultConfig
// rejects while AWS_CA_BUNDLE is set: make them with package
// github.com/sqskit/sqsconsumer/sqsclient, which wraps the SDK's own HTTP client the
// same way. sqsclient.New works against a [Server] behind a listener too.
//
// base nil means [http.DefaultTransport]; pass a clone of it to tune connection
// pooling. [Server.Client] does not need it: [Server.Transport] has no connection.
//
// The cost is one copy of each request body (SQS bodies are at most a few MB). A
// body that fails to read fails the request with that error, before base is
// called. The transport holds no state of its own and is safe for concurrent use
// when base is.
func RebufferingTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return rebuffering{base}
}

type rebuffering struct{ base http.RoundTripper }

func (r rebuffering) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return r.base.RoundTrip(req)
	}
	b, err := io.ReadAll(req.Body)
	// A RoundTripper closes the body, on errors too. From here on nothing base
	// does depends on the caller's body, so closing it early cannot hurt.
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("sqstest: reading the request body: %w", err)
	}
	own := req.Clone(req.Context())
	own.Body = io.NopCloser(bytes.NewReader(b))
	own.ContentLength = int64(len(b))
	own.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return r.base.RoundTrip(own)
}
