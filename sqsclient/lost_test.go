package sqsclient_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqsclient"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// tlsServer serves an sqstest.Server over TLS (HTTP/1.1) on a loopback
// listener, as SQS serves HTTPS, and returns it, its URL, its self-signed
// certificate and a pool trusting it.
func tlsServer(t *testing.T) (srv *sqstest.Server, url string, cert *x509.Certificate, roots *x509.CertPool) {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	srv = sqstest.NewServer(sqstest.WithBaseURL("https://" + ts.Listener.Addr().String()))
	ts.Config.Handler = srv.Handler()
	ts.StartTLS()
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	roots = x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	return srv, ts.URL, ts.Certificate(), roots
}

// stallConn is the client's end of a TLS connection, seen above TLS (what
// net/http writes and reads). It holds net/http's connection writer right
// after the write that ends the request (the JSON body's closing brace),
// with the bytes already sent, until the response is being read past its
// first bytes: what a busy machine does when it deschedules that goroutine
// there. Then it holds the response's reader until the writer has finished
// the request (wrote) or closed the connection, so that what the writer does
// next decides the outcome, whichever goroutine the machine runs first.
type stallConn struct {
	net.Conn
	wrote    <-chan struct{} // closed when net/http reports the request written without error
	released chan struct{}   // closed when the held write may return
	closed   chan struct{}   // closed by Close, once
	once     sync.Once

	mu       sync.Mutex // guards the fields below
	held     bool       // a write has been held
	read     int        // response bytes read
	timedOut bool       // a wait hit its ceiling
}

// ceiling bounds every wait of the test: real sockets, real time.
const ceiling = 5 * time.Second

// releaseAt is how far into the response the writer is released: past the
// headers and the 4 KB net/http's reader buffers, so only the SDK's decoder,
// which runs after smithy-go closed the request body, reads this far.
const releaseAt = 16 << 10

func (c *stallConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	hold := !c.held && bytes.HasSuffix(p, []byte("}"))
	c.held = c.held || hold
	c.mu.Unlock()
	if hold {
		c.wait(c.released)
	}
	return n, err
}

func (c *stallConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	before := c.read
	c.read += n
	release := before < releaseAt && c.read >= releaseAt
	c.mu.Unlock()
	if release {
		close(c.released)
		select {
		case <-c.wrote:
		case <-c.closed:
		case <-time.After(ceiling):
			c.mu.Lock()
			c.timedOut = true
			c.mu.Unlock()
		}
	}
	return n, err
}

func (c *stallConn) wait(ch <-chan struct{}) {
	select {
	case <-ch:
	case <-time.After(ceiling):
		c.mu.Lock()
		c.timedOut = true
		c.mu.Unlock()
	}
}

