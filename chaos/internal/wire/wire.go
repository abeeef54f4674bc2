// Package wire builds the SQS clients of the chaos suite's processes.
package wire

import (
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// PIDHeader carries the sending process's id on every request, so the
// fault proxy can tell which worker a receive answer was handed to.
const PIDHeader = "X-Chaos-Pid"

// Client returns an *sqs.Client for the endpoint (an sqstest server or the
// fault proxy in front of one) with static credentials, the SDK's default
// retries, and each request tagged with pid (0: no tag).
//
// The request body is re-buffered before net/http sees it
// (sqstest.RebufferingTransport): without
// that, aws-sdk-go-v2 against a fast local server can silently retry a
// request whose answer it already had (package sqstest's documentation,
// "Over a real socket"), and a retried receive strands the first answer's
// messages for a visibility timeout — a delay this suite would otherwise
// blame on the library.
func Client(endpoint string, pid int) *sqs.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	var rt http.RoundTripper = tagged{next: sqstest.RebufferingTransport(tr), pid: pid}
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("chaos", "chaos", ""),
		HTTPClient:   &http.Client{Transport: rt, Timeout: 60 * time.Second},
	})
}

// tagged adds the process id header to every request.
type tagged struct {
	next http.RoundTripper
	pid  int
}

func (t tagged) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.pid == 0 {
		return t.next.RoundTrip(req)
	}
	own := req.Clone(req.Context())
	own.Header.Set(PIDHeader, strconv.Itoa(t.pid))
	return t.next.RoundTrip(own)
}
