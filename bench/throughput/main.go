// Command throughput measures how close the Consumer comes to the fastest
// possible loop over the same SQS endpoint, and how many API calls it makes
// per message.
//
// It is a module of its own (it measures the Go CDK, which the library's
// module does not require), so it runs from its directory:
//
//	cd bench/throughput
//	go run .                                        # in-process sqstest on a loopback listener
//	go run . -endpoint http://127.0.0.1:9324        # e.g. go run ./cmd/sqstest from the root
//	go run . -rtt 10ms                              # every SQS call 10 ms longer
//	go run . -matrix -endpoint http://127.0.0.1:9324
//
// Each round gives every contender a queue of -n messages (default 5,000)
// to drain, in an order that rotates from round to round (-rounds, default
// 25). Many short rounds rather than a few long ones: on a shared 2-core
// machine one round's rate swings by ±15 %, and the median of 25 per-round
// ratios is what resolves a 5 % target.
//
//   - raw: -pollers goroutines, each looping ReceiveMessage (10, long poll)
//     then DeleteMessageBatch of what it got; no handler, no lease.
//   - consumer c=N: an sqsconsumer.Consumer with a no-op handler,
//     WithVisibilityTimeout(30s), WithConcurrency(N) and the same number of
//     pollers (WithPollers(-pollers)), once for each N in -concurrency.
//     The default list is 10 per poller (the concurrency whose default
//     poller count equals -pollers) and 50 per poller.
//
// Every contender asks for the same message attributes and uses the same
// HTTP client. The report gives messages per second, the ratio to the raw
// loop of the same round, API calls per message (HTTP requests counted on
// the client, so retries would count too), process CPU time per message
// (client and, in-process, server), KB allocated and GC cycles per message
// (in this small-heap process the GC runs every 2 to 3 MB allocated, so
// allocation is CPU), TCP connections opened, and the messages delivered
// twice: a
// clean drain has none, and each one means the drain waited out a 30 s
// visibility timeout, which wrecks that round's rate. Failed HTTP requests
// are listed at the end (the long polls cancelled when a drain ends are
// expected there). -cpuprofile writes a profile whose samples carry the
// contender as a label: go tool pprof -tagfocus contender=raw.
//
// -rtt adds a round-trip time to every SQS call the contenders make (half
// before the request is sent, half after the response arrives, each call on
// its own timer), as a network to SQS would; setting up the queues does not
// pay it.
//
// -matrix measures what users see instead: for each RTT (-rtt, default 0
// and 10 ms), each handler duration (-handlers, default none, 5 ms and
// 50 ms) and each concurrency C (-concurrency, default 20 and 100), three
// contenders drain a queue (about a second's worth at the ideal rate, at
// most -n messages; -rounds, default 1, drains each):
//
//   - sqsconsumer: a Consumer with WithConcurrency(C), the default pollers.
//   - Go CDK: gocloud.dev/pubsub/awssnssqs, Receive in a loop, a handler
//     goroutine per message behind a semaphore of C, Ack.
//   - naive: C goroutines, each receiving 10 and handling them one by one,
//     with a DeleteMessage after each.
//
// The raw loop runs once per RTT; at RTT 0 its rate is the CPU ceiling. At
// a longer RTT it runs again with pollers enough to cover the round trips,
// and the lower of the two rates is that RTT's ceiling. Each row's ideal is
// min(C/takes, ceiling), where takes is what a handler call really takes
// on this machine with C of them at once and nothing else running (a 5 ms
// timer fires after 5.2-5.7 ms on a busy VM). The report gives each
// contender's messages per second, its ratio to the ideal, its API calls
// per message and, in rows with a handler, how busy its handler slots were
// (handler time over C x elapsed: 1 means no slot ever waited for a
// message). Then the overrun case (-overrun messages, default 40, 0
// skips it) runs the three at once, at the largest RTT, with a lease of 3 s
// and handlers of 4.5 s at concurrency 20, and counts the handler runs that
// were duplicates.
//
// The SDK client is built with static credentials and a fixed region, never
// from the default AWS configuration: this is a benchmark against a local
// endpoint, and ambient AWS settings must not change it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// benchConfig is what one run measures.
type benchConfig struct {
	// Endpoint is an SQS endpoint to use; "" starts sqstest in-process on
	// a loopback listener.
	Endpoint string
	// Messages is how many messages each contender drains per round.
	Messages int
	// Warmup is how many messages each contender drains before the
	// rounds, unmeasured (connections, heap growth).
	Warmup int
	// Rounds is how many times each contender is measured.
	Rounds int
	// Pollers is the number of receiving goroutines of every contender.
	Pollers int
	// Concurrency lists the WithConcurrency of each Consumer contender;
	// empty means 10 and 50 per poller.
	Concurrency []int
	// Wait is the long-poll wait of every contender.
	Wait time.Duration
	// RTTs lists the round-trip times added to every measured SQS call
	// (see delay). Without Matrix it holds at most one; empty means 0.
	RTTs []time.Duration

	// Matrix measures the handler × concurrency matrix at each RTT, then
	// the overrun case, instead of the raw loop against Consumers.
	Matrix bool
	// Handlers lists the handler durations of the matrix's rows (0: a
	// handler that returns at once); empty means 0, 5 ms and 50 ms.
	// Concurrency lists the matrix's concurrencies; empty means 20 and 100.
	Handlers []time.Duration
	// Overrun is how many messages the overrun case drains; 0 skips it.
	Overrun int
	// OverrunLease, OverrunHandler and OverrunConcurrency shape the
	// overrun case: handlers longer than the lease.
	OverrunLease, OverrunHandler time.Duration
	OverrunConcurrency           int
}

