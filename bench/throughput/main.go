// Command throughput measures how close the Consumer comes to the fastest
// possible loop over the same SQS endpoint, and how many API calls it makes
// per message.
//
//	go run ./bench/throughput                       # in-process sqstest on a loopback listener
//	go run ./bench/throughput -endpoint http://127.0.0.1:9324   # e.g. go run ./cmd/sqstest
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
}

func defaultConfig() benchConfig {
	return benchConfig{Messages: 5_000, Warmup: 2_000, Rounds: 25, Pollers: 4, Wait: 20 * time.Second}
}

func main() {
	cfg := defaultConfig()
	flag.StringVar(&cfg.Endpoint, "endpoint", "", "SQS endpoint URL (default: start sqstest in-process on 127.0.0.1)")
	flag.IntVar(&cfg.Messages, "n", cfg.Messages, "messages drained by each contender per round")
	flag.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "messages drained by each contender before measuring")
	flag.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "measured rounds (the order of the contenders rotates)")
	flag.IntVar(&cfg.Pollers, "pollers", cfg.Pollers, "receiving goroutines of every contender")
	flag.Func("concurrency", "comma-separated WithConcurrency values, one Consumer contender each (default 10 and 50 per poller)", func(v string) error {
		cfg.Concurrency = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("%q is not a positive number", f)
			}
			cfg.Concurrency = append(cfg.Concurrency, n)
		}
		return nil
	})
	flag.DurationVar(&cfg.Wait, "wait", cfg.Wait, "long-poll wait (whole seconds, 1s to 20s)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()

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
	if len(cfg.Concurrency) == 0 {
		cfg.Concurrency = []int{10 * cfg.Pollers, 50 * cfg.Pollers}
	}
	contenders := []contender{rawLoop()}
	for _, c := range cfg.Concurrency {
		contenders = append(contenders, consumerLoop(c))
	}

	b, err := newBench(cfg)
	if err != nil {
		return err
	}
	defer b.close()
	fmt.Fprintf(out, "throughput: %d messages per drain, %d rounds, %d pollers per contender, %s, GOMAXPROCS %d\n\n",
		cfg.Messages, cfg.Rounds, cfg.Pollers, b.where, runtime.GOMAXPROCS(0))

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
