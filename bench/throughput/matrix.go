package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// rowTarget is about how long a row's drain takes at the ideal rate
// (-row): a row's queue holds ideal × rowTarget messages, within
// [200, -n]; 0 makes every row drain -n. A row of 1 s is mostly the start (pollers spawning, the
// completion rate and round trip being learned); 5 s shows the steady pace.
var rowTarget = time.Second

// ideal is the best rate a client could reach with concurrency handlers of
// duration handler on this machine: c/h, or the CPU ceiling (the best rate
// of the bare raw loop at this RTT, see saturateRaw) if that is lower. The RTT is not in it: a
// client that receives ahead of its handlers hides the RTT entirely.
// handler is what a handler call really takes here (see slotTime), not
// what it asks for: a timer of 5 ms fires after 5.2–5.7 ms on a busy VM.
func ideal(handler time.Duration, concurrency int, ceiling float64) float64 {
	if handler <= 0 {
		return ceiling
	}
	return min(float64(concurrency)/handler.Seconds(), ceiling)
}

// slotTime is the mean time a handler call of d really takes on this
// machine when concurrency of them run at once and nothing else does:
// each of concurrency goroutines calls work(d) in a loop for about half a
// second (at least 20 calls). It is the handler time of a row's ideal.
func slotTime(d time.Duration, concurrency int) time.Duration {
	if d <= 0 {
		return 0
	}
	calls := max(20, int(500*time.Millisecond/d))
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				_ = work(context.Background(), d)
			}
		}()
	}
	wg.Wait()
	return time.Since(start) / time.Duration(calls)
}

// rowMessages is how many messages a row drains.
func rowMessages(idealRate float64, most int) int {
	if rowTarget <= 0 {
		return most
	}
	least := min(200, most)
	return max(least, min(most, int(idealRate*rowTarget.Seconds())))
}

// figures is one contender's figures in one row, each the median over the
// rounds.
type figures struct {
	rate, calls float64
	cpu         float64 // the bench process's CPU per message, µs
	serverCPU   float64 // the server side's CPU per message, µs (child process only)
	conns       float64 // new connections per 1,000 messages
	late        float64 // new connections per 1,000 messages of the drain's second half
	handshakes  float64 // TLS handshakes per 1,000 messages
	unused      float64 // connections that carried no request, per 1,000 messages
	busy        float64 // share of the slots' time in handler calls (0: no handler)
}

// cell is one contender in one row: its figures and, for each, the median
// over the rounds of its ratio to the raw loop's of the same round (NaN
// where the raw loop was not measured or its figure is 0).
type cell struct {
	figures
	x          figures // ratios to the raw loop
	duplicates int     // handler runs beyond a message's first, over all rounds
	again      int     // messages received more than once (server side; -1 unknown), over all rounds
	http2      int     // requests over HTTP/2, over all rounds
	requests   int     // requests, over all rounds
}

// matrixRow is one row of the matrix.
type matrixRow struct {
	handler     time.Duration
	slot        time.Duration // what a handler call of handler really took (slotTime)
	concurrency int
	messages    int
	ideal       float64
	rawPollers  int    // the raw loop's pollers in this row
	cells       []cell // one per contender of the run
}

// rttResult is the matrix at one RTT with one client.
type rttResult struct {
	rtt                time.Duration
	client             clientSpec
	setup              string // RTT, protocol, client, server
	proto              protocol
	ladder             []rawStep // the bare raw loop with more and more pollers (saturateRaw)
	ceiling            float64   // the rows' CPU ceiling: the ladder's best rate
	ceilingPollers     int       // the pollers of that rate
	contenders         []rowContender
	rows               []matrixRow
	duplicateNotes     []string
	overrunResults     []overrunResult // at the largest RTT, with the first client, only
	overrunWindow      time.Duration
	overrunWorkload    workload
	overrunMessages    int
	overrunWasMeasured bool
}

