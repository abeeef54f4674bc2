// Command throughput measures how close the Consumer comes to the fastest
// possible loop over the same SQS endpoint, how many API calls it makes per
// message, what CPU it spends per message, and how many connections (and
// TLS handshakes) it makes its HTTP client open, talking to SQS as users
// do: over HTTPS, with the SDK's default HTTP client.
//
// It is a module of its own (it measures the Go CDK, which the library's
// module does not require), so it runs from its directory:
//
//	cd bench/throughput
//	go run .                                        # HTTPS to sqstest in a child process
//	go run . -rtt 10ms                              # every SQS call 10 ms longer
//	go run . -matrix -rtt 10ms -handlers 0,5ms -contenders raw,sqsconsumer,gocdk -n 20000 -row 0
//	go run . -plain                                 # plain HTTP instead
//	go run . -endpoint http://127.0.0.1:9324        # proxy to another SQS (e.g. go run ./cmd/sqstest)
//
// # The server side
//
// The contenders talk to a server side on loopback: sqstest (or, with
// -endpoint, a reverse proxy to that endpoint) behind a listener that
// counts every connection it accepts, every TLS handshake it completes and
// every request by SQS action, and answers every request -rtt later than
// sqstest does (half before, half after, on timers of the request's own),
// so that, as on a real network, a connection is busy for the whole round
// trip. By default the listener speaks TLS 1.3 with a self-signed ECDSA
// P-256 certificate made at start and offers only HTTP/1.1 (as SQS serves
// the AWS JSON protocol); -h2 offers HTTP/2 first (whether SQS negotiates
// h2 is not confirmed; the SDK's client takes it if offered) and -plain
// serves plain HTTP/1.1. The server side runs in a child process (this
// program again) unless -server inprocess, so the bench process's CPU time
// is the client's alone; the child's CPU is reported beside it. Every
// measurement gets a fresh sqstest server, and every connection is closed
// before it starts, so a contender starts cold, like a new process.
//
// # The client
//
// Every contender's SQS client is built with sqs.New from static
// credentials, a fixed region and, as HTTP client,
// awshttp.NewBuildableClient(): what sqs.NewFromConfig uses when the
// configuration names no client (MaxIdleConnsPerHost 10), changed only to
// trust the bench's certificate. It is never built from the default AWS
// configuration: ambient AWS settings must not change a benchmark against
// a local endpoint (and AWS_CA_BUNDLE makes config.LoadDefaultConfig refuse
// a client it cannot add the bundle to). -pool N keeps N idle connections
// per host instead; with -matrix, -pool default,256 measures both. Every
// measurement gets a new client, so every pool starts empty.
//
// # Raw loop against Consumers (the default)
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
// Every contender asks for the same message attributes. The report gives
// messages per second, the ratio to the raw loop of the same round, API
// calls per message (requests counted by the server side, so retries
// count too), process CPU time per message, KB allocated and GC cycles
// per message (in this small-heap process the GC runs every 2 to 3 MB
// allocated, so allocation is CPU), new connections and TLS handshakes per
// 1,000 messages, and the messages delivered twice: a clean drain has none,
// and each one means the drain waited out a 30 s visibility timeout, which
// wrecks that round's rate. Failed requests are listed at the end, and
// apart from them the long polls cancelled when a drain ends. -cpuprofile
// writes a profile whose samples carry the contender as a label: go tool
// pprof -tagfocus contender=raw.
//
// # The matrix
//
// -matrix measures what users see instead: for each RTT (-rtt, default 0
// and 10 ms), each client (-pool), each handler duration (-handlers,
// default none, 5 ms and 50 ms) and each concurrency C (-concurrency,
// default 20 and 100), the contenders (-contenders, default all) drain a
// queue (about a second's worth at the ideal rate, at most -n messages;
// -row 0 makes it -n; -rounds, default 1, drains each):
//
//   - raw: the reference of each row: pollers enough to cover the round
//     trips at the row's ideal rate (-raw-pollers overrides), each
//     receiving 10, running their handlers (at most C at once), deleting
//     them in one batch.
//   - sqsconsumer: a Consumer with WithConcurrency(C), the default pollers.
//   - Go CDK: gocloud.dev/pubsub/awssnssqs, Receive in a loop, a handler
//     goroutine per message behind a semaphore of C, Ack.
//   - naive: C goroutines, each receiving 10 and handling them one by one,
//     with a DeleteMessage after each.
//
// Every figure of a row comes with its ratio to the raw loop's in the same
// round. Before the rows, at each RTT and with each client, the bare raw
// loop (no handler) runs with -pollers (at least 8 above RTT 0), then
// twice as many, and so on while its rate grows by more than 10 % (at most
// 256): its best rate is the CPU ceiling, and its pollers are the raw
// loop's in the rows bound by the CPU. Each row's ideal is min(C/takes, ceiling), where
// takes is what a handler call really takes on this machine with C of them
// at once and nothing else running (a 5 ms timer fires after 5.2-5.7 ms on
// a busy VM). The report is Markdown: for each RTT and client a table whose
// header states the RTT, the protocol, the client and the server, with
// each contender's messages per second, its share of the ideal, CPU per
// message (the bench's and the server's), new connections, TLS handshakes
// and connections that carried no request per 1,000 messages, API calls
// per message and, in rows with a handler, how busy its handler slots were
// (handler time over C x elapsed: 1 means no slot ever waited for a
// message). Then the overrun case (-overrun messages, default 40, 0 skips
// it) runs every contender but the raw loop at once, at the largest RTT
// with the first client, with a lease of 3 s and handlers of 4.5 s at
// concurrency 20, and counts the handler runs that were duplicates.
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
	// Endpoint is an SQS endpoint to proxy to; "" serves sqstest.
	Endpoint string
	// Proto is how the contenders reach the server side: HTTPS with
	// HTTP/1.1 (the default), HTTPS offering HTTP/2, or plain HTTP.
	Proto protocol
	// Place is where the server side runs: a child process (the default)
	// or this one.
	Place serverPlacement
	// Pools lists the HTTP clients to measure with (see clientSpec);
	// empty means the SDK's default. Without Matrix it holds at most one.
	Pools []clientSpec
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
	// Contenders lists the matrix's contenders by name (raw, sqsconsumer,
	// gocdk, naive); empty means all.
	Contenders []string
	// RawPollers is the pollers of the matrix's raw loop; 0 sizes them to
	// cover each row's round trips at its ideal rate.
	RawPollers int
	// Overrun is how many messages the overrun case drains; 0 skips it.
	Overrun int
	// OverrunLease, OverrunHandler and OverrunConcurrency shape the
	// overrun case: handlers longer than the lease.
	OverrunLease, OverrunHandler time.Duration
	OverrunConcurrency           int

	// Compare measures bare loops (RawPollers) against Consumers with
	// their default pollers, with each client of Pools, in interleaved
	// rounds (issue 37).
	Compare bool
	// RawList is the pollers of the bare loops of Compare.
	RawList []int
	// Fixed adds to Compare, for each concurrency, a Consumer whose
	// calls in flight are fixed at the rule before issue 37 (twice the
	// idle pool, within the read-ahead's need) with WithPollers.
	Fixed bool
	// ConsumerPollers adds to Compare, for each concurrency and each
	// entry, a Consumer with WithPollers(entry).
	ConsumerPollers []int
	// Warm is the deletes after which the steady state's new
	// connections are counted (Compare; 0: not counted).
	Warm int
	// ConnTrace traces each client's connections by SQS action.
	ConnTrace bool
}

