// Package proxy is a fault-injecting reverse proxy for the SQS JSON protocol,
// to put between a consumer process and an sqstest server (cmd/sqstest). It
// passes every request through unless its Policy picks a fault, and records
// every request: what was asked (action, receipt handles), what the server
// answered (messages handed out, handles deleted) and the fault injected, if
// any. A test then explains what the consumer did — a duplicate, a late
// redelivery — by the faults on record.
//
// The faults are those a consumer meets between itself and SQS: server errors
// and throttling in AWS's JSON error shape, connections reset before or after
// the request reached the server, answers delayed, cut short or replaced by a
// load balancer's HTML page.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer/chaos/internal/wire"
)

// Class names a kind of fault.
type Class string

// Fault classes. Those marked "not forwarded" answer without the server ever
// seeing the request; the others forward it, so its effect (a receive's
// messages leased, a delete done) happens even though the client does not
// learn of it.
const (
	None Class = ""
	// Error500 answers HTTP 500 InternalError in AWS's JSON error shape
	// (not forwarded).
	Error500 Class = "http-500"
	// Throttle400 and Throttle403 answer RequestThrottled with the
	// x-amzn-query-error header, with status 400 or 403 (not forwarded).
	Throttle400 Class = "throttle-400"
	Throttle403 Class = "throttle-403"
	// ResetBefore resets the connection without answering (not forwarded).
	ResetBefore Class = "reset-before"
	// HTML answers 502 with an HTML page, as a load balancer does (not
	// forwarded).
	HTML Class = "html-502"
	// Delay forwards, then holds the answer for Fault.Delay (or until the
	// client gives up) before sending it.
	Delay Class = "delay"
	// Truncated forwards, then sends the answer's status and the first half
	// of its JSON body.
	Truncated Class = "truncated"
	// LostAnswer forwards, then resets the connection instead of answering.
	// On DeleteMessageBatch it is the lost delete answer: the message is
	// gone, the client does not know.
	LostAnswer Class = "lost-answer"
	// FakeDelete answers a delete call with success for every entry without
	// forwarding it: a broken network that lies, for control runs only.
	FakeDelete Class = "fake-delete"
)

// Forwarded reports whether requests under fault c reach the server.
func (c Class) Forwarded() bool {
	switch c {
	case Error500, Throttle400, Throttle403, ResetBefore, HTML, FakeDelete:
		return false
	}
	return true
}

// Fault is a Policy's decision for one request.
type Fault struct {
	Class Class
	Delay time.Duration // for Delay
}

// Call is what a Policy sees of a request.
type Call struct {
	Seq     int    // 1 for the first request through the proxy
	PID     int    // the sender's wire.PIDHeader, 0 when absent
	Action  string // e.g. "ReceiveMessage", from X-Amz-Target
	Handles []string
	// Delivered is the receive answer's messages; set only for After.
	Delivered []Delivery
}

// Policy picks the faults.
type Policy interface {
	// Before is asked for every request before it is forwarded.
	Before(c *Call) Fault
	// After is asked for requests Before let through untouched, once the
	// server answered, with c.Delivered filled for receives. Only Delay,
	// Truncated and LostAnswer apply here.
	After(c *Call) Fault
}

// PassThrough injects nothing.
type PassThrough struct{}

// Before returns no fault.
func (PassThrough) Before(*Call) Fault { return Fault{} }

// After returns no fault.
func (PassThrough) After(*Call) Fault { return Fault{} }

// Delivery is one message handed out in a receive answer.
type Delivery struct {
	MessageID    string
	Handle       string
	ReceiveCount int
}

