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
}

// parsePool parses one -pool entry: "default" or a number of idle
// connections per host.
func parsePool(s string) (clientSpec, error) {
	if s == "default" {
		return clientSpec{}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 10_000 {
		return clientSpec{}, fmt.Errorf("-pool %q: want default or a number of idle connections per host from 1 to 10000", s)
	}
	return clientSpec{pool: n}, nil
}

// String names the client in a table's client column.
func (c clientSpec) String() string {
	if c.pool == 0 {
		return fmt.Sprintf("SDK default (%d idle/host)", awshttp.DefaultHTTPTransportMaxIdleConnsPerHost)
	}
	return fmt.Sprintf("SDK, pool %d idle/host", c.pool)
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

// newSQSClient is an SQS client for endpoint with static credentials and a
// fixed region, never the default AWS configuration: this is a benchmark
// against a local endpoint, and ambient AWS settings must not change it
// (AWS_CA_BUNDLE, for one, makes config.LoadDefaultConfig refuse a client
// it cannot add the bundle to).
func newSQSClient(endpoint string, hc sqs.HTTPClient) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   hc,
	})
}

// pools formats a list of clients for a header.
func pools(cs []clientSpec) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}
