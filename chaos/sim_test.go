package chaos

// The seeded simulation runs the library at scale inside testing/synctest,
// in virtual time, against the in-memory sqstest server: several Consumer
// "processes" share a queue, each through a wire that injects faults of
// every class sqstest offers; processes crash at random moments and are
// replaced. It uses only the public API of sqsconsumer and sqstest.

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

var (
	simSeedFlag  = flag.Uint64("sim.seed", 0, "seed of the simulation's random draws; 0 picks one and prints it")
	simNFlag     = flag.Int("sim.n", 0, "messages the simulation sends (default 100,000; 10,000 with -short or -race)")
	simHeapFlag  = flag.String("sim.heapprofile", "", "write heap profiles (pprof) to FILE.5 and FILE.9, after half and nine tenths of the messages")
	simHistFlag  = flag.Int("sim.history", simHistoryLimit, "sqstest WithHistoryLimit of the simulation's server (0: keep every message's history)")
	simFaultFlag = flag.Float64("sim.faults", 0.01, "share of calls faulted, and of handler calls whose lease the server expires (0 to 0.5)")
)

// simHistoryLimit is the history the simulation's server keeps of messages
// that left the queue (sqstest.WithHistoryLimit).
const simHistoryLimit = 1000

// simCfg is the shape of a simulation.
type simCfg struct {
	n          int           // messages
	procs      int           // processes consuming at once
	conc       int           // handlers per process
	lease      time.Duration // visibility timeout
	maxLease   time.Duration // WithMaxLeaseDuration: long handlers meet the ceiling
	backlog    int           // messages sent but not yet checked, at most
	faultRate  float64       // per call, and per handler start for expiries
	crashEvery time.Duration // mean virtual time between crashes
	history    int
	// broken names a deliberately broken variant (controls): "" for none,
	// "ignore-cancel" (handlers ignore their context), "skip-work" (some
	// handlers succeed without doing the work), "no-evidence" (the wire
	// and the crashes record nothing), "keep-history" (the server keeps
	// every message's history).
	broken string
}

func defaultSimCfg(n int) simCfg {
	return simCfg{
		n:          n,
		procs:      4,
		conc:       50,
		lease:      30 * time.Second,
		maxLease:   80 * time.Second,
		backlog:    2000,
		faultRate:  *simFaultFlag,
		crashEvery: 3 * time.Minute,
		history:    *simHistFlag,
	}
}

// TestSimulation: n messages (-sim.n, default 10^5) through 4 Consumers
// with 1 % of calls faulted and random crashes. Asserted: none lost, every
// duplicate explained, no two handlers of a message at once unless the
// server expired the first one's lease (then it ends within a lease), and
// the heap flat as messages flow.
func TestSimulation(t *testing.T) {
	require.GreaterOrEqual(t, *simNFlag, 0, "-sim.n must be a positive number of messages (0: the default)")
	require.True(t, *simFaultFlag >= 0 && *simFaultFlag <= 0.5, "-sim.faults must be between 0 and 0.5")
	require.GreaterOrEqual(t, *simHistFlag, 0, "-sim.history must be 0 (keep every message's history) or a positive limit")
	n := *simNFlag
	if n == 0 {
		n = 100_000
		if testing.Short() || raceEnabled {
			n = 10_000
		}
	}
	seed := *simSeedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())%1_000_000_000 + 1
	}
	fmt.Printf("sim: seed %d, %d messages (replay with -sim.seed=%d -sim.n=%d)\n", seed, n, seed, n)
	t.Logf("seed %d (replay with -sim.seed=%d -sim.n=%d)", seed, seed, n)
	var res simResult
	wall := time.Now()
	synctest.Test(t, func(t *testing.T) {
		res = runSim(t, seed, defaultSimCfg(n))
	})
	res.wall = time.Since(wall)
	fmt.Println(res.String())
	for _, v := range res.violations[:min(len(res.violations), 20)] {
		t.Errorf("violation: %s", v)
	}
	require.Empty(t, res.violations, "%d violations (seed %d)", len(res.violations), seed)
	require.Zero(t, res.lost)
	require.Equal(t, n, res.checked)
	res.requireFlatHeap(t)
}

