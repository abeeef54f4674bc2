package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// poolClient counts the connections an HTTP/1.1 client with an idle pool
// of n per host would open for the calls made through it, as net/http's
// Transport does: a call takes an idle connection, or dials a new one; a
// call that ends gives its connection back to the pool, which closes it
// when n are idle already. Every call takes rtt (half before the server
// handles it, half after), as latencyClient.
//
// With traced set it also tells the httptrace.ClientTrace of each call's
// context what it did, as net/http's Transport does: GotConn (Reused when
// the call took an idle connection) when the call begins, PutIdleConn
// (with an error when the connection was closed) when it ends. With
// sustains above 0 it models a client that sustains that many calls in
// flight, whatever its pool: a call that ends while more are in flight
// loses its connection.
type poolClient struct {
	Client
	n        int
	rtt      time.Duration
	traced   bool
	sustains int
	jitter   bool // each round trip 0.7 to 1.3 rtt
	// serves, when above 0, is how many calls a second the server
	// answers at most, as a server short of CPU: a call then takes at
	// least the calls in flight / serves (Little's law), and calls in
	// flight beyond serves x rtt only wait longer.
	serves float64

	mu       sync.Mutex // guards the fields below
	idle     int
	inFlight int
	peak     int
	dials    int
	calls    int
	lost     int

	deleted atomic.Int64
}

var errPoolFull = errors.New("http: putIdleConn: too many idle connections for host")

func (p *poolClient) begin(ctx context.Context) {
	p.mu.Lock()
	p.calls++
	p.inFlight++
	p.peak = max(p.peak, p.inFlight)
	reused := p.idle > 0
	if reused {
		p.idle--
	} else {
		p.dials++
	}
	p.mu.Unlock()
	if tr := httptrace.ContextClientTrace(ctx); p.traced && tr != nil && tr.GotConn != nil {
		tr.GotConn(httptrace.GotConnInfo{Reused: reused})
	}
}

func (p *poolClient) end(ctx context.Context) {
	p.mu.Lock()
	var err error
	switch {
	case p.sustains > 0 && p.inFlight > p.sustains:
		err = errPoolFull
	case p.idle < p.n:
		p.idle++
	default:
		err = errPoolFull
	}
	if err != nil {
		p.lost++
	}
	p.inFlight--
	p.mu.Unlock()
	if tr := httptrace.ContextClientTrace(ctx); p.traced && tr != nil && tr.PutIdleConn != nil {
		tr.PutIdleConn(err)
	}
}

// counts returns the dials, calls and lost connections so far, and resets
// the peak.
func (p *poolClient) counts() (dials, calls, lost, peak int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	peak, p.peak = p.peak, p.inFlight
	return p.dials, p.calls, p.lost, peak
}

func (p *poolClient) trip(ctx context.Context) func() {
	p.begin(ctx)
	rtt := p.rtt
	if p.jitter {
		// A round trip of 0.7 to 1.3 rtt, in 61 steps that follow each
		// other from call to call (a golden-ratio sequence): calls that
		// begin together do not all end together, as on a network.
		p.mu.Lock()
		k := p.calls
		p.mu.Unlock()
		frac := float64(k) * 0.6180339887
		frac -= float64(int(frac))
		rtt = time.Duration(float64(p.rtt) * (0.7 + 0.6*float64(int(frac*61))/60))
	}
	if p.serves > 0 {
		p.mu.Lock()
		n := p.inFlight
		p.mu.Unlock()
		rtt = max(rtt, time.Duration(float64(n)/p.serves*float64(time.Second)))
	}
	time.Sleep(rtt / 2)
	return func() {
		time.Sleep(rtt - rtt/2)
		p.end(ctx)
	}
}

func (p *poolClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	defer p.trip(ctx)()
	return p.Client.ReceiveMessage(ctx, in, optFns...)
}

func (p *poolClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	defer p.trip(ctx)()
	out, err := p.Client.DeleteMessageBatch(ctx, in, optFns...)
	if err == nil {
		p.deleted.Add(int64(len(out.Successful)))
	}
	return out, err
}

func (p *poolClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	defer p.trip(ctx)()
	return p.Client.ChangeMessageVisibilityBatch(ctx, in, optFns...)
}

func (p *poolClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	defer p.trip(ctx)()
	return p.Client.GetQueueAttributes(ctx, in, optFns...)
}

// poolRun is what measurePool saw over its measured span.
type poolRun struct {
	rate        float64 // messages deleted per virtual second
	dialsPer1k  float64 // new connections per 1,000 messages
	callsPerMsg float64
	peak        int // most calls in flight at once
	stats       Stats
}

func (r poolRun) String() string {
	return fmt.Sprintf("%.0f msg/s, %.1f new connections per 1,000 messages, %.3f calls a message, at most %d calls in flight", r.rate, r.dialsPer1k, r.callsPerMsg, r.peak)
}

