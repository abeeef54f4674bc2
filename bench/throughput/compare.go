package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer"
)

// The compare mode (-compare): for each client (-pool), bare loops with a
// fixed number of pollers each (-raw-list, default 20 and 32) against
// Consumers with their default pollers at each concurrency
// (-concurrency, default 20 and 100), no-op handlers, in interleaved rounds
// (-rounds, the order rotating). With -fixed, each Consumer is measured
// once more with its calls in flight fixed at the rule it had before
// issue 37 (WithPollers(min(twice the idle pool, its read-ahead's need))),
// "today's" rule, in the same rounds. Each Consumer's figures come with
// their ratio to the best bare loop of the same round (the one that
// drained fastest), and the new connections are counted over the whole
// drain and after its first -warm messages (the steady state).

// compareContender is one contender of the compare mode.
type compareContender struct {
	name    string
	raw     int // a bare loop's pollers; 0 for a Consumer
	conc    int // a Consumer's WithConcurrency
	pollers int // a Consumer's WithPollers; 0 for its default
}

// compareContenders lists cfg's contenders for client c: the bare loops,
// then for each concurrency the Consumer (and, with Fixed, the Consumer
// with today's rule).
func compareContenders(cfg benchConfig, c clientSpec) []compareContender {
	var out []compareContender
	for _, p := range cfg.RawList {
		out = append(out, compareContender{name: fmt.Sprintf("bare loop, %d pollers", p), raw: p})
	}
	for _, conc := range cfg.Concurrency {
		out = append(out, compareContender{name: fmt.Sprintf("Consumer c=%d", conc), conc: conc})
		if cfg.Fixed {
			p := todaysPollers(conc, c.pool)
			out = append(out, compareContender{name: fmt.Sprintf("Consumer c=%d, WithPollers(%d): before issue 37", conc, p), conc: conc, pollers: p})
		}
		for _, p := range cfg.ConsumerPollers {
			out = append(out, compareContender{name: fmt.Sprintf("Consumer c=%d, WithPollers(%d)", conc, p), conc: conc, pollers: p})
		}
	}
	return out
}

// todaysPollers is the calls in flight a Consumer of concurrency conc
// kept before issue 37 with a pool of pool idle connections per host (0:
// the SDK's 10), at the default read-ahead (1,000) and receive size (10):
// what its read-ahead needs, at most twice the pool.
func todaysPollers(conc, pool int) int {
	if pool == 0 {
		pool = 10
	}
	return min((conc+1000+9)/10+1, max(2*pool, 2))
}

// drain runs c on a queue of n messages.
func (c compareContender) drain(ctx context.Context, client *sqs.Client, url string, n int, cfg benchConfig) (drained, error) {
	if c.raw > 0 {
		cfg.Pollers = c.raw
		return drainRaw(ctx, client, url, n, cfg)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	line := newFinishLine(ctx, n, cancel)
	var failed atomic.Int64
	opts := []sqsconsumer.Option{
		sqsconsumer.WithVisibilityTimeout(benchVisibility),
		sqsconsumer.WithConcurrency(c.conc),
		sqsconsumer.WithWaitTime(cfg.Wait),
		// A Consumer never cancels a receive in flight at shutdown: with
		// a shutdown timeout of 1 s its long polls wait 1 s at most, so
		// the end of a drain (the queue empty) does not wait out 20 s.
		// With a backlog a receive answers at once whatever its wait.
		sqsconsumer.WithShutdownTimeout(time.Second),
		sqsconsumer.WithObserver(sqsconsumer.ObserverFunc(func(e sqsconsumer.Event) {
			switch e.Kind {
			case sqsconsumer.EventReceived:
				line.received(e.Message.Attributes)
			case sqsconsumer.EventDeleted:
				line.add(1)
			case sqsconsumer.EventFailed, sqsconsumer.EventLeaseLost, sqsconsumer.EventLeaseExpired:
				failed.Add(1)
			}
		})),
	}
	if c.pollers > 0 {
		opts = append(opts, sqsconsumer.WithPollers(c.pollers))
	}
	con, err := sqsconsumer.New(client, url, sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil }), opts...)
	if err != nil {
		return drained{}, err
	}
	if err := con.Run(ctx); err != nil {
		return drained{}, err
	}
	if f := failed.Load(); f > 0 {
		return drained{}, fmt.Errorf("%d messages failed or lost their lease", f)
	}
	d, err := line.result()
	st := con.Stats()
	d.stats = &st
	return d, err
}