// TestSimulationControls runs deliberately broken variants, each of which
// a check must report.
func TestSimulationControls(t *testing.T) {
	for _, c := range []struct {
		broken string
		n      int
		want   string
	}{
		{"skip-work", 2000, "lost"},
		{"no-evidence", 2000, "no recorded cause"},
		{"ignore-cancel", 2000, "while process|more than a lease"},
		{"keep-history", 20000, "heap grows"},
	} {
		t.Run(c.broken, func(t *testing.T) {
			if c.broken == "keep-history" && (raceEnabled || testing.Short()) {
				t.Skip("a memory control: run without -race and -short")
			}
			cfg := defaultSimCfg(c.n)
			cfg.broken = c.broken
			var res simResult
			synctest.Test(t, func(t *testing.T) {
				res = runSim(t, 1, cfg)
			})
			all := strings.Join(res.violations, "\n")
			if err := res.heapGrowth(); err != nil {
				all += "\n" + err.Error()
			}
			t.Logf("%s: %d violations, e.g. %s\n%s", c.broken, len(res.violations), all[:min(len(all), 300)], res)
			found := false
			for _, w := range strings.Split(c.want, "|") {
				found = found || strings.Contains(all, w)
			}
			require.True(t, found, "the checks missed the broken variant %q (want %q)", c.broken, c.want)
		})
	}
}

// simResult is what a run measured.

type simResult struct {
	seed                   uint64
	cfg                    simCfg
	checked, lost          int
	completions            int
	procs, crashes, exits  int
	faults                 map[string]int
	dups                   map[string]int
	overlapsAfterExpiry    int
	violations             []string
	heap                   []heapPoint
	virtual, wall          time.Duration
	calls                  map[string]int
	maxHeldAtOnce, maxOpen int
}

type heapPoint struct {
	checked int
	heap    uint64 // HeapAlloc after a GC, bytes
	held    int    // messages held by the processes (running + waiting)
}

func (r simResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sim summary (seed %d): messages=%d lost=%d handled=%d processes=%d crashes=%d exits(permanent receive error)=%d\n",
		r.seed, r.checked, r.lost, r.completions, r.procs, r.crashes, r.exits)
	total := 0
	for _, n := range r.faults {
		total += n
	}
	calls := 0
	for _, n := range r.calls {
		calls += n
	}
	fmt.Fprintf(&b, "  faults=%s over %d calls (%.2f%%)\n", counts(r.faults), calls, 100*float64(total)/float64(max(calls, 1)))
	fmt.Fprintf(&b, "  duplicates=%s overlaps after an injected expiry=%d violations=%d\n", counts(r.dups), r.overlapsAfterExpiry, len(r.violations))
	fmt.Fprintf(&b, "  heap after GC (MB) / held:")
	for _, h := range r.heap {
		fmt.Fprintf(&b, " %dk:%.1f/%d", h.checked/1000, float64(h.heap)/1e6, h.held)
	}
	fmt.Fprintf(&b, "\n  virtual time=%v wall=%v", r.virtual.Round(time.Second), r.wall.Round(100*time.Millisecond))
	return b.String()
}

// requireFlatHeap: the heap does not grow with the messages processed
// (see heapGrowth).
func (r simResult) requireFlatHeap(t *testing.T) {
	t.Helper()
	if err := r.heapGrowth(); err != nil {
		require.NoError(t, err)
	}
}

