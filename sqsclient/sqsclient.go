// Package sqsclient makes the aws-sdk-go-v2 SQS client sqsconsumer recommends
// in production: the SDK's own client and HTTP client, with each request body
// handed to net/http as a private in-memory copy, and an optional idle
// connection pool size.
//
//	cfg, err := config.LoadDefaultConfig(ctx) // region, credentials, AWS_CA_BUNDLE, proxies
//	if err != nil {
//		return err
//	}
//	client, err := sqsclient.NewFromConfig(cfg, sqsclient.HTTPOptions{MaxIdleConnsPerHost: 64})
//	if err != nil {
//		return err
//	}
//	c, err := sqsconsumer.New(client, queueURL, handler)
//
// # Why a copy of each request body: production needs it
//
// Over HTTP/1.1, plain or TLS, aws-sdk-go-v2 can lose an answer it has
// already received and retry the call without telling anyone; this is not
// limited to local test servers. The request body smithy-go (v1.28.9) hands
// net/http returns io.EOF from WriteTo once closed (its
// transport/http/internal/io/safe.go), and smithy-go closes it as soon as
// client.Do returns, that is when the response headers arrive
// (transport/http/client.go). After sending
// a body of known length, net/http's connection writer reads the body once
// more to check for extra bytes (Go 1.26, net/http/transfer.go,
// transferWriter.writeBody); that read goes through WriteTo, and if the
// writer gets there only after the close, it takes the io.EOF for a write
// error and closes the connection (transport.go, persistConn.writeLoop)
// while the SDK is still reading the response: "use of closed network
// connection", which the SDK retries (aws/retry/retryable_error.go). A lost
// ReceiveMessage answer leaves its messages invisible for their visibility
// timeout, each with one receive counted towards the queue's
// maxReceiveCount; a lost SendMessage answer sends its messages twice.
//
// The writer goroutine must be held up between sending the body and that
// read, a few instructions apart, for longer than the call's round trip plus
// SQS's time to answer: a goroutine or thread descheduled at that moment on a
// busy machine. Against a server on loopback that happens often enough to see
// (one benchmark drain in five against cmd/sqstest waited out a visibility
// timeout); against SQS, a millisecond or more away, it is much rarer:
// without a forced delay it was not seen here in 85,000 calls over TLS nor
// in 107,000 over plain HTTP on loopback (a loaded 2-core machine, 16 to 64
// callers). Rare is not never, and the loss is silent, so use this package
// in production. TestLostAnswerOverTLS forces the delay and
// shows the lost answer over TLS with the SDK's default client, and the
// whole answer with this package's. HTTP/2 does not have the race (its
// writer reads the body with Read, whose io.EOF after the close it takes for
// the body's end: net/http/h2_bundle.go, writeRequestBody); AWS does not say
// whether SQS endpoints negotiate HTTP/2, and the copy is harmless if they
// do. The copy costs one allocation of the body's size per request (a
// consumer's requests are a few KB).
//
// # AWS_CA_BUNDLE
//
// config.LoadDefaultConfig applies AWS_CA_BUNDLE (or ca_bundle in the shared
// config) to the HTTP client by a type assertion to the SDK's concrete
// *awshttp.BuildableClient, not to an interface (config v1.33.18, resolve.go,
// resolveCustomCABundle): with an HTTP client of any other type given through
// config.WithHTTPClient, such as an *http.Client, loading fails with "unable
// to add custom RootCAs HTTPClient, has no WithTransportOptions". A wrapper
// cannot be a *awshttp.BuildableClient, so this package never goes through
// config.WithHTTPClient: NewFromConfig and New let the SDK build its client
// (the CA bundle, the defaults mode's timeouts and the service's read
// timeout applied to it), then set the pool size on it and wrap it, last.
package sqsclient

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// MaxIdleConnsPerHostLimit is the largest HTTPOptions.MaxIdleConnsPerHost:
// the SDK's MaxConnsPerHost (awshttp.DefaultHTTPTransportMaxConnsPerHost),
// past which idle connections could never be used.
const MaxIdleConnsPerHostLimit = 2048

