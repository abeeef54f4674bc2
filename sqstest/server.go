package sqstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Defaults of a new [Server].
const (
	DefaultBaseURL   = "http://sqstest.local"
	DefaultAccountID = "123456789012"
	DefaultRegion    = "us-east-1"
)

// maxRequestBytes bounds what the server reads of one request body. Real SQS accepts
// batches up to 1 MiB of payload; JSON escaping and base64 can more than double that.
const maxRequestBytes = 8 << 20

type config struct {
	baseURL      string
	accountID    string
	region       string
	historyLimit int
}

// Option configures a [Server].
type Option func(*config)

// WithBaseURL sets the prefix of queue URLs and the client endpoint, e.g.
// "http://127.0.0.1:9324". Default [DefaultBaseURL]. A trailing slash is dropped.
func WithBaseURL(u string) Option {
	return func(c *config) { c.baseURL = strings.TrimRight(u, "/") }
}

// WithAccountID sets the account id used in queue URLs and ARNs. Default
// [DefaultAccountID].
func WithAccountID(id string) Option { return func(c *config) { c.accountID = id } }

// WithRegion sets the region used in queue ARNs and by [Server.Client]. Default
// [DefaultRegion].
func WithRegion(r string) Option { return func(c *config) { c.region = r } }

// WithHistoryLimit bounds the history the server keeps for inspection: per queue, at
// most n messages that have left it (deleted, moved to a dead-letter queue, expired
// or purged); older ones are forgotten. A forgotten message no longer appears in
// [Server.Messages] or [Server.Message], and its receipt handles answer as never
// issued (ReceiptHandleIsInvalid) instead of as SQS answers for a deleted message (a
// delete succeeds, a visibility change fails). Messages still in the queue
// and all their handles are always kept.
//
// The default, n <= 0, keeps everything for the server's lifetime, which is what
// tests want; a long-running server (cmd/sqstest) should set a limit so that its
// memory stays bounded.
func WithHistoryLimit(n int) Option { return func(c *config) { c.historyLimit = n } }

// Server is an in-memory SQS. It is safe for concurrent use. The zero value is not
// usable: make one with [New] or [NewServer].
//
// In testing/synctest, use a server from one bubble only (create it inside the
// bubble): a long poll waits on a channel and a timer of the bubble it runs in, and
// only goroutines of that bubble may wake it.
type Server struct {
	cfg config

	mu sync.Mutex // guards every field below and all queue and message state
	// queues by name.
	queues map[string]*queue
	// deletedAt remembers when a queue name was deleted (QueueDeletedRecently).
	deletedAt map[string]time.Time
	// handles maps every receipt handle issued to its receive, except those of
	// messages forgotten (WithHistoryLimit, DeleteQueue).
	handles     map[string]*handleRef
	calls       map[string]int
	faults      map[string][]Fault // per action, consumed front first
	delays      map[string][]time.Duration
	entryFaults map[string][]Fault
	// waiters are the long polls blocked right now, each with its own channel (made
	// by the waiting goroutine, so it belongs to the caller's synctest bubble).
	waiters map[chan struct{}]struct{}
	// tasks are the active message move tasks (movetask.go).
	tasks  []*moveTask
	closed bool
}

// NewServer returns a Server with no queues.
func NewServer(opts ...Option) *Server {
	cfg := config{baseURL: DefaultBaseURL, accountID: DefaultAccountID, region: DefaultRegion}
	for _, o := range opts {
		o(&cfg)
	}
	return &Server{
		cfg:         cfg,
		queues:      map[string]*queue{},
		deletedAt:   map[string]time.Time{},
		handles:     map[string]*handleRef{},
		calls:       map[string]int{},
		faults:      map[string][]Fault{},
		delays:      map[string][]time.Duration{},
		entryFaults: map[string][]Fault{},
		waiters:     map[chan struct{}]struct{}{},
	}
}

// New is [NewServer] plus t.Cleanup(s.Close).
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := NewServer(opts...)
	t.Cleanup(s.Close)
	return s
}

// Close ends every long poll in progress (they answer with no messages) and makes
// every later request fail with 503 ServiceUnavailable. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.notifyLocked()
}

// BaseURL is the prefix of this server's queue URLs.
func (s *Server) BaseURL() string { return s.cfg.baseURL }

// Handler serves the AWS JSON 1.0 protocol over a real listener (httptest.NewServer,
// cmd/sqstest). Requests are routed by the QueueUrl in the body, so any host works.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Transport returns an in-memory RoundTripper: it runs the request in the calling
// goroutine and returns the answer; no socket, no goroutine. Inside a synctest bubble
// a long poll blocks only on the bubble's timers and channels, so virtual time runs.
func (s *Server) Transport() http.RoundTripper { return transport{s} }

// Client returns an SQS client wired to this server through [Server.Transport]: static
// credentials ("test", "test"), the server's region and BaseEndpoint = the base URL.
// optFns are applied last.
func (s *Server) Client(optFns ...func(*sqs.Options)) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       s.cfg.region,
		BaseEndpoint: aws.String(s.cfg.baseURL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "sqstest"}, nil
		}),
		HTTPClient: &http.Client{Transport: s.Transport()},
	}, optFns...)
}

type transport struct{ s *Server }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxRequestBytes+1))
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	ans := t.s.serve(req.Context(), req.Header, body)
	if ans.aborted != nil {
		return nil, ans.aborted
	}
	return &http.Response{
		Status:        http.StatusText(ans.status),
		StatusCode:    ans.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        ans.header,
		Body:          io.NopCloser(bytes.NewReader(ans.body)),
		ContentLength: int64(len(ans.body)),
		Request:       req,
	}, nil
}