// heapGrowth reports a checkpoint (after the first fifth of the messages,
// a warm-up) whose heap exceeds the first's by more than a quarter plus
// 4 MB.
func (r simResult) heapGrowth() error {
	if len(r.heap) < 3 {
		return nil
	}
	base := r.heap[1].heap
	limit := base + base/4 + 4<<20
	for _, h := range r.heap[2:] {
		if h.heap > limit {
			return fmt.Errorf("heap grows with messages processed: %.1f MB after %d messages, %.1f MB after %d",
				float64(h.heap)/1e6, h.checked, float64(base)/1e6, r.heap[1].checked)
		}
	}
	return nil
}

// Evidence kinds: what can make a message come back after its handler
// succeeded.
type evKind uint8

const (
	evCrash       evKind = iota + 1 // its process crashed before the delete was confirmed
	evExit                          // its process quit (permanent receive error) before the delete was confirmed
	evExpire                        // the server expired its lease (sqstest Expire)
	evLostDelete                    // a delete answer for it was lost
	evDeleteFault                   // a delete call for it failed, was delayed, or its entry failed
	evRenewFault                    // a renewal for it failed, was delayed, lost its answer, or its entry failed
)

var evNames = map[evKind]string{
	evCrash:       "crash",
	evExit:        "process exit",
	evExpire:      "expired by the server",
	evLostDelete:  "lost delete answer",
	evDeleteFault: "failed delete",
	evRenewFault:  "lost or expired lease",
}

type evidence struct {
	at   time.Time
	kind evKind
}

// simRun is one handler call.
type simRun struct {
	proc       *simProc
	start, end time.Time
	// recv is when the server handed over the delivery this call works
	// on: a message read ahead waits in its process before its handler
	// starts, and what happens to its delivery meanwhile (an expiry)
	// counts for it.
	recv      time.Time
	mustEndBy time.Time // overlapping a later handler after an expiry: its end bound
}

// simMsg is what the simulation tracks of one message until it is checked.
type simMsg struct {
	idx         int
	id          string
	completions int
	lastDone    time.Time // start of the latest handler call that completed
	lastRecv    time.Time // when the server handed over that call's delivery
	live        []*simRun
	ev          []evidence
	handles     []string
	deletedAt   time.Time // first delete the library confirmed
	// trace is what the processes' observers saw of it (kind, process,
	// time, error), printed with a late overlap to explain it.
	trace []observed
}

// simProc is one simulated process: a Consumer with its own client and
// wire.
type simProc struct {
	id        int
	mu        sync.Mutex
	dead      bool
	crashedAt time.Time
	crashed   chan struct{}
	cancel    context.CancelFunc
	done      chan struct{} // closed when Run returned
	runErr    error
	consumer  *sqsconsumer.Consumer
	undeleted map[*simMsg]bool // completed here, delete not confirmed
}

func (p *simProc) isDead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

type sim struct {
	t    *testing.T
	seed uint64
	cfg  simCfg
	srv  *sqstest.Server
	url  string

	mu        sync.Mutex
	open      map[string]*simMsg // by message id
	byHandle  map[string]*simMsg
	checkedAt []bool // by index: checked and forgotten
	recheck   map[*simMsg]bool
	calls     map[string]uint64 // per action, for the fault draws
	faults    map[string]int
	dups      map[string]int
	res       simResult
	expiries  []pendingExpiry
}

type pendingExpiry struct {
	at time.Time
	m  *simMsg
}

// Draw tags: each random choice hashes the seed, a tag and its keys, so a
// choice does not depend on how many others were made before it.
const (
	tagFault = iota + 1
	tagFaultClass
	tagEntries
	tagDelay
	tagDuration
	tagOutcome
	tagExpire
	tagCrash
)

func (s *sim) draw(tag uint64, keys ...uint64) uint64 {
	x := s.seed*0x9e3779b97f4a7c15 + tag
	for _, k := range keys {
		x = splitmix(x ^ k)
	}
	return splitmix(x)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func (s *sim) unit(tag uint64, keys ...uint64) float64 {
	return float64(s.draw(tag, keys...)>>11) / (1 << 53)
}

func hashString(str string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(str))
	return h.Sum64()
}