func defaultConfig() benchConfig {
	return benchConfig{Messages: 5_000, Warmup: 2_000, Rounds: 25, Pollers: 4, Wait: 20 * time.Second,
		Overrun: 40, OverrunLease: 3 * time.Second, OverrunHandler: 4500 * time.Millisecond, OverrunConcurrency: 20}
}

// matrixRounds is the default -rounds of the matrix: one drain per
// contender and row keeps the default matrix to a minute or two.
const matrixRounds = 1

// parseList parses a comma-separated list with parse, appending to dst.
func parseList[T any](v string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(v, ",") {
		x, err := parse(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// parseDuration is time.ParseDuration that also takes a bare 0.
func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration of 0 or more (e.g. 10ms)", s)
	}
	return d, nil
}

func main() {
	cfg := defaultConfig()
	flag.StringVar(&cfg.Endpoint, "endpoint", "", "SQS endpoint URL (default: start sqstest in-process on 127.0.0.1)")
	flag.IntVar(&cfg.Messages, "n", cfg.Messages, "messages drained by each contender per round")
	flag.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "messages drained by each contender before measuring")
	flag.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "measured rounds (the order of the contenders rotates)")
	flag.IntVar(&cfg.Pollers, "pollers", cfg.Pollers, "receiving goroutines of every contender")
	flag.Func("concurrency", "comma-separated WithConcurrency values, one Consumer contender each (default 10 and 50 per poller); with -matrix, the rows' concurrencies (default 20,100)", func(v string) (err error) {
		cfg.Concurrency, err = parseList(v, func(f string) (int, error) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("%q is not a positive number", f)
			}
			return n, nil
		})
		return err
	})
	flag.Func("rtt", "round-trip time added to every SQS call of the contenders, e.g. 10ms (default 0); with -matrix a comma-separated list (default 0,10ms)", func(v string) (err error) {
		cfg.RTTs, err = parseList(v, parseDuration)
		return err
	})
	flag.BoolVar(&cfg.Matrix, "matrix", false, "measure sqsconsumer, the Go CDK and a naive SDK loop over handler × concurrency at each RTT, then the overrun case")
	flag.Func("handlers", "with -matrix: comma-separated handler durations (default 0,5ms,50ms)", func(v string) (err error) {
		cfg.Handlers, err = parseList(v, parseDuration)
		return err
	})
	flag.IntVar(&cfg.Overrun, "overrun", cfg.Overrun, "with -matrix: messages of the overrun case (lease 3s, handlers 4.5s, concurrency 20); 0 skips it")
	flag.DurationVar(&cfg.Wait, "wait", cfg.Wait, "long-poll wait (whole seconds, 1s to 20s)")
	flag.DurationVar(&rowTarget, "row", rowTarget, "with -matrix: about how long each row drains at the ideal rate (1s is mostly the start; 5s shows the steady pace)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if cfg.Matrix {
		roundsSet := false
		flag.Visit(func(f *flag.Flag) { roundsSet = roundsSet || f.Name == "rounds" })
		if !roundsSet {
			cfg.Rounds = matrixRounds
		}
	}

	if err := profiled(*cpuprofile, func() error {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return run(ctx, os.Stdout, cfg)
	}); err != nil {
		fmt.Fprintln(os.Stderr, "throughput:", err)
		os.Exit(1)
	}
}

// profiled runs f, writing a CPU profile to path unless path is "".
func profiled(path string, f func() error) error {
	if path == "" {
		return f()
	}
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	defer file.Close()
	if err := pprof.StartCPUProfile(file); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	return f()
}

// run measures and writes the report to out.
func run(ctx context.Context, out io.Writer, cfg benchConfig) error {
	if cfg.Messages < 1 || cfg.Rounds < 1 || cfg.Pollers < 1 {
		return errors.New("-n, -rounds and -pollers must be at least 1")
	}
	if cfg.Wait < time.Second || cfg.Wait > 20*time.Second || cfg.Wait%time.Second != 0 {
		return errors.New("-wait must be whole seconds from 1s to 20s")
	}
	if cfg.Matrix {
		return runMatrix(ctx, out, cfg)
	}
	if len(cfg.RTTs) > 1 {
		return errors.New("-rtt takes a list only with -matrix")
	}
	var rtt time.Duration
	if len(cfg.RTTs) == 1 {
		rtt = cfg.RTTs[0]
	}
	if rtt < 0 || rtt > 10*time.Second {
		return fmt.Errorf("-rtt %v: must be from 0 to 10s", rtt)
	}
	if len(cfg.Concurrency) == 0 {
		cfg.Concurrency = []int{10 * cfg.Pollers, 50 * cfg.Pollers}
	}
	contenders := []contender{rawLoop()}
	for _, c := range cfg.Concurrency {
		contenders = append(contenders, consumerLoop(c))
	}

	b, err := newBench(cfg, rtt)
	if err != nil {
		return err
	}
	defer b.close()
	fmt.Fprintf(out, "throughput: %d messages per drain, %d rounds, %d pollers per contender, %s, RTT %v added to every SQS call, GOMAXPROCS %d\n\n",
		cfg.Messages, cfg.Rounds, cfg.Pollers, b.where, rtt, runtime.GOMAXPROCS(0))

	if cfg.Warmup > 0 {
		for _, c := range contenders {
			if _, err := b.measure(ctx, c, cfg.Warmup); err != nil {
				return fmt.Errorf("warm-up, %s: %w", c.name, err)
			}
		}
	}
	results := make([][]measurement, len(contenders)) // [contender][round]
	for r := range cfg.Rounds {
		for k := range contenders {
			i := (k + r) % len(contenders)
			m, err := b.measure(ctx, contenders[i], cfg.Messages)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, contenders[i].name, err)
			}
			results[i] = append(results[i], m)
		}
	}
	report(out, contenders, results, b.counter.failures())
	return nil
}
