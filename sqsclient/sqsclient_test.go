package sqsclient_test

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqsclient"
)

// isolateAWSConfig points the SDK's configuration loader at nothing on this
// machine: no shared config or credentials files, no profile, no endpoint,
// no CA bundle (each case sets its own).
func isolateAWSConfig(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE":             filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_PROFILE":                 "",
		"AWS_DEFAULT_PROFILE":         "",
		"AWS_ENDPOINT_URL":            "",
		"AWS_ENDPOINT_URL_SQS":        "",
		"AWS_CA_BUNDLE":               "",
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		t.Setenv(k, v)
	}
}

// The documented set-up works with AWS_CA_BUNDLE set: config.LoadDefaultConfig
// applies the bundle to the SDK's own HTTP client, and NewFromConfig keeps that
// client (with the pool size set on it) under its wrapper. The server's
// certificate is self-signed, so a call succeeds only if the bundle was
// applied. Two controls: the set-up the issue tried (an *http.Client through
// config.WithHTTPClient) fails to load, and without the bundle the call
// fails verification. Real TLS on loopback; the SDK retries are off and each
// call has a 5 s ceiling. Not parallel: it sets environment variables.
func TestCABundle(t *testing.T) {
	srv, url, cert, _ := tlsServer(t)
	_, err := srv.CreateQueue("jobs", nil)
	require.NoError(t, err)
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600))

	load := func(t *testing.T, extra ...func(*config.LoadOptions) error) (aws.Config, error) {
		return config.LoadDefaultConfig(t.Context(), append([]func(*config.LoadOptions) error{
			config.WithRegion("us-east-1"),
			config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
			config.WithBaseEndpoint(url),
			config.WithRetryMaxAttempts(1),
		}, extra...)...)
	}
	call := func(t *testing.T, c *sqs.Client) error {
		ctx, cancel := context.WithTimeout(t.Context(), ceiling)
		defer cancel()
		_, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("jobs")})
		return err
	}

	for _, tc := range []struct {
		name string
		pool int
	}{
		{"the SDK's pool", 0},
		{"a pool of 64", 64},
	} {
		t.Run("with the bundle, "+tc.name, func(t *testing.T) {
			isolateAWSConfig(t)
			t.Setenv("AWS_CA_BUNDLE", bundle)
			cfg, err := load(t)
			require.NoError(t, err)
			c, err := sqsclient.NewFromConfig(cfg, sqsclient.HTTPOptions{MaxIdleConnsPerHost: tc.pool})
			require.NoError(t, err)
			require.NoError(t, call(t, c), "the bundle's certificate verified the server")

			inner, ok := sqsclient.Unwrap(c.Options().HTTPClient)
			require.True(t, ok, "the SQS client's HTTP client is this package's wrapper")
			b, ok := inner.(*awshttp.BuildableClient)
			require.True(t, ok, "under it, the SDK's own client (%T)", inner)
			tr := b.GetTransport()
			require.NotNil(t, tr.TLSClientConfig.RootCAs, "the CA bundle is still on it")
			want := tc.pool
			if want == 0 {
				want = awshttp.DefaultHTTPTransportMaxIdleConnsPerHost
			}
			require.Equal(t, want, tr.MaxIdleConnsPerHost)
			require.GreaterOrEqual(t, tr.MaxIdleConns, want)
		})
	}

	t.Run("an *http.Client through config.WithHTTPClient fails to load", func(t *testing.T) {
		isolateAWSConfig(t)
		t.Setenv("AWS_CA_BUNDLE", bundle)
		_, err := load(t, config.WithHTTPClient(&http.Client{}))
		require.ErrorContains(t, err, "has no WithTransportOptions")
	})

	t.Run("without the bundle the server is not trusted", func(t *testing.T) {
		isolateAWSConfig(t)
		cfg, err := load(t)
		require.NoError(t, err)
		c, err := sqsclient.NewFromConfig(cfg, sqsclient.HTTPOptions{})
		require.NoError(t, err)
		require.ErrorContains(t, call(t, c), "certificate signed by unknown authority")
	})
}