// runCompare measures the compare mode and writes its report.
func runCompare(ctx context.Context, out io.Writer, cfg benchConfig) error {
	if len(cfg.RTTs) > 1 {
		return fmt.Errorf("-rtt takes one value with -compare")
	}
	var rtt time.Duration
	if len(cfg.RTTs) == 1 {
		rtt = cfg.RTTs[0]
	}
	if len(cfg.RawList) == 0 {
		cfg.RawList = []int{20, 32}
	}
	if len(cfg.Concurrency) == 0 {
		cfg.Concurrency = []int{20, 100}
	}
	srv, err := startServer(serverOptions{Proto: cfg.Proto, Endpoint: cfg.Endpoint}, cfg.Place)
	if err != nil {
		return err
	}
	defer srv.close()
	fmt.Fprintf(out, "throughput compare: %d messages per drain, no-op handlers, %d round(s), the contenders' order rotating; GOMAXPROCS %d, %d CPUs; %s\n\n",
		cfg.Messages, cfg.Rounds, runtime.GOMAXPROCS(0), runtime.NumCPU(), goVersion())
	for _, client := range cfg.Pools {
		b := newBench(cfg, srv, rtt, client)
		b.warm = cfg.Warm
		cons := compareContenders(cfg, client)
		load0 := loadAverage()
		if cfg.Warmup > 0 {
			for _, c := range cons {
				if _, err := b.measureDrain(ctx, c.name, cfg.Warmup, nil, func(ctx context.Context, sc *sqs.Client, url string) (drained, error) {
					return c.drain(ctx, sc, url, cfg.Warmup, cfg)
				}); err != nil {
					return fmt.Errorf("warm-up, %s, %s: %w", client, c.name, err)
				}
			}
		}
		results := make([][]measurement, len(cons))
		for r := range cfg.Rounds {
			for k := range cons {
				i := (k + r) % len(cons)
				c := cons[i]
				m, err := b.measureDrain(ctx, c.name, cfg.Messages, nil, func(ctx context.Context, sc *sqs.Client, url string) (drained, error) {
					return c.drain(ctx, sc, url, cfg.Messages, cfg)
				})
				if err != nil {
					return fmt.Errorf("%s, round %d, %s: %w", client, r+1, c.name, err)
				}
				results[i] = append(results[i], m)
			}
		}
		reportCompare(out, b, cfg, cons, results, load0, loadAverage())
	}
	st, err := srv.stats(ctx)
	if err != nil {
		return err
	}
	reportFailures(out, "during the run", st)
	return nil
}

// reportCompare writes one client's table.
func reportCompare(out io.Writer, b *bench, cfg benchConfig, cons []compareContender, results [][]measurement, load0, load1 string) {
	fmt.Fprintf(out, "**%s**. Load average (1, 5, 15 min) before: %s; after: %s.\n\n", b.setup(), load0, load1)
	rounds := len(results[0])
	// The best bare loop of each round: its rate and CPU per message.
	bestRate, bestCPU, bestName := make([]float64, rounds), make([]float64, rounds), make([]string, rounds)
	for r := range rounds {
		for i, c := range cons {
			if c.raw > 0 && results[i][r].rate() > bestRate[r] {
				bestRate[r], bestCPU[r], bestName[r] = results[i][r].rate(), microseconds(results[i][r].cpuPerMessage()), c.name
			}
		}
	}
	fmt.Fprintf(out, "Best bare loop by round: %s.\n\n", strings.Join(bestName, ", "))
	warm := "after the first " + commas(float64(cfg.Warm)) + " msgs"
	fmt.Fprintf(out, "| contender | msg/s median (range) | × best bare loop | CPU µs/msg median (range) | CPU × best loop's | new conns /1k msgs | %s: new conns /1k msgs | calls/msg | calls in flight at the end |\n", warm)
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i, c := range cons {
		ms := results[i]
		var rates, xs, cpus, cx, conns, late, calls, inFlight []float64
		for r, m := range ms {
			rates = append(rates, m.rate())
			xs = append(xs, m.rate()/bestRate[r])
			cpu := microseconds(m.cpuPerMessage())
			cpus = append(cpus, cpu)
			cx = append(cx, cpu/bestCPU[r])
			conns = append(conns, m.per1k(m.conns))
			if m.warmMessages > 0 {
				late = append(late, float64(m.warmConns)*1000/float64(m.warmMessages))
			}
			calls = append(calls, m.callsPerMessage())
			if m.stats != nil {
				inFlight = append(inFlight, float64(m.stats.MaxCallsInFlight))
			}
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.name,
			spread(rates, "%.0f", true), spread(xs, "%.2f", false), spread(cpus, "%.1f", false), spread(cx, "%.2f", false),
			spread(conns, "%.2f", false), spread(late, "%.2f", false), spread(calls, "%.3f", false), spread(inFlight, "%.0f", false))
	}
	fmt.Fprintln(out)
	for i, c := range cons {
		for r, m := range results[i] {
			if m.note != "" {
				fmt.Fprintf(out, "- %s, round %d: %s\n", c.name, r+1, m.note)
			}
			if m.receivedAgain > 0 {
				fmt.Fprintf(out, "- %s, round %d: %d messages received more than once (a stall: this rate is not the contender's)\n", c.name, r+1, m.receivedAgain)
			}
			if m.trace != nil {
				fmt.Fprintf(out, "- %s, round %d, connections by action: %s\n", c.name, r+1, formatTrace(m.trace, m.messages))
			}
			if m.stats != nil && cfg.ConnTrace {
				fmt.Fprintf(out, "- %s, round %d, Stats: %s\n", c.name, r+1, consumerLine(m.stats))
			}
		}
	}
	fmt.Fprintln(out)
}

// consumerLine is what a Consumer's Stats say of its calls and holdings.
func consumerLine(st *sqsconsumer.Stats) string {
	return fmt.Sprintf("max calls in flight %d, idle conns/host %d, limited by pool %v, calls %+v", st.MaxCallsInFlight, st.IdleConnsPerHost, st.LimitedByPool, st.Calls)
}

// spread is the median of xs with its range in parentheses ("–" when xs
// is empty); commas formats with thousands separators.
func spread(xs []float64, format string, withCommas bool) string {
	if len(xs) == 0 {
		return "–"
	}
	f := func(x float64) string {
		if withCommas {
			return commas(x)
		}
		return fmt.Sprintf(format, x)
	}
	med := median(xs)
	if len(xs) == 1 || math.IsNaN(med) {
		return f(med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(med), f(slices.Min(xs)), f(slices.Max(xs)))
}

// loadAverage is the machine's load average as /proc/loadavg gives it
// (1, 5 and 15 minutes), or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

func goVersion() string { return runtime.Version() }