// HTTPOptions configures the SQS client's HTTP client. The zero value keeps
// the SDK's settings.
type HTTPOptions struct {
	// MaxIdleConnsPerHost is how many idle connections to the SQS endpoint
	// the client keeps for reuse. 0 keeps the SDK's default, 10
	// (awshttp.DefaultHTTPTransportMaxIdleConnsPerHost); range 0 to
	// MaxIdleConnsPerHostLimit. With more calls in flight than the pool
	// holds (a Consumer's pollers, renewals and deletes together), each
	// call beyond it dials a new connection (over TLS, a full handshake) and
	// closes it afterwards: set it to at least the calls a process has in
	// flight at once. The pool's total for all endpoints (MaxIdleConns, 100
	// in the SDK) is raised to at least this. It can be set only on the
	// SDK's own HTTP client (an *awshttp.BuildableClient); with an HTTP
	// client of your own, set its pool there.
	MaxIdleConnsPerHost int
}

func (h HTTPOptions) validate() error {
	if h.MaxIdleConnsPerHost < 0 || h.MaxIdleConnsPerHost > MaxIdleConnsPerHostLimit {
		return fmt.Errorf("sqsclient: HTTPOptions.MaxIdleConnsPerHost %d: must be from 0 (the SDK's default, %d) to %d",
			h.MaxIdleConnsPerHost, awshttp.DefaultHTTPTransportMaxIdleConnsPerHost, MaxIdleConnsPerHostLimit)
	}
	return nil
}

// NewFromConfig returns sqs.NewFromConfig(cfg, optFns...) with the client's
// HTTP client configured by h and wrapped so that each request body reaches
// net/http as a private in-memory copy (see the package documentation). The
// wrapping comes after optFns, so it applies to the HTTP client the SQS
// client ends up with: the SDK's (with cfg's CA bundle), or one set by cfg
// or optFns. It returns an error if h is out of range, or if h sets the pool
// size and that HTTP client is not the SDK's *awshttp.BuildableClient.
func NewFromConfig(cfg aws.Config, h HTTPOptions, optFns ...func(*sqs.Options)) (*sqs.Client, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	var err error
	c := sqs.NewFromConfig(cfg, append(optFns[:len(optFns):len(optFns)], h.apply(&err))...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// New is NewFromConfig for sqs.New: it returns sqs.New(o, optFns...) with its
// HTTP client configured by h and wrapped, last.
func New(o sqs.Options, h HTTPOptions, optFns ...func(*sqs.Options)) (*sqs.Client, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	var err error
	c := sqs.New(o, append(optFns[:len(optFns):len(optFns)], h.apply(&err))...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// apply returns the last option of the SQS client: it sets the pool on the
// client's HTTP client and wraps it, or sets *err.
func (h HTTPOptions) apply(err *error) func(*sqs.Options) {
	return func(o *sqs.Options) {
		hc := o.HTTPClient
		if w, ok := hc.(rebuffering); ok { // made by this package already
			hc = w.next
		}
		if hc == nil { // sqs.New has resolved it already; in case a later SDK does not
			hc = awshttp.NewBuildableClient()
		}
		if n := h.MaxIdleConnsPerHost; n > 0 {
			b, ok := hc.(*awshttp.BuildableClient)
			if !ok {
				*err = fmt.Errorf("sqsclient: HTTPOptions.MaxIdleConnsPerHost %d can be set only on the SDK's own HTTP client (*awshttp.BuildableClient); this SQS client's is a %T: set its pool there and leave MaxIdleConnsPerHost 0", n, hc)
				return
			}
			hc = b.WithTransportOptions(func(tr *http.Transport) {
				tr.MaxIdleConnsPerHost = n
				tr.MaxIdleConns = max(tr.MaxIdleConns, n)
			})
		}
		o.HTTPClient = rebuffering{next: hc}
	}
}

// rebuffering is an aws.HTTPClient that reads each request body into memory,
// closes it, and hands next a copy of the request with a private body
// (ContentLength and GetBody set). It holds no state of its own: safe for
// concurrent use when next is.
type rebuffering struct{ next aws.HTTPClient }

// Unwrap returns the HTTP client r wraps: a Consumer reads its connection
// pool through it (sqsconsumer.New).
func (r rebuffering) Unwrap() aws.HTTPClient { return r.next }

// Do implements aws.HTTPClient. A body that fails to read fails the request
// with that error, before next is called.
func (r rebuffering) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return r.next.Do(req)
	}
	b, err := io.ReadAll(req.Body)
	// Do closes the body, on errors too (as http.Client.Do does); nothing
	// next does depends on it from here on.
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("sqsclient: reading the request body: %w", err)
	}
	own := req.Clone(req.Context())
	own.Body = io.NopCloser(bytes.NewReader(b))
	own.ContentLength = int64(len(b))
	own.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return r.next.Do(own)
}
