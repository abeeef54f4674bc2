package interop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// envEndpoint names the variable that switches the suite on.
const envEndpoint = "SQSCONSUMER_FAUXQS_ENDPOINT"

const skipMessage = "set " + envEndpoint + "=http://127.0.0.1:PORT (see .ci/setup.d/10-fauxqs.sh) to run the fauxqs differential suite"

// Implementation names, also the subtest names.
const (
	implSQSTest = "sqstest"
	implFauxqs  = "fauxqs"
)

// differential runs scenario once against sqstest (served on a loopback
// listener) and once against fauxqs, in parallel subtests, then compares what
// both observed (see compareRecords). Both runs go through a real *sqs.Client
// over real sockets, so the scenarios use short real timeouts (1–2 s).
func differential(t *testing.T, scenario func(t *testing.T, s *session)) {
	t.Helper()
	endpoint := os.Getenv(envEndpoint)
	if endpoint == "" {
		t.Skip(skipMessage)
	}
	t.Parallel()

	starts := []struct {
		name  string
		start func(t *testing.T) string
	}{
		{implSQSTest, startSQSTest},
		{implFauxqs, func(*testing.T) string { return endpoint }},
	}
	recs := make(map[string]*record, len(starts))
	prefix := queuePrefix(t)
	for _, st := range starts {
		rec := &record{vals: map[string]observation{}}
		recs[st.name] = rec
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s := &session{t: t, impl: st.name, c: newClient(t, st.start(t)), rec: rec, prefix: prefix}
			scenario(t, s)
			rec.finished = !t.Failed()
		})
	}
	// Cleanup of the parent runs after its parallel subtests have finished.
	t.Cleanup(func() { compareRecords(t, recs[implSQSTest], recs[implFauxqs]) })
}

// startSQSTest serves a fresh sqstest server on a loopback listener and
// returns its endpoint.
func startSQSTest(t *testing.T) string {
	ts := httptest.NewUnstartedServer(nil)
	url := "http://" + ts.Listener.Addr().String()
	srv := sqstest.NewServer(sqstest.WithBaseURL(url))
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		srv.Close()
	})
	return url
}

// newClient builds the SDK client exactly as a user would for a custom
// endpoint (never config.LoadDefaultConfig: the suite must not depend on the
// machine's AWS configuration). Retries are off so every answer is seen as
// the server gave it.
func newClient(t *testing.T, endpoint string) *sqs.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   hc,
		Retryer:      aws.NopRetryer{},
	})
}

var nonNameChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// queuePrefix gives the queues of one test a name unique across tests and
// runs (fauxqs is shared by the whole suite and may outlive one run).
func queuePrefix(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(t.Name(), "Test")
	name = nonNameChars.ReplaceAllString(name, "-")
	if len(name) > 50 {
		name = name[:50]
	}
	return name + "-" + hex.EncodeToString(b)
}

// session is one implementation's run of one scenario.
type session struct {
	t      *testing.T
	impl   string
	c      *sqs.Client
	rec    *record
	prefix string
}

func (s *session) ctx() context.Context { return s.t.Context() }

// name returns a queue name unique to this test; suffix distinguishes the
// queues of one scenario (".fifo" is kept at the end).
func (s *session) name(suffix string) string {
	if base, ok := strings.CutSuffix(suffix, ".fifo"); ok {
		return s.prefix + "-" + base + ".fifo"
	}
	return s.prefix + "-" + suffix
}

// queue creates a queue and returns its URL; failing to create it ends the
// subtest.
func (s *session) queue(suffix string, attrs map[string]string) string {
	s.t.Helper()
	out, err := s.c.CreateQueue(s.ctx(), &sqs.CreateQueueInput{
		QueueName:  aws.String(s.name(suffix)),
		Attributes: attrs,
	})
	if err != nil {
		s.t.Fatalf("%s: CreateQueue %s: %v", s.impl, suffix, err)
	}
	return aws.ToString(out.QueueUrl)
}