func (c *stallConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *stallConn) wasClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// TestLostAnswerOverTLS reproduces, over HTTPS on loopback and with the
// SDK's own client stack (sqs.Client, smithy-go, awshttp.BuildableClient,
// net/http over crypto/tls, HTTP/1.1), the race the package documentation
// describes: net/http's connection writer is held after sending a
// ReceiveMessage body until the answer is being decoded. With the SDK's
// client the writer's late second read of the closed body fails with
// io.EOF, the connection closes under the answer, the SDK retries, and the
// call returns no error and none of the ten messages the server handed
// out, which stay in flight. With this package's client the answer arrives
// whole on the one connection. It needs a real socket (the race is in
// net/http's connection writer, which an in-memory transport does not
// have), so it runs in real time, with a 5 s ceiling on every wait and no
// sleep.
func TestLostAnswerOverTLS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fix  bool
	}{
		{"the SDK's client", false},
		{"sqsclient", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, url, _, roots := tlsServer(t)
			qurl, err := srv.CreateQueue("jobs", nil)
			require.NoError(t, err)
			for i := range 10 { // a 1 MB answer: decoded well after its headers
				_, err := srv.Send(qurl, strconv.Itoa(i)+strings.Repeat("x", 100_000))
				require.NoError(t, err)
			}

			wrote := make(chan struct{})
			var (
				mu        sync.Mutex
				wroteErrs []error // what net/http reported for each request written
				conns     []*stallConn
			)
			trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
				mu.Lock()
				defer mu.Unlock()
				wroteErrs = append(wroteErrs, info.Err)
				if len(wroteErrs) == 1 && info.Err == nil {
					close(wrote)
				}
			}}
			dialer := &net.Dialer{Timeout: ceiling}
			hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
				tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					raw, err := dialer.DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					host, _, _ := net.SplitHostPort(addr)
					tc := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: host, NextProtos: []string{"http/1.1"}})
					if err := tc.HandshakeContext(ctx); err != nil {
						_ = raw.Close()
						return nil, err
					}
					c := &stallConn{Conn: tc, wrote: wrote, released: make(chan struct{}), closed: make(chan struct{})}
					mu.Lock()
					defer mu.Unlock()
					if len(conns) > 0 {
						return tc, nil // the retry's connection runs free
					}
					conns = append(conns, c)
					return c, nil
				}
			})
			o := sqs.Options{
				Region:       "us-east-1",
				BaseEndpoint: aws.String(url),
				Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
				HTTPClient:   hc,
			}
			var client *sqs.Client
			if tc.fix {
				client, err = sqsclient.New(o, sqsclient.HTTPOptions{})
				require.NoError(t, err)
			} else {
				client = sqs.New(o)
			}

			ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(t.Context(), trace), 4*ceiling)
			defer cancel()
			out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &qurl, MaxNumberOfMessages: 10, VisibilityTimeout: 600})
			require.NoError(t, err, "no error either way: the SDK retries a lost answer")

			mu.Lock()
			defer mu.Unlock()
			require.Len(t, conns, 1)
			c := conns[0]
			c.mu.Lock()
			require.True(t, c.held, "the writer was held after the request")
			require.False(t, c.timedOut, "a wait hit its ceiling")
			c.mu.Unlock()
			var inFlight int
			for _, m := range srv.Messages(qurl) {
				require.Equal(t, 1, m.ReceiveCount, "message %s", m.ID)
				if m.InFlight {
					inFlight++
				}
			}
			require.Equal(t, 10, inFlight, "the first receive handed out all ten")
			if !tc.fix {
				require.ErrorIs(t, wroteErrs[0], io.EOF, "net/http took the closed body's io.EOF for a write error")
				require.True(t, c.wasClosed(), "the connection was closed under the answer")
				require.Equal(t, 2, srv.CallCount("ReceiveMessage"), "the SDK retried")
				require.Empty(t, out.Messages, "the answer was lost: its messages stay invisible for 600 s")
				t.Logf("the SDK's client: net/http wrote the request with %v, the connection closed, the retry got %d of the 10 messages handed out", wroteErrs[0], len(out.Messages))
				return
			}
			for _, werr := range wroteErrs {
				require.NoError(t, werr)
			}
			require.False(t, c.wasClosed(), "the connection stays open for the next call")
			require.Equal(t, 1, srv.CallCount("ReceiveMessage"), "one call")
			require.Len(t, out.Messages, 10, "the answer arrived whole")
			t.Logf("sqsclient: the answer arrived whole with %d messages on one connection", len(out.Messages))
		})
	}
}

// The race needs a body that reports io.EOF from WriteTo once closed, as
// smithy-go's does; if a later smithy-go stops doing that, the test above
// would pass for the SDK's client without showing anything. This pins the
// premise on the SDK's real request body.
func TestSDKBodyWriteToAfterClose(t *testing.T) {
	t.Parallel()
	var body io.ReadCloser
	grab := aws.HTTPClient(smithyDo(func(req *http.Request) (*http.Response, error) {
		body = req.Body
		return nil, errors.New("stop here")
	}))
	client := sqs.New(sqs.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String("https://127.0.0.1:1"),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:       grab,
		RetryMaxAttempts: 1,
	})
	_, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String("https://127.0.0.1:1/123456789012/q")})
	require.ErrorContains(t, err, "stop here")
	require.NotNil(t, body)
	wt, ok := body.(io.WriterTo)
	require.True(t, ok, "smithy-go's request body implements io.WriterTo (%T)", body)
	// The client closed it when Do returned, as it does after every attempt.
	n, err := wt.WriteTo(io.Discard)
	require.Zero(t, n)
	require.ErrorIs(t, err, io.EOF, "a closed body's WriteTo returns io.EOF")
}

type smithyDo func(*http.Request) (*http.Response, error)

func (f smithyDo) Do(r *http.Request) (*http.Response, error) { return f(r) }
