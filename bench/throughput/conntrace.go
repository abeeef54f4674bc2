package main

import (
	"fmt"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// actionTrace counts, by SQS action, what the client's connection pool did
// for each request (-conntrace): whether it got a connection it had used
// before, and whether the pool kept the connection afterwards or closed
// it because the pool was full. It tells which calls open the connections
// a drain opens. Safe for concurrent use.
type actionTrace struct {
	mu      sync.Mutex // guards by
	by      map[string]*actionCounts
	inUse   atomic.Int64 // connections a request holds now (got, not yet put back)
	maxUsed atomic.Int64
}

// actionCounts is what the pool did for one action's requests.
type actionCounts struct {
	Calls    int64 // requests that got a connection
	Fresh    int64 // of them, on a connection never used before (dialled for it)
	Discards int64 // connections the pool closed after the request instead of keeping them idle (PutIdleConn failed)
	// InUseAtDiscard sums the connections in use when each discard
	// happened: over Discards, the calls in flight that overflowed the
	// pool.
	InUseAtDiscard int64
}

func newActionTrace() *actionTrace { return &actionTrace{by: map[string]*actionCounts{}} }

func (t *actionTrace) counts(action string) *actionCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.by[action]
	if c == nil {
		c = &actionCounts{}
		t.by[action] = c
	}
	return c
}

// snapshot copies the counts.
func (t *actionTrace) snapshot() map[string]actionCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]actionCounts, len(t.by))
	for k, v := range t.by {
		out[k] = actionCounts{Calls: atomic.LoadInt64(&v.Calls), Fresh: atomic.LoadInt64(&v.Fresh),
			Discards: atomic.LoadInt64(&v.Discards), InUseAtDiscard: atomic.LoadInt64(&v.InUseAtDiscard)}
	}
	return out
}

// tracedHTTP is an aws.HTTPClient that traces each request's connection
// into t. Unwrap lets a Consumer read the pool underneath.
type tracedHTTP struct {
	next aws.HTTPClient
	t    *actionTrace
}

func (h tracedHTTP) Unwrap() aws.HTTPClient { return h.next }

func (h tracedHTTP) Do(r *http.Request) (*http.Response, error) {
	c := h.t.counts(strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS."))
	var got atomic.Bool
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			got.Store(true)
			atomic.AddInt64(&c.Calls, 1)
			if !info.Reused {
				atomic.AddInt64(&c.Fresh, 1)
			}
			n := h.t.inUse.Add(1)
			for m := h.t.maxUsed.Load(); n > m && !h.t.maxUsed.CompareAndSwap(m, n); m = h.t.maxUsed.Load() {
			}
		},
		PutIdleConn: func(err error) {
			n := h.t.inUse.Add(-1)
			if err != nil {
				atomic.AddInt64(&c.Discards, 1)
				atomic.AddInt64(&c.InUseAtDiscard, n+1)
			}
		},
	}
	return h.next.Do(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
}

// formatTrace is one line per action: calls, fresh connections, discards
// and the connections in use at a discard, on average.
func formatTrace(by map[string]actionCounts, messages int) string {
	names := make([]string, 0, len(by))
	for k := range by {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		c := by[k]
		at := 0.0
		if c.Discards > 0 {
			at = float64(c.InUseAtDiscard) / float64(c.Discards)
		}
		parts = append(parts, fmt.Sprintf("%s: %d calls, %.2f fresh and %.2f discarded conns/1k msgs (in use at a discard %.0f)",
			k, c.Calls, float64(c.Fresh)*1000/float64(messages), float64(c.Discards)*1000/float64(messages), at))
	}
	return strings.Join(parts, "; ")
}
