package main

import (
	"context"
	"net/http"
	"time"
)

// delay adds a fixed round-trip time to every HTTP request, as a network
// between the client and SQS would: half of it before the request is
// forwarded, the other half after the response arrives. Every request waits
// on a timer of its own, so concurrent calls overlap exactly as they would on
// a real network (a request pays the RTT, not the requests before it). A
// request whose context ends while it waits fails with the context's error,
// as one cancelled in flight would.
type delay struct {
	rtt  time.Duration
	next http.RoundTripper
}

func (d delay) RoundTrip(req *http.Request) (*http.Response, error) {
	if d.rtt <= 0 {
		return d.next.RoundTrip(req)
	}
	out := d.rtt / 2
	if err := pause(req.Context(), out); err != nil {
		if req.Body != nil {
			req.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, err
	}
	resp, err := d.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if err := pause(req.Context(), d.rtt-out); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// pause waits for d, or until ctx ends, whichever comes first.
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
