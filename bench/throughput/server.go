package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// protocol is how the contenders reach the server side.
type protocol string

const (
	// protoHTTPS is TLS 1.3 offering only HTTP/1.1 (ALPN "http/1.1"), as
	// SQS's public endpoints serve the AWS JSON protocol to the SDK.
	protoHTTPS protocol = "https"
	// protoHTTPS2 is TLS 1.3 offering HTTP/2 first ("h2", then
	// "http/1.1"). Whether SQS's endpoints negotiate h2 has not been
	// confirmed; the SDK's default client would take it if offered
	// (its transport sets ForceAttemptHTTP2).
	protoHTTPS2 protocol = "https-h2"
	// protoHTTP is plain HTTP/1.1: no TLS, so a new connection costs a
	// TCP handshake only.
	protoHTTP protocol = "http"
)

func (p protocol) tls() bool { return p != protoHTTP }

// String describes the protocol for report headers.
func (p protocol) String() string {
	switch p {
	case protoHTTPS:
		return "HTTPS (TLS 1.3, HTTP/1.1 only, ECDSA P-256 certificate)"
	case protoHTTPS2:
		return "HTTPS (TLS 1.3, HTTP/2 offered first, ECDSA P-256 certificate)"
	default:
		return "plain HTTP/1.1"
	}
}

// serverOptions is what the server side is told when it starts.
type serverOptions struct {
	Proto protocol `json:"proto"`
	// Endpoint is an SQS endpoint to proxy to; "" serves sqstest.
	Endpoint string `json:"endpoint,omitempty"`
}

// serverSide is the SQS end of a run: sqstest (or a reverse proxy to
// -endpoint) behind two loopback listeners.
//
//   - The measured listener is what the contenders' clients talk to: TLS
//     (or plain HTTP), with every connection, TLS handshake and request
//     counted, and every request answered rtt later than the backend
//     answers it (half before the backend sees it, half after), so that a
//     connection is busy for the whole round trip as on a real network.
//   - The control listener (plain HTTP, neither delayed nor counted)
//     serves the bench's own calls: /_bench/... to prepare a measurement
//     and read the counters, and anything else straight to the backend
//     (GetQueueAttributes, DeleteQueue).
//
// It runs in a child process by default (startServer), so the parent's
// CPU time is the client's alone.
type serverSide struct {
	opts      serverOptions
	certPEM   []byte // the measured listener's certificate (TLS only)
	measured  *http.Server
	control   *http.Server
	urls      serverURLs
	rtt       atomic.Int64 // the added round-trip time, ns
	stats     *connStats
	proxy     http.Handler // endpoint mode: the reverse proxy to opts.Endpoint
	filler    *sqs.Client  // endpoint mode: fills queues at opts.Endpoint
	fillerTr  *http.Transport
	served    sync.WaitGroup
	backendMu sync.Mutex      // guards backend and queues
	backend   *sqstest.Server // sqstest mode: the server of the measurement under way
	queues    []string        // sqstest mode: the queues made on backend
}

// serverURLs is where a started server side listens, with the PEM of its
// certificate (TLS only): the child's first line of output.
type serverURLs struct {
	URL     string `json:"url"`     // the measured endpoint (BaseEndpoint of the contenders)
	Control string `json:"control"` // the control endpoint
	CertPEM string `json:"cert,omitempty"`
}