// drawFault decides whether the next call of action is faulted, and how.
func (s *sim) drawFault(action string, batch bool) *simFault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[action]++
	k := s.calls[action]
	a := hashString(action)
	if s.unit(tagFault, a, k) >= s.cfg.faultRate {
		return nil
	}
	total := 0
	for i := range simFaults {
		if s.applies(&simFaults[i], action, batch) {
			total += simFaults[i].weight
		}
	}
	pick := int(s.draw(tagFaultClass, a, k) % uint64(total))
	for i := range simFaults {
		f := &simFaults[i]
		if !s.applies(f, action, batch) {
			continue
		}
		if pick < f.weight {
			s.faults[f.class]++
			return f
		}
		pick -= f.weight
	}
	return nil
}

func (s *sim) applies(f *simFault, action string, batch bool) bool {
	switch f.actions {
	case "batch":
		return batch
	case "receive":
		return action == "ReceiveMessage"
	}
	return true
}

// noteCall records a batch call that did not simply succeed against the
// messages whose handles it named.
func (s *sim) noteCall(action string, body, rbody []byte, lost, whole bool) {
	if s.cfg.broken == "no-evidence" {
		return
	}
	hs := handlesOf(body, rbody, whole || lost)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hs {
		m := s.byHandle[h]
		if m == nil {
			continue
		}
		kind := evRenewFault
		if action == "DeleteMessageBatch" {
			kind = evDeleteFault
			if lost {
				kind = evLostDelete
			}
		}
		m.ev = append(m.ev, evidence{at: now, kind: kind})
	}
}

func (s *sim) violate(format string, args ...any) {
	if len(s.res.violations) < 1000 {
		s.res.violations = append(s.res.violations, fmt.Sprintf(format, args...))
	}
}

// begin records the start of a handler call of message idx in p; nil means
// p has crashed and the handler must not run.
func (s *sim) begin(p *simProc, m *sqsconsumer.Message) (*simRun, *simMsg) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.open[m.ID]
	if rec == nil {
		idx, _ := strconv.Atoi(m.Body)
		s.violate("message %d (%s) handled after it was deleted and checked", idx, m.ID)
		return nil, nil
	}
	expired := func(from, to time.Time) bool {
		for _, e := range rec.ev {
			if e.kind == evExpire && !e.at.Before(from) && !e.at.After(to) {
				return true
			}
		}
		return false
	}
	recv := s.receivedLocked(rec, m.Lease.ReceiptHandle(), now)
	var mustEndBy time.Time // this call's, when its delivery is the older one
	for _, r := range rec.live {
		// Two deliveries at once: the server must have expired the
		// older one's lease after handing it over and before handing
		// over the newer one. The older delivery's handler (which may
		// start second, after waiting in its process) must then end
		// within a lease of the other's start: its lease learns at its
		// next renewal.
		if !expired(earliest(r.recv, recv), latest(r.recv, recv)) {
			s.violate("message %d handled by process %d from %v while process %d has handled it since %v\n%s", rec.idx, p.id, now, r.proc.id, r.start, s.explainLocked(rec))
			continue
		}
		s.res.overlapsAfterExpiry++
		if recv.Before(r.recv) {
			if end := r.start.Add(s.cfg.lease); mustEndBy.IsZero() || end.Before(mustEndBy) {
				mustEndBy = end
			}
		} else {
			r.mustEndBy = now.Add(s.cfg.lease)
		}
	}
	if !rec.deletedAt.IsZero() && !expired(time.Time{}, now) {
		s.violate("message %d handled by process %d at %v after a delete confirmed at %v", rec.idx, p.id, now, rec.deletedAt)
	}
	r := &simRun{proc: p, start: now, recv: recv, mustEndBy: mustEndBy}
	rec.live = append(rec.live, r)
	return r, rec
}