// measurePool runs a Consumer with handlers of h and concurrency conc over
// a backlog through a pool of n idle connections at a round trip rtt, in
// virtual time, and measures the steady state: from warm to warm + span.
func measurePool(t *testing.T, n int, rtt, h time.Duration, conc int, warm, span time.Duration, opts ...Option) poolRun {
	t.Helper()
	var r poolRun
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		p := &poolClient{Client: b.client, n: n, rtt: rtt}
		want := int(float64(conc) / max(h, rtt).Seconds() * (warm + span).Seconds() * 2)
		for range (want + 9) / 10 {
			batch := make([]string, 10)
			for i := range batch {
				batch[i] = "m"
			}
			sendBodies(t, b, batch)
		}
		c, err := New(p, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if h > 0 {
				time.Sleep(h)
			}
			return nil
		}), append([]Option{WithVisibilityTimeout(30 * time.Second), WithConcurrency(conc)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, c)
		time.Sleep(warm)
		d0, c0, _, _ := p.counts()
		m0 := p.deleted.Load()
		time.Sleep(span)
		d1, c1, _, peak := p.counts()
		m1 := p.deleted.Load()
		st := c.Stats()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		msgs := float64(m1 - m0)
		r = poolRun{rate: msgs / span.Seconds(), dialsPer1k: float64(d1-d0) / msgs * 1000, callsPerMsg: float64(c1-c0) / msgs, peak: peak, stats: st}
	})
	return r
}

// sendBodies sends bodies to b's queue in one SendMessageBatch call.
func sendBodies(t *testing.T, b bundle, bodies []string) {
	t.Helper()
	in := &sqs.SendMessageBatchInput{QueueUrl: &b.url}
	for i, body := range bodies {
		id, body := fmt.Sprint(i), body
		in.Entries = append(in.Entries, sqsSendEntry(id, body))
	}
	if _, err := b.client.SendMessageBatch(context.Background(), in); err != nil {
		t.Fatal(err)
	}
}

// MaxIdleConnsPerHost tells the Consumer the pool's size, as
// idleConnsPerHost reads it from an SDK client.
func (p *poolClient) MaxIdleConnsPerHost() int { return p.n }

// A Consumer whose HTTP client it cannot trace (this client tells its pool
// but reports no connection through httptrace) keeps its calls in flight
// within twice the pool's idle connections, so that in steady state it
// opens next to no connection, at the rate the work asks for when the
// pool allows it; when the pool is what bounds it, Stats says so. A
// Consumer that sized its calls by its read-ahead alone (as before: 103
// for these settings) kept up to 48 calls in flight over a pool of 10.
// (A client it can trace: inflight_test.go.)
func TestCallsInFlightWithinThePool(t *testing.T) {
	t.Parallel()
	const rtt = 10 * time.Millisecond
	h := 5 * time.Millisecond
	for _, tt := range []struct {
		name    string
		pool    int
		conc    int
		minRate float64 // messages a second
		limited bool
	}{
		{"the work needs fewer calls than the pool holds", 10, 20, 0.95 * 20 / h.Seconds(), false},
		{"the pool bounds the calls", 4, 40, 0.9 * 8 / rtt.Seconds() * 5, true},
		{"a larger pool, the work's rate", 64, 40, 0.95 * 40 / h.Seconds(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := measurePool(t, tt.pool, rtt, h, tt.conc, 1500*time.Millisecond, 1500*time.Millisecond)
			t.Logf("pool %d, %v x %d: %v", tt.pool, h, tt.conc, r)
			require.LessOrEqual(t, r.peak, lanesPerIdleConn*tt.pool, "calls in flight")
			require.LessOrEqual(t, r.dialsPer1k, 2.0, "new connections per 1,000 messages in steady state")
			require.GreaterOrEqual(t, r.rate, tt.minRate, "messages a second")
			require.LessOrEqual(t, r.callsPerMsg, 0.21)
			require.Equal(t, tt.pool, r.stats.IdleConnsPerHost)
			require.Equal(t, min(lanesPerIdleConn*tt.pool, 1+(tt.conc+1000+9)/10), r.stats.MaxCallsInFlight)
			require.Equal(t, tt.limited, r.stats.LimitedByPool, "Stats.LimitedByPool")
		})
	}
}

func sqsSendEntry(id, body string) types.SendMessageBatchRequestEntry {
	return types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(body)}
}

// idleConnsPerHost reads the pool of the clients users build.
func TestIdleConnsPerHost(t *testing.T) {
	t.Parallel()
	base := sqs.Options{Region: "us-east-1", Credentials: aws.AnonymousCredentials{}}
	withHTTP := func(hc sqs.HTTPClient) *sqs.Client {
		o := base
		o.HTTPClient = hc
		return sqs.New(o)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	for _, tt := range []struct {
		name string
		c    Client
		want int
		ok   bool
	}{
		{"the SDK's default client (sqs.New, sqs.NewFromConfig)", sqs.New(base), awshttp.DefaultHTTPTransportMaxIdleConnsPerHost, true},
		{"a BuildableClient with a larger pool", withHTTP(awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) { tr.MaxIdleConnsPerHost = 256 })), 256, true},
		{"an http.Client over an http.Transport", withHTTP(&http.Client{Transport: tr}), 64, true},
		{"an http.Client over net/http's default", withHTTP(&http.Client{}), http.DefaultMaxIdleConnsPerHost, true},
		{"a wrapper with Unwrap", withHTTP(unwrapper{awshttp.NewBuildableClient()}), 10, true},
		{"a client that tells its pool", &poolClient{n: 7}, 7, true},
		{"an http.Client over a transport of its own", withHTTP(&http.Client{Transport: roundTripFunc(nil)}), 0, false},
		{"a Client of unknown make", &instantSQS{}, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, ok := idleConnsPerHost(tt.c)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, n)
		})
	}
}

type unwrapper struct{ next aws.HTTPClient }

func (u unwrapper) Do(r *http.Request) (*http.Response, error) { return u.next.Do(r) }
func (u unwrapper) Unwrap() aws.HTTPClient                     { return u.next }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
