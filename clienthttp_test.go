package sqsconsumer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// stallCeiling bounds every wait of the lost-answer test: real sockets,
// real time.
const stallCeiling = 5 * time.Second

// stallReleaseAt is how far into the held request's response its writer is
// released: past the headers and the 4 KB net/http's reader buffers, so
// that only the SDK's decoder, which runs after smithy-go closed the
// request body, reads this far.
const stallReleaseAt = 16 << 10

// stallConn is the client's end of a connection. It holds net/http's
// connection writer right after it wrote the body of the first
// ReceiveMessage request (bytes sent), until that request's response is
// being read past stallReleaseAt: what a busy machine does when it
// deschedules the writer goroutine there. Then it holds the response's
// reader until the writer has finished the request (wrote) or closed the
// connection, so that what the writer does next decides the outcome.
type stallConn struct {
	net.Conn
	s *stall
}

// stall is the state of the one held request, shared by the test's
// connections.
type stall struct {
	released chan struct{} // closed when the held write may return
	wrote    chan struct{} // closed when net/http reported the held request written
	closed   chan struct{} // closed when the held request's connection is closed

	mu       sync.Mutex // guards the fields below
	held     bool       // a write has been held
	conn     net.Conn   // the held request's connection
	read     int        // its response bytes read since the hold
	wroteErr error      // what net/http reported for the held request
	reported bool
	timedOut bool
}

func newStall() *stall {
	return &stall{released: make(chan struct{}), wrote: make(chan struct{}), closed: make(chan struct{})}
}

func (s *stall) wait(ch <-chan struct{}) {
	select {
	case <-ch:
	case <-time.After(stallCeiling):
		s.mu.Lock()
		s.timedOut = true
		s.mu.Unlock()
	}
}

// wroteRequest is the httptrace hook of every request: the first one
// reported after the held write was released is the held request.
func (s *stall) wroteRequest(info httptrace.WroteRequestInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.released:
	default:
		return
	}
	if !s.reported {
		s.reported, s.wroteErr = true, info.Err
		close(s.wrote)
	}
}

func (c *stallConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.s.mu.Lock()
	hold := !c.s.held && bytes.Contains(p, []byte(`"MaxNumberOfMessages"`)) && bytes.HasSuffix(p, []byte("}"))
	if hold {
		c.s.held, c.s.conn = true, c
	}
	c.s.mu.Unlock()
	if hold {
		c.s.wait(c.s.released)
	}
	return n, err
}

func (c *stallConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.s.mu.Lock()
	mine := c.s.conn == c
	before := c.s.read
	if mine {
		c.s.read += n
	}
	release := mine && before < stallReleaseAt && c.s.read >= stallReleaseAt
	c.s.mu.Unlock()
	if release {
		close(c.s.released)
		select {
		case <-c.s.wrote:
		case <-c.s.closed:
		case <-time.After(stallCeiling):
			c.s.mu.Lock()
			c.s.timedOut = true
			c.s.mu.Unlock()
		}
	}
	return n, err
}

func (c *stallConn) Close() error {
	c.s.mu.Lock()
	if c.s.conn == c {
		select {
		case <-c.s.closed:
		default:
			close(c.s.closed)
		}
	}
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// tracing is an HTTP client that adds the stall's trace to every request
// (a shallow copy: the body is the SDK's, as it was). Each request gets a
// copy of the trace: WithClientTrace composes the one it is given with the
// Consumer's own (inflight.go) by writing into it, and the Consumer's
// calls run at once.
type tracing struct {
	next  aws.HTTPClient
	trace *httptrace.ClientTrace
}

func (t tracing) Do(req *http.Request) (*http.Response, error) {
	trace := *t.trace
	return t.next.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), &trace)))
}