// runMatrix measures every contender on every row of the matrix, for each
// RTT and client, then the overrun case at the largest RTT, and writes the
// report.
func runMatrix(ctx context.Context, out io.Writer, cfg benchConfig) error {
	if len(cfg.Concurrency) == 0 {
		cfg.Concurrency = []int{20, 100}
	}
	if len(cfg.RTTs) == 0 {
		cfg.RTTs = []time.Duration{0, 10 * time.Millisecond}
	}
	if len(cfg.Handlers) == 0 {
		cfg.Handlers = []time.Duration{0, 5 * time.Millisecond, 50 * time.Millisecond}
	}
	if err := validateMatrix(cfg); err != nil {
		return err
	}
	srv, err := startServer(serverOptions{Proto: cfg.Proto, Endpoint: cfg.Endpoint}, cfg.Place)
	if err != nil {
		return err
	}
	defer srv.close()
	fmt.Fprintf(out, "throughput matrix: RTT %s × handler %s × concurrency %s × client {%s}; %d round(s) per cell, GOMAXPROCS %d\n",
		durations(cfg.RTTs), durations(cfg.Handlers), ints(cfg.Concurrency), pools(cfg.Pools), cfg.Rounds, runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "%s; server: %s. The RTT is added to every SQS call the contenders make, on the server side (half before the request is handled, half after), so a connection is busy for the whole round trip.\n",
		cfg.Proto, srv.where())

	results := make([]*rttResult, 0, len(cfg.RTTs)*len(cfg.Pools))
	rtts := slices.Clone(cfg.RTTs)
	slices.Sort(rtts)
	for _, rtt := range rtts {
		for i, client := range cfg.Pools {
			b := newBench(cfg, srv, rtt, client)
			r, err := measureAtRTT(ctx, b, cfg)
			if err == nil && rtt == rtts[len(rtts)-1] && i == 0 && cfg.Overrun > 0 {
				err = measureOverrun(ctx, b, cfg, r)
			}
			if err != nil {
				if st, serr := srv.stats(ctx); serr == nil && st.failures() != "" {
					err = fmt.Errorf("%w (failed HTTP requests: %s)", err, st.failures())
				}
				return fmt.Errorf("RTT %v, client %s: %w", rtt, client, err)
			}
			results = append(results, r)
		}
	}
	st, err := srv.stats(ctx)
	if err != nil {
		return err
	}
	fmt.Fprint(out, "At each RTT and client the bare raw loop (no handler) runs with more and more pollers, doubling while its rate grows by more than 10 %; its best rate is the CPU ceiling. ideal = min(C/takes, ceiling), where takes is what one handler call really took with C of them running at once and nothing else\n\n")
	for _, r := range results {
		reportRTT(out, r)
	}
	for _, r := range results {
		if r.overrunWasMeasured {
			reportOverrun(out, r)
		}
	}
	reportFailures(out, "during the matrix", st)
	return nil
}

func validateMatrix(cfg benchConfig) error {
	for _, rtt := range cfg.RTTs {
		if rtt < 0 || rtt > 10*time.Second {
			return fmt.Errorf("-rtt %v: must be from 0 to 10s", rtt)
		}
	}
	for _, h := range cfg.Handlers {
		if h < 0 || h > time.Minute {
			return fmt.Errorf("-handlers %v: must be from 0 to 1m", h)
		}
	}
	for _, c := range cfg.Concurrency {
		if c < 1 || c > 1000 {
			return fmt.Errorf("-concurrency %d: must be from 1 to 1000 in the matrix", c)
		}
	}
	if cfg.RawPollers < 0 || cfg.RawPollers > 1000 {
		return fmt.Errorf("-raw-pollers %d: must be from 0 (sized per row) to 1000", cfg.RawPollers)
	}
	if cfg.Overrun < 0 || cfg.Overrun > 1000 {
		return fmt.Errorf("-overrun %d: must be from 0 to 1000", cfg.Overrun)
	}
	if cfg.Overrun > 0 && (cfg.OverrunLease < 3*time.Second || cfg.OverrunLease%time.Second != 0 || cfg.OverrunHandler <= cfg.OverrunLease) {
		return fmt.Errorf("overrun lease %v, handler %v: the lease must be whole seconds, at least 3s, and the handler longer", cfg.OverrunLease, cfg.OverrunHandler)
	}
	return nil
}