// Record is one request through the proxy.
type Record struct {
	Seq    int
	Start  time.Time // the request arrived
	Time   time.Time // the server answered (or, not forwarded, the fault was chosen)
	End    time.Time // the proxy finished with the request
	PID    int
	Action string
	Fault  Fault
	// Forwarded: the server saw the request. Status is its HTTP status,
	// 0 when forwarding failed (UpstreamErr says why).
	Forwarded   bool
	Status      int
	UpstreamErr string
	// Handles are the receipt handles in the request, IDs the message ids
	// they were issued for (as far as the proxy saw them issued), in the
	// same order ("" when unknown).
	Handles []string
	IDs     []string
	// Delivered: messages the server handed out in this receive's answer,
	// whether or not the client got it.
	Delivered []Delivery
	// Deleted: handles the server confirmed deleted in this call.
	Deleted []string
	// ClientGone: the client had gone when the answer was to be written.
	ClientGone bool
}

// Proxy is the fault-injecting proxy. Its methods are safe for concurrent use.
type Proxy struct {
	upstream string
	client   *http.Client
	ln       net.Listener
	srv      *http.Server
	served   chan struct{}

	mu       sync.Mutex // guards the fields below
	policy   Policy
	seq      int
	records  []Record
	handleID map[string]string
}

// Start listens on 127.0.0.1 (a free port) and forwards to upstream, the base
// URL of an SQS endpoint, under policy p (nil: PassThrough).
func Start(upstream string, p Policy) (*Proxy, error) {
	if p == nil {
		p = PassThrough{}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	px := &Proxy{
		upstream: strings.TrimRight(upstream, "/"),
		client:   &http.Client{Transport: tr},
		ln:       ln,
		served:   make(chan struct{}),
		policy:   p,
		handleID: make(map[string]string),
	}
	px.srv = &http.Server{Handler: http.HandlerFunc(px.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(px.served)
		_ = px.srv.Serve(ln)
	}()
	return px, nil
}

// URL is the proxy's base URL, the endpoint to give the client.
func (px *Proxy) URL() string { return "http://" + px.ln.Addr().String() }

// SetPolicy replaces the policy for requests that arrive from now on.
func (px *Proxy) SetPolicy(p Policy) {
	if p == nil {
		p = PassThrough{}
	}
	px.mu.Lock()
	px.policy = p
	px.mu.Unlock()
}

// Records returns a copy of the records of every finished request, in the
// order they finished.
func (px *Proxy) Records() []Record {
	px.mu.Lock()
	defer px.mu.Unlock()
	return append([]Record(nil), px.records...)
}

// Close stops the proxy: it closes the listener and every connection, and
// waits for the requests being served to end.
func (px *Proxy) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if px.srv.Shutdown(ctx) != nil {
		px.srv.Close()
	}
	<-px.served
	px.client.CloseIdleConnections()
}

// maxBody bounds what the proxy reads of one request or answer.
const maxBody = 16 << 20

func (px *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	rec := Record{Start: time.Now()}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return // the client went away while sending
	}
	rec.PID, _ = strconv.Atoi(r.Header.Get(wire.PIDHeader))
	rec.Action = strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	rec.Handles = handlesOf(body)

	px.mu.Lock()
	px.seq++
	rec.Seq = px.seq
	policy := px.policy
	rec.IDs = make([]string, len(rec.Handles))
	for i, h := range rec.Handles {
		rec.IDs[i] = px.handleID[h]
	}
	px.mu.Unlock()
	call := &Call{Seq: rec.Seq, PID: rec.PID, Action: rec.Action, Handles: rec.Handles}
	defer func() {
		rec.End = time.Now()
		px.mu.Lock()
		px.records = append(px.records, rec)
		px.mu.Unlock()
	}()

	rec.Fault = policy.Before(call)
	if !rec.Fault.Class.Forwarded() {
		rec.Time = time.Now()
		px.answerFault(w, rec.Fault.Class, body)
		return
	}

	status, header, answer, err := px.forward(r, body)
	rec.Time = time.Now()
	rec.Forwarded = true
	if err != nil {
		rec.UpstreamErr = err.Error()
		reset(w)
		return
	}
	rec.Status = status
	if status == http.StatusOK {
		rec.Delivered, rec.Deleted = px.learn(rec.Action, rec.Handles, body, answer)
	}
	if rec.Fault.Class == None {
		call.Delivered = rec.Delivered
		rec.Fault = policy.After(call)
	}

	switch rec.Fault.Class {
	case LostAnswer:
		reset(w)
		return
	case Delay:
		t := time.NewTimer(rec.Fault.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			rec.ClientGone = true
			return
		}
	case Truncated:
		answer = answer[:len(answer)/2]
	}
	for k, v := range header {
		if k == "Content-Length" {
			continue
		}
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
	w.WriteHeader(status)
	if _, err := w.Write(answer); err != nil || r.Context().Err() != nil {
		rec.ClientGone = true
	}
}

// forward sends the request to the server. It follows the client's
// cancellation: a client that gives up on a long poll ends the server's too,
// as when the connection to SQS closes.
func (px *Proxy) forward(r *http.Request, body []byte) (int, http.Header, []byte, error) {
	// Not the client's context: a worker killed while its call is in
	// flight must not cut the proxy off from the server's answer, or a
	// delete (or a receive) the server carried out goes unrecorded, and
	// the checks count the message as held by the dead worker and never
	// handed out again.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), forwardTimeout)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, r.Method, px.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	for k, v := range r.Header {
		if k != wire.PIDHeader {
			out.Header[k] = v
		}
	}
	resp, err := px.client.Do(out)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, answer, nil
}

