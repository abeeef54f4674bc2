package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// measurement is one contender draining a queue once.
type measurement struct {
	messages int
	elapsed  time.Duration
	calls    map[string]int
	cpu      time.Duration // process CPU time (client and, in-process, server)
	dials    int           // TCP connections opened
	allocs   uint64        // bytes allocated by the process
	gcs      uint32        // GC cycles
	// redelivered counts messages received twice: a stall of the
	// visibility timeout that note explains.
	redelivered int
	note        string
	// busy is the share of concurrency x elapsed the handler slots spent
	// in handler calls (matrix rows with a handler; 0 otherwise).
	busy float64
}

func (m measurement) rate() float64 { return float64(m.messages) / m.elapsed.Seconds() }

func (m measurement) callsPerMessage() float64 {
	total := 0
	for _, n := range m.calls {
		total += n
	}
	return float64(total) / float64(m.messages)
}

func (m measurement) cpuPerMessage() time.Duration {
	return m.cpu / time.Duration(m.messages)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// summary is the medians of one contender over the rounds; ratio compares
// each round with the raw loop's of the same round.
type summary struct {
	rate, ratio, calls float64
	cpu                time.Duration
	redelivered        int // over all rounds
	dials              int // over all rounds
	allocKB, gcsPer1k  float64
}

func summarize(ms, raw []measurement) summary {
	var rates, ratios, calls, cpus, allocs, gcs []float64
	redelivered, dials := 0, 0
	for r, m := range ms {
		redelivered += m.redelivered
		dials += m.dials
		rates = append(rates, m.rate())
		ratios = append(ratios, m.rate()/raw[r].rate())
		calls = append(calls, m.callsPerMessage())
		cpus = append(cpus, float64(m.cpuPerMessage()))
		allocs = append(allocs, float64(m.allocs)/1024/float64(m.messages))
		gcs = append(gcs, float64(m.gcs)*1000/float64(m.messages))
	}
	return summary{rate: median(rates), ratio: median(ratios), calls: median(calls), cpu: time.Duration(median(cpus)), redelivered: redelivered, dials: dials,
		allocKB: median(allocs), gcsPer1k: median(gcs)}
}

// report writes one row per contender: messages per second in each round,
// then the medians. results[0] is the raw loop.
func report(out io.Writer, contenders []contender, results [][]measurement, failures string) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "contender\t")
	for r := range results[0] {
		fmt.Fprintf(w, "round %d\t", r+1)
	}
	fmt.Fprintln(w, "median msg/s\tvs raw\tcalls/msg\tCPU µs/msg\tKB/msg\tGCs/1k msg\tconns\tredelivered\t")
	for i, c := range contenders {
		fmt.Fprintf(w, "%s\t", c.name)
		for _, m := range results[i] {
			fmt.Fprintf(w, "%.0f\t", m.rate())
		}
		s := summarize(results[i], results[0])
		fmt.Fprintf(w, "%.0f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%d\t%d\t\n", s.rate, s.ratio, s.calls, float64(s.cpu)/float64(time.Microsecond),
			s.allocKB, s.gcsPer1k, s.dials, s.redelivered)
	}
	w.Flush()
	for i, c := range contenders {
		for r, m := range results[i] {
			if m.note != "" {
				fmt.Fprintf(out, "  %s, round %d: %s\n", c.name, r+1, m.note)
			}
		}
	}

	fmt.Fprintln(out, "\ncalls per message in the last round:")
	for i, c := range contenders {
		last := results[i][len(results[i])-1]
		fmt.Fprintf(out, "  %-16s %s\n", c.name, formatCalls(last.calls, last.messages))
	}
	if failures == "" {
		failures = "none"
	}
	fmt.Fprintf(out, "\nfailed HTTP requests during the run: %s\n", failures)
	fmt.Fprintln(out, "targets: consumer/raw >= 0.95, consumer calls/msg <= 0.21")
}

func formatCalls(calls map[string]int, messages int) string {
	names := make([]string, 0, len(calls))
	for k := range calls {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %.3f", k, float64(calls[k])/float64(messages))
	}
	return strings.Join(parts, ", ")
}

// callCounter counts HTTP requests by SQS action (the X-Amz-Target header),
// and, over the whole run, the requests that failed (a transport error or a
// status other than 2xx) with an example of each kind.
type callCounter struct {
	dials atomic.Int64 // connections opened since the last reset

	mu      sync.Mutex // guards the fields below
	n       map[string]int
	failed  map[string]int
	example map[string]string
}

func newCallCounter() *callCounter {
	return &callCounter{n: map[string]int{}, failed: map[string]int{}, example: map[string]string{}}
}

// dial counts the connections dial opens.
func (c *callCounter) dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.dials.Add(1)
		return dial(ctx, network, addr)
	}
}

func (c *callCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		action := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "AmazonSQS.")
		c.mu.Lock()
		c.n[action]++
		c.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode/100 != 2 {
			what := fmt.Sprint(err)
			if err == nil {
				what = resp.Status
			}
			c.mu.Lock()
			c.failed[action]++
			if _, ok := c.example[action]; !ok {
				c.example[action] = what
			}
			c.mu.Unlock()
		}
		return resp, err
	})
}

// reset zeroes the request counts (not the failures).
func (c *callCounter) reset() {
	c.dials.Store(0)
	c.mu.Lock()
	clear(c.n)
	c.mu.Unlock()
}

func (c *callCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.n))
	for k, v := range c.n {
		m[k] = v
	}
	return m
}

// failures describes the failed requests of the run, "" if none failed.
func (c *callCounter) failures() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for a, n := range c.failed {
		parts = append(parts, fmt.Sprintf("%s %d (e.g. %s)", a, n, c.example[a]))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