// newServerSide starts the server side on loopback.
func newServerSide(opts serverOptions) (*serverSide, error) {
	switch opts.Proto {
	case protoHTTPS, protoHTTPS2, protoHTTP:
	default:
		return nil, fmt.Errorf("protocol %q: want https, https-h2 or http", opts.Proto)
	}
	s := &serverSide{opts: opts, stats: newConnStats()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, err
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	s.measured = &http.Server{
		Handler:           front{rtt: &s.rtt, next: s.backendHandler, stats: s.stats},
		ReadHeaderTimeout: 10 * time.Second,
		ConnState:         s.stats.connState,
		ErrorLog:          log.New(s.stats.logWriter(), "", 0),
		Protocols:         &protos,
	}
	scheme := "http"
	if opts.Proto.tls() {
		cert, certPEM, err := newCertificate()
		if err != nil {
			ln.Close()
			cln.Close()
			return nil, err
		}
		s.certPEM = certPEM
		cfg := &tls.Config{
			Certificates:     []tls.Certificate{cert},
			MinVersion:       tls.VersionTLS13,
			MaxVersion:       tls.VersionTLS13,
			NextProtos:       []string{"http/1.1"},
			VerifyConnection: s.stats.handshake,
		}
		if opts.Proto == protoHTTPS2 {
			cfg.NextProtos = []string{"h2", "http/1.1"}
			protos.SetHTTP2(true)
		}
		s.measured.TLSConfig = cfg
		ln = tls.NewListener(ln, cfg)
		scheme = "https"
	}
	s.urls = serverURLs{URL: scheme + "://" + ln.Addr().String(), Control: "http://" + cln.Addr().String(), CertPEM: string(s.certPEM)}

	if opts.Endpoint != "" {
		u, err := url.Parse(opts.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			ln.Close()
			cln.Close()
			return nil, fmt.Errorf("endpoint %q: want an http:// or https:// URL", opts.Endpoint)
		}
		s.fillerTr = http.DefaultTransport.(*http.Transport).Clone()
		s.fillerTr.MaxIdleConns, s.fillerTr.MaxIdleConnsPerHost = 0, 512
		p := httputil.NewSingleHostReverseProxy(u)
		p.Transport = sqstest.RebufferingTransport(s.fillerTr)
		errLog := log.New(s.stats.logWriter(), "proxy: ", 0)
		p.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away (a long poll cut short): the front counts it
			}
			errLog.Printf("%s: %v", r.Header.Get("X-Amz-Target"), err)
			w.WriteHeader(http.StatusBadGateway)
		}
		s.proxy = p
		s.filler = newSQSClient(opts.Endpoint, &http.Client{Transport: sqstest.RebufferingTransport(s.fillerTr)})
	} else {
		s.backend = sqstest.NewServer(sqstest.WithBaseURL(s.urls.URL))
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /_bench/fresh", s.handleFresh)
	mux.HandleFunc("POST /_bench/queue", s.handleQueue)
	mux.HandleFunc("POST /_bench/rtt", s.handleRTT)
	mux.HandleFunc("POST /_bench/reset", func(w http.ResponseWriter, _ *http.Request) { s.stats.reset() })
	mux.HandleFunc("GET /_bench/stats", func(w http.ResponseWriter, _ *http.Request) {
		st := s.stats.snapshot()
		st.CPU = cpuTime()
		st.ReceivedAgain = s.receivedAgain()
		writeJSON(w, st)
	})
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.backendHandler().ServeHTTP(w, r) }))
	s.control = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	s.served.Add(2)
	go func() { defer s.served.Done(); _ = s.measured.Serve(ln) }()
	go func() { defer s.served.Done(); _ = s.control.Serve(cln) }()
	return s, nil
}

// close stops both listeners and every connection, and waits for the
// serving goroutines.
func (s *serverSide) close() {
	s.backendMu.Lock()
	if s.backend != nil {
		s.backend.Close() // ends long polls at once
	}
	s.backendMu.Unlock()
	s.measured.Close()
	s.control.Close()
	s.served.Wait()
	if s.fillerTr != nil {
		s.fillerTr.CloseIdleConnections()
	}
}

// backendHandler is what answers SQS calls now.
func (s *serverSide) backendHandler() http.Handler {
	if s.proxy != nil {
		return s.proxy
	}
	s.backendMu.Lock()
	defer s.backendMu.Unlock()
	return s.backend.Handler()
}

// handleFresh starts a measurement: a new sqstest server (one per
// measurement, so no heap grows across them), and every connection of the
// measured listener closed, so each measurement starts cold as a new
// process would.
func (s *serverSide) handleFresh(w http.ResponseWriter, _ *http.Request) {
	s.backendMu.Lock()
	if s.backend != nil {
		s.backend.Close()
		s.backend = sqstest.NewServer(sqstest.WithBaseURL(s.urls.URL))
		s.queues = nil
	}
	s.backendMu.Unlock()
	s.stats.closeAll()
}

// receivedAgain counts the messages of the measurement's queues that were
// received more than once (-1 when the backend is not sqstest).
func (s *serverSide) receivedAgain() int {
	s.backendMu.Lock()
	defer s.backendMu.Unlock()
	if s.backend == nil {
		return -1
	}
	n := 0
	for _, q := range s.queues {
		for _, m := range s.backend.Messages(q) {
			if m.ReceiveCount > 1 {
				n++
			}
		}
	}
	return n
}

// queueRequest is the body of POST /_bench/queue.
type queueRequest struct {
	Name     string            `json:"name"`
	Messages int               `json:"messages"`
	Attrs    map[string]string `json:"attrs,omitempty"`
}