// end records the end of a handler call; done says it completed the work.
// A call of a crashed process ends at the crash.
func (s *sim) end(rec *simMsg, r *simRun, done bool) bool {
	now := time.Now()
	p := r.proc
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		now, done = p.crashedAt, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r.end = now
	rec.live = slices.DeleteFunc(rec.live, func(x *simRun) bool { return x == r })
	if !r.mustEndBy.IsZero() && now.After(r.mustEndBy) {
		s.violate("message %d: process %d's handler (from %v) ran until %v, more than a lease after another delivery's handler started (by %v)\n%s",
			rec.idx, p.id, r.start, now, now.Sub(r.mustEndBy), s.explainLocked(rec))
	}
	if !done {
		return false
	}
	if rec.completions > 0 {
		// Since the earlier of the two deliveries was handed over: what
		// befell a delivery while it waited in its process counts.
		from, to := earliest(rec.lastRecv, r.recv), latest(rec.lastDone, r.start)
		best := evKind(0)
		for _, e := range rec.ev {
			if !e.at.Before(from) && !e.at.After(to) && (best == 0 || e.kind < best) {
				best = e.kind
			}
		}
		if best == 0 {
			s.violate("message %d handled again by process %d at %v with no recorded cause since the handling that started at %v\n%s", rec.idx, p.id, now, rec.lastDone, s.explainLocked(rec))
		} else {
			s.dups[evNames[best]]++
		}
	}
	rec.completions++
	s.res.completions++
	if rec.lastDone.Before(r.start) {
		rec.lastDone, rec.lastRecv = r.start, r.recv
	}
	p.undeleted[rec] = true
	return true
}

// simObserver sees one process's events.
type simObserver struct {
	s *sim
	p *simProc
}

func (o simObserver) Observe(e sqsconsumer.Event) {
	s := o.s
	if e.MessageID != "" {
		s.mu.Lock()
		if m := s.open[e.MessageID]; m != nil && len(m.trace) < 200 {
			t := observed{at: e.Time, proc: o.p.id, kind: e.Kind, err: e.Err}
			if e.Kind == sqsconsumer.EventReceived || e.Kind == sqsconsumer.EventAdopted {
				t.handle = e.Message.Lease.ReceiptHandle()
			}
			m.trace = append(m.trace, t)
		}
		s.mu.Unlock()
	}
	switch e.Kind {
	case sqsconsumer.EventReceived, sqsconsumer.EventAdopted:
		h := e.Message.Lease.ReceiptHandle()
		s.mu.Lock()
		if m := s.open[e.MessageID]; m != nil {
			m.handles = append(m.handles, h)
			s.byHandle[h] = m
		}
		s.mu.Unlock()
	case sqsconsumer.EventDeleted:
		o.p.mu.Lock()
		s.mu.Lock()
		if m := s.open[e.MessageID]; m != nil {
			if m.deletedAt.IsZero() {
				m.deletedAt = e.Time
			}
			delete(o.p.undeleted, m)
			s.recheck[m] = true
		}
		s.mu.Unlock()
		o.p.mu.Unlock()
	}
}