// forwardTimeout bounds a forwarded call: a long poll's 20 s and slack.
const forwardTimeout = 40 * time.Second

// learn reads a successful answer: the messages a receive handed out
// (remembering their handles' ids) and the handles a delete removed.
func (px *Proxy) learn(action string, handles []string, req, answer []byte) (delivered []Delivery, deleted []string) {
	switch action {
	case "ReceiveMessage":
		var out struct {
			Messages []struct {
				MessageId     string
				ReceiptHandle string
				Attributes    map[string]string
			}
		}
		if json.Unmarshal(answer, &out) != nil {
			return nil, nil
		}
		px.mu.Lock()
		defer px.mu.Unlock()
		for _, m := range out.Messages {
			n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			delivered = append(delivered, Delivery{MessageID: m.MessageId, Handle: m.ReceiptHandle, ReceiveCount: n})
			px.handleID[m.ReceiptHandle] = m.MessageId
		}
		return delivered, nil
	case "DeleteMessage":
		return nil, handles
	case "DeleteMessageBatch":
		var in struct {
			Entries []struct{ Id, ReceiptHandle string }
		}
		var out struct{ Successful []struct{ Id string } }
		if json.Unmarshal(req, &in) != nil || json.Unmarshal(answer, &out) != nil {
			return nil, nil
		}
		byID := make(map[string]string, len(in.Entries))
		for _, e := range in.Entries {
			byID[e.Id] = e.ReceiptHandle
		}
		for _, s := range out.Successful {
			deleted = append(deleted, byID[s.Id])
		}
		return nil, deleted
	}
	return nil, nil
}

// handlesOf returns the receipt handles a request carries: ReceiptHandle
// for single calls, Entries[].ReceiptHandle for batches.
func handlesOf(body []byte) []string {
	var in struct {
		ReceiptHandle string
		Entries       []struct{ ReceiptHandle string }
	}
	if json.Unmarshal(body, &in) != nil {
		return nil
	}
	var hs []string
	if in.ReceiptHandle != "" {
		hs = append(hs, in.ReceiptHandle)
	}
	for _, e := range in.Entries {
		if e.ReceiptHandle != "" {
			hs = append(hs, e.ReceiptHandle)
		}
	}
	return hs
}