// An expectation is what AWS answers at a step, where that is known.
//
// fact names the evidence for AWS's answer, in these terms:
//   - "recorded": a real AWS response recorded by LocalStack's AWS-validated
//     SQS tests (github.com/localstack/localstack,
//     tests/aws/services/sqs/test_sqs.py with its snapshot file);
//   - "SDK <file>": the API documentation in aws-sdk-go-v2 service/sqs, e.g.
//     api_op_SendMessage.go;
//   - "model": the SQS Smithy model as aws-sdk-go-v2 service/sqs compiles it
//     (schemas/schemas.go): each error's HTTP status and query code;
//   - "SDK error decoding": how smithy-go's awsjson protocol turns an error
//     response into the error the client returns;
//   - "Developer Guide '<title>'": a page of the Amazon SQS Developer Guide;
//   - "report <repo>#<n>": a user's or maintainer's report, weaker evidence;
//   - "UNCONFIRMED": nothing establishes AWS's answer.
type expectation struct {
	mode  expectMode
	value string
	fact  string // the evidence behind it, as above
}

type expectMode int

const (
	sameAcross  expectMode = iota // no AWS claim: the two implementations must agree
	awsEquals                     // sqstest must answer value exactly
	awsContains                   // sqstest's answer must contain value
	infoOnly                      // UNCONFIRMED for AWS: differences are only logged
)

type observation struct {
	got  string
	want expectation
}

// record is the ordered list of observations of one run.
type record struct {
	mu       sync.Mutex
	steps    []string
	vals     map[string]observation
	finished bool
}

func (r *record) add(t *testing.T, step, got string, want expectation) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.vals[step]; dup {
		t.Errorf("scenario bug: step %q recorded twice", step)
		return
	}
	r.steps = append(r.steps, step)
	r.vals[step] = observation{got: got, want: want}
}

// see records a value the two implementations must agree on.
func (s *session) see(step, got string) { s.t.Helper(); s.rec.add(s.t, step, got, expectation{}) }

// seef is see with fmt.Sprintf formatting.
func (s *session) seef(step, format string, args ...any) {
	s.t.Helper()
	s.rec.add(s.t, step, fmt.Sprintf(format, args...), expectation{})
}

// aws records a value for which AWS's answer is known (fact says how).
func (s *session) aws(step, got, want, fact string) {
	s.t.Helper()
	s.rec.add(s.t, step, got, expectation{mode: awsEquals, value: want, fact: fact})
}

// awsText records an error message that must contain AWS's wording.
func (s *session) awsText(step, msg, want, fact string) {
	s.t.Helper()
	s.rec.add(s.t, step, msg, expectation{mode: awsContains, value: want, fact: fact})
}

// info records a value AWS has not pinned down; differences are only logged.
func (s *session) info(step, got, why string) {
	s.t.Helper()
	s.rec.add(s.t, step, got, expectation{mode: infoOnly, fact: why})
}

func (e expectation) matches(got string) bool {
	switch e.mode {
	case awsEquals:
		return got == e.value
	case awsContains:
		return strings.Contains(got, e.value)
	}
	return true
}

