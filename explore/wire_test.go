package explore

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// The wire is one process's connection to the in-memory server: it
// injects faults on that process's calls without touching the server's
// shared fault queues (so that a fault meant for one Consumer's call never
// lands on another's), and records every call: the receipt handles each
// receive delivered (or lost), and each delete and visibility change and
// what SQS answered, in the run's global order (seq), so that an event can
// be matched to the call it reports.

type faultKind int

const (
	fWhole   faultKind = iota // an error answer; the server never sees the call
	fEntries                  // some entries of a batch call fail
	fDelay                    // the call waits before reaching the server
	fLost                     // the server runs the call; the answer is lost
)

type faultClass struct {
	name      string
	weight    int
	actions   string // "all", "batch" (the batch calls with receipt handles), "receive"
	kind      faultKind
	f         sqstest.Fault
	permanent bool // the Consumer takes it for a permanent error
}

// faultClasses is every class sqstest can answer with, weighted.
// Permanent errors on a receive end Run: they are rare here.
var faultClasses = []faultClass{
	{"throttled", 6, "all", fWhole, sqstest.FaultThrottled, false},
	{"internal-error", 6, "all", fWhole, sqstest.FaultInternalError, false},
	{"unavailable", 4, "all", fWhole, sqstest.FaultServiceUnavailable, false},
	{"over-limit", 2, "all", fWhole, sqstest.FaultOverLimit, false},
	{"kms-throttled", 2, "all", fWhole, sqstest.FaultKmsThrottled, false},
	{"access-denied", 1, "all", fWhole, sqstest.FaultAccessDenied, true},
	{"queue-does-not-exist", 1, "all", fWhole, sqstest.FaultQueueDoesNotExist, true},
	{"invalid-parameter", 1, "all", fWhole, sqstest.FaultInvalidParameterValue, true},
	{"not-inflight", 2, "batch", fWhole, sqstest.FaultMessageNotInflight, false},
	{"handle-invalid", 2, "batch", fWhole, sqstest.FaultReceiptHandleIsInvalid, false},
	{"entry-throttled", 3, "batch", fEntries, sqstest.FaultThrottled, false},
	{"entry-internal-error", 3, "batch", fEntries, sqstest.FaultInternalError, false},
	{"entry-not-inflight", 2, "batch", fEntries, sqstest.FaultMessageNotInflight, false},
	{"entry-handle-invalid", 2, "batch", fEntries, sqstest.FaultReceiptHandleIsInvalid, false},
	{"entry-access-denied", 1, "batch", fEntries, sqstest.FaultAccessDenied, false},
	{"delay", 6, "all", fDelay, sqstest.Fault{}, false},
	{"lost-answer", 6, "all", fLost, sqstest.Fault{}, false},
}

func (c *faultClass) applies(action string) bool {
	switch c.actions {
	case "batch":
		return isHandleCall(action)
	case "receive":
		return action == "ReceiveMessage"
	}
	return true
}

// isHandleCall reports whether action carries receipt handles.
func isHandleCall(action string) bool {
	switch action {
	case "DeleteMessageBatch", "ChangeMessageVisibilityBatch", "DeleteMessage", "ChangeMessageVisibility":
		return true
	}
	return false
}

var (
	errLostAnswer = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer (the explorer lost the answer)")}
)

// firstContactClass is an error a wrong endpoint (or a network that
// heals) answers Run's first contact with: an error of the HTTP client
// (err), or an answer of SQS's (fault). fatal: no retry can cure it, and
// Run must fail at once, naming the queue.
type firstContactClass struct {
	name  string
	fatal bool
	err   error
	fault *sqstest.Fault
}

var firstContactClasses = []firstContactClass{
	{name: "no-such-host", fatal: true, err: &net.DNSError{Err: "no such host", Name: "sqs.xx-west-9.amazonaws.com", IsNotFound: true}},
	{name: "tls-unknown-authority", fatal: true, err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}},
	{name: "not-tls", fatal: true, err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}},
	{name: "access-denied", fatal: true, fault: &sqstest.FaultAccessDenied},
	{name: "queue-does-not-exist", fatal: true, fault: &sqstest.FaultQueueDoesNotExist},
	{name: "signature", fatal: true, fault: &sqstest.Fault{Status: http.StatusForbidden, Type: "SignatureDoesNotMatch",
		Message: "Credential should be scoped to a valid region, not 'us-east-1'."}},
	{name: "refused", err: &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}},
	{name: "read-timeout", err: &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}},
	{name: "dns-server-failing", err: &net.DNSError{Err: "server misbehaving", Name: "sqs.us-east-1.amazonaws.com", IsTemporary: true}},
	{name: "internal-error", fault: &sqstest.FaultInternalError},
	{name: "throttled", fault: &sqstest.FaultThrottled},
}