func TestHTTPOptionsErrors(t *testing.T) {
	t.Parallel()
	base := sqs.Options{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}
	for _, tc := range []struct {
		name string
		http aws.HTTPClient
		pool int
		want string
	}{
		{"negative pool", nil, -1, "sqsclient: HTTPOptions.MaxIdleConnsPerHost -1: must be from 0 (the SDK's default, 10) to 2048"},
		{"pool over the limit", nil, 2049, "MaxIdleConnsPerHost 2049: must be from 0"},
		{"pool on a client of another type", &http.Client{}, 64, "MaxIdleConnsPerHost 64 can be set only on the SDK's own HTTP client (*awshttp.BuildableClient); this SQS client's is a *http.Client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := base
			o.HTTPClient = tc.http
			c, err := sqsclient.New(o, sqsclient.HTTPOptions{MaxIdleConnsPerHost: tc.pool})
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, c)
			c, err = sqsclient.NewFromConfig(aws.Config{Region: "us-east-1", HTTPClient: tc.http}, sqsclient.HTTPOptions{MaxIdleConnsPerHost: tc.pool})
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, c)
		})
	}

	t.Run("a client of another type is wrapped as it is", func(t *testing.T) {
		t.Parallel()
		o := base
		own := &http.Client{}
		o.HTTPClient = own
		c, err := sqsclient.New(o, sqsclient.HTTPOptions{})
		require.NoError(t, err)
		inner, ok := sqsclient.Unwrap(c.Options().HTTPClient)
		require.True(t, ok)
		require.Same(t, own, inner)
	})
	t.Run("an option of the caller's setting the HTTP client comes first", func(t *testing.T) {
		t.Parallel()
		own := &http.Client{}
		c, err := sqsclient.New(base, sqsclient.HTTPOptions{}, func(o *sqs.Options) { o.HTTPClient = own })
		require.NoError(t, err)
		inner, ok := sqsclient.Unwrap(c.Options().HTTPClient)
		require.True(t, ok)
		require.Same(t, own, inner)
	})
	t.Run("wrapped once", func(t *testing.T) {
		t.Parallel()
		c, err := sqsclient.New(base, sqsclient.HTTPOptions{})
		require.NoError(t, err)
		again, err := sqsclient.New(c.Options(), sqsclient.HTTPOptions{MaxIdleConnsPerHost: 32})
		require.NoError(t, err)
		inner, ok := sqsclient.Unwrap(again.Options().HTTPClient)
		require.True(t, ok)
		_, twice := sqsclient.Unwrap(inner)
		require.False(t, twice, "a wrapper around a wrapper")
		require.Equal(t, 32, inner.(*awshttp.BuildableClient).GetTransport().MaxIdleConnsPerHost)
	})
}

// recorder is an aws.HTTPClient that records the request it is given.
type recorder struct{ got *http.Request }

func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	r.got = req
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// closedEOF behaves like smithy-go's request body: once closed, Read and
// WriteTo return io.EOF.
type closedEOF struct {
	r      *strings.Reader
	closed bool
}