// handler is a process's handler: it works for a drawn duration (most
// short, some up to three leases), fails now and then, stops when its
// context is cancelled, and stops dead when its process crashes.
func (s *sim) handler(p *simProc) sqsconsumer.HandlerFunc {
	return func(ctx context.Context, m *sqsconsumer.Message) error {
		r, rec := s.begin(p, m)
		if r == nil {
			return errCrashed
		}
		idx := uint64(rec.idx)
		rc := uint64(m.ReceiveCount)
		u := s.unit(tagDuration, idx, rc)
		var d time.Duration
		switch {
		case u < 0.90:
			d = time.Duration(u / 0.90 * float64(2*time.Second))
		case u < 0.98:
			d = 2*time.Second + time.Duration((u-0.90)/0.08*float64(s.cfg.lease-2*time.Second))
		default:
			d = s.cfg.lease + time.Duration((u-0.98)/0.02*float64(2*s.cfg.lease))
		}
		if s.unit(tagExpire, idx, rc) < s.cfg.faultRate {
			s.mu.Lock()
			s.expiries = append(s.expiries, pendingExpiry{at: time.Now().Add(time.Duration(s.unit(tagExpire, idx, rc, 1) * float64(d))), m: rec})
			s.mu.Unlock()
		}
		timer := time.NewTimer(d)
		defer timer.Stop()
		if s.cfg.broken == "skip-work" && s.unit(tagOutcome, idx, rc, 1) < 0.01 {
			s.end(rec, r, false) // succeeds without completing the work
			return nil
		}
		done := ctx.Done()
		if s.cfg.broken == "ignore-cancel" {
			done = nil
		}
		select {
		case <-timer.C:
			if s.unit(tagOutcome, idx, rc) < 0.005 {
				s.end(rec, r, false)
				return fmt.Errorf("simulated failure of message %d", idx)
			}
			if !s.end(rec, r, true) {
				return errCrashed
			}
			return nil
		case <-done:
			s.end(rec, r, false)
			return context.Cause(ctx)
		case <-p.crashed:
			s.end(rec, r, false)
			return errCrashed
		}
	}
}

func (s *sim) startProc(ctx context.Context, id int) *simProc {
	p := &simProc{id: id, crashed: make(chan struct{}), done: make(chan struct{}), undeleted: map[*simMsg]bool{}}
	client := s.srv.Client(func(o *sqs.Options) {
		o.HTTPClient = &http.Client{Transport: &simWire{sim: s, proc: p, base: s.srv.Transport()}}
	})
	c, err := sqsconsumer.New(client, s.url, s.handler(p),
		sqsconsumer.WithVisibilityTimeout(s.cfg.lease),
		sqsconsumer.WithMaxLeaseDuration(s.cfg.maxLease),
		sqsconsumer.WithConcurrency(s.cfg.conc),
		sqsconsumer.WithMaxReadAhead(s.cfg.conc),
		sqsconsumer.WithShutdownTimeout(5*time.Second),
		sqsconsumer.WithObserver(simObserver{s: s, p: p}),
	)
	require.NoError(s.t, err)
	p.consumer = c
	runCtx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	go func() {
		defer close(p.done)
		p.runErr = c.Run(runCtx)
	}()
	s.res.procs++
	return p
}

// crash kills p: from now on its wire fails every call, its handlers stop,
// and nothing it did not confirm is done.
func (s *sim) crash(p *simProc) {
	now := time.Now()
	p.mu.Lock()
	p.dead, p.crashedAt = true, now
	close(p.crashed)
	s.mu.Lock()
	for m := range p.undeleted {
		if s.cfg.broken != "no-evidence" {
			m.ev = append(m.ev, evidence{at: now, kind: evCrash})
		}
	}
	clear(p.undeleted)
	s.mu.Unlock()
	p.mu.Unlock()
	p.cancel() // the Consumer's goroutines wind down against a dead wire
	s.res.crashes++
}

// exited notes a process whose Run returned on its own.
func (s *sim) exited(p *simProc) {
	now := time.Now()
	p.mu.Lock()
	s.mu.Lock()
	for m := range p.undeleted {
		if s.cfg.broken != "no-evidence" {
			m.ev = append(m.ev, evidence{at: now, kind: evExit})
		}
	}
	clear(p.undeleted)
	s.mu.Unlock()
	p.mu.Unlock()
	s.res.exits++
}

// check forgets m if the server no longer has it and no handler runs:
// then it can never be handled again. It counts it lost if it was never
// handled to completion.
func (s *sim) checkLocked(m *simMsg) bool {
	if len(m.live) > 0 {
		return false
	}
	st, ok := s.srv.Message(s.url, m.id)
	if ok && !st.Deleted {
		if st.Expired || st.MovedToDLQ || st.Purged {
			s.violate("message %d left the queue without a delete: %+v", m.idx, st)
		} else {
			return false
		}
	}
	if m.completions == 0 {
		s.res.lost++
		s.violate("message %d lost: deleted without being handled", m.idx)
	}
	for _, h := range m.handles {
		delete(s.byHandle, h)
	}
	delete(s.open, m.id)
	delete(s.recheck, m)
	s.checkedAt[m.idx] = true
	s.res.checked++
	return true
}