// measureRaw measures the bare raw loop with cfg.Pollers for rounds rounds.
func measureRaw(ctx context.Context, b *bench, cfg benchConfig, rounds int) (rawStep, error) {
	var rates, calls, cpus, conns []float64
	again := 0
	for range rounds {
		m, err := b.measureWith(ctx, rawLoop(), cfg.Messages, cfg)
		if err != nil {
			return rawStep{}, fmt.Errorf("raw loop, %d pollers: %w", cfg.Pollers, err)
		}
		rates = append(rates, m.rate())
		calls = append(calls, m.callsPerMessage())
		cpus = append(cpus, microseconds(m.cpuPerMessage()))
		conns = append(conns, m.per1k(m.conns))
		if m.receivedAgain < 0 || again < 0 {
			again = -1
		} else {
			again += m.receivedAgain
		}
	}
	return rawStep{pollers: cfg.Pollers, rate: median(rates), calls: median(calls), cpu: median(cpus), conns: median(conns), again: again}, nil
}

// rawStep is the bare raw loop (no handler) with some number of pollers.
type rawStep struct {
	pollers          int
	rate, calls, cpu float64 // msg/s, calls and CPU µs per message (medians over the rounds)
	conns            float64 // new connections per 1,000 messages
	again            int     // messages received more than once, over the rounds (-1: unknown)
}

