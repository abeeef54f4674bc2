package sqstest

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// HostCheckingHandler is [Server.Handler] for a server that answers for its own
// address only, as cmd/sqstest does by default. [Server.Handler] routes a request
// by the last two segments of its QueueUrl (account and queue name), whatever host
// and port the URL names, which suits tests that make up URLs. Against a real
// listener that hides a client's mistake: a URL meant for another server (another
// port, another host, an AWS region's endpoint) would reach this server's queue of
// the same name. HostCheckingHandler answers such a request as SQS answers a queue
// that does not exist: 400 QueueDoesNotExist (the legacy code
// AWS.SimpleQueueService.NonExistentQueue).
//
// A QueueUrl names this server when its host and port (the scheme's default port
// when it gives none) are those of the base URL ([WithBaseURL]) or those the
// request was sent to (its Host header), so a client that reached the server as
// localhost:9324 may use queue URLs on localhost:9324 even when the base URL says
// 127.0.0.1:9324. Host names are compared as written, not resolved. A QueueUrl
// without a scheme and host (a bare queue name, for example) is not checked.
func (s *Server) HostCheckingHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, maxRequestBytes+1))
		if err != nil {
			return
		}
		if f, foreign := s.foreignQueueURL(req, body); foreign {
			writeAnswer(w, errorAnswer(f))
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		s.serveHTTP(w, req)
	})
}

// foreignQueueURL reports whether the request's QueueUrl names a host or port
// other than this server's, with the fault to answer.
func (s *Server) foreignQueueURL(req *http.Request, body []byte) (Fault, bool) {
	var in struct {
		QueueURL string `json:"QueueUrl"`
	}
	if json.Unmarshal(body, &in) != nil || !strings.Contains(in.QueueURL, "://") {
		return Fault{}, false // the action answers bad JSON, a bare name is routed as usual
	}
	u, err := url.Parse(in.QueueURL)
	if err != nil || u.Host == "" {
		return Fault{}, false
	}
	got := hostPort(u.Scheme, u.Host)
	ours := []string{}
	if b, err := url.Parse(s.cfg.baseURL); err == nil && b.Host != "" {
		ours = append(ours, hostPort(b.Scheme, b.Host))
	}
	if req.Host != "" {
		scheme := "http"
		if req.TLS != nil {
			scheme = "https"
		}
		if hp := hostPort(scheme, req.Host); !slices.Contains(ours, hp) {
			ours = append(ours, hp)
		}
	}
	for _, o := range ours {
		if got == o {
			return Fault{}, false
		}
	}
	return FaultQueueDoesNotExist.withMessage("The specified queue does not exist. (sqstest: the QueueUrl names %s; this server answers for %s)",
		got, strings.Join(ours, " and ")), true
}

// hostPort is host:port in lower case, with the scheme's default port when
// hostport has none.
func hostPort(scheme, hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.Trim(hostport, "[]"), ""
	}
	if port == "" {
		port = "80"
		if strings.EqualFold(scheme, "https") {
			port = "443"
		}
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.ToLower(host), "."), port)
}

// writeAnswer writes ans as serveHTTP does.
func writeAnswer(w http.ResponseWriter, ans answer) {
	for k, v := range ans.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(ans.body)))
	w.WriteHeader(ans.status)
	_, _ = w.Write(ans.body)
}