// compareRecords applies the suite's rule: sqstest must match AWS wherever
// AWS's answer is known; fauxqs must match sqstest (or AWS)
// unless the difference is a known divergence (divergences_test.go), which is
// logged, not failed.
func compareRecords(t *testing.T, fake, faux *record) {
	t.Helper()
	if !fake.finished || !faux.finished {
		t.Logf("a run failed; comparison skipped")
		return
	}
	test := t.Name()
	for _, step := range fake.steps {
		o := fake.vals[step]
		if !o.want.matches(o.got) {
			t.Errorf("sqstest differs from AWS at %q:\n  got:  %q\n  want: %q (source: %s)", step, o.got, o.want.value, o.want.fact)
		}
		f, ok := faux.vals[step]
		if !ok {
			if d, known := lookupDivergence(test, step); known {
				markSeen(test, step, true)
				t.Logf("known fauxqs divergence: step %q not reached on fauxqs: %s", step, d.summary())
				continue
			}
			t.Errorf("step %q: recorded by sqstest only", step)
			continue
		}
		if f.got == o.got {
			markSeen(test, step, false)
			continue
		}
		if o.want.mode == infoOnly {
			t.Logf("differs at %q (AWS unconfirmed: %s):\n  sqstest: %q\n  fauxqs:  %q", step, o.want.fact, o.got, f.got)
			continue
		}
		if wd, known := lookupWireDivergence(f.got, o.got); known {
			t.Logf("known fauxqs wire divergence at %q (%s): sqstest %q, fauxqs %q", step, wd.name, o.got, f.got)
			continue
		}
		if d, known := lookupDivergence(test, step); known {
			markSeen(test, step, true)
			t.Logf("known fauxqs divergence at %q: %s\n  sqstest: %q\n  fauxqs:  %q", step, d.summary(), o.got, f.got)
			continue
		}
		if (o.want.mode == awsEquals || o.want.mode == awsContains) && o.want.matches(f.got) {
			continue // both within what AWS is known to answer (e.g. wording)
		}
		t.Errorf("unrecorded difference at %q (add it to divergences_test.go if fauxqs is the one that is wrong):\n  sqstest: %q\n  fauxqs:  %q", step, o.got, f.got)
	}
	for _, step := range faux.steps {
		if _, ok := fake.vals[step]; !ok {
			if _, known := lookupDivergence(test, step); known {
				markSeen(test, step, true)
				continue
			}
			t.Errorf("step %q: recorded by fauxqs only", step)
		}
	}
}

// errString describes an error as the Go SDK presents it: the concrete API
// error type found by errors.As and its ErrorCode. "ok" for nil.
func errString(err error) string {
	if err == nil {
		return "ok"
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return fmt.Sprintf("%T %s", ae, ae.ErrorCode())
	}
	return "not an API error: " + err.Error()
}

// errMessage is the API error's message, or "" without an API error.
func errMessage(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorMessage()
	}
	return ""
}

// Error descriptions as errString renders them.
const (
	answerOK                     = "ok"
	errInvalidParameterValue     = "*smithy.GenericAPIError InvalidParameterValue"
	errMissingParameter          = "*smithy.GenericAPIError MissingParameter"
	errReceiptHandleIsInvalid    = "*types.ReceiptHandleIsInvalid ReceiptHandleIsInvalid"
	errQueueDoesNotExist         = "*types.QueueDoesNotExist AWS.SimpleQueueService.NonExistentQueue"
	errQueueNameExists           = "*types.QueueNameExists QueueAlreadyExists"
	errInvalidAttributeName      = "*types.InvalidAttributeName InvalidAttributeName"
	errTooManyEntries            = "*types.TooManyEntriesInBatchRequest AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
	errEmptyBatch                = "*types.EmptyBatchRequest AWS.SimpleQueueService.EmptyBatchRequest"
	errIDsNotDistinct            = "*types.BatchEntryIdsNotDistinct AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
	errInvalidBatchEntryID       = "*types.InvalidBatchEntryId AWS.SimpleQueueService.InvalidBatchEntryId"
	errBatchRequestTooLong       = "*types.BatchRequestTooLong AWS.SimpleQueueService.BatchRequestTooLong"
	errPurgeQueueInProgress      = "*types.PurgeQueueInProgress AWS.SimpleQueueService.PurgeQueueInProgress"
	errInvalidMessageContents    = "*types.InvalidMessageContents InvalidMessageContents"
	factErrorMapping             = "model status and query code; SDK error decoding"
	factHandles                  = "receipt-handle cases (see sqstest/doc.go)"
	factLimits                   = "SDK api_op_*Batch.go; Developer Guide 'Amazon SQS message quotas'"
	factBatchRules               = "batch rules (recorded)"
	textHandleNotAvailable       = "Message does not exist or is not available for visibility timeout change"
	textHandleExpired            = "The receipt handle has expired"
	textMaxNumberOfMessagesRange = "Must be between 1 and 10, if provided."
	textWaitTimeSecondsRange     = "Must be >= 0 and <= 20, if provided."
)