func (b *closedEOF) Read(p []byte) (int, error) {
	if b.closed {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

func (b *closedEOF) WriteTo(w io.Writer) (int64, error) {
	if b.closed {
		return 0, io.EOF
	}
	return b.r.WriteTo(w)
}

func (b *closedEOF) Close() error { b.closed = true; return nil }

type failing struct{ closed bool }

var errDisk = errors.New("disk on fire")

func (f *failing) Read([]byte) (int, error) { return 0, errDisk }
func (f *failing) Close() error             { f.closed = true; return nil }

// wrapped returns this package's wrapper around next, through New.
func wrapped(t *testing.T, next aws.HTTPClient) aws.HTTPClient {
	t.Helper()
	c, err := sqsclient.New(sqs.Options{Region: "us-east-1", HTTPClient: next}, sqsclient.HTTPOptions{})
	require.NoError(t, err)
	return c.Options().HTTPClient
}

func TestRebufferingDo(t *testing.T) {
	t.Parallel()
	t.Run("the body below is a private copy", func(t *testing.T) {
		t.Parallel()
		const payload = `{"QueueUrl":"https://x/123456789012/q"}`
		body := &closedEOF{r: strings.NewReader(payload)}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://127.0.0.1:1/", body)
		require.NoError(t, err)
		req.ContentLength = int64(len(payload))
		req.Header.Set("X-Amz-Target", "AmazonSQS.ReceiveMessage")
		rec := &recorder{}
		_, err = wrapped(t, rec).Do(req)
		require.NoError(t, err)
		require.True(t, body.closed, "the caller's body is closed, as a client closes it")
		got := rec.got
		require.NotSame(t, req, got, "the caller's request is not modified")
		require.Same(t, body, req.Body)
		require.Equal(t, "AmazonSQS.ReceiveMessage", got.Header.Get("X-Amz-Target"))
		require.Equal(t, int64(len(payload)), got.ContentLength)
		_, isWriterTo := got.Body.(io.WriterTo)
		require.True(t, isWriterTo, "an in-memory body net/http knows (io.NopCloser of a *bytes.Reader)")
		b, err := io.ReadAll(got.Body)
		require.NoError(t, err)
		require.Equal(t, payload, string(b), "it survives the caller's close")
		again, err := got.GetBody()
		require.NoError(t, err)
		b, err = io.ReadAll(again)
		require.NoError(t, err)
		require.Equal(t, payload, string(b), "GetBody gives a fresh copy")
	})
	t.Run("no body is passed through", func(t *testing.T) {
		t.Parallel()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://127.0.0.1:1/", http.NoBody)
		require.NoError(t, err)
		rec := &recorder{}
		_, err = wrapped(t, rec).Do(req)
		require.NoError(t, err)
		require.Same(t, req, rec.got)
	})
	t.Run("a body that fails to read fails the request and is closed", func(t *testing.T) {
		t.Parallel()
		body := &failing{}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://127.0.0.1:1/", body)
		require.NoError(t, err)
		rec := &recorder{}
		_, err = wrapped(t, rec).Do(req)
		require.ErrorIs(t, err, errDisk)
		require.ErrorContains(t, err, "sqsclient: reading the request body")
		require.Nil(t, rec.got, "the client below is not called")
		require.True(t, body.closed)
	})
}

// The package is part of the root module's library: it pulls in nothing
// but the standard library and the AWS SDK.
func TestDependencies(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, pkg := range strings.Fields(string(out)) {
		first := strings.SplitN(pkg, "/", 2)[0]
		if !strings.Contains(first, ".") || strings.HasPrefix(pkg, "vendor/") {
			continue // standard library
		}
		ok := strings.HasPrefix(pkg, "github.com/aws/aws-sdk-go-v2") ||
			strings.HasPrefix(pkg, "github.com/aws/smithy-go") ||
			pkg == "github.com/sqskit/sqsconsumer/sqsclient"
		require.True(t, ok, "sqsclient depends on %s", pkg)
	}
}

// A Consumer sees the pool of a client made here, through the wrapper,
// and starts its calls in flight at it (from where they follow what the
// client sustains).
func TestConsumerSeesThePool(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 64} {
		client, err := sqsclient.New(sqs.Options{Region: "us-east-1", Credentials: aws.AnonymousCredentials{}}, sqsclient.HTTPOptions{MaxIdleConnsPerHost: n})
		require.NoError(t, err)
		c, err := sqsconsumer.New(client, "https://sqs.us-east-1.amazonaws.com/123456789012/q",
			sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil }))
		require.NoError(t, err)
		want := n
		if n == 0 {
			want = awshttp.DefaultHTTPTransportMaxIdleConnsPerHost
		}
		st := c.Stats()
		require.Equal(t, want, st.IdleConnsPerHost)
		require.Equal(t, min(want, (10+1000+9)/10+1), st.MaxCallsInFlight, "the pool, at most what the read-ahead could ask for")
	}
}