// stallClient returns an sqstest server over plain HTTP on loopback, a
// queue holding ten 100 KB messages (an answer decoded well after its
// headers), and an *sqs.Client with the SDK's own HTTP client whose first
// ReceiveMessage is held as stallConn describes.
func stallClient(t *testing.T) (srv *sqstest.Server, queue string, client *sqs.Client, s *stall) {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	srv = sqstest.NewServer(sqstest.WithBaseURL("http://" + ts.Listener.Addr().String()))
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	queue, err := srv.CreateQueue("jobs", nil)
	require.NoError(t, err)
	for i := range 10 {
		_, err := srv.Send(queue, strconv.Itoa(i)+strings.Repeat("x", 100_000))
		require.NoError(t, err)
	}
	s = newStall()
	dialer := &net.Dialer{Timeout: stallCeiling}
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &stallConn{Conn: c, s: s}, nil
		}
	})
	t.Cleanup(func() { hc.GetTransport().CloseIdleConnections() })
	client = sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(ts.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   tracing{next: hc, trace: &httptrace.ClientTrace{WroteRequest: s.wroteRequest}},
	})
	return srv, queue, client, s
}

// Issue 35 case 1: with the SDK's own HTTP client, over a real socket, the
// SDK can lose a ReceiveMessage answer it has received and retry: the
// answer's messages stay in flight for the receive's visibility timeout,
// and the caller never sees them. The control makes that happen to a
// receive made without the Consumer's guard; the Consumer, whose every
// call passes guardBodies, gets the whole answer over the same stalled
// writer, and handles all ten messages. It needs a real socket (the race
// is in net/http's connection writer), so it runs in real time, with a
// 5 s ceiling on every wait and no sleep.
func TestLostAnswerGuard(t *testing.T) {
	t.Parallel()
	t.Run("control: a receive without the guard", func(t *testing.T) {
		t.Parallel()
		srv, queue, client, s := stallClient(t)
		ctx, cancel := context.WithTimeout(t.Context(), 4*stallCeiling)
		defer cancel()
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: 10, VisibilityTimeout: 600})
		require.NoError(t, err, "no error: the SDK retries a lost answer")
		s.mu.Lock()
		defer s.mu.Unlock()
		require.True(t, s.held)
		require.False(t, s.timedOut, "a wait hit its ceiling")
		require.ErrorIs(t, s.wroteErr, io.EOF, "net/http took the closed body's io.EOF for a write error")
		require.Equal(t, 2, srv.CallCount("ReceiveMessage"), "the SDK retried")
		require.Empty(t, out.Messages, "the answer was lost")
		inFlight := 0
		for _, m := range srv.Messages(queue) {
			if m.InFlight {
				inFlight++
			}
		}
		require.Equal(t, 10, inFlight, "its ten messages stay invisible for 600 s")
	})
	t.Run("the Consumer", func(t *testing.T) {
		t.Parallel()
		srv, queue, client, s := stallClient(t)
		var received atomic.Int32
		handled := make(chan struct{}, 10)
		c, err := New(client, queue, HandlerFunc(func(context.Context, *Message) error {
			handled <- struct{}{}
			return nil
		}), WithVisibilityTimeout(600*time.Second), WithConcurrency(10), WithWaitTime(time.Second), WithShutdownTimeout(time.Second),
			WithObserver(ObserverFunc(func(e Event) {
				if e.Kind == EventReceived {
					received.Add(1)
				}
			})))
		require.NoError(t, err)
		stop := running(t, c)
		deadline := time.After(4 * stallCeiling)
		for range 10 {
			select {
			case <-handled:
			case <-deadline:
				require.NoError(t, stop())
				t.Fatalf("%d of the 10 messages received; the server saw %d receives", received.Load(), srv.CallCount("ReceiveMessage"))
			}
		}
		require.NoError(t, stop())
		s.mu.Lock()
		defer s.mu.Unlock()
		require.True(t, s.held, "the first receive's writer was held")
		require.False(t, s.timedOut, "a wait hit its ceiling")
		require.NoError(t, s.wroteErr, "net/http wrote the request without error")
		require.EqualValues(t, 10, received.Load(), "the first receive's answer arrived whole")
		for _, m := range srv.Messages(queue) {
			require.True(t, m.Deleted, m.ID)
			require.Equal(t, 1, m.ReceiveCount, "received once: %s", m.ID)
		}
	})
}

