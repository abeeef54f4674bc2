package sqsconsumer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// failingTransport fails every request sent before until (virtual time in
// a bubble; zero: every request) with err, as a dialer, a resolver or a
// TLS handshake would, and passes the others to next. No socket.
type failingTransport struct {
	next  http.RoundTripper
	err   error
	until atomic.Int64 // Unix nanoseconds; 0: fail every request
}

func newFailingTransport(err error, until time.Time) *failingTransport {
	f := &failingTransport{err: err}
	if !until.IsZero() {
		f.until.Store(until.UnixNano())
	}
	return f
}

func (f *failingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if u := f.until.Load(); u == 0 || time.Now().UnixNano() < u {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, f.err
	}
	return f.next.RoundTrip(req)
}

// The error classes of a wrong endpoint, as the HTTP client reports them.
var (
	errNoSuchHost   = &net.DNSError{Err: "no such host", Name: "sqs.xx-west-9.amazonaws.com", IsNotFound: true}
	errDNSTemporary = &net.DNSError{Err: "server misbehaving", Name: "sqs.us-east-1.amazonaws.com", IsTemporary: true}
	errUnknownCA    = &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}
	errWrongHost    = x509.HostnameError{Certificate: &x509.Certificate{DNSNames: []string{"proxy.internal"}}, Host: "sqs.us-east-1.amazonaws.com"}
	errNotTLS       = tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}
	errRefused      = &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	errReadTimeout  = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	faultSignature  = sqstest.Fault{Status: http.StatusForbidden, Type: "SignatureDoesNotMatch",
		Message: "Credential should be scoped to a valid region, not 'us-east-1'."}
)

// firstContactClient is b's client behind a failingTransport.
func firstContactClient(b bundle, ft *failingTransport) *sqs.Client {
	ft.next = b.srv.Transport()
	return b.srv.Client(func(o *sqs.Options) {
		o.Retryer = aws.NopRetryer{}
		o.HTTPClient = &http.Client{Transport: ft}
	})
}

// A first contact that cannot succeed ends Run at once, naming the queue
// and the cause, with or without WithVisibilityTimeout (which used to
// make such an endpoint retry receives forever and return nil at
// shutdown).
func TestFirstContactThatCannotSucceedFailsRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		err   error          // from the transport, for every call
		fault *sqstest.Fault // else from SQS, for the first receive and attributes read
		want  string
	}{
		{"unknown host", errNoSuchHost, nil, `the endpoint's host "sqs.xx-west-9.amazonaws.com" does not resolve (no such host)`},
		{"certificate of an unknown authority", errUnknownCA, nil, "TLS: the endpoint's certificate cannot be verified"},
		{"certificate for another host", errWrongHost, nil, "TLS: the endpoint's certificate cannot be verified"},
		{"not a TLS endpoint", errNotTLS, nil, "TLS: the handshake with the endpoint failed"},
		{"access denied", nil, &sqstest.FaultAccessDenied, "access denied"},
		{"no such queue", nil, &sqstest.FaultQueueDoesNotExist, "does not exist (check the region and account in its URL)"},
		{"signature for another region", nil, &faultSignature, "SQS refused the request's signature (SignatureDoesNotMatch: Credential should be scoped to a valid region, not 'us-east-1'.)"},
	}
	for _, tt := range tests {
		for _, vis := range []bool{false, true} {
			name := tt.name
			if vis {
				name += ", WithVisibilityTimeout"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					b := setup(t, nil)
					var client Client = b.client
					if tt.err != nil {
						client = firstContactClient(b, newFailingTransport(tt.err, time.Time{}))
					} else {
						b.srv.FailNext("GetQueueAttributes", 1, *tt.fault)
						b.srv.FailNext("ReceiveMessage", 1, *tt.fault)
					}
					var opts []Option
					if vis {
						opts = append(opts, WithVisibilityTimeout(30*time.Second))
					}
					c, err := New(client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }), opts...)
					require.NoError(t, err)
					begun := time.Now()
					err = runFor(c, 10*time.Minute)
					require.Error(t, err, "Run went on")
					require.Less(t, time.Since(begun), time.Second, "Run did not fail at once: %v", err)
					require.ErrorContains(t, err, "queue "+b.url)
					require.ErrorContains(t, err, tt.want)
					if tt.err != nil {
						require.ErrorIs(t, err, tt.err)
					}
					h := c.Health()
					require.Equal(t, "failed", h.Status)
				})
			})
		}
	}
}