// saturateRaw finds the CPU ceiling at b's RTT with b's client: after the
// warm-up it measures the bare raw loop with -pollers (at least 8 at an
// RTT above 0), then twice as many, and so on while the rate grows by more
// than 10 % (at most 256). Pollers sized from a guess are not enough: with
// the server in another process a few pollers leave the CPU idle even at
// RTT 0, and at 10 ms each poller moves at most 10 messages per two round
// trips.
func saturateRaw(ctx context.Context, b *bench, cfg benchConfig) ([]rawStep, error) {
	if cfg.Warmup > 0 {
		if _, err := b.measureWith(ctx, rawLoop(), cfg.Warmup, cfg); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	p := cfg.Pollers
	if b.rtt > 0 {
		p = max(p, 8)
	}
	var steps []rawStep
	for {
		c := cfg
		c.Pollers = p
		st, err := measureRaw(ctx, b, c, cfg.Rounds)
		if err != nil {
			return nil, err
		}
		steps = append(steps, st)
		// A step that stalled on a lost answer (see serverStats.ReceivedAgain)
		// says nothing about the pollers: go on.
		if p >= 256 || (len(steps) > 1 && st.again <= 0 && st.rate < 1.1*steps[len(steps)-2].rate) {
			return steps, nil
		}
		p = min(256, 2*p)
	}
}

// bestStep is the step of the highest rate.
func bestStep(steps []rawStep) rawStep {
	best := steps[0]
	for _, s := range steps[1:] {
		if s.rate > best.rate {
			best = s
		}
	}
	return best
}

// measureAtRTT finds the CPU ceiling (saturateRaw), then measures every
// row.
func measureAtRTT(ctx context.Context, b *bench, cfg benchConfig) (*rttResult, error) {
	r := &rttResult{rtt: b.rtt, client: b.client, setup: b.setup(), proto: b.srv.opts.Proto}
	ladder, err := saturateRaw(ctx, b, cfg)
	if err != nil {
		return nil, err
	}
	best := bestStep(ladder)
	r.ladder, r.ceiling, r.ceilingPollers = ladder, best.rate, best.pollers
	here := r.ceiling
	r.contenders = rowContenders(cfg.Contenders)
	rawAt := slices.IndexFunc(r.contenders, func(c rowContender) bool { return c.raw })
	for _, h := range cfg.Handlers {
		for _, c := range cfg.Concurrency {
			slot := slotTime(h, c)
			row := matrixRow{handler: h, slot: slot, concurrency: c, ideal: ideal(slot, c, here)}
			row.messages = rowMessages(row.ideal, cfg.Messages)
			row.rawPollers = rawPollers(cfg, row.ideal, r.ceiling, r.ceilingPollers, b.rtt, slot)
			w := workload{handler: h, concurrency: c, visibility: benchVisibility, wait: cfg.Wait, pollers: row.rawPollers}
			ms := make([][]measurement, len(r.contenders))
			for round := range cfg.Rounds {
				for k := range r.contenders {
					i := (k + round) % len(r.contenders)
					m, err := b.measureRow(ctx, r.contenders[i], row.messages, w)
					if err != nil {
						return nil, fmt.Errorf("handler %v, concurrency %d, %s: %w", h, c, r.contenders[i].name, err)
					}
					ms[i] = append(ms[i], m)
				}
			}
			for i, con := range r.contenders {
				var raw []measurement
				if rawAt >= 0 {
					raw = ms[rawAt]
				}
				cl := cellOf(ms[i], raw)
				row.cells = append(row.cells, cl)
				if cl.duplicates > 0 {
					r.duplicateNotes = append(r.duplicateNotes, fmt.Sprintf("handler %v, C=%d, %s: %d duplicate handler runs", h, row.concurrency, con.name, cl.duplicates))
				}
				if cl.again > 0 {
					r.duplicateNotes = append(r.duplicateNotes, fmt.Sprintf("handler %v, C=%d, %s: %d messages received more than once: a lease ran out, or an answer was lost and its messages waited out the %v visibility timeout (the SDK's request-body race over a real socket, likeliest at RTT 0), so this rate is not the contender's",
						h, row.concurrency, con.name, cl.again, benchVisibility))
				}
			}
			r.rows = append(r.rows, row)
		}
	}
	return r, nil
}

// rawPollers is the raw loop's pollers in a row: -raw-pollers if set;
// without a handler and bound by the CPU (its ideal is the ceiling) those
// of the ceiling; otherwise enough to cover its round trips at the row's
// ideal rate with half again to spare (each poller moves 10 messages per
// receive, handlers and delete), within [-pollers, the ceiling's]. With a
// handler no more: a poller's connection idles while its messages are
// handled, and more idle connections than the pool keeps are closed and
// dialled again.
func rawPollers(cfg benchConfig, idealRate, ceiling float64, ceilingPollers int, rtt, slot time.Duration) int {
	if cfg.RawPollers > 0 {
		return cfg.RawPollers
	}
	if slot <= 0 && idealRate >= ceiling {
		return ceilingPollers
	}
	cycle := 2*rtt + slot
	return min(max(ceilingPollers, cfg.Pollers), max(cfg.Pollers, int(math.Ceil(idealRate*cycle.Seconds()/10*1.5))))
}

// figuresOf is m's figures.
func figuresOf(m measurement, handler bool) figures {
	f := figures{rate: m.rate(), calls: m.callsPerMessage(), cpu: microseconds(m.cpuPerMessage()),
		serverCPU: microseconds(m.serverCPU / time.Duration(m.messages)),
		conns:     m.per1k(m.conns), late: m.latePer1k(), handshakes: m.per1k(m.handshakes), unused: m.per1k(m.unused)}
	if handler {
		f.busy = m.busy
	}
	return f
}

// cellOf sums up a contender's rounds, with ratios to raw's rounds (nil:
// not measured).
func cellOf(ms, raw []measurement) cell {
	var c cell
	each := make([]figures, len(ms))
	xs := make([]figures, len(ms))
	for r, m := range ms {
		each[r] = figuresOf(m, m.busy > 0)
		c.duplicates += m.redelivered
		if m.receivedAgain < 0 || c.again < 0 {
			c.again = -1
		} else {
			c.again += m.receivedAgain
		}
		c.http2 += m.http2
		c.requests += m.requests
		if raw == nil {
			xs[r] = figures{rate: math.NaN(), calls: math.NaN(), cpu: math.NaN(), serverCPU: math.NaN(), conns: math.NaN(), late: math.NaN(), handshakes: math.NaN(), unused: math.NaN(), busy: math.NaN()}
			continue
		}
		ref := figuresOf(raw[r], raw[r].busy > 0)
		xs[r] = figures{rate: ratio(each[r].rate, ref.rate), calls: ratio(each[r].calls, ref.calls), cpu: ratio(each[r].cpu, ref.cpu),
			serverCPU: ratio(each[r].serverCPU, ref.serverCPU), conns: ratio(each[r].conns, ref.conns), late: ratio(each[r].late, ref.late),
			handshakes: ratio(each[r].handshakes, ref.handshakes), unused: ratio(each[r].unused, ref.unused), busy: ratio(each[r].busy, ref.busy)}
	}
	c.figures = medianFigures(each)
	c.x = medianFigures(xs)
	return c
}

// ratio is a/b, NaN if b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// medianFigures is the median of each figure (NaN if any round's is NaN).
func medianFigures(fs []figures) figures {
	pick := func(get func(figures) float64) float64 {
		xs := make([]float64, len(fs))
		for i, f := range fs {
			xs[i] = get(f)
			if math.IsNaN(xs[i]) {
				return math.NaN()
			}
		}
		return median(xs)
	}
	return figures{
		rate: pick(func(f figures) float64 { return f.rate }), calls: pick(func(f figures) float64 { return f.calls }),
		cpu: pick(func(f figures) float64 { return f.cpu }), serverCPU: pick(func(f figures) float64 { return f.serverCPU }),
		conns: pick(func(f figures) float64 { return f.conns }), late: pick(func(f figures) float64 { return f.late }),
		handshakes: pick(func(f figures) float64 { return f.handshakes }),
		unused:     pick(func(f figures) float64 { return f.unused }), busy: pick(func(f figures) float64 { return f.busy }),
	}
}

// measureRow times c draining a queue of n messages under workload w.
func (b *bench) measureRow(ctx context.Context, c rowContender, n int, w workload) (measurement, error) {
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(int(w.visibility / time.Second))}
	handlerTime.Store(0)
	m, err := b.measureDrain(ctx, c.name, n, attrs, func(ctx context.Context, client *sqs.Client, url string) (drained, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		line := newFinishLine(ctx, n, cancel)
		runs := newTally()
		end, err := c.run(ctx, client, url, w, line, runs)
		if err != nil {
			return drained{}, err
		}
		d, err := line.result()
		if err != nil {
			return drained{}, err
		}
		if !end.IsZero() {
			d.end = end
		}
		_, _, d.redelivered = runs.counts()
		return d, nil
	})
	if err == nil && w.handler > 0 {
		m.busy = time.Duration(handlerTime.Load()).Seconds() / (float64(w.concurrency) * m.elapsed.Seconds())
	}
	return m, err
}

