package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sqskit/sqsconsumer"
)

// job is the body of one message: which run sent it and how long its
// handler works.
type job struct {
	Run    string `json:"run"`
	Seq    int    `json:"seq"`
	WorkMS int64  `json:"work_ms"`
}

func (j job) work() time.Duration { return time.Duration(j.WorkMS) * time.Millisecond }

func (j job) body() string {
	b, _ := json.Marshal(j)
	return string(b)
}

// makeJobs returns cfg.Messages jobs tagged with a fresh run ID. Every
// twentieth handler works 1.5 to 3.3 leases, every fifth (of the rest) up
// to about one lease, the others up to 200 ms: most work is short, and the
// long ones would outlive an unrenewed lease several times over.
func makeJobs(cfg runConfig) []job {
	r := rand.New(rand.NewPCG(cfg.Seed, 0x5157))
	run := strconv.FormatUint(rand.Uint64(), 36)
	jobs := make([]job, cfg.Messages)
	for i := range jobs {
		var d time.Duration
		switch {
		case i%20 == 3:
			d = time.Duration(float64(cfg.Lease) * (1.5 + 1.8*r.Float64()))
		case i%5 == 1:
			d = cfg.Lease/6 + time.Duration(r.Float64()*float64(cfg.Lease))
		default:
			d = time.Millisecond + time.Duration(r.Int64N(int64(200*time.Millisecond)))
		}
		jobs[i] = job{Run: run, Seq: i, WorkMS: d.Milliseconds()}
	}
	return jobs
}

// errForeign is returned for a message this run did not send: it goes back
// to the queue untouched (after a delay, so this run does not spin on it).
var errForeign = errors.New("not a message of this run; leaving it in the queue")

// tally is the handler's and the observer's record of the run. All its
// methods are safe for concurrent use.
type tally struct {
	mu       sync.Mutex     // guards every field below
	ours     map[string]int // message ID -> index in jobs
	want     int
	calls    map[string]int           // handler invocations per message
	took     map[string]time.Duration // duration of each message's first completed handler call
	spent    map[string]time.Duration // handler time per message over all calls, cut-off ones included
	ran      map[string]bool          // messages whose handler completed at least once
	held     map[string]time.Duration // receive to confirmed delete
	renewals map[string]int
	deleted  map[string]bool
	events   map[sqsconsumer.EventKind]int
	foreign  int
	lastAt   time.Time     // when the last of our messages was deleted
	done     chan struct{} // closed when every message of ours is deleted
	lastRan  time.Time     // when the last of our messages completed its first handler call
	allRan   chan struct{} // closed when every message of ours was handled at least once
}

func newTally(ids []string) *tally {
	t := &tally{
		ours:     make(map[string]int, len(ids)),
		want:     len(ids),
		calls:    map[string]int{},
		took:     map[string]time.Duration{},
		spent:    map[string]time.Duration{},
		ran:      map[string]bool{},
		held:     map[string]time.Duration{},
		renewals: map[string]int{},
		deleted:  map[string]bool{},
		events:   map[sqsconsumer.EventKind]int{},
		done:     make(chan struct{}),
		allRan:   make(chan struct{}),
	}
	for i, id := range ids {
		t.ours[id] = i
	}
	return t
}

// handler simulates the work its message asks for, giving up if the
// message's context is cancelled (lease lost, shutdown). It records every
// call and the time it took, whether it completed or was cut off.
func (t *tally) handler(run string) sqsconsumer.HandlerFunc {
	return func(ctx context.Context, m *sqsconsumer.Message) error {
		var j job
		if err := json.Unmarshal([]byte(m.Body), &j); err != nil || j.Run != run {
			t.mu.Lock()
			t.foreign++
			t.mu.Unlock()
			return sqsconsumer.RetryAfter(errForeign, time.Minute)
		}
		t.mu.Lock()
		t.calls[m.ID]++
		t.mu.Unlock()

		start := time.Now()
		timer := time.NewTimer(j.work())
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			t.mu.Lock()
			t.spent[m.ID] += time.Since(start)
			t.mu.Unlock()
			return context.Cause(ctx)
		}
		took := time.Since(start)
		t.mu.Lock()
		defer t.mu.Unlock()
		t.spent[m.ID] += took
		if !t.ran[m.ID] {
			t.ran[m.ID] = true
			t.took[m.ID] = took
			if len(t.ran) == t.want {
				t.lastRan = time.Now()
				close(t.allRan)
			}
		}
		return nil
	}
}

// duplicates is how many handler calls there were beyond one per message.
func (t *tally) duplicates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.calls {
		n += c - 1
	}
	return n
}

// wasted is the handler time beyond one completed run of each message:
// repeated runs and runs cut off before they finished.
func (t *tally) wasted() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w time.Duration
	for id, d := range t.spent {
		w += d - t.took[id]
	}
	return w
}

// progress returns how many messages were deleted and how many handled at
// least once so far.
func (t *tally) progress() (deleted, ran int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.deleted), len(t.ran)
}

// Observe counts the Consumer's events.
func (t *tally) Observe(e sqsconsumer.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.ours[e.MessageID]; !ok {
		return
	}
	t.events[e.Kind]++
	switch e.Kind {
	case sqsconsumer.EventRenewed:
		t.renewals[e.MessageID]++
	case sqsconsumer.EventDeleted:
		if t.deleted[e.MessageID] {
			return
		}
		t.deleted[e.MessageID] = true
		t.held[e.MessageID] = e.SinceReceive
		if len(t.deleted) == t.want {
			t.lastAt = e.Time
			close(t.done)
		}
	}
}

