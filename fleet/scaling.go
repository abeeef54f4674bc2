package fleet

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/internal/probe"
	"github.com/sqskit/sqsconsumer/internal/scaling"
)

// Scaling is a fleet's scaling signal (Fleet.Scaling serves it,
// Fleet.ScalingHandler serves it as JSON): each listed queue's own figure
// (sqsconsumer.Consumer.Scaling, for the queues whose Consumer has
// WithScalingTarget or WithScaling), and the replicas of this whole
// process that the queues need together, sharing its budget.
//
// A watched queue (Fleet.Watch) runs outside the budget, on its own
// slots: its own figure bounds the process's from below, its slots are
// not added to SlotsNeeded. The view follows the queues that join and
// leave (see Health); while a queue that joined has no figure yet, the
// process's is not Known (Replicas holds the last known figure).
//
// The process's figure is ceil(SlotsNeeded / (Budget × Utilization)),
// where SlotsNeeded adds up each queue's demand times the time a message
// holds one of its slots (Little's law: the slots the queue keeps busy),
// and Utilization is the lowest of the queues' policies; it is never below
// the highest queue's own figure (a queue cannot get more slots in a
// replica than its WithConcurrency), and it is held whole: it rises at
// once and falls only when it has been lower for the longest ScaleInAfter
// of the queues. Unlike a queue's figure, whose backlog share is not
// held, the process's holds the slots a drained backlog needed for that
// long too.
type Scaling struct {
	// Known is false while any queue with the signal on has no known
	// figure, or when no queue has the signal on; Reason says why, and
	// Replicas is then the last known figure (0 if none).
	Known  bool   `json:"known"`
	Reason string `json:"reason,omitempty"`
	// Replicas is the process's figure.
	Replicas int `json:"replicas"`
	// SlotsNeeded is the handler slots the queues' demand keeps busy
	// across all replicas; Budget is the fleet's concurrency (one
	// replica's slots).
	SlotsNeeded float64 `json:"slots_needed"`
	Budget      int     `json:"budget"`
	// Queues holds each listed queue's figure, in the order they joined
	// (those without the signal too, never Known).
	Queues []QueueScaling `json:"queues"`
}

// QueueScaling is one queue's figure within a fleet's.
type QueueScaling struct {
	Queue   string              `json:"queue"`
	Scaling sqsconsumer.Scaling `json:"scaling"`
}

// processScale holds the process's figure between calls of Scaling.
type processScale struct {
	mu     sync.Mutex // guards the fields below
	hold   scaling.Hold
	lastAt time.Time // the newest queue reading added to hold
	last   int       // the last known figure
}

// Scaling returns the fleet's scaling signal now (see Scaling). Safe for
// concurrent use, at any time.
func (f *Fleet) Scaling() Scaling {
	f.mu.Lock()
	queues := slices.Clone(f.queues)
	f.mu.Unlock()
	var gone []*queue
	queues = slices.DeleteFunc(queues, func(q *queue) bool {
		if q.how == byWatch && q.c.Health().Status == "stopped" {
			gone = append(gone, q) // its Run returned nil: it leaves
			return true
		}
		return false
	})
	f.drop(gone)
	out := Scaling{Budget: f.budget, Queues: make([]QueueScaling, 0, len(queues))}
	var (
		on      int
		known   []scaling.Queue
		window  time.Duration
		newest  time.Time
		unknown string
	)
	for _, q := range queues {
		c := q.c
		s := c.Scaling()
		out.Queues = append(out.Queues, QueueScaling{Queue: c.QueueURL(), Scaling: s})
		if s.Target == 0 {
			continue // the signal is off for this queue
		}
		on++
		if !s.Known {
			if unknown == "" {
				unknown = fmt.Sprintf("queue %s: %s", c.QueueURL(), s.Reason)
			}
			continue
		}
		if q.member == nil {
			// Outside the budget: its own figure only.
			known = append(known, scaling.Queue{Replicas: s.Replicas, Utilization: 1})
		} else {
			known = append(known, scaling.Queue{Replicas: s.Replicas, Demand: s.Demand, SlotTime: s.SlotTime, Utilization: s.Utilization})
		}
		window = max(window, s.ScaleInAfter)
		if s.At.After(newest) {
			newest = s.At
		}
	}
	need, slots := scaling.Process(known, f.budget)
	out.SlotsNeeded = slots
	p := &f.scale
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on == 0:
		out.Reason = "no queue has the scaling signal on: give their Consumers WithScalingTarget"
		return out
	case unknown != "":
		out.Reason, out.Replicas = unknown, p.last
		return out
	}
	if newest.After(p.lastAt) {
		p.hold.Window = window
		p.last = p.hold.Add(newest, need)
		p.lastAt = newest
	}
	out.Known, out.Replicas = true, max(p.last, need)
	return out
}

// ScalingHandler returns an http.Handler that serves the fleet's Scaling
// as JSON, as sqsconsumer.Consumer.ScalingHandler does for one queue: the
// process's figure at valueLocation "replicas" (KEDA's metrics-api
// scaler), 200 when known and 503 when not, each queue's figure under
// "queues". Safe for concurrent use.
func (f *Fleet) ScalingHandler() http.Handler {
	return probe.Handler(func() (any, int) { s := f.Scaling(); return s, probe.Status(s.Known) })
}