// The guard needs smithy-go's request body to implement io.WriterTo and
// answer io.EOF from it once closed (else there is no race to guard
// against, and the test above shows nothing); and the body next gets must
// not implement WriterTo, while reading and closing the SDK's.
func TestGuardBodiesHidesWriteTo(t *testing.T) {
	t.Parallel()
	var body io.ReadCloser
	grab := doFunc(func(req *http.Request) (*http.Response, error) {
		body = req.Body
		return nil, errors.New("stop here")
	})
	client := sqs.New(sqs.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String("https://127.0.0.1:1"),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:       grab,
		RetryMaxAttempts: 1,
	})
	in := &sqs.ReceiveMessageInput{QueueUrl: aws.String("https://127.0.0.1:1/123456789012/q")}
	_, err := client.ReceiveMessage(t.Context(), in)
	require.ErrorContains(t, err, "stop here")
	wt, ok := body.(io.WriterTo)
	require.True(t, ok, "smithy-go's request body implements io.WriterTo (%T)", body)
	n, err := wt.WriteTo(io.Discard)
	require.Zero(t, n)
	require.ErrorIs(t, err, io.EOF, "the SDK closed it when Do returned; its WriteTo answers io.EOF")

	_, err = client.ReceiveMessage(t.Context(), in, guardOpts...)
	require.ErrorContains(t, err, "stop here")
	_, ok = body.(io.WriterTo)
	require.False(t, ok, "the guarded body does not implement io.WriterTo (%T)", body)
	n, err = io.Copy(io.Discard, body)
	require.Zero(t, n)
	require.NoError(t, err, "through the guard the closed body's io.EOF is its end: what net/http's last read gets")

	// The option wraps once, and leaves a client without an HTTP client alone.
	var o sqs.Options
	guardBodies(&o)
	require.Nil(t, o.HTTPClient)
	o.HTTPClient = grab
	guardBodies(&o)
	guardBodies(&o)
	g, ok := o.HTTPClient.(bodyGuard)
	require.True(t, ok)
	_, ok = g.next.(doFunc)
	require.True(t, ok, "wrapped once")
}

type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// BenchmarkGuardBodies measures the guard's cost per call: an SDK
// ReceiveMessage whose HTTP client answers at once with ten messages (no
// network: the SDK's own cost and the guard's), without and with
// guardBodies. Compare allocs/op and ns/op of the two.
func BenchmarkGuardBodies(b *testing.B) {
	var msgs []string
	for i := range 10 {
		msgs = append(msgs, `{"MessageId":"m`+strconv.Itoa(i)+`","ReceiptHandle":"h`+strconv.Itoa(i)+`","Body":"`+strings.Repeat("x", 200)+`","Attributes":{"ApproximateReceiveCount":"1","SentTimestamp":"1700000000000"}}`)
	}
	answer := []byte(`{"Messages":[` + strings.Join(msgs, ",") + `]}`)
	hc := doFunc(func(req *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, req.Body) // what net/http does with it
		_ = req.Body.Close()
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
			Body: io.NopCloser(bytes.NewReader(answer)), ContentLength: int64(len(answer)), Request: req}, nil
	})
	client := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("https://127.0.0.1:1"),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   hc,
	})
	in := &sqs.ReceiveMessageInput{QueueUrl: aws.String("https://127.0.0.1:1/123456789012/q"), MaxNumberOfMessages: 10}
	for _, bc := range []struct {
		name string
		opts []func(*sqs.Options)
	}{{"plain", []func(*sqs.Options){skipChecksum}}, {"guarded", receiveOpts}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := client.ReceiveMessage(context.Background(), in, bc.opts...)
				if err != nil || len(out.Messages) != 10 {
					b.Fatal(err)
				}
			}
		})
	}
}
