package sqsconsumer

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// The SDK's lost answer, and the Consumer's guard against it.
//
// Over HTTP/1.1 (plain or TLS) aws-sdk-go-v2 with its default HTTP client
// can lose an answer it has received and retry the call without telling
// anyone. smithy-go hands net/http a request body that implements
// io.WriterTo and answers io.EOF from WriteTo once closed, and closes it
// as soon as the HTTP client's Do returns (when the response headers
// arrive). After writing a body of known length, net/http's connection
// writer reads the body once more to check that nothing is left; that
// read goes through WriteTo, and when the writer goroutine gets there only
// after the close (it was descheduled between the two reads, on a busy
// machine, for longer than the server took to answer), it takes the io.EOF
// for a write error and closes the connection under the answer the SDK is
// still reading. The SDK retries the call: a lost ReceiveMessage answer
// leaves its messages invisible for the receive's visibility timeout,
// never seen by the Consumer (no EventReceived) and with one receive
// counted towards the queue's maxReceiveCount; a lost SendMessage answer
// (the dead-letter move) sends the message twice. Package sqsclient's
// documentation gives the evidence, with Go and smithy-go versions and a
// test that forces the timing.
//
// The guard: every call the Consumer and its leases make (receives,
// deletes, visibility changes, the dead-letter move) passes guardBodies,
// a per-call option that wraps the call's HTTP client (sqs.Options'
// HTTPClient) in bodyGuard, which hands net/http the request with its
// body behind a reader that has no WriteTo. net/http then makes its last
// read with Read, and the closed body's io.EOF is the body's end, as
// HTTP/2's writer already takes it: nothing closes the connection, and the
// answer arrives whole. So the SDK's own client (sqs.NewFromConfig) is
// safe to use with a Consumer; an HTTP client that copies each body itself
// (package sqsclient's) is safe without it and only pays the guard's
// small cost as well.
//
// The guard costs two allocations a call, about 400 bytes (the HTTP client
// wrapper, and the request's shallow copy with its body's reader): about
// 0.4 allocations and 80 bytes a message at full receives and deletes (a
// receive and a delete call per ten messages). Its time is within the
// noise of the SDK's own call, about 70 µs of CPU for a ten-message
// receive without a network (BenchmarkGuardBodies: 379 allocations a call
// plain, 381 guarded). A Client that is not an *sqs.Client ignores the
// option. Other per-call wrappers of the HTTP client (a tracing one)
// compose with it: each wraps what it finds.

// guardBodies is the per-call option of every call the Consumer and its
// leases make: see above.
func guardBodies(o *sqs.Options) {
	if o.HTTPClient == nil || broken.Is(broken.UnguardedBodies) {
		return
	}
	if _, ok := o.HTTPClient.(bodyGuard); ok {
		return
	}
	o.HTTPClient = bodyGuard{next: o.HTTPClient}
}

// guardOpts is the per-call options of every call but the receive
// (receive.go has its own), as a slice made once: a variadic call with a
// literal list would allocate its slice on every call. Its capacity is its
// length, so that a Client appending to it copies.
var guardOpts = []func(*sqs.Options){guardBodies}

// bodyGuard is an aws.HTTPClient that hands next each request with its
// body behind a reader without WriteTo (see above). It holds no state of
// its own: safe for concurrent use when next is.
type bodyGuard struct{ next aws.HTTPClient }

// Unwrap returns the HTTP client g wraps.
func (g bodyGuard) Unwrap() aws.HTTPClient { return g.next }

// Do implements aws.HTTPClient: next gets a shallow copy of req whose body
// reads and closes req's.
func (g bodyGuard) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return g.next.Do(req)
	}
	own := &guardedRequest{req: *req}
	own.body.rc = req.Body
	own.req.Body = &own.body
	return g.next.Do(&own.req)
}

// guardedRequest is a request's shallow copy and its body's reader, in one
// allocation.
type guardedRequest struct {
	req  http.Request
	body readCloser
}

// readCloser is an io.ReadCloser that is only that: it hides any WriteTo
// of the body it reads.
type readCloser struct{ rc io.ReadCloser }

func (r *readCloser) Read(p []byte) (int, error) { return r.rc.Read(p) }
func (r *readCloser) Close() error               { return r.rc.Close() }