func defaultConfig() benchConfig {
	return benchConfig{Messages: 5_000, Warmup: 2_000, Rounds: 25, Pollers: 4, Wait: 20 * time.Second, Proto: protoHTTPS, Place: placeChild,
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
	if opts, ok := os.LookupEnv(serverEnv); ok {
		os.Exit(serveChild(opts, os.Stdin, os.Stdout, os.Stderr))
	}
	cfg := defaultConfig()
	flag.StringVar(&cfg.Endpoint, "endpoint", "", "SQS endpoint URL to proxy to (default: serve sqstest)")
	plain := flag.Bool("plain", false, "plain HTTP/1.1 instead of HTTPS")
	h2 := flag.Bool("h2", false, "HTTPS offering HTTP/2 first (the SDK's client takes it; whether SQS offers it is unconfirmed)")
	flag.Func("server", "where the server side runs: child (a child process, so this process's CPU is the client's alone; the default) or inprocess", func(v string) error {
		switch p := serverPlacement(v); p {
		case placeChild, placeInProcess:
			cfg.Place = p
			return nil
		}
		return fmt.Errorf("%q: want child or inprocess", v)
	})
	flag.Func("pool", "the contenders' HTTP client: default (the SDK's, 10 idle connections per host) or N idle connections per host; with -matrix a comma-separated list, e.g. default,256", func(v string) (err error) {
		cfg.Pools, err = parseList(v, parsePool)
		return err
	})
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
	flag.Func("contenders", "with -matrix: comma-separated contenders (raw, sqsconsumer, gocdk, naive; default all)", func(v string) (err error) {
		cfg.Contenders, err = parseList(v, func(f string) (string, error) {
			if _, ok := contenderNames[f]; !ok {
				return "", fmt.Errorf("%q: want raw, sqsconsumer, gocdk or naive", f)
			}
			return f, nil
		})
		return err
	})
	flag.IntVar(&cfg.RawPollers, "raw-pollers", 0, "with -matrix: pollers of the raw loop (default: enough to cover each row's round trips at its ideal rate)")
	flag.IntVar(&cfg.Overrun, "overrun", cfg.Overrun, "with -matrix: messages of the overrun case (lease 3s, handlers 4.5s, concurrency 20); 0 skips it")
	flag.DurationVar(&cfg.Wait, "wait", cfg.Wait, "long-poll wait (whole seconds, 1s to 20s)")
	flag.DurationVar(&rowTarget, "row", rowTarget, "with -matrix: about how long each row drains at the ideal rate (1s is mostly the start; 5s shows the steady pace)")
	flag.BoolVar(&cfg.Compare, "compare", false, "bare loops (-raw-list) against Consumers with their default pollers (-concurrency, default 20,100), no-op handlers, for each client of -pool (issue 37)")
	flag.Func("raw-list", "with -compare: comma-separated pollers of the bare loops (default 20,32)", func(v string) (err error) {
		cfg.RawList, err = parseList(v, func(f string) (int, error) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 || n > 1000 {
				return 0, fmt.Errorf("%q is not a number of pollers from 1 to 1000", f)
			}
			return n, nil
		})
		return err
	})
	flag.Func("with-pollers", "with -compare: comma-separated WithPollers values, one more Consumer contender each per concurrency", func(v string) (err error) {
		cfg.ConsumerPollers, err = parseList(v, func(f string) (int, error) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 || n > 1000 {
				return 0, fmt.Errorf("%q is not a number of pollers from 1 to 1000", f)
			}
			return n, nil
		})
		return err
	})
	flag.BoolVar(&cfg.Fixed, "fixed", false, "with -compare: also each Consumer with its calls in flight fixed by the rule before issue 37 (WithPollers)")
	flag.IntVar(&cfg.Warm, "warm", 1000, "with -compare: the new connections of the steady state are those after this many messages")
	flag.BoolVar(&cfg.ConnTrace, "conntrace", false, "trace each contender's connections by SQS action (what the pool did for each request)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "throughput: unexpected arguments %v\n", flag.Args())
		os.Exit(2)
	}
	switch {
	case *plain && *h2:
		fmt.Fprintln(os.Stderr, "throughput: -plain and -h2 exclude each other")
		os.Exit(2)
	case *plain:
		cfg.Proto = protoHTTP
	case *h2:
		cfg.Proto = protoHTTPS2
	}
	if cfg.Compare {
		roundsSet := false
		flag.Visit(func(f *flag.Flag) { roundsSet = roundsSet || f.Name == "rounds" })
		if !roundsSet {
			cfg.Rounds = 3
		}
	}
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
	if len(cfg.Pools) == 0 {
		cfg.Pools = []clientSpec{{}}
	}
	if cfg.Matrix {
		return runMatrix(ctx, out, cfg)
	}
	if cfg.Compare {
		return runCompare(ctx, out, cfg)
	}
	if len(cfg.RTTs) > 1 {
		return errors.New("-rtt takes a list only with -matrix")
	}
	if len(cfg.Pools) > 1 {
		return errors.New("-pool takes a list only with -matrix")
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

	srv, err := startServer(serverOptions{Proto: cfg.Proto, Endpoint: cfg.Endpoint}, cfg.Place)
	if err != nil {
		return err
	}
	defer srv.close()
	b := newBench(cfg, srv, rtt, cfg.Pools[0])
	fmt.Fprintf(out, "throughput: %d messages per drain, %d rounds, %d pollers per contender, GOMAXPROCS %d\n%s\nThe RTT is added on the server side to every SQS call of the contenders.\n\n",
		cfg.Messages, cfg.Rounds, cfg.Pollers, runtime.GOMAXPROCS(0), b.setup())

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
	st, err := srv.stats(ctx)
	if err != nil {
		return err
	}
	report(out, contenders, results, st)
	return nil
}