func (s *Server) serveHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxRequestBytes+1))
	if err != nil {
		return
	}
	ans := s.serve(req.Context(), req.Header, body)
	if ans.aborted != nil {
		return
	}
	for k, v := range ans.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(ans.body)))
	w.WriteHeader(ans.status)
	_, _ = w.Write(ans.body)
}

// answer is one response, or aborted when the caller's context ended before the
// server answered.
type answer struct {
	status  int
	header  http.Header
	body    []byte
	aborted error
}

const targetPrefix = "AmazonSQS."

// serve runs one request: count it, apply injected delays and faults, decode the
// body, run the action. Of the request's HTTP headers it reads X-Amz-Target and
// X-Amzn-Trace-Id.
func (s *Server) serve(ctx context.Context, hdr http.Header, body []byte) answer {
	target := hdr.Get("X-Amz-Target")
	if th := hdr.Get("X-Amzn-Trace-Id"); th != "" {
		ctx = context.WithValue(ctx, traceHeaderKey{}, th)
	}
	action, ok := strings.CutPrefix(target, targetPrefix)
	if !ok || action == "" {
		return errorAnswer(errUnknownOperation.withMessage("Unknown operation %q.", target))
	}
	s.mu.Lock()
	s.calls[action]++
	closed := s.closed
	delay := popFront(s.delays, action)
	fault, faulted := popFrontOK(s.faults, action)
	s.mu.Unlock()
	if closed {
		return errorAnswer(errServerClosed)
	}
	if faulted {
		delay += fault.Delay
	}
	if delay > 0 {
		if err := sleep(ctx, delay); err != nil {
			return answer{aborted: err}
		}
	}
	if faulted {
		return errorAnswer(fault)
	}
	h, known := actions[action]
	if !known {
		return errorAnswer(errUnknownOperation.withMessage("Unknown operation %s.", action))
	}
	if len(body) > maxRequestBytes {
		return errorAnswer(errBatchTooLong.withMessage("Batch requests cannot be longer than 1048576 bytes. You have sent %d bytes.", len(body)))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	out, err := h(s, ctx, body)
	if err != nil {
		var f Fault
		if errors.As(err, &f) {
			return errorAnswer(f)
		}
		if ctx.Err() != nil {
			return answer{aborted: err}
		}
		return errorAnswer(FaultInternalError.withMessage("%v", err))
	}
	return jsonAnswer(http.StatusOK, out)
}

// traceHeaderKey is the context key of a request's X-Amzn-Trace-Id header.
type traceHeaderKey struct{}

// traceHeader returns the X-Amzn-Trace-Id header of the request ctx belongs to.
func traceHeader(ctx context.Context) string {
	v, _ := ctx.Value(traceHeaderKey{}).(string)
	return v
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func errorAnswer(f Fault) answer {
	a := jsonAnswer(f.Status, errorBody{Type: f.wireType(), Message: f.Message})
	f.header(a.header)
	return a
}

func jsonAnswer(status int, v any) answer {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"__type":"com.amazonaws.sqs#InternalError","message":"sqstest: cannot encode answer"}`)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("x-amzn-RequestId", newUUID())
	return answer{status: status, header: h, body: b}
}

func popFront[T any](m map[string][]T, k string) T {
	v, _ := popFrontOK(m, k)
	return v
}

func popFrontOK[T any](m map[string][]T, k string) (T, bool) {
	var zero T
	l := m[k]
	if len(l) == 0 {
		return zero, false
	}
	v := l[0]
	if len(l) == 1 {
		delete(m, k)
	} else {
		m[k] = l[1:]
	}
	return v, true
}

// Calls returns the number of requests per action name ("ReceiveMessage", ...) since
// the start or the last [Server.ResetCalls], requests answered with an injected fault
// included. Helper methods of Server are not counted.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		m[k] = v
	}
	return m
}

// CallCount returns the number of requests of one action, as in [Server.Calls].
func (s *Server) CallCount(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[action]
}

// ResetCalls sets every call count to zero.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.calls)
}

// FailNext makes the next n requests of action answer with f (after f.Delay), without
// running the action. Faults queue up behind those already pending.
func (s *Server) FailNext(action string, n int, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[action] = append(s.faults[action], f)
	}
}

// DelayNext makes the next n requests of action wait d before they run. A request
// whose context ends while waiting is abandoned without effect.
func (s *Server) DelayNext(action string, n int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.delays[action] = append(s.delays[action], d)
	}
}

// FailNextEntries makes the next n entries of the batch action
// (ChangeMessageVisibilityBatch, DeleteMessageBatch or SendMessageBatch) fail in the
// result's Failed[] with code f.Code(), message f.Message and SenderFault when
// f.Status < 500, without effect on their message. Each entry of a batch that passed
// the batch-wide checks consumes one pending fault, in entry order, before it runs.
func (s *Server) FailNextEntries(action string, n int, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.entryFaults[action] = append(s.entryFaults[action], f)
	}
}

// takeEntryFaultLocked pops an injected per-entry fault for action. s.mu must be held.
func (s *Server) takeEntryFaultLocked(action string) (Fault, bool) {
	return popFrontOK(s.entryFaults, action)
}

// notifyLocked wakes every waiting long poll; each re-examines its queue.
func (s *Server) notifyLocked() {
	for ch := range s.waiters {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
