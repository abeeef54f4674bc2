package main

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer/sqsclient"
)

// clientSpec is the HTTP client every contender's SQS client is built with:
// the SDK's own, awshttp.NewBuildableClient(), which is what
// sqs.NewFromConfig gives a user who sets no HTTP client, changed only to
// trust the bench's certificate and, if pool > 0, to keep more idle
// connections. It stays a *awshttp.BuildableClient, so a library that
// inspects its client's pool sees what it would see in a user's process.
type clientSpec struct {
	// pool is the transport's MaxIdleConnsPerHost; 0 keeps the SDK's
	// default (awshttp.DefaultHTTPTransportMaxIdleConnsPerHost, 10).
	pool int
	// sqsclient builds the SQS client with package sqsclient (the SDK's
	// client, its pool set by sqsclient.HTTPOptions, each request body
	// copied), as the library's README tells users to for a larger pool.
	sqsclient bool
}

// parsePool parses one -pool entry: "default" or a number of idle
// connections per host, either prefixed "sqsclient:" to build the client
// with package sqsclient.
func parsePool(s string) (clientSpec, error) {
	var c clientSpec
	if rest, ok := strings.CutPrefix(s, "sqsclient:"); ok {
		c.sqsclient, s = true, rest
	}
	if s == "default" {
		return c, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 10_000 {
		return clientSpec{}, fmt.Errorf("-pool %q: want default or a number of idle connections per host from 1 to 10000, either prefixed with sqsclient: (e.g. sqsclient:64)", s)
	}
	c.pool = n
	return c, nil
}

// String names the client in a table's client column.
func (c clientSpec) String() string {
	var s string
	if c.pool == 0 {
		s = fmt.Sprintf("SDK default (%d idle/host)", awshttp.DefaultHTTPTransportMaxIdleConnsPerHost)
	} else {
		s = fmt.Sprintf("SDK, pool %d idle/host", c.pool)
	}
	if c.sqsclient {
		s += " via sqsclient"
	}
	return s
}

// describe says what the client is, for report headers; tls says whether
// it trusts the bench's certificate.
func (c clientSpec) describe(tls bool) string {
	var s string
	if c.pool == 0 {
		s = fmt.Sprintf("the SDK's default HTTP client (awshttp.NewBuildableClient(), as sqs.NewFromConfig builds it: MaxIdleConnsPerHost %d, MaxIdleConns %d)",
			awshttp.DefaultHTTPTransportMaxIdleConnsPerHost, awshttp.DefaultHTTPTransportMaxIdleConns)
	} else {
		s = fmt.Sprintf("the SDK's HTTP client (awshttp.NewBuildableClient()) with MaxIdleConnsPerHost %d (MaxIdleConns %d)",
			c.pool, max(c.pool, awshttp.DefaultHTTPTransportMaxIdleConns))
	}
	if c.sqsclient {
		s += ", built by sqsclient.New (the pool set by sqsclient.HTTPOptions, each request body copied)"
	}
	if tls {
		s += ", trusting the bench's certificate"
	}
	return s
}

// httpClient builds the client; roots is the certificate pool to trust
// (nil over plain HTTP).
func (c clientSpec) httpClient(roots *x509.CertPool) *awshttp.BuildableClient {
	hc := awshttp.NewBuildableClient()
	var opts []func(*http.Transport)
	if roots != nil {
		opts = append(opts, func(tr *http.Transport) { tr.TLSClientConfig.RootCAs = roots })
	}
	if c.pool > 0 {
		opts = append(opts, func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = c.pool
			tr.MaxIdleConns = max(tr.MaxIdleConns, c.pool)
		})
	}
	if len(opts) > 0 {
		hc = hc.WithTransportOptions(opts...)
	}
	return hc
}

// sqsClient is an SQS client for endpoint over a new HTTP client of c's
// kind trusting roots (nil over plain HTTP), its calls traced by trace
// when it is not nil.
func (c clientSpec) sqsClient(endpoint string, roots *x509.CertPool, trace *actionTrace) *sqs.Client {
	var hc sqs.HTTPClient = c.httpClient(roots)
	if trace != nil {
		hc = tracedHTTP{next: hc, t: trace}
	}
	if !c.sqsclient {
		return newSQSClient(endpoint, hc)
	}
	// The pool is set on the SDK's client already (httpClient), as
	// sqsclient.HTTPOptions{MaxIdleConnsPerHost: c.pool} would set it
	// (which it can only on the SDK's own client, not on the tracing
	// wrapper).
	client, err := sqsclient.New(sqsOptions(endpoint, hc), sqsclient.HTTPOptions{})
	if err != nil {
		panic(err) // HTTPOptions{} is always valid
	}
	return client
}

// newSQSClient is an SQS client for endpoint with static credentials and a
// fixed region, never the default AWS configuration: this is a benchmark
// against a local endpoint, and ambient AWS settings must not change it
// (AWS_CA_BUNDLE, for one, makes config.LoadDefaultConfig refuse a client
// it cannot add the bundle to).
func newSQSClient(endpoint string, hc sqs.HTTPClient) *sqs.Client {
	return sqs.New(sqsOptions(endpoint, hc))
}

func sqsOptions(endpoint string, hc sqs.HTTPClient) sqs.Options {
	return sqs.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   hc,
	}
}

// pools formats a list of clients for a header.
func pools(cs []clientSpec) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}