// An error that can heal at the first contact is retried, with or
// without WithVisibilityTimeout (which used to make Run fail at once
// without it), and Health names it at once; once SQS answers, messages
// flow and Health is clear.
func TestFirstContactThatCanHealIsRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		err   error
		fault *sqstest.Fault
		want  string // in Health's Retrying
	}{
		{"refused connection", errRefused, nil, "connection refused"},
		{"read timeout", errReadTimeout, nil, "i/o timeout"},
		{"DNS server failing", errDNSTemporary, nil, "server misbehaving"},
		{"server error", nil, &sqstest.FaultInternalError, "InternalError"},
		{"throttled", nil, &sqstest.FaultThrottled, "RequestThrottled"},
	}
	for _, tt := range tests {
		for _, vis := range []bool{false, true} {
			name := tt.name
			if vis {
				name += ", WithVisibilityTimeout"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					b := setup(t, nil)
					heal := time.Now().Add(2 * time.Minute)
					var client Client = b.client
					if tt.err != nil {
						client = firstContactClient(b, newFailingTransport(tt.err, heal))
					} else {
						// Enough for two minutes of backoff (at most 10 s each).
						b.srv.FailNext("GetQueueAttributes", 20, *tt.fault)
						b.srv.FailNext("ReceiveMessage", 20, *tt.fault)
					}
					id := b.send(t, 1)[0]
					done := make(chan struct{})
					opts := []Option{WithShutdownTimeout(5 * time.Second)}
					if vis {
						opts = append(opts, WithVisibilityTimeout(30*time.Second))
					}
					c, err := New(client, b.url, HandlerFunc(func(context.Context, *Message) error { close(done); return nil }), opts...)
					require.NoError(t, err)
					stop := running(t, c)

					time.Sleep(10 * time.Second)
					h := c.Health()
					require.True(t, h.Healthy, "within the startup limit: %v", h.Problems)
					require.Equal(t, "starting", h.Status)
					require.Contains(t, h.Retrying, tt.want, "Health says why")

					select {
					case <-done:
					case <-time.After(5 * time.Minute):
						require.Fail(t, "the message was not handled after the error healed")
					}
					time.Sleep(time.Second)
					require.True(t, b.state(t, id).Deleted)
					h = c.Health()
					require.True(t, h.Healthy, h.Problems)
					require.Empty(t, h.Retrying)
					require.NoError(t, stop(), "a clean shutdown")
				})
			})
		}
	}
}

// Once SQS has answered, the endpoint is known to be right: a host that
// stops resolving later (a DNS outage) is retried, not fatal.
func TestNoSuchHostAfterAnAnswerIsRetried(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ft := newFailingTransport(errNoSuchHost, time.Now().Add(-time.Second)) // passes for now
		c, err := New(firstContactClient(b, ft), b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second), WithShutdownTimeout(5*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(30 * time.Second)                           // answered
		ft.until.Store(time.Now().Add(time.Minute).UnixNano()) // the outage
		time.Sleep(2 * time.Minute)
		require.Equal(t, "running", c.Health().Status, "Run went on")
		require.NoError(t, stop())
	})
}

// cannotSucceed's verdicts, error class by error class.
func TestCannotSucceed(t *testing.T) {
	t.Parallel()
	for _, err := range []error{errNoSuchHost, errUnknownCA, errWrongHost, errNotTLS, tls.AlertError(42),
		&wrapped{Err: errUnknownCA}} {
		_, fatal := cannotSucceed(err)
		require.True(t, fatal, "%v", err)
	}
	for _, err := range []error{errDNSTemporary, errRefused, errReadTimeout, context.DeadlineExceeded, errors.New("EOF")} {
		_, fatal := cannotSucceed(err)
		require.False(t, fatal, "%v", err)
	}
}

// wrapped wraps as net/http's client's *url.Error does.
type wrapped struct{ Err error }

func (e *wrapped) Error() string { return "Post \"https://sqs\": " + e.Err.Error() }
func (e *wrapped) Unwrap() error { return e.Err }