// negotiated says which HTTP version the server side saw the rows'
// requests arrive over.
func (r *rttResult) negotiated() string {
	h2, all := 0, 0
	for _, row := range r.rows {
		for _, c := range row.cells {
			h2, all = h2+c.http2, all+c.requests
		}
	}
	switch {
	case all == 0:
		return "no requests"
	case h2 == 0:
		return "every request over HTTP/1.1"
	case h2 == all:
		return "every request over HTTP/2"
	default:
		return fmt.Sprintf("%.1f%% of the requests over HTTP/2", 100*float64(h2)/float64(all))
	}
}

// reportRTT writes the matrix at one RTT with one client as a Markdown
// table whose header states the RTT, the protocol and the client.
func reportRTT(out io.Writer, r *rttResult) {
	fmt.Fprintf(out, "**%s**, as negotiated: %s.\n\n", r.setup, r.negotiated())
	steps := make([]string, len(r.ladder))
	for i, st := range r.ladder {
		steps[i] = fmt.Sprintf("%d pollers %s msg/s (%.1f µs CPU/msg, %.1f new conns/1k msgs)", st.pollers, commas(st.rate), st.cpu, st.conns)
		if st.again > 0 {
			steps[i] += fmt.Sprintf(" STALLED: %d messages received more than once", st.again)
		}
	}
	fmt.Fprintf(out, "Bare raw loop (no handler): %s. CPU ceiling at this RTT with this client: %s msg/s (%d pollers).\n",
		strings.Join(steps, "; "), commas(r.ceiling), r.ceilingPollers)
	fmt.Fprintln(out, "CPU µs/msg is the bench process's CPU time per message (user + system); (×) is the ratio to the raw loop's figure in the same round, the raw loop of each row running that row's handler and concurrency. New connections are counted over the whole drain (a cold start: every pool starts empty) and over its second half (the steady state).")
	fmt.Fprintln(out)
	child := !math.IsNaN(r.anyServerCPU()) && r.anyServerCPU() > 0
	header := "| RTT | handler × C | msgs | client | contender | msg/s (× raw) | × ideal | CPU µs/msg (× raw) |"
	sep := "|---|---|---:|---|---|---:|---:|---:|"
	if child {
		header += " server CPU µs/msg |"
		sep += "---:|"
	}
	header += " new conns /1k msgs (× raw) | 2nd half: new conns /1k msgs | TLS handshakes /1k msgs | unused conns /1k msgs | calls/msg (× raw) | busy | duplicates | received again |"
	sep += "---:|---:|---:|---:|---:|---:|---:|---:|"
	fmt.Fprintln(out, header)
	fmt.Fprintln(out, sep)
	for _, row := range r.rows {
		what := fmt.Sprintf("%s × %d", handlerName(row.handler), row.concurrency)
		for i, c := range row.cells {
			con := r.contenders[i]
			name := con.name
			if con.raw {
				name = fmt.Sprintf("raw (%d pollers)", row.rawPollers)
			}
			line := fmt.Sprintf("| %v | %s | %d | %s | %s | %s | %.2f | %s |", r.rtt, what, row.messages, r.client, name,
				withRatio(commas(c.rate), c.x.rate, con.raw), c.rate/row.ideal, withRatio(fmt.Sprintf("%.1f", c.cpu), c.x.cpu, con.raw))
			if child {
				line += fmt.Sprintf(" %.1f |", c.serverCPU)
			}
			hs := "–"
			if r.proto.tls() {
				hs = fmt.Sprintf("%.1f", c.handshakes)
			}
			busy := "–"
			if row.handler > 0 {
				busy = fmt.Sprintf("%.2f", c.busy)
			}
			again := "?"
			if c.again >= 0 {
				again = strconv.Itoa(c.again)
			}
			line += fmt.Sprintf(" %s | %.1f | %s | %.1f | %s | %s | %d | %s |", withRatio(fmt.Sprintf("%.1f", c.conns), c.x.conns, con.raw), c.late, hs, c.unused,
				withRatio(fmt.Sprintf("%.3f", c.calls), c.x.calls, con.raw), busy, c.duplicates, again)
			fmt.Fprintln(out, line)
		}
	}
	fmt.Fprintln(out)
	for _, n := range r.duplicateNotes {
		fmt.Fprintf(out, "- %s\n", n)
	}
	if len(r.duplicateNotes) > 0 {
		fmt.Fprintln(out)
	}
}