func firstContactOf(name string) *firstContactClass {
	for i := range firstContactClasses {
		if firstContactClasses[i].name == name {
			return &firstContactClasses[i]
		}
	}
	return nil
}

// connPool plays net/http's pool of idle connections for one process's
// calls, through the httptrace hooks of each request's context: a call
// takes an idle connection or dials one, and gives it back after its
// answer, or has it closed when size are idle already. So the Consumer,
// which follows what its HTTP client's pool sustains, sees one.
type connPool struct {
	size int
	mu   sync.Mutex
	idle int
}

func (c *connPool) get(req *http.Request) {
	tr := httptrace.ContextClientTrace(req.Context())
	c.mu.Lock()
	reused := c.idle > 0
	if reused {
		c.idle--
	}
	c.mu.Unlock()
	if tr == nil {
		return
	}
	if !reused && tr.ConnectDone != nil {
		tr.ConnectDone("tcp", "sqs.explore:443", nil)
	}
	if tr.GotConn != nil {
		tr.GotConn(httptrace.GotConnInfo{Reused: reused, WasIdle: reused})
	}
}

var errTooManyIdle = errors.New("http: putIdleConn: too many idle connections for host")

func (c *connPool) put(req *http.Request, broken bool) {
	tr := httptrace.ContextClientTrace(req.Context())
	c.mu.Lock()
	keep := !broken && c.idle < c.size
	if keep {
		c.idle++
	}
	c.mu.Unlock()
	if tr != nil && tr.PutIdleConn != nil {
		if keep {
			tr.PutIdleConn(nil)
		} else {
			tr.PutIdleConn(errTooManyIdle)
		}
	}
}

// pooledClient is an HTTP client that says how many idle connections per
// host it keeps, as an http.Transport's would tell.
type pooledClient struct {
	*http.Client
	idle int
}

func (c pooledClient) MaxIdleConnsPerHost() int { return c.idle }

type wire struct {
	r    *run
	p    *proc
	base http.RoundTripper
}

// handleEntry is one receipt handle a call named.
type handleEntry struct {
	ID            string `json:"Id"`
	ReceiptHandle string `json:"ReceiptHandle"`
	Visibility    *int   `json:"VisibilityTimeout,omitempty"`
}

type batchRequest struct {
	QueueURL string            `json:"QueueUrl"`
	Entries  []json.RawMessage `json:"Entries"`
}

type singleRequest struct {
	QueueURL      string `json:"QueueUrl"`
	ReceiptHandle string `json:"ReceiptHandle"`
	Visibility    *int   `json:"VisibilityTimeout,omitempty"`
	MessageBody   string `json:"MessageBody"`
	// AttributeNames: a GetQueueAttributes that asks for VisibilityTimeout
	// is Run's read of the queue (not the scaling signal's or the
	// in-flight quota's reading of its counts).
	AttributeNames []string `json:"AttributeNames"`
}

type batchResult struct {
	Successful []struct {
		ID string `json:"Id"`
	} `json:"Successful"`
	Failed []entryFailure `json:"Failed"`
}

type entryFailure struct {
	ID          string `json:"Id"`
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message,omitempty"`
}

type receiveResult struct {
	Messages []struct {
		MessageID     string            `json:"MessageId"`
		ReceiptHandle string            `json:"ReceiptHandle"`
		Body          string            `json:"Body"`
		Attributes    map[string]string `json:"Attributes"`
	} `json:"Messages"`
}

