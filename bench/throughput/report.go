package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sqskit/sqsconsumer"
)

// measurement is one contender draining a queue once.
type measurement struct {
	messages int
	elapsed  time.Duration
	calls    map[string]int
	cpu      time.Duration // the bench process's CPU time (client; with -server inprocess, server too)
	// serverCPU is the server side's CPU time (a child process's; 0
	// with -server inprocess, where cpu holds it).
	serverCPU time.Duration
	// conns and handshakes are the connections the server side accepted
	// and the TLS handshakes completed on them; unused the connections
	// that carried no request; requests the requests, http2 those over
	// HTTP/2. All counted by the server side.
	conns, handshakes, unused, requests, http2 int
	// lateConns is the connections accepted after half the messages were
	// deleted, lateMessages the messages left then: the steady state,
	// past the cold start.
	lateConns, lateMessages int
	// warmConns is the connections accepted after the bench's warm mark
	// (bench.warm messages deleted), warmMessages the messages left
	// then (0: no mark).
	warmConns, warmMessages int
	allocs                  uint64 // bytes allocated by the process
	gcs                     uint32 // GC cycles
	// redelivered counts messages received twice: a stall of the
	// visibility timeout that note explains.
	redelivered int
	// receivedAgain is what the server side counted of the same (-1:
	// unknown), whether or not the contender reports receive counts.
	receivedAgain int
	note          string
	// busy is the share of concurrency x elapsed the handler slots spent
	// in handler calls (matrix rows with a handler; 0 otherwise).
	busy float64
	// stats is a Consumer's Stats when it ended (nil for the others).
	stats *sqsconsumer.Stats
	// trace is what the client's pool did, by action (-conntrace).
	trace map[string]actionCounts
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

// per1k is x per 1,000 messages.
func (m measurement) per1k(x int) float64 { return float64(x) * 1000 / float64(m.messages) }

// latePer1k is the new connections per 1,000 messages of the drain's
// second half.
func (m measurement) latePer1k() float64 {
	if m.lateMessages == 0 {
		return 0
	}
	return float64(m.lateConns) * 1000 / float64(m.lateMessages)
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
	redelivered        int     // over all rounds
	conns, handshakes  float64 // per 1,000 messages
	lateConns          float64 // per 1,000 messages of the second half
	allocKB, gcsPer1k  float64
}

func summarize(ms, raw []measurement) summary {
	var rates, ratios, calls, cpus, allocs, gcs, conns, handshakes, late []float64
	redelivered := 0
	for r, m := range ms {
		redelivered += m.redelivered
		conns = append(conns, m.per1k(m.conns))
		handshakes = append(handshakes, m.per1k(m.handshakes))
		late = append(late, m.latePer1k())
		rates = append(rates, m.rate())
		ratios = append(ratios, m.rate()/raw[r].rate())
		calls = append(calls, m.callsPerMessage())
		cpus = append(cpus, float64(m.cpuPerMessage()))
		allocs = append(allocs, float64(m.allocs)/1024/float64(m.messages))
		gcs = append(gcs, float64(m.gcs)*1000/float64(m.messages))
	}
	return summary{rate: median(rates), ratio: median(ratios), calls: median(calls), cpu: time.Duration(median(cpus)), redelivered: redelivered,
		conns: median(conns), handshakes: median(handshakes), lateConns: median(late),
		allocKB: median(allocs), gcsPer1k: median(gcs)}
}

// report writes one row per contender: messages per second in each round,
// then the medians. results[0] is the raw loop.
func report(out io.Writer, contenders []contender, results [][]measurement, st serverStats) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "contender\t")
	for r := range results[0] {
		fmt.Fprintf(w, "round %d\t", r+1)
	}
	fmt.Fprintln(w, "median msg/s\tvs raw\tcalls/msg\tCPU µs/msg\tKB/msg\tGCs/1k msg\tconns/1k msg\tTLS handshakes/1k msg\tconns/1k msg 2nd half\tredelivered\t")
	for i, c := range contenders {
		fmt.Fprintf(w, "%s\t", c.name)
		for _, m := range results[i] {
			fmt.Fprintf(w, "%.0f\t", m.rate())
		}
		s := summarize(results[i], results[0])
		fmt.Fprintf(w, "%.0f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\n", s.rate, s.ratio, s.calls, float64(s.cpu)/float64(time.Microsecond),
			s.allocKB, s.gcsPer1k, s.conns, s.handshakes, s.lateConns, s.redelivered)
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
	reportFailures(out, "during the run", st)
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

// reportFailures writes the failed and the cancelled requests the server
// side saw.
func reportFailures(out io.Writer, when string, st serverStats) {
	failures, cancelled := st.failures(), st.cancellations()
	if failures == "" {
		failures = "none"
	}
	if cancelled == "" {
		cancelled = "none"
	}
	fmt.Fprintf(out, "failed HTTP requests %s: %s; cancelled by the client (long polls cut short when a drain ends): %s\n", when, failures, cancelled)
}
