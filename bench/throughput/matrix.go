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
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// rowTarget is about how long a row's drain takes at the ideal rate
// (-row): a row's queue holds ideal × rowTarget messages, within
// [200, -n]. A row of 1 s is mostly the start (pollers spawning, the
// completion rate and round trip being learned); 5 s shows the steady pace.
var rowTarget = time.Second

// ideal is the best rate a client could reach with concurrency handlers of
// duration handler on this machine: c/h, or the CPU ceiling (the raw loop's
// rate at RTT 0, no handler) if that is lower. The RTT is not in it: a
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
	least := min(200, most)
	return max(least, min(most, int(idealRate*rowTarget.Seconds())))
}

// cell is one contender's figures in one row (medians over the rounds).
type cell struct {
	rate, calls float64
	cpu         float64 // process CPU per message, µs (client and, in-process, server)
	busy        float64 // share of the slots' time in handler calls (0: no handler)
	duplicates  int     // over all rounds
}

// matrixRow is one row of the matrix.
type matrixRow struct {
	handler     time.Duration
	slot        time.Duration // what a handler call of handler really took (slotTime)
	concurrency int
	messages    int
	ideal       float64
	cells       []cell // one per rowContenders()
}

// rttResult is the matrix at one RTT.
type rttResult struct {
	rtt                time.Duration
	where              string
	rawRate, rawCalls  float64
	rawCPU             float64 // the raw loop's process CPU per message, µs
	widePollers        int     // RTT > 0: the raw loop again with this many pollers
	wideRate, wideCPU  float64 // its rate and CPU per message (µs)
	ceiling            float64 // the rows' CPU ceiling: min(RTT 0 raw loop, wide raw loop)
	rows               []matrixRow
	failures           string
	duplicateNotes     []string
	overrunResults     []overrunResult // at the largest RTT only
	overrunWindow      time.Duration
	overrunWorkload    workload
	overrunMessages    int
	overrunWasMeasured bool
}

// runMatrix measures every contender on every row of the matrix, for each
// RTT, then the overrun case at the largest RTT, and writes the report.
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
	fmt.Fprintf(out, "throughput matrix: RTT %s × handler %s × concurrency %s; %d round(s) per cell, GOMAXPROCS %d\n",
		durations(cfg.RTTs), durations(cfg.Handlers), ints(cfg.Concurrency), cfg.Rounds, runtime.GOMAXPROCS(0))
	fmt.Fprintln(out, "RTT is added to every SQS call the contenders make (half before the request, half after the response).")

	// The CPU ceiling: the raw loop at RTT 0, at least three rounds.
	var ceiling float64
	results := make([]*rttResult, 0, len(cfg.RTTs))
	rtts := slices.Clone(cfg.RTTs)
	if !slices.Contains(rtts, 0) {
		b, err := newBench(cfg, 0)
		if err != nil {
			return err
		}
		r, err := measureRaw(ctx, b, cfg, max(3, cfg.Rounds))
		b.close()
		if err != nil {
			return err
		}
		ceiling = r.rawRate
	}
	slices.Sort(rtts)
	for _, rtt := range rtts {
		b, err := newBench(cfg, rtt)
		if err != nil {
			return err
		}
		r, err := measureAtRTT(ctx, b, cfg, &ceiling)
		if err == nil && rtt == rtts[len(rtts)-1] && cfg.Overrun > 0 {
			err = measureOverrun(ctx, b, cfg, r)
		}
		failures := b.counter.failures()
		b.close()
		if err != nil {
			if failures != "" {
				err = fmt.Errorf("%w (failed HTTP requests: %s)", err, failures)
			}
			return fmt.Errorf("RTT %v: %w", rtt, err)
		}
		r.failures = failures
		results = append(results, r)
	}
	fmt.Fprintf(out, "CPU ceiling (raw loop at RTT 0, %d pollers, no handler): %.0f msg/s; at RTT > 0 also the raw loop with pollers enough to cover the round trips, if lower. ideal = min(C/takes, ceiling), where takes is what one handler call really took with C of them running at once and nothing else\n\n", cfg.Pollers, ceiling)
	for _, r := range results {
		reportRTT(out, r, cfg)
	}
	for _, r := range results {
		if r.overrunWasMeasured {
			reportOverrun(out, r)
		}
	}
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
	if cfg.Overrun < 0 || cfg.Overrun > 1000 {
		return fmt.Errorf("-overrun %d: must be from 0 to 1000", cfg.Overrun)
	}
	if cfg.Overrun > 0 && (cfg.OverrunLease < 3*time.Second || cfg.OverrunLease%time.Second != 0 || cfg.OverrunHandler <= cfg.OverrunLease) {
		return fmt.Errorf("overrun lease %v, handler %v: the lease must be whole seconds, at least 3s, and the handler longer", cfg.OverrunLease, cfg.OverrunHandler)
	}
	return nil
}