func (w *wire) RoundTrip(req *http.Request) (*http.Response, error) {
	r, p := w.r, w.p
	action := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "AmazonSQS.")
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	var entries []handleEntry
	var single singleRequest
	if isHandleCall(action) || action == "SendMessage" || action == "GetQueueAttributes" {
		entries, single = parseHandles(action, body)
	}
	sentAt := time.Now()
	// The SDK's retry of an attempt that failed says attempt=2 or more:
	// the same call, not one the Consumer decided on anew.
	retry := !strings.Contains(req.Header.Get("amz-sdk-request"), "attempt=1;") && req.Header.Get("amz-sdk-request") != ""
	callNo := r.callSent(p, action, retry)
	if action == "ReceiveMessage" {
		defer r.receiveEnded(p, sentAt)
	}
	if fcc := r.firstContact(p, action); fcc != nil {
		// A wrong endpoint, or a network that heals later.
		r.callAnswered(p, action, r.seq.Add(1), entries, single, nil, nil, false)
		if fcc.err != nil {
			return nil, fcc.err
		}
		resp, rbody := faultResponse(req, *fcc.fault)
		resp.Body = io.NopCloser(bytes.NewReader(rbody))
		resp.ContentLength = int64(len(rbody))
		return resp, nil
	}
	if p.pool != nil {
		p.pool.get(req)
		defer func() { p.pool.put(req, false) }()
	}
	fc := r.drawFault(p, action, callNo)
	if fc != nil && !fc.applies(action) {
		fc = nil
	}
	sent := r.seq.Add(1)
	if fc != nil {
		r.noteFault(p, action, fc, entries)
	}
	if rtt := r.sc.RTT.D(); rtt > 0 {
		// The round trip, before the call reaches the server.
		t := time.NewTimer(rtt)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
			r.callAnswered(p, action, sent, entries, single, nil, nil, false)
			return nil, req.Context().Err()
		}
	}
	send := func(b []byte) (*http.Response, []byte, error) {
		req2 := req.Clone(req.Context())
		req2.Body = io.NopCloser(bytes.NewReader(b))
		req2.ContentLength = int64(len(b))
		resp, err := w.base.RoundTrip(req2)
		if err != nil {
			return nil, nil, err
		}
		rb, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, nil, err
		}
		return resp, rb, nil
	}
	var failed []entryFailure
	var resp *http.Response
	var rbody []byte
	var err error
	switch {
	case fc != nil && fc.kind == fWhole:
		resp, rbody = faultResponse(req, fc.f)
	case fc != nil && fc.kind == fDelay:
		d := time.Second + time.Duration(r.draw(tagDelay, uint64(p.id), hashString(action), callNo)%40)*time.Second
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
			r.callAnswered(p, action, sent, entries, single, nil, nil, false)
			return nil, req.Context().Err()
		}
		resp, rbody, err = send(body)
	case fc != nil && fc.kind == fEntries && len(entries) > 0:
		k := 1 + int(r.draw(tagEntries, uint64(p.id), callNo)%3)
		keep, b := dropEntries(body, k)
		failed = make([]entryFailure, 0, k)
		for _, e := range entries[:min(k, len(entries))] {
			failed = append(failed, entryFailure{ID: e.ID, SenderFault: fc.f.Status < 500, Code: fc.f.Code(), Message: fc.f.Message})
		}
		if keep == 0 {
			out, _ := json.Marshal(batchResult{Failed: failed})
			resp, rbody = okResponse(req, out), out
			failed = nil
		} else {
			resp, rbody, err = send(b)
		}
	default:
		resp, rbody, err = send(body)
	}
	if err == nil && len(failed) > 0 && resp.StatusCode == http.StatusOK {
		var res batchResult
		if json.Unmarshal(rbody, &res) == nil {
			res.Failed = append(res.Failed, failed...)
			rbody, _ = json.Marshal(res)
		}
	}
	lost := fc != nil && fc.kind == fLost && err == nil
	r.callAnswered(p, action, sent, entries, single, resp, rbody, !lost && err == nil)
	if err != nil {
		return nil, err
	}
	if lost {
		return nil, errLostAnswer
	}
	resp.Body = io.NopCloser(bytes.NewReader(rbody))
	resp.ContentLength = int64(len(rbody))
	resp.Header.Set("Content-Length", strconv.Itoa(len(rbody)))
	return resp, nil
}

// parseHandles reads the receipt handles a call names.
func parseHandles(action string, body []byte) ([]handleEntry, singleRequest) {
	var single singleRequest
	switch action {
	case "DeleteMessage", "ChangeMessageVisibility", "SendMessage", "GetQueueAttributes":
		_ = json.Unmarshal(body, &single)
		if single.ReceiptHandle != "" {
			return []handleEntry{{ID: "", ReceiptHandle: single.ReceiptHandle, Visibility: single.Visibility}}, single
		}
		return nil, single
	}
	var in batchRequest
	if json.Unmarshal(body, &in) != nil {
		return nil, single
	}
	out := make([]handleEntry, 0, len(in.Entries))
	for _, raw := range in.Entries {
		var e handleEntry
		if json.Unmarshal(raw, &e) == nil {
			out = append(out, e)
		}
	}
	return out, single
}

// dropEntries removes the first k entries of a batch request; keep is
// how many are left.
func dropEntries(body []byte, k int) (keep int, out []byte) {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return 0, body
	}
	var entries []json.RawMessage
	if json.Unmarshal(m["Entries"], &entries) != nil {
		return 0, body
	}
	entries = entries[min(k, len(entries)):]
	m["Entries"], _ = json.Marshal(entries)
	out, _ = json.Marshal(m)
	return len(entries), out
}

func faultResponse(req *http.Request, f sqstest.Fault) (*http.Response, []byte) {
	typ := f.Type
	if !strings.Contains(typ, "#") {
		typ = "com.amazonaws.sqs#" + typ
	}
	b, _ := json.Marshal(map[string]string{"__type": typ, "message": f.Message})
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	if f.QueryCode != "" {
		who := "Sender"
		if f.Status >= 500 {
			who = "Receiver"
		}
		h.Set("x-amzn-query-error", f.QueryCode+";"+who)
	}
	return &http.Response{Status: http.StatusText(f.Status), StatusCode: f.Status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Request: req}, b
}

func okResponse(req *http.Request, b []byte) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	return &http.Response{Status: "OK", StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Request: req}
}