// handleQueue makes a queue holding the messages asked for and answers its
// URL.
func (s *serverSide) handleQueue(w http.ResponseWriter, r *http.Request) {
	var q queueRequest
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil || q.Name == "" || q.Messages < 0 {
		http.Error(w, fmt.Sprintf("want {name, messages ≥ 0, attrs}: %v", err), http.StatusBadRequest)
		return
	}
	var queueURL string
	var err error
	if s.filler != nil {
		queueURL, err = s.fillEndpoint(r.Context(), q)
	} else {
		queueURL, err = s.fillSQSTest(q)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, map[string]string{"url": queueURL})
}

func (s *serverSide) fillSQSTest(q queueRequest) (string, error) {
	s.backendMu.Lock()
	srv := s.backend
	s.backendMu.Unlock()
	queueURL, err := srv.CreateQueue(q.Name, q.Attrs)
	if err != nil {
		return "", err
	}
	s.backendMu.Lock()
	if s.backend == srv {
		s.queues = append(s.queues, queueURL)
	}
	s.backendMu.Unlock()
	for i := range q.Messages {
		if _, err := srv.Send(queueURL, "message "+strconv.Itoa(i)); err != nil {
			return "", err
		}
	}
	return queueURL, nil
}

func (s *serverSide) fillEndpoint(ctx context.Context, q queueRequest) (string, error) {
	out, err := s.filler.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q.Name), Attributes: q.Attrs})
	if err != nil {
		return "", fmt.Errorf("creating queue %s at %s: %w", q.Name, s.opts.Endpoint, err)
	}
	queueURL := aws.ToString(out.QueueUrl)
	return queueURL, sendBatches(ctx, s.filler, queueURL, q.Messages)
}

func (s *serverSide) handleRTT(w http.ResponseWriter, r *http.Request) {
	d, err := parseDuration(r.URL.Query().Get("d"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.rtt.Store(int64(d))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// bufferedResponse holds a backend's answer until the second half of the
// round trip has passed.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newBufferedResponse() *bufferedResponse {
	return &bufferedResponse{header: http.Header{}, status: http.StatusOK}
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) WriteHeader(status int)      { b.status = status }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }

func (b *bufferedResponse) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range b.header {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(b.body.Len()))
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body.Bytes())
}

// newCertificate makes a self-signed ECDSA P-256 certificate for 127.0.0.1
// and localhost, valid for a day, and returns it with its PEM (what the
// clients trust).
func newCertificate() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "sqsconsumer throughput bench"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return cert, certPEM, err
}

// serverStats is what the measured listener saw: since the last reset for
// the window figures, since the start for the rest.
type serverStats struct {
	// Conns is the connections accepted (TCP handshakes) in the window.
	Conns int64 `json:"conns"`
	// Handshakes is the TLS handshakes completed in the window, Resumed
	// those that resumed a session (the SDK's client keeps no session
	// cache, so none should).
	Handshakes int64 `json:"handshakes"`
	Resumed    int64 `json:"resumed"`
	// Unused is the connections accepted in the window that carried no
	// request by its end (dialled, then not needed).
	Unused int64 `json:"unused"`
	// Requests counts the requests of the window, HTTP2 those over HTTP/2,
	// Calls them by SQS action.
	Requests int64          `json:"requests"`
	HTTP2    int64          `json:"http2"`
	Calls    map[string]int `json:"calls"`

	// Failed counts, since the start, the answers other than 2xx by
	// action, with an example of each in Examples; Cancelled the requests
	// whose client went away before the answer (the long polls cut short
	// when a drain ends); ServerErrors the lines net/http logged (e.g. TLS
	// handshake errors), with the first in ServerErrorExample.
	Failed             map[string]int    `json:"failed"`
	Examples           map[string]string `json:"examples"`
	Cancelled          map[string]int    `json:"cancelled"`
	ServerErrors       int               `json:"serverErrors"`
	ServerErrorExample string            `json:"serverErrorExample,omitempty"`

	// CPU is the server side's process CPU time so far (user and system).
	CPU time.Duration `json:"cpu"`
	// ReceivedAgain counts the messages of the measurement's queues that
	// were received more than once: a lease that expired, or an answer
	// the client lost (the SDK's request-body race over a real socket,
	// see sqstest's package documentation), after which the messages of
	// that answer wait out their visibility timeout. -1: unknown (a
	// proxy to -endpoint).
	ReceivedAgain int `json:"receivedAgain"`
}