// result is what a run found.
type result struct {
	cfg         runConfig
	where       string
	jobs        []job
	ids         []string
	elapsed     time.Duration
	calls       map[string]int
	redelivered int // messages SQS delivered more than once; -1 if unknown
	t           *tally
}

// consume runs a Consumer on q until every message in ids is deleted or ctx
// ends, and gathers the result. t records the run; it must be
// newTally(ids).
func consume(ctx context.Context, q *queue, cfg runConfig, jobs []job, ids []string, t *tally) (*result, error) {
	c, err := sqsconsumer.New(q.client, q.url, t.handler(jobs[0].Run),
		sqsconsumer.WithVisibilityTimeout(cfg.Lease),
		sqsconsumer.WithConcurrency(cfg.Concurrency),
		sqsconsumer.WithShutdownTimeout(cfg.Lease),
		sqsconsumer.WithObserver(t),
	)
	if err != nil {
		return nil, err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-t.done: // all processed: shut the consumer down
		case <-runCtx.Done():
		}
		stop()
	}()
	start := time.Now()
	if err := c.Run(runCtx); err != nil {
		return nil, err
	}

	res := &result{cfg: cfg, where: q.where, jobs: jobs, ids: ids, calls: q.calls(), redelivered: -1, t: t}
	t.mu.Lock()
	res.elapsed = time.Since(start)
	if !t.lastAt.IsZero() {
		res.elapsed = t.lastAt.Sub(start)
	}
	t.mu.Unlock()
	if q.states != nil {
		res.redelivered = 0
		for _, st := range q.states() {
			if st.ReceiveCount > 1 {
				res.redelivered++
			}
		}
	}
	return res, nil
}

// processed is how many of the run's messages were deleted.
func (r *result) processed() int {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	return len(r.t.deleted)
}

// duplicates is how many handler calls there were beyond one per message.
func (r *result) duplicates() int { return r.t.duplicates() }

// verdict is nil when every message was processed exactly once.
func (r *result) verdict() error {
	var errs []error
	if d := r.duplicates(); d > 0 {
		errs = append(errs, fmt.Errorf("%d duplicate handler calls", d))
	}
	if p := r.processed(); p < len(r.ids) {
		errs = append(errs, fmt.Errorf("only %d of %d messages processed", p, len(r.ids)))
	}
	return errors.Join(errs...)
}

func (r *result) report(out io.Writer) {
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	lease := r.cfg.Lease
	longer, longest := 0, time.Duration(0)
	for _, j := range r.jobs {
		if j.work() > lease {
			longer++
		}
		longest = max(longest, j.work())
	}
	renewals, dups := 0, 0
	for _, n := range t.renewals {
		renewals += n
	}
	for _, n := range t.calls {
		dups += n - 1
	}

	fmt.Fprintf(out, "sqsconsumer quickstart: %s\n", r.where)
	fmt.Fprintf(out, "lease %v (renewed every %v), %d handlers at once; %d messages, %d of them with handlers longer than the lease (up to %v)\n\n",
		lease, lease/3, r.cfg.Concurrency, len(r.ids), longer, longest.Round(10*time.Millisecond))

	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "processed\t%d/%d\tdeleted after the handler returned nil\n", len(t.deleted), len(r.ids))
	fmt.Fprintf(w, "duplicates\t%d\thandler called again for a message already handled (must be 0)\n", dups)
	if r.redelivered >= 0 {
		fmt.Fprintf(w, "redelivered\t%d\tmessages SQS delivered more than once\n", r.redelivered)
	}
	fmt.Fprintf(w, "renewals\t%d\tvisibility extensions while handlers ran\n", renewals)
	lost := t.events[sqsconsumer.EventLeaseLost] + t.events[sqsconsumer.EventLeaseExpired] + t.events[sqsconsumer.EventCeilingReached]
	fmt.Fprintf(w, "leases lost\t%d\tlost, expired or at the ceiling\n", lost)
	if t.foreign > 0 {
		fmt.Fprintf(w, "foreign\t%d\treceives of messages this run did not send (left in the queue)\n", t.foreign)
	}
	fmt.Fprintf(w, "elapsed\t%v\tfrom Run to the last delete\n", r.elapsed.Round(time.Millisecond))
	w.Flush()

	fmt.Fprintln(out, "\nAPI calls by action")
	actions := make([]string, 0, len(r.calls))
	total := 0
	for a, n := range r.calls {
		actions = append(actions, a)
		total += n
	}
	sort.Strings(actions)
	for _, a := range actions {
		fmt.Fprintf(out, "  %-30s %6d\n", a, r.calls[a])
	}
	fmt.Fprintf(out, "  %-30s %6d  (%.2f per message)\n", "total", total, float64(total)/float64(len(r.ids)))

	type slow struct {
		id   string
		took time.Duration
	}
	var slowest []slow
	for id, d := range t.took {
		slowest = append(slowest, slow{id, d})
	}
	sort.Slice(slowest, func(i, j int) bool { return slowest[i].took > slowest[j].took })
	slowest = slowest[:min(5, len(slowest))]
	fmt.Fprintf(out, "\nslowest handlers (lease %v)\n", lease)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  message\thandler\t× lease\tin hand\trenewals\thandler calls\n")
	for _, s := range slowest {
		fmt.Fprintf(w, "  #%d\t%v\t%.1f×\t%v\t%d\t%d\n",
			t.ours[s.id], s.took.Round(10*time.Millisecond), float64(s.took)/float64(lease),
			t.held[s.id].Round(10*time.Millisecond), t.renewals[s.id], t.calls[s.id])
	}
	w.Flush()
}
