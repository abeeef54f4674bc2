// Package probe serves health reports over HTTP for orchestrators' probes:
// the one handler behind a Consumer's and a fleet's HealthHandler and
// ReadyHandler.
package probe

import (
	"encoding/json"
	"net/http"
)

// Status is the HTTP status for a verdict: 200 when ok, 503 when not.
func Status(ok bool) int {
	if ok {
		return http.StatusOK
	}
	return http.StatusServiceUnavailable
}

// Handler returns an http.Handler that answers GET and HEAD with the
// status report returns and the report as a JSON body (for GET), marked
// not to be cached, and 405 to other methods. report is called once per
// request, from the request's goroutine.
func Handler(report func() (any, int)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		v, status := report()
		body, err := json.Marshal(v)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		if r.Method == http.MethodGet {
			_, _ = w.Write(append(body, '\n'))
		}
	})
}