// failures describes the failed requests and server errors, "" if none.
func (s serverStats) failures() string {
	var parts []string
	for a, n := range s.Failed {
		parts = append(parts, fmt.Sprintf("%s %d (e.g. %s)", a, n, s.Examples[a]))
	}
	sort.Strings(parts)
	if s.ServerErrors > 0 {
		parts = append(parts, fmt.Sprintf("server errors %d (e.g. %s)", s.ServerErrors, s.ServerErrorExample))
	}
	return strings.Join(parts, "; ")
}

// cancellations describes the requests whose client went away, "" if none.
func (s serverStats) cancellations() string {
	var parts []string
	for a, n := range s.Cancelled {
		parts = append(parts, fmt.Sprintf("%s %d", a, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// connStats counts the measured listener's connections, handshakes and
// requests. Its methods are safe for concurrent use.
type connStats struct {
	mu     sync.Mutex // guards every field below
	gen    int        // the window: reset starts a new one
	conns  map[net.Conn]*connInfo
	window serverStats // the window's figures and the run's failures
}

// connInfo is one open connection of the measured listener.
type connInfo struct {
	gen  int  // the window it was accepted in
	used bool // it carried a request
}

func newConnStats() *connStats {
	return &connStats{conns: map[net.Conn]*connInfo{}, window: serverStats{
		Calls: map[string]int{}, Failed: map[string]int{}, Examples: map[string]string{}, Cancelled: map[string]int{},
	}}
}

// connState is the measured server's http.Server.ConnState.
func (c *connStats) connState(conn net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateNew:
		c.window.Conns++
		c.conns[conn] = &connInfo{gen: c.gen}
	case http.StateActive:
		if info := c.conns[conn]; info != nil {
			info.used = true
		}
	case http.StateClosed, http.StateHijacked:
		if info := c.conns[conn]; info != nil {
			if !info.used && info.gen == c.gen {
				c.window.Unused++
			}
			delete(c.conns, conn)
		}
	}
}

// handshake is the measured listener's tls.Config.VerifyConnection: it runs
// once for every completed handshake.
func (c *connStats) handshake(cs tls.ConnectionState) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.window.Handshakes++
	if cs.DidResume {
		c.window.Resumed++
	}
	return nil
}

func (c *connStats) request(action string, protoMajor int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.window.Requests++
	if protoMajor == 2 {
		c.window.HTTP2++
	}
	c.window.Calls[action]++
}

func (c *connStats) cancelled(action string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.window.Cancelled[action]++
}

func (c *connStats) failed(action string, rec *bufferedResponse) {
	body := rec.body.String()
	if len(body) > 200 {
		body = body[:200]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.window.Failed[action]++
	if _, ok := c.window.Examples[action]; !ok {
		c.window.Examples[action] = fmt.Sprintf("%d %s", rec.status, body)
	}
}

// logWriter counts what net/http (or the proxy) logs.
func (c *connStats) logWriter() logCounter { return logCounter{c} }

type logCounter struct{ c *connStats }

func (l logCounter) Write(p []byte) (int, error) {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	l.c.window.ServerErrors++
	if l.c.window.ServerErrorExample == "" {
		l.c.window.ServerErrorExample = strings.TrimSpace(string(p))
	}
	return len(p), nil
}

// reset starts a new window.
func (c *connStats) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	w := &c.window
	w.Conns, w.Handshakes, w.Resumed, w.Unused, w.Requests, w.HTTP2 = 0, 0, 0, 0, 0, 0
	clear(w.Calls)
}

// snapshot copies the figures; Unused counts the window's open connections
// that have not carried a request yet too.
func (c *connStats) snapshot() serverStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.window
	for _, info := range c.conns {
		if info.gen == c.gen && !info.used {
			s.Unused++
		}
	}
	s.Calls = cloneMap(c.window.Calls)
	s.Failed = cloneMap(c.window.Failed)
	s.Examples = cloneMap(c.window.Examples)
	s.Cancelled = cloneMap(c.window.Cancelled)
	return s
}

// closeAll closes every connection of the measured listener.
func (c *connStats) closeAll() {
	c.mu.Lock()
	conns := make([]net.Conn, 0, len(c.conns))
	for conn := range c.conns {
		conns = append(conns, conn)
	}
	c.mu.Unlock()
	// Outside the lock: closing makes net/http report StateClosed, which
	// takes it.
	for _, conn := range conns {
		if tc, ok := conn.(*tls.Conn); ok {
			conn = tc.NetConn() // no close_notify to write: this is a teardown
		}
		_ = conn.Close()
	}
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