// awsError is an AWS JSON 1.0 error answer as SQS sends it (and as
// sqstest/errors.go encodes its faults): status, the shape in __type, the
// legacy query code in x-amzn-query-error with ";Sender" for 4xx and
// ";Receiver" for 5xx.
func awsError(w http.ResponseWriter, status int, shape, queryCode, message string) {
	fault := "Sender"
	if status >= 500 {
		fault = "Receiver"
	}
	b, _ := json.Marshal(struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{"com.amazonaws.sqs#" + shape, message})
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("x-amzn-query-error", queryCode+";"+fault)
	w.Header().Set("x-amzn-RequestId", "chaos-proxy")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// htmlPage is what a load balancer in front of an HTTP service sends when
// its target failed.
const htmlPage = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n</body>\r\n</html>\r\n"

func (px *Proxy) answerFault(w http.ResponseWriter, c Class, body []byte) {
	switch c {
	case Error500:
		awsError(w, http.StatusInternalServerError, "InternalError", "InternalError", "We encountered an internal error. Please try again.")
	case Throttle400:
		awsError(w, http.StatusBadRequest, "RequestThrottled", "RequestThrottled", "Rate exceeded")
	case Throttle403:
		awsError(w, http.StatusForbidden, "RequestThrottled", "RequestThrottled", "Rate exceeded")
	case HTML:
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Length", strconv.Itoa(len(htmlPage)))
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, htmlPage)
	case FakeDelete:
		var in struct{ Entries []struct{ Id string } }
		_ = json.Unmarshal(body, &in)
		type ok struct{ Id string }
		out := struct {
			Successful []ok
			Failed     []struct{}
		}{Successful: []ok{}, Failed: []struct{}{}}
		for _, e := range in.Entries {
			out.Successful = append(out.Successful, ok{e.Id})
		}
		b, _ := json.Marshal(out)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
	default: // ResetBefore, and any class this function does not know
		reset(w)
	}
}

// reset closes the client's connection with a TCP RST and no answer.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok { // not with net/http's HTTP/1 server; answer something broken anyway
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// Funcs makes a Policy of two functions; a nil one injects nothing.
type Funcs struct {
	BeforeFunc func(*Call) Fault
	AfterFunc  func(*Call) Fault
}

// Before calls BeforeFunc.
func (f Funcs) Before(c *Call) Fault {
	if f.BeforeFunc == nil {
		return Fault{}
	}
	return f.BeforeFunc(c)
}

// After calls AfterFunc.
func (f Funcs) After(c *Call) Fault {
	if f.AfterFunc == nil {
		return Fault{}
	}
	return f.AfterFunc(c)
}

// Random injects a fault into a fraction rate (0 to 1) of the requests whose
// action is in actions (all when empty), each a class drawn uniformly from
// classes (LostAnswer only on the delete calls, where it is the lost delete
// answer), Delay faults holding the answer for delay. Its draws come from a
// generator seeded with seed, so a run's sequence of decisions replays; the
// requests' order, set by the processes, does not.
func Random(seed uint64, rate float64, classes []Class, delay time.Duration, actions ...string) Policy {
	r := &random{rng: rand.New(rand.NewPCG(seed, 0x5eed)), rate: rate, classes: classes, delay: delay}
	if len(actions) > 0 {
		r.actions = make(map[string]bool)
		for _, a := range actions {
			r.actions[a] = true
		}
	}
	return r
}

type random struct {
	mu      sync.Mutex // guards rng
	rng     *rand.Rand
	rate    float64
	classes []Class
	delay   time.Duration
	actions map[string]bool
}

func (r *random) Before(c *Call) Fault {
	if r.actions != nil && !r.actions[c.Action] {
		return Fault{}
	}
	var ok []Class
	for _, cl := range r.classes {
		if cl == LostAnswer && c.Action != "DeleteMessageBatch" && c.Action != "DeleteMessage" {
			continue
		}
		ok = append(ok, cl)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(ok) == 0 || r.rng.Float64() >= r.rate {
		return Fault{}
	}
	return Fault{Class: ok[r.rng.IntN(len(ok))], Delay: r.delay}
}

func (r *random) After(*Call) Fault { return Fault{} }
