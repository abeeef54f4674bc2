package main

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// front is the measured listener's handler: it counts every request by SQS
// action and answers it a round-trip time later than next does, as a
// network between the client and SQS would: half of the RTT before next
// sees the request, the other half after next has answered (the answer is
// held in memory meanwhile). Every request waits on timers of its own, so
// concurrent calls overlap exactly as on a real network (a request pays the
// RTT, not the requests before it), and the connection stays busy for the
// whole round trip, as an HTTP/1.1 connection to SQS does. A request whose
// client goes away while it waits is counted as cancelled and answered
// nothing.
type front struct {
	rtt   *atomic.Int64 // the added round-trip time, ns; read per request
	next  func() http.Handler
	stats *connStats
}

func (f front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	action := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	f.stats.request(action, r.ProtoMajor)
	rtt := time.Duration(f.rtt.Load())
	ctx := r.Context()
	next := f.next()
	if err := pause(ctx, rtt/2); err != nil {
		f.stats.cancelled(action)
		return
	}
	rec := newBufferedResponse()
	next.ServeHTTP(rec, r)
	if err := pause(ctx, rtt-rtt/2); err != nil {
		f.stats.cancelled(action)
		return
	}
	if rec.status/100 != 2 {
		f.stats.failed(action, rec)
	}
	rec.writeTo(w)
}

// pause waits for d, or until ctx ends, whichever comes first; it fails
// with ctx's error if ctx has ended, even for d ≤ 0.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
