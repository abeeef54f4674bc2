package fleet

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/internal/probe"
)

// Health is a fleet's health, for a liveness or health check (Fleet.Health
// returns it, Fleet.HealthHandler serves it): its own verdict in the JSON
// shape of sqsconsumer.Health ("healthy", "status", "problems", "error"),
// and each listed queue's sqsconsumer.Health under "queues".
//
// The fleet is healthy when every listed queue is (see sqsconsumer.Health
// for what makes one unhealthy: a stall, a handler over its limit, a lease
// near its ceiling, Run failed or not called), and at least one is
// listed. Each problem is a queue's, prefixed with its URL, so a probe's
// log names the unhealthy queue:
//
//	{"healthy":false,"status":"running","problems":["queue https://sqs.us-east-1.amazonaws.com/123456789012/orders: no ReceiveMessage, visibility change or delete was answered by SQS for 2m10s (limit 2m0s); the latest receive failed: ..."],"queues":[...]}
//
// Queues join and leave the view (Add, Serve, Watch, Remove; a Serve'd or
// watched queue whose Run returned nil leaves by itself), so the same
// fleet answers for a process whose queues come and go.
type Health struct {
	// Healthy is false when Problems is not empty.
	Healthy bool `json:"healthy"`
	// Ready is true when every listed queue is ready
	// (sqsconsumer.Health.Ready), at least one is listed, and Run was
	// called if queues were added for it: the fleet takes messages from
	// each of them.
	Ready bool `json:"ready"`
	// Status is the listed queues' least advanced status, in this order:
	// "failed" (a queue's Run returned an error: the fleet's Run stops
	// the queues it runs), "not started" (fleet.Run was not called for
	// the queues added to it, or a queue's own Run was not called), any
	// status a queue reports that is not listed here, "starting",
	// "draining", "running", "stopped" (all returned nil). A queue the
	// fleet stopped because another failed counts as "stopped", as in
	// Run's error. "not started" when no queue is listed.
	Status string `json:"status"`
	// Problems says, one sentence each, why Healthy is false; each
	// queue's problems start with "queue URL: ".
	Problems []string `json:"problems,omitempty"`
	// Queues holds each listed queue's own Health, in the order they
	// joined.
	Queues []QueueHealth `json:"queues"`
	// Err is the error Run returned, if any.
	Err error `json:"-"`
}

// QueueHealth is one queue's Health within a fleet's.
type QueueHealth struct {
	// Queue is the queue's URL (sqsconsumer.Consumer.QueueURL).
	Queue string `json:"queue"`
	// Health is the queue's Consumer's own report, unchanged: a queue the
	// fleet stopped while it was still starting reports "failed" here,
	// though the fleet counts it as stopped.
	Health sqsconsumer.Health `json:"health"`
}

// MarshalJSON writes h with Err as its text, under "error".
func (h Health) MarshalJSON() ([]byte, error) {
	type plain Health
	out := struct {
		plain
		Err string `json:"error,omitempty"`
	}{plain: plain(h)}
	if h.Err != nil {
		out.Err = h.Err.Error()
	}
	return json.Marshal(out)
}

// statusOrder ranks the queues' statuses for the fleet's: the fleet reports
// the first any queue has. A status not listed ranks just after "not
// started".
var statusOrder = []string{"failed", "not started", "starting", "draining", "running", "stopped"}

func statusRank(s string) float64 {
	if i := slices.Index(statusOrder, s); i >= 0 {
		return float64(i)
	}
	return 1.5
}

// Health reports the fleet's health now (see Health), from each listed
// queue's sqsconsumer.Consumer.Health. Safe to call at any time, from any
// goroutine; like the Consumers' it takes locks they take for every
// message, so call it every few seconds, not in a loop.
func (f *Fleet) Health() Health {
	f.mu.Lock()
	queues := slices.Clone(f.queues)
	started, runErr := f.started, f.runErr
	stopped := make([]bool, len(queues))
	for i, q := range queues {
		stopped[i] = q.stoppedByFleet
	}
	f.mu.Unlock()

	h := Health{Status: "not started", Queues: make([]QueueHealth, 0, len(queues)), Err: runErr}
	waiting := false // queues added for a Run not called yet
	var gone []*queue
	for i, q := range queues {
		qh := q.c.Health()
		if q.how == byWatch && qh.Status == "stopped" {
			gone = append(gone, q) // its Run returned nil: it leaves
			continue
		}
		h.Queues = append(h.Queues, QueueHealth{Queue: q.c.QueueURL(), Health: qh})
		status, problems := qh.Status, qh.Problems
		if stopped[i] {
			status, problems = "stopped", nil
		}
		if len(h.Queues) == 1 || statusRank(status) < statusRank(h.Status) {
			h.Status = status
		}
		if q.how == byAdd && !started {
			waiting = true
			continue // the fleet's own problem says it
		}
		for _, p := range problems {
			h.Problems = append(h.Problems, fmt.Sprintf("queue %s: %s", q.c.QueueURL(), p))
		}
	}
	f.drop(gone)
	switch {
	case len(h.Queues) == 0:
		h.Problems = append(h.Problems, "no Consumer is in the fleet")
	case waiting:
		h.Problems = append([]string{"fleet.Run has not been called"}, h.Problems...)
	}
	h.Healthy = len(h.Problems) == 0
	h.Ready = h.Healthy
	for _, q := range h.Queues {
		h.Ready = h.Ready && q.Health.Ready
	}
	return h
}

// drop takes the watched queues whose Run returned nil out of the view.
func (f *Fleet) drop(gone []*queue) {
	for _, q := range gone {
		f.removeQueue(q)
	}
}

// HTTPStatus is the status HealthHandler answers with: 200 when healthy,
// 503 when not.
func (h Health) HTTPStatus() int { return probe.Status(h.Healthy) }

// ReadyHTTPStatus is the status ReadyHandler answers with: 200 when
// ready, 503 when not.
func (h Health) ReadyHTTPStatus() int { return probe.Status(h.Ready) }

// HealthHandler returns an http.Handler for the fleet's liveness and health
// checks, as sqsconsumer.Consumer.HealthHandler does for one queue: it
// answers GET and HEAD with 200 when Health is healthy and 503 when not,
// with Health as a JSON body (for GET), and 405 to other methods. So it
// answers 503 while no queue is listed, before Run for the queues added
// to it, while any listed queue is unhealthy (each problem names its
// queue), and once any listed queue's Run failed; 200 while every listed
// queue runs or drains healthily, and after Run returned nil. Mount it
// where the orchestrator looks, e.g. mux.Handle("/healthz",
// f.HealthHandler()).
func (f *Fleet) HealthHandler() http.Handler {
	return probe.Handler(func() (any, int) { h := f.Health(); return h, h.HTTPStatus() })
}

// ReadyHandler returns an http.Handler for the fleet's readiness and
// startup checks, as sqsconsumer.Consumer.ReadyHandler does for one queue:
// 200 while every queue takes messages (sqsconsumer.Health's table of
// states), 503 otherwise. Mount it, e.g., at mux.Handle("/readyz",
// f.ReadyHandler()).
func (f *Fleet) ReadyHandler() http.Handler {
	return probe.Handler(func() (any, int) { h := f.Health(); return h, h.ReadyHTTPStatus() })
}