// anyServerCPU is the first cell's server CPU (0 or NaN: not measured).
func (r *rttResult) anyServerCPU() float64 {
	for _, row := range r.rows {
		for _, c := range row.cells {
			return c.serverCPU
		}
	}
	return math.NaN()
}

// withRatio is v followed by its ratio to the raw loop's, unless this is
// the raw loop or the ratio is unknown.
func withRatio(v string, x float64, raw bool) string {
	if raw || math.IsNaN(x) {
		return v
	}
	return fmt.Sprintf("%s (%.2f)", v, x)
}

// handlerName is how a handler duration reads in a table.
func handlerName(d time.Duration) string {
	if d <= 0 {
		return "no-op"
	}
	return d.String()
}

// commas formats a rate as a whole number with thousands separators.
func commas(x float64) string {
	s := strconv.FormatInt(int64(math.Round(x)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// overrunResult is one contender in the overrun case.
type overrunResult struct {
	name                       string
	runs, messages, duplicates int
	deletes                    int64 // deletes (acks, for the Go CDK) the contender reported
	left                       int   // messages still in the queue (visible or in flight) at the end
}

// measureOverrun runs every contender at once, each on a queue of its own,
// with handlers longer than the lease, for a fixed window, and counts the
// handler runs per message.
func measureOverrun(ctx context.Context, b *bench, cfg benchConfig, r *rttResult) error {
	w := workload{handler: cfg.OverrunHandler, concurrency: cfg.OverrunConcurrency, visibility: cfg.OverrunLease, wait: cfg.Wait}
	n := cfg.Overrun
	waves := (n + w.concurrency - 1) / w.concurrency
	// Long enough for a client that never handles a message twice to
	// finish, and for leases to run out under one that does.
	window := max(time.Duration(waves)*w.handler, w.handler+w.visibility) + time.Second + 2*b.rtt*time.Duration(waves)
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(int(w.visibility / time.Second))}
	var contenders []rowContender
	for _, c := range rowContenders(cfg.Contenders) {
		if !c.raw { // no lease renewal: the naive loop shows what that does
			contenders = append(contenders, c)
		}
	}
	if err := b.srv.fresh(ctx, b.rtt); err != nil {
		return err
	}
	results := make([]overrunResult, len(contenders))
	errs := make([]error, len(contenders))
	var wg sync.WaitGroup
	for i, c := range contenders {
		t, err := b.target(ctx, queueName("overrun"), n, attrs)
		if err != nil {
			return fmt.Errorf("preparing the overrun queue: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer t.close()
			wctx, cancel := context.WithTimeout(ctx, window)
			defer cancel()
			line := newFinishLine(wctx, math.MaxInt32, func() {}) // counts; the window ends the run
			runs := newTally()
			if _, err := c.run(wctx, t.client, t.url, w, line, runs); err != nil {
				errs[i] = fmt.Errorf("overrun, %s: %w", c.name, err)
				return
			}
			res := overrunResult{name: c.name, deletes: line.done.Load()}
			res.runs, res.messages, res.duplicates = runs.counts()
			left, err := queueDepth(ctx, t.filler, t.url)
			if err != nil {
				errs[i] = fmt.Errorf("overrun, %s: %w", c.name, err)
				return
			}
			res.left = left
			results[i] = res
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.overrunResults, r.overrunWindow, r.overrunWorkload, r.overrunMessages, r.overrunWasMeasured = results, window, w, n, true
	return nil
}

// queueDepth is the number of messages in the queue, visible or in flight.
func queueDepth(ctx context.Context, client *sqs.Client, url string) (int, error) {
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		return 0, fmt.Errorf("GetQueueAttributes: %w", err)
	}
	total := 0
	for _, k := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		v, err := strconv.Atoi(out.Attributes[string(k)])
		if err != nil {
			return 0, fmt.Errorf("GetQueueAttributes: %s is %q", k, out.Attributes[string(k)])
		}
		total += v
	}
	return total, nil
}

func reportOverrun(out io.Writer, r *rttResult) {
	w := r.overrunWorkload
	fmt.Fprintf(out, "Overrun at RTT %v, client %s: %d messages, lease (visibility timeout) %v, handlers %v, concurrency %d, every contender at once on a queue of its own for %v:\n\n",
		r.rtt, r.client, r.overrunMessages, w.visibility, w.handler, w.concurrency, r.overrunWindow.Round(100*time.Millisecond))
	fmt.Fprintln(out, "| RTT | client | contender | handler runs | messages handled | duplicates | deletes sent | left in queue |")
	fmt.Fprintln(out, "|---|---|---|---:|---:|---:|---:|---:|")
	for _, res := range r.overrunResults {
		fmt.Fprintf(out, "| %v | %s | %s | %d | %d | %d | %d | %d |\n", r.rtt, r.client, res.name, res.runs, res.messages, res.duplicates, res.deletes, res.left)
	}
	fmt.Fprintln(out, "\n(a delete with a receipt handle that a later receive has superseded may delete nothing: SQS says it might not, sqstest never does; such a message stays in the queue)")
	fmt.Fprintln(out)
}

// microseconds is d in µs.
func microseconds(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func durations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return "{" + strings.Join(s, ", ") + "}"
}

func ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return "{" + strings.Join(s, ", ") + "}"
}