func runSim(t *testing.T, seed uint64, cfg simCfg) simResult {
	var opts []sqstest.Option
	if cfg.history > 0 && cfg.broken != "keep-history" {
		opts = append(opts, sqstest.WithHistoryLimit(cfg.history))
	}
	s := &sim{t: t, seed: seed, cfg: cfg, srv: sqstest.New(t, opts...),
		open: map[string]*simMsg{}, byHandle: map[string]*simMsg{}, checkedAt: make([]bool, cfg.n),
		recheck: map[*simMsg]bool{}, calls: map[string]uint64{}, faults: map[string]int{}, dups: map[string]int{}}
	s.res.seed, s.res.cfg = seed, cfg
	url, err := s.srv.CreateQueue("sim", map[string]string{"VisibilityTimeout": strconv.Itoa(int(cfg.lease / time.Second))})
	require.NoError(t, err)
	s.url = url

	ctx, stopAll := context.WithCancel(context.Background())
	defer stopAll()
	procs := make([]*simProc, cfg.procs)
	var gone []*simProc // crashed or exited, winding down
	nextID := 0
	for i := range procs {
		procs[i] = s.startProc(ctx, nextID)
		nextID++
	}
	began := time.Now()
	sent := 0
	nextCrash := began.Add(s.crashGap(0))
	crashNo := uint64(1)
	nextFull := began
	mark := 0
	limit := began.Add(time.Duration(cfg.n)*100*time.Millisecond + 2*time.Hour)
	for tick := 0; ; tick++ {
		now := time.Now()
		// Top up the queue.
		s.mu.Lock()
		for sent < cfg.n && len(s.open) < cfg.backlog {
			id, err := s.srv.Send(url, strconv.Itoa(sent))
			require.NoError(t, err)
			s.open[id] = &simMsg{idx: sent, id: id}
			sent++
		}
		s.res.maxOpen = max(s.res.maxOpen, len(s.open))
		// Expiries due.
		kept := s.expiries[:0]
		for _, e := range s.expiries {
			if e.at.After(now) {
				kept = append(kept, e)
				continue
			}
			if s.open[e.m.id] == e.m && s.srv.Expire(url, e.m.id) == nil {
				if cfg.broken != "no-evidence" {
					e.m.ev = append(e.m.ev, evidence{at: now, kind: evExpire})
				}
				s.faults[faultExpire]++
			}
		}
		s.expiries = kept
		// Check messages whose delete was confirmed, and every minute all.
		for m := range s.recheck {
			s.checkLocked(m)
		}
		if !now.Before(nextFull) {
			nextFull = now.Add(time.Minute)
			for _, m := range s.open {
				if m.completions > 0 {
					s.checkLocked(m)
				}
			}
		}
		checked := s.res.checked
		s.mu.Unlock()

		// Processes: crash one now and then; replace those that quit.
		if !now.Before(nextCrash) {
			i := int(s.draw(tagCrash, crashNo, 1) % uint64(len(procs)))
			s.crash(procs[i])
			gone = append(gone, procs[i])
			procs[i] = s.startProc(ctx, nextID)
			nextID++
			nextCrash = now.Add(s.crashGap(crashNo))
			crashNo++
		}
		held := 0
		for i, p := range procs {
			select {
			case <-p.done:
				s.exited(p)
				gone = append(gone, p)
				procs[i] = s.startProc(ctx, nextID)
				nextID++
			default:
				st := p.consumer.Stats()
				held += st.Running + st.Waiting
			}
		}
		s.res.maxHeldAtOnce = max(s.res.maxHeldAtOnce, held)
		gone = slices.DeleteFunc(gone, func(p *simProc) bool {
			select {
			case <-p.done:
				return true
			default:
				return false
			}
		})

		if checked >= (mark+1)*cfg.n/10 || checked == cfg.n {
			mark = checked * 10 / cfg.n
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			s.res.heap = append(s.res.heap, heapPoint{checked: checked, heap: ms.HeapAlloc, held: held})
			if *simHeapFlag != "" && (mark == 5 || mark == 9) {
				f, err := os.Create(fmt.Sprintf("%s.%d", *simHeapFlag, mark))
				require.NoError(t, err)
				require.NoError(t, pprof.WriteHeapProfile(f))
				require.NoError(t, f.Close())
			}
		}
		if checked == cfg.n {
			break
		}
		if now.After(limit) {
			s.mu.Lock()
			var left []int
			for _, m := range s.open {
				left = append(left, m.idx)
			}
			sort.Ints(left)
			s.violate("virtual time limit reached with %d messages unchecked, e.g. %v", len(left), left[:min(len(left), 10)])
			s.mu.Unlock()
			break
		}
		time.Sleep(time.Second)
	}
	s.res.virtual = time.Since(began)
	stopAll()
	for _, p := range append(procs, gone...) {
		<-p.done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.faults, s.res.dups = s.faults, s.dups
	s.res.calls = s.srv.Calls()
	return s.res
}

// crashGap is the virtual time to the next crash: exponential, mean
// cfg.crashEvery.
func (s *sim) crashGap(k uint64) time.Duration {
	u := s.unit(tagCrash, k, 2)
	return time.Duration(-math.Log(1-u) * float64(s.cfg.crashEvery))
}

// observed is one event a process's observer saw of a message; formatted
// only when a report needs it.
type observed struct {
	at     time.Time
	proc   int
	kind   sqsconsumer.EventKind
	handle string // the receipt handle of a receive or adoption
	err    error
}

// explainLocked is the story of m for a report: what the processes'
// observers saw, the evidence, and the server's receives and visibility
// changes.
func (s *sim) explainLocked(m *simMsg) string {
	var b strings.Builder
	for _, t := range m.trace {
		fmt.Fprintf(&b, "    observed %s p%d %s", t.at.Format("15:04:05.000"), t.proc, t.kind)
		if t.handle != "" {
			fmt.Fprintf(&b, " %s", tail8(t.handle))
		}
		if t.err != nil {
			fmt.Fprintf(&b, " (%v)", t.err)
		}
		b.WriteByte('\n')
	}
	for _, e := range m.ev {
		fmt.Fprintf(&b, "    evidence %s %s\n", e.at.Format("15:04:05.000"), evNames[e.kind])
	}
	if st, ok := s.srv.Message(s.url, m.id); ok {
		for _, r := range st.Receives {
			fmt.Fprintf(&b, "    server receive %s %s for %v\n", r.At.Format("15:04:05.000"), tail8(r.ReceiptHandle), r.VisibilityTimeout)
		}
		for _, c := range st.VisibilityChanges {
			fmt.Fprintf(&b, "    server visibility %s %s to %v %s\n", c.At.Format("15:04:05.000"), tail8(c.ReceiptHandle), c.Timeout, c.Err)
		}
	}
	return b.String()
}

// tail8 is the tail of a receipt handle, enough to tell handles apart.
func tail8(h string) string {
	return h[max(0, len(h)-8):]
}

// receivedLocked is when the server handed over m's delivery with handle
// h (now if the server no longer knows it: it is then at most as old as
// the call).
func (s *sim) receivedLocked(m *simMsg, h string, now time.Time) time.Time {
	if st, ok := s.srv.Message(s.url, m.id); ok {
		for _, r := range slices.Backward(st.Receives) {
			if r.ReceiptHandle == h {
				return r.At
			}
		}
	}
	return now
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