// measureRaw measures the raw loop (after the warm-up) for rounds rounds.
func measureRaw(ctx context.Context, b *bench, cfg benchConfig, rounds int) (*rttResult, error) {
	r := &rttResult{rtt: b.rtt, where: b.where}
	if cfg.Warmup > 0 {
		if _, err := b.measureWith(ctx, rawLoop(), cfg.Warmup, cfg); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	var rates, calls, cpus []float64
	for range rounds {
		m, err := b.measureWith(ctx, rawLoop(), cfg.Messages, cfg)
		if err != nil {
			return nil, fmt.Errorf("raw loop: %w", err)
		}
		rates = append(rates, m.rate())
		calls = append(calls, m.callsPerMessage())
		cpus = append(cpus, microseconds(m.cpuPerMessage()))
	}
	r.rawRate, r.rawCalls, r.rawCPU = median(rates), median(calls), median(cpus)
	return r, nil
}

// measureAtRTT measures the raw loop, then every row. At RTT 0 the raw
// loop's rate becomes the ceiling.
func measureAtRTT(ctx context.Context, b *bench, cfg benchConfig, ceiling *float64) (*rttResult, error) {
	rounds := cfg.Rounds
	if b.rtt == 0 {
		rounds = max(3, rounds)
	}
	r, err := measureRaw(ctx, b, cfg, rounds)
	if err != nil {
		return nil, err
	}
	here := *ceiling
	if b.rtt == 0 {
		*ceiling = r.rawRate
		here = r.rawRate
	} else {
		// At this RTT the machine's ceiling is the raw loop with pollers
		// enough to cover the round trips (a receive and a delete per 10
		// messages): what the table calls the CPU ceiling.
		wide := cfg
		wide.Pollers = min(256, max(cfg.Pollers, int(math.Ceil(*ceiling*2*b.rtt.Seconds()/10*1.5))))
		w, err := measureRaw(ctx, b, wide, rounds)
		if err != nil {
			return nil, err
		}
		r.widePollers, r.wideRate, r.wideCPU = wide.Pollers, w.rawRate, w.rawCPU
		here = min(here, w.rawRate)
	}
	r.ceiling = here
	contenders := rowContenders()
	for _, h := range cfg.Handlers {
		for _, c := range cfg.Concurrency {
			w := workload{handler: h, concurrency: c, visibility: benchVisibility, wait: cfg.Wait}
			slot := slotTime(h, c)
			row := matrixRow{handler: h, slot: slot, concurrency: c, ideal: ideal(slot, c, here)}
			row.messages = rowMessages(row.ideal, cfg.Messages)
			ms := make([][]measurement, len(contenders))
			for round := range cfg.Rounds {
				for k := range contenders {
					i := (k + round) % len(contenders)
					m, err := b.measureRow(ctx, contenders[i], row.messages, w)
					if err != nil {
						return nil, fmt.Errorf("handler %v, concurrency %d, %s: %w", h, c, contenders[i].name, err)
					}
					ms[i] = append(ms[i], m)
				}
			}
			for i, c := range contenders {
				var rates, calls, cpus, busy []float64
				dup := 0
				for _, m := range ms[i] {
					rates = append(rates, m.rate())
					calls = append(calls, m.callsPerMessage())
					cpus = append(cpus, microseconds(m.cpuPerMessage()))
					busy = append(busy, m.busy)
					dup += m.redelivered
				}
				row.cells = append(row.cells, cell{rate: median(rates), calls: median(calls), cpu: median(cpus), busy: median(busy), duplicates: dup})
				if dup > 0 {
					r.duplicateNotes = append(r.duplicateNotes, fmt.Sprintf("handler %v, C=%d, %s: %d duplicate handler runs", h, row.concurrency, c.name, dup))
				}
			}
			r.rows = append(r.rows, row)
		}
	}
	return r, nil
}

// measureRow times c draining a queue of n messages under workload w.
func (b *bench) measureRow(ctx context.Context, c rowContender, n int, w workload) (measurement, error) {
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(int(w.visibility / time.Second))}
	handlerTime.Store(0)
	m, err := b.measureDrain(ctx, c.name, n, attrs, func(ctx context.Context, client *sqs.Client, url string) (drained, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		line := newFinishLine(n, cancel)
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

func reportRTT(out io.Writer, r *rttResult, cfg benchConfig) {
	fmt.Fprintf(out, "RTT %v (%s): raw loop (%d pollers, no handler) %.0f msg/s, %.3f calls/msg, %.1f µs CPU/msg\n",
		r.rtt, r.where, cfg.Pollers, r.rawRate, r.rawCalls, r.rawCPU)
	if r.widePollers > 0 {
		fmt.Fprintf(out, "  raw loop with %d pollers (enough to cover the round trips) %.0f msg/s, %.1f µs CPU/msg: the CPU ceiling at this RTT is %.0f msg/s\n", r.widePollers, r.wideRate, r.wideCPU, r.ceiling)
	}
	fmt.Fprintln(out, "  CPU µs/msg is the process's CPU time per message (client, proxy and, in-process, the server): at the CPU ceiling a contender's rate is the raw loop's times the ratio of their CPU per message")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "RTT\thandler\ttakes\tC\tmsgs\tideal msg/s\t")
	contenders := rowContenders()
	for _, c := range contenders {
		fmt.Fprintf(w, "%s msg/s\tx ideal\tcalls/msg\tCPU µs/msg\tbusy\t", c.name)
	}
	fmt.Fprintln(w)
	for _, row := range r.rows {
		fmt.Fprintf(w, "%v\t%v\t%v\t%d\t%d\t%.0f\t", r.rtt, row.handler, row.slot.Round(10*time.Microsecond), row.concurrency, row.messages, row.ideal)
		for _, c := range row.cells {
			busy := "-"
			if row.handler > 0 {
				busy = fmt.Sprintf("%.2f", c.busy)
			}
			fmt.Fprintf(w, "%.0f\t%.2f\t%.3f\t%.1f\t%s\t", c.rate, c.rate/row.ideal, c.calls, c.cpu, busy)
		}
		fmt.Fprintln(w)
	}
	w.Flush()
	for _, n := range r.duplicateNotes {
		fmt.Fprintf(out, "  %s\n", n)
	}
	if r.failures == "" {
		r.failures = "none"
	}
	fmt.Fprintf(out, "failed HTTP requests at RTT %v: %s\n\n", r.rtt, r.failures)
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
	contenders := rowContenders()
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
			line := newFinishLine(math.MaxInt32, func() {}) // counts; the window ends the run
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
	fmt.Fprintf(out, "overrun at RTT %v: %d messages, lease (visibility timeout) %v, handlers %v, concurrency %d, every contender for %v\n",
		r.rtt, r.overrunMessages, w.visibility, w.handler, w.concurrency, r.overrunWindow.Round(100*time.Millisecond))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "RTT\tcontender\thandler runs\tmessages handled\tduplicates\tdeletes sent\tleft in queue\t")
	for _, res := range r.overrunResults {
		fmt.Fprintf(tw, "%v\t%s\t%d\t%d\t%d\t%d\t%d\t\n", r.rtt, res.name, res.runs, res.messages, res.duplicates, res.deletes, res.left)
	}
	tw.Flush()
	fmt.Fprintln(out, "(a delete with a receipt handle that a later receive has superseded may delete nothing: SQS says it might not, sqstest never does; such a message stays in the queue)")
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
