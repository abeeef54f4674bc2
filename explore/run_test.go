package explore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/ecsprotect"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// Draw tags: each draw made while a scenario runs hashes the seed, a tag
// and its keys, so that a draw does not depend on how many others came
// before it (a shrunk scenario keeps the draws of what it kept).
const (
	tagFault = iota + 1
	tagFaultClass
	tagEntries
	tagDelay
	tagBehaviour
	tagWork
	tagCancel
	tagExpire
	tagRetry
	tagProbe
	tagBatchPanic
	tagBody
)

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// violation is one failed check: its name (the invariant) and what was seen.
type violation struct {
	Check string
	Text  string
}

func (v violation) String() string { return v.Check + ": " + v.Text }

// Check names.
const (
	chkDelete    = "delete-after-success"
	chkStranded  = "nothing-hidden-after-run"
	chkReturn    = "run-returns-in-time"
	chkLeak      = "goroutines-joined"
	chkEvents    = "events-match-calls"
	chkStats     = "stats-balance"
	chkFIFO      = "fifo-order"
	chkGroup     = "group-limit"
	chkTwice     = "one-handler-per-message"
	chkBreaker   = "breaker-downstream-only"
	chkHealth    = "health"
	chkReceiving = "keeps-receiving"
	chkRunErr    = "run-error"
	chkConflict  = "conflicts-refused"
	chkNew       = "new-accepts-valid"
	chkThrottle  = "throttle-pause"
	chkRelease   = "release-as-asked"
	chkLimit     = "concurrency-limit"
	chkBytes     = "byte-bound"
	chkCalls     = "calls-in-flight"
	chkPaused    = "paused-agrees"
	chkFirst     = "first-contact"
	chkSettings  = "settings-final"
	chkProtect   = "scale-in-protection"
)

// result is one handler outcome a process recorded for a message.
type result struct {
	seq        uint64
	at         time.Time
	kind       string // a behaviour's outcome: "success", "fail", "permanent", "retry", "panic", "cancelled", "released", "inprogress"
	retry      time.Duration
	shutdown   bool // the handler's context had been cancelled by the shutdown when it returned
	downstream bool // a failure the breaker may count
	ignored    bool // it ignored its cancelled context for a while
	cause      string
	leaseEnded bool          // its lease had ended (lost, expired, ceiling) when it returned
	throttled  bool          // Throttled, with its lease alive and no shutdown: back pressure
	asked      time.Duration // the delay RetryAfter (or Throttled) asked for
	hasAsked   bool
	// receiveCount is its message's ApproximateReceiveCount, for the
	// backoff it is released for.
	receiveCount int
}

// callRec is one entry of a delete or visibility change call.
type callRec struct {
	sent, answered uint64
	at             time.Time
	timeout        time.Duration
	ok             bool // SQS answered success and the answer reached the process
	used           bool // matched to an event
}

// handleRec is what the run knows of one receipt handle.
type handleRec struct {
	handle  string
	msg     string
	proc    int
	at      time.Time
	seq     uint64
	lost    bool // the receive's answer never reached the process
	faulted bool // a call naming it was faulted, delayed or lost its answer
	deletes []*callRec
	changes []*callRec
}

// obs is one event a process's observer saw.
type obs struct {
	seq    uint64
	kind   sqsconsumer.EventKind
	msg    string
	at     time.Time
	vis    time.Duration
	err    error
	handle string
}

type logRec struct {
	seq   uint64
	at    time.Time
	msg   string
	attrs map[string]string
}

// proc is one Consumer ("process") on the queue.
type proc struct {
	r      *run
	id     int
	c      *sqsconsumer.Consumer
	cancel context.CancelFunc
	done   chan struct{}

	// Guarded by r.mu.
	runErr                     error
	started, cancelAt, retTime time.Time
	returned, cancelled        bool
	outer, inner               map[string]int // message ID: handlers running in the outer layer, the innermost
	groupRunning               map[string]int // group: messages running in the innermost layer
	results                    map[string][]result
	events                     []obs
	logs                       []logRec
	dlqSends                   []uint64 // seq of each delivered SendMessage, by body in dlqBodies
	dlqBodies                  []string
	calls                      map[string]int
	lastAnswer                 time.Time // SQS answered a receive, visibility change or delete
	firstAnswer                time.Time
	faultTimes                 []time.Time
	handleCallFaults           []time.Time // whole-call faults on handle calls (breaker's call failures)
	permanentFault             bool
	permanentAt                time.Time // the latest permanent fault on a receive: Run ends after it
	receivesSent               int
	lastReceive                time.Time
	pauses                     int
	paused                     bool      // between the driver's Pause and Resume
	pauseChanged               time.Time // the last Pause or Resume began
	batches, handlers          int
	downstream                 []time.Time
	lastBreakerOpen            time.Time
	ownReleases                map[string][]time.Duration // message ID: visibilities its handler released it with itself
	recvLog                    []string                   // the latest receives, for a report
	startedAt                  map[string]time.Time       // message ID: EventStarted not yet followed by Succeeded or Failed
	outcomeAt                  map[string]time.Time       // message ID: its latest EventSucceeded or EventFailed
	drainedAt                  map[string]uint64          // message ID: when its handler returned RetryAfter(err, 0) at the drain
	roomSince                  time.Time                  // the first of the Health polls in a row that saw a free slot
	pausedPoll                 time.Time                  // the first of the Health polls in a row that saw it paused, with no Pause or Resume since
	receiveTimes               []time.Time                // when each receive was sent
	recvInFlight               []time.Time                // the sends of the receives in flight
	limitSamples               []limitSample              // Stats.MaxCallsInFlight at each receive sent
	pollersBound               int                        // Settings().Pollers: the most calls in flight
	lastThrottle               time.Time                  // the latest Throttled result its handlers returned
	minMsg, maxMsg             int64                      // the smallest and largest message its receives brought, in the byte bound's bytes
	queueRead                  bool                       // SQS answered its read of the source queue's attributes
	firstCall                  time.Time                  // its first call reached the wire
	firstContactFails          int                        // calls the wire failed with the scenario's first-contact error
	firstDeciding              time.Time                  // the first of them that decides whether Run goes on
	pool                       *connPool                  // the emulated connection pool (Scenario.Pool)
	agent                      *ecsAgent                  // the ECS agent of its Protector (Scenario.Protect)
	protector                  *ecsprotect.Protector
	held                       int       // messages between EventReceived and EventDone
	heldSince                  time.Time // held went from 0 to 1
	running                    int       // messages in the explorer's innermost handler calls
	throttledUntil             time.Time // the latest Stats.ThrottledUntil seen
}

// limitSample is Stats.MaxCallsInFlight read at a receive's send.
type limitSample struct {
	at    time.Time
	limit int
}

func (p *proc) name() string { return fmt.Sprintf("process %d", p.id) }

// msgRec is one message the run sent.
type msgRec struct {
	idx      int
	id       string
	body     string
	group    string
	groupPos int
}

type pendingTrigger struct {
	e    Event
	n    int
	fire func()
}

// run is one scenario running in a synctest bubble.
type run struct {
	sc     *Scenario
	srv    *sqstest.Server
	url    string
	dlqURL string
	fifo   bool
	store  *sqsconsumer.MemoryStore
	seq    atomic.Uint64
	start  time.Time
	abort  chan struct{} // closed to unstick handlers when Run does not return
	ctx    context.Context
	stopEv context.CancelFunc
	wg     sync.WaitGroup // the driver's goroutines

	mu         sync.Mutex
	msgs       map[string]*msgRec
	byIdx      []*msgRec
	groups     map[string][]*msgRec
	procs      []*proc
	handles    map[string]*handleRec
	violations []violation
	seen       map[string]bool
	triggers   map[string][]*pendingTrigger
	counts     map[string]int // trigger counts of process 0
	calls      map[string]uint64
	inBatch    map[int]int // batch calls running, by process
	receiving  map[int]int // receives in flight, by process
	summary    string
	virtual    time.Duration
}

func (r *run) violate(check, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violateLocked(check, format, args...)
}

func (r *run) violateLocked(check, format string, args ...any) {
	if len(r.violations) < 200 {
		r.violations = append(r.violations, violation{Check: check, Text: fmt.Sprintf(format, args...)})
	}
}

// saw marks a thing that happened, for the coverage table.
func (r *run) saw(what string) {
	r.mu.Lock()
	r.seen[what] = true
	r.mu.Unlock()
}

func (r *run) draw(tag uint64, keys ...uint64) uint64 {
	x := r.sc.Seed*0x9e3779b97f4a7c15 + tag
	for _, k := range keys {
		x = splitmix(x ^ k)
	}
	return splitmix(x)
}

func (r *run) unit(tag uint64, keys ...uint64) float64 {
	return float64(r.draw(tag, keys...)>>11) / (1 << 53)
}

func (r *run) since() time.Duration { return time.Since(r.start) }

// outcome is what a finished run reports.
type outcome struct {
	violations []violation
	seen       map[string]bool
	refused    string // the conflict New refused, correctly
	virtual    time.Duration
	summary    string
}

// deadlocked counts the bubbles whose goroutines outlived their scenario:
// they stay blocked for the life of the test binary (each is reported as
// a violation, or set aside as a known issue).
var deadlocked atomic.Int64

// runScenario runs sc in a bubble of its own; it must be called from a
// test goroutine (not inside a bubble).
func runScenario(tb testingT, sc Scenario) (out outcome) {
	var r *run
	func() {
		defer func() {
			if v := recover(); v != nil {
				msg := fmt.Sprint(v)
				if strings.Contains(msg, "deadlock") {
					deadlocked.Add(1)
					out.violations = append(out.violations, violation{Check: chkLeak,
						Text: "goroutines of the bubble outlived the scenario (" + msg + "):\n" + leakedStacks()})
					return
				}
				panic(v)
			}
		}()
		synctestTest(tb, func() { r = newRun(&sc); r.main() })
	}()
	if r != nil {
		r.mu.Lock()
		out.violations = append(r.violations, out.violations...)
		out.seen = r.seen
		out.summary = r.summary
		out.virtual = r.virtual
		if r.seen["refused"] {
			out.refused = sc.Conflict
		}
		r.mu.Unlock()
	}
	return out
}

func newRun(sc *Scenario) *run {
	return &run{sc: sc, abort: make(chan struct{}), msgs: map[string]*msgRec{}, groups: map[string][]*msgRec{},
		handles: map[string]*handleRec{}, seen: map[string]bool{}, triggers: map[string][]*pendingTrigger{},
		counts: map[string]int{}, calls: map[string]uint64{}, inBatch: map[int]int{}, receiving: map[int]int{}}
}

// main is the bubble's root: it sets up the queue, starts the first
// Consumer, drives the events, waits for every Run, and checks.
func (r *run) main() {
	sc := r.sc
	r.start = time.Now()
	r.srv = sqstest.NewServer()
	defer r.srv.Close()
	r.ctx, r.stopEv = context.WithCancel(context.Background())
	defer r.stopEv()
	r.fifo = sc.Queue == queueFIFO
	if err := r.createQueues(); err != nil {
		r.violate(chkNew, "creating the queues: %v", err)
		return
	}
	r.store = sqsconsumer.NewMemoryStore()

	p0, ok := r.newProc(0)
	if !ok {
		return
	}
	for _, e := range sc.Events {
		if e.Kind == evPause && e.Trigger == trBefore {
			r.mu.Lock()
			p0.paused, p0.pauseChanged, p0.pauses = true, time.Now(), p0.pauses+1
			r.mu.Unlock()
			p0.c.Pause()
			r.saw("event:pause-before-run")
			r.fireTrigger(trPaused)
		}
	}
	r.startSender()
	p0.start()
	var p1 *proc
	var p1mu sync.Mutex
	shutdownDone := make(chan struct{})
	var shutdownOnce sync.Once
	var shutdownAt time.Time
	fire := func(e Event) {
		switch {
		case e.Trigger == trShutdown && e.Kind == evPause:
			r.pauseLate(p0)
			return
		case e.Trigger == trShutdown && e.Kind == evResume:
			r.resume(p0)
			return
		}
		switch e.Kind {
		case evPause:
			r.pause(p0)
		case evResume:
			r.resume(p0)
		case evStart2:
			p1mu.Lock()
			defer p1mu.Unlock()
			if p1 != nil || r.stopped(p0) {
				return
			}
			p, ok := r.newProc(1)
			if !ok {
				return
			}
			p1 = p
			p.start()
			r.saw("event:second-consumer")
		case evStop2:
			p1mu.Lock()
			defer p1mu.Unlock()
			if p1 != nil {
				r.stop(p1)
			}
		case evShutdown:
			shutdownOnce.Do(func() {
				r.describeShutdown(p0)
				shutdownAt = time.Now()
				r.stop(p0)
				r.fireTrigger(trShutdown)
				if !sc.has(evStop2) {
					p1mu.Lock()
					if p1 != nil {
						r.stop(p1)
					}
					p1mu.Unlock()
				}
				close(shutdownDone)
			})
		}
	}
	for _, e := range sc.Events {
		switch e.Trigger {
		case trBefore:
		case trTime:
			r.after(e.At.D(), func() { fire(e) })
		default:
			r.onTrigger(e, func() { r.after(e.At.D(), func() { fire(e) }) })
		}
	}
	// A shutdown whose trigger never comes happens at 5 minutes.
	r.after(5*time.Minute, func() { fire(Event{Kind: evShutdown}) })
	<-shutdownDone
	r.waitReturn(p0)
	// The Pauses and Resumes due after the shutdown began come, even
	// after Run returned.
	for _, e := range sc.Events {
		if e.Trigger == trShutdown {
			if d := time.Until(shutdownAt.Add(e.At.D())); d > 0 {
				time.Sleep(d + time.Millisecond)
			}
		}
	}
	// The second Consumer stops at its own event (or at the shutdown);
	// one started after its stop event went by stops now.
	for _, e := range sc.Events {
		if e.Kind == evStop2 {
			if d := e.At.D() - r.since(); d > 0 {
				time.Sleep(d)
			}
		}
	}
	p1mu.Lock()
	q := p1
	p1mu.Unlock()
	if q != nil {
		r.stop(q)
		r.waitReturn(q)
	}
	r.stopEv()
	r.wg.Wait()
	r.finalChecks()
	r.summarize()
	// Anything a Run started and did not join shows as a deadlock of the
	// bubble once this returns (runScenario reports it).
}

// after runs f at d from now on a goroutine of the driver's, unless the
// run ends first.
func (r *run) after(d time.Duration, f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			f()
		case <-r.ctx.Done():
		}
	}()
}

// onTrigger calls f when process 0's trigger count reaches e.N.
func (r *run) onTrigger(e Event, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts[e.Trigger] >= e.N {
		go f()
		return
	}
	r.triggers[e.Trigger] = append(r.triggers[e.Trigger], &pendingTrigger{e: e, n: e.N, fire: f})
}

// fireTrigger counts one trigger of process 0 and fires the events it
// reaches.
func (r *run) fireTrigger(trigger string) {
	r.mu.Lock()
	r.counts[trigger]++
	n := r.counts[trigger]
	var due []*pendingTrigger
	kept := r.triggers[trigger][:0]
	for _, t := range r.triggers[trigger] {
		if t.n <= n {
			due = append(due, t)
		} else {
			kept = append(kept, t)
		}
	}
	r.triggers[trigger] = kept
	r.mu.Unlock()
	for _, t := range due {
		t.fire()
	}
}

func (r *run) stopped(p *proc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return p.cancelled || p.returned
}

// describeShutdown notes what the shutdown meets, for the coverage table.
func (r *run) describeShutdown(p *proc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.paused {
		r.seen["shutdown:while-paused"] = true
	}
	running := 0
	for _, n := range p.inner {
		running += n
	}
	if running > 0 {
		r.seen["shutdown:handlers-running"] = true
	}
	if r.inBatch[p.id] > 0 {
		r.seen["shutdown:during-batch"] = true
	}
	if r.receiving[p.id] > 0 {
		r.seen["shutdown:during-receive"] = true
	}
}

func (r *run) pause(p *proc) {
	r.mu.Lock()
	if p.cancelled || p.returned {
		r.mu.Unlock()
		return
	}
	p.paused, p.pauseChanged = true, time.Now()
	p.pauses++
	r.mu.Unlock()
	r.saw("event:pause")
	p.c.Pause()
	if p.id == 0 {
		r.fireTrigger(trPaused)
	}
}

// pauseLate is a Pause after the shutdown began: during the drain, or
// after Run returned.
func (r *run) pauseLate(p *proc) {
	r.mu.Lock()
	p.paused, p.pauseChanged = true, time.Now()
	p.pauses++
	returned := p.returned
	r.mu.Unlock()
	if returned {
		r.saw("event:pause-after-run")
	} else {
		r.saw("event:pause-during-drain")
	}
	p.c.Pause()
}

func (r *run) resume(p *proc) {
	r.mu.Lock()
	p.paused, p.pauseChanged = false, time.Now()
	r.mu.Unlock()
	r.saw("event:resume")
	p.c.Resume()
}

func (r *run) stop(p *proc) {
	r.mu.Lock()
	if p.cancelled {
		r.mu.Unlock()
		return
	}
	p.cancelled, p.cancelAt = true, time.Now()
	r.mu.Unlock()
	p.cancel()
}

// waitReturn waits for p's Run to return, within its bound and a margin;
// past that it reports the overrun and unsticks what it can (handlers,
// the server's long polls).
func (r *run) waitReturn(p *proc) {
	bound := r.returnBound()
	t := time.NewTimer(bound + 2*time.Minute)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	r.mu.Lock()
	since := time.Since(p.cancelAt)
	r.mu.Unlock()
	r.violate(chkReturn, "%s: Run had not returned %v after its context was cancelled (bound %v)\n%s", p.name(), since, bound, r.holdingStory(p))
	select {
	case <-r.abort:
	default:
		close(r.abort)
	}
	r.srv.Close()
	t2 := time.NewTimer(30 * time.Minute)
	defer t2.Stop()
	select {
	case <-p.done:
	case <-t2.C:
		r.violate(chkReturn, "%s: Run never returned, even after the server closed and every handler was released", p.name())
	}
}

// returnBound is how long after its context is cancelled Run may take:
// the shutdown timeout, the call timeout after it, and the time a handler
// ignores its cancelled context.
func (r *run) returnBound() time.Duration {
	ignore := time.Duration(0)
	if r.sc.Behaviour.Weights[bIgnore] > 0 {
		ignore = r.sc.Behaviour.Ignore.D()
	}
	return r.sc.shutdownTimeout() + 5*time.Second + ignore
}

// createQueues makes the queue (and its dead-letter queue).
func (r *run) createQueues() error {
	sc := r.sc
	name := "q"
	if r.fifo {
		name = "q.fifo"
	}
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(sc.QueueVisibility)}
	if sc.QueueWait > 0 {
		attrs["ReceiveMessageWaitTimeSeconds"] = strconv.Itoa(sc.QueueWait)
	}
	if d := sc.Options.DLQ; d != nil && d.Kind != "source" {
		dname := "dlq"
		if r.fifo {
			dname = "dlq.fifo"
		}
		u, err := r.srv.CreateQueue(dname, nil)
		if err != nil {
			return err
		}
		r.dlqURL = u
		if d.Kind == "redrive" {
			arn := fmt.Sprintf("arn:aws:sqs:%s:%s:%s", sqstest.DefaultRegion, sqstest.DefaultAccountID, dname)
			attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, arn, d.MaxReceive)
		}
	}
	u, err := r.srv.CreateQueue(name, attrs)
	r.url = u
	return err
}

// startSender sends the messages at their arrival times.
func (r *run) startSender() {
	sc := r.sc
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		groupPos := map[string]int{}
		for i := range sc.Messages {
			if sc.Spread > 0 && i > 0 {
				at := time.Duration(r.unit(tagWork, 1<<40, uint64(i)) * float64(sc.Spread.D()))
				if d := at - r.since(); d > 0 {
					t := time.NewTimer(d)
					select {
					case <-t.C:
					case <-r.ctx.Done():
						t.Stop()
						return
					}
				}
			}
			body := r.body(i)
			if sc.SameBody > 0 && i > 0 && int(r.draw(tagWork, 1<<41, uint64(i))%uint64(sc.Messages)) < sc.SameBody {
				// A body of an earlier message: a duplicate for an idempotency key by body.
				body = r.body(int(r.draw(tagWork, 1<<42, uint64(i)) % uint64(i)))
			}
			var opts []sqstest.SendOption
			group := ""
			if sc.Groups > 0 {
				group = fmt.Sprintf("g%d", r.draw(tagWork, 1<<43, uint64(i))%uint64(sc.Groups))
				opts = append(opts, sqstest.WithGroupID(group))
			}
			if r.fifo {
				opts = append(opts, sqstest.WithDeduplicationID(strconv.Itoa(i)))
			}
			id, err := r.srv.Send(r.url, body, opts...)
			if err != nil {
				r.violate(chkNew, "sending message %d: %v", i, err)
				return
			}
			m := &msgRec{idx: i, id: id, body: body, group: group}
			r.mu.Lock()
			if group != "" {
				m.groupPos = groupPos[group]
				groupPos[group]++
				r.groups[group] = append(r.groups[group], m)
			}
			r.msgs[id] = m
			r.byIdx = append(r.byIdx, m)
			r.mu.Unlock()
		}
	}()
}

// body is message i's body: "m" and its index, padded to the scenario's
// body size (BigShare percent of them to BigBody).
func (r *run) body(i int) string {
	b := fmt.Sprintf("m%03d", i)
	size := r.sc.BodySize
	if r.sc.BigShare > 0 && int(r.draw(tagBody, uint64(i))%100) < r.sc.BigShare {
		size = r.sc.BigBody
	}
	if r.sc.Idempotent == "body" {
		size = min(size, sqsconsumer.MaxIdempotencyKeyLen) // the key is the body
	}
	if size > len(b) {
		b += strings.Repeat(".", size-len(b))
	}
	return b
}

// cheapCalls spares the calls the work the in-memory SQS does not check:
// no signature and no payload hash (the calls and answers are the same).
func cheapCalls(o *sqs.Options) {
	o.Credentials = aws.AnonymousCredentials{}
	o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
}

// newProc makes process id's Consumer; false when New refused (the
// outcome is recorded: a refused conflict, or a violation).
func (r *run) newProc(id int) (*proc, bool) {
	sc := r.sc
	p := &proc{r: r, id: id, done: make(chan struct{}), outer: map[string]int{}, inner: map[string]int{},
		groupRunning: map[string]int{}, results: map[string][]result{}, calls: map[string]int{},
		ownReleases: map[string][]time.Duration{}, startedAt: map[string]time.Time{}, outcomeAt: map[string]time.Time{}, drainedAt: map[string]uint64{}}
	if sc.Pool > 0 {
		p.pool = &connPool{size: sc.Pool}
	}
	client := r.srv.Client(cheapCalls, func(o *sqs.Options) {
		hc := &http.Client{Transport: &wire{r: r, p: p, base: r.srv.Transport()}}
		o.HTTPClient = hc
		if sc.Pool > 0 && sc.PoolKnown {
			o.HTTPClient = pooledClient{Client: hc, idle: sc.Pool}
		}
		if !sc.SDKRetries {
			o.Retryer = aws.NopRetryer{}
		}
	})
	h, opts, err := r.consumerConfig(p)
	if err == nil && sc.Protect > 0 {
		p.protector, err = r.newProtector(p)
		opts = append(opts, sqsconsumer.WithScaleInProtection(p.protector))
	}
	var c *sqsconsumer.Consumer
	if err == nil {
		c, err = sqsconsumer.New(client, r.url, h, opts...)
	}
	if sc.Conflict != "" && (!conflicts[sc.Conflict].atRun || err != nil) {
		r.judgeConflict(err)
		return nil, false
	}
	if err != nil {
		r.violate(chkNew, "New refused a scenario drawn valid: %v", err)
		return nil, false
	}
	p.c = c
	p.pollersBound = c.Settings().Pollers
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	return p, true
}

// judgeConflict checks the answer to a conflict drawn on purpose: New's
// (where, "New"), or Run's for one only the queue can tell ("Run").
func (r *run) judgeConflict(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.judgeConflictLocked("New", err)
}

func (r *run) judgeConflictLocked(where string, err error) {
	names := conflicts[r.sc.Conflict].names
	switch {
	case err == nil:
		r.seen["conflict-accepted:"+r.sc.Conflict] = true
		if *strictConflicts {
			r.violateLocked(chkConflict, "%s accepted the conflicting options %s and %s", where, names[0], names[1])
		}
	case !errors.Is(err, sqsconsumer.ErrInvalidOption):
		r.violateLocked(chkConflict, "%s refused %s with %v, which does not wrap ErrInvalidOption", where, r.sc.Conflict, err)
	case !strings.Contains(err.Error(), names[0]) || !strings.Contains(err.Error(), names[1]):
		r.violateLocked(chkConflict, "%s refused %s but its error does not name both %s and %s: %v", where, r.sc.Conflict, names[0], names[1], err)
	default:
		r.seen["refused"] = true
		r.seen["refused-at:"+where] = true
	}
}

// start runs p's Consumer; when Run returns, the checks that judge the
// moment of its return run.
func (p *proc) start() {
	r := p.r
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	r.mu.Lock()
	p.started = time.Now()
	r.mu.Unlock()
	r.wg.Add(1)
	go r.watchHealth(p)
	go func() {
		err := p.c.Run(ctx)
		r.mu.Lock()
		p.returned, p.retTime, p.runErr = true, time.Now(), err
		r.mu.Unlock()
		r.checkReturn(p)
		r.checkProtectionAfter(p)
		close(p.done)
	}()
}

// consumerConfig builds process p's handler and options from the scenario.
func (r *run) consumerConfig(p *proc) (sqsconsumer.Handler, []sqsconsumer.Option, error) {
	sc := r.sc
	var h sqsconsumer.Handler = sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		return r.handleOne(p, ctx, m)
	})
	if sc.Handler == "batch" {
		var err error
		h, err = sqsconsumer.Batch(func(ctx context.Context, msgs []*sqsconsumer.Message) error {
			return r.handleBatch(p, ctx, msgs)
		}, sc.BatchSize, sc.BatchWindow.D())
		if err != nil {
			return nil, nil, err
		}
	}
	opts := []sqsconsumer.Option{
		sqsconsumer.WithObserver(sqsconsumer.ObserverFunc(func(e sqsconsumer.Event) { r.observe(p, e) })),
		sqsconsumer.WithLogger(slog.New(&logCapture{r: r, p: p})),
	}
	var mws []sqsconsumer.Middleware
	if sc.Middleware || sc.Idempotent != "" {
		mws = append(mws, r.recorder(p))
	}
	if sc.Idempotent != "" {
		var iopts []sqsconsumer.IdempotencyOption
		if sc.Idempotent == "body" {
			iopts = append(iopts, sqsconsumer.WithIdempotencyKey(func(m *sqsconsumer.Message) (string, error) { return m.Body, nil }))
		}
		if io := sc.Idem; io != nil {
			if io.TTL > 0 {
				iopts = append(iopts, sqsconsumer.WithIdempotencyTTL(io.TTL.D()))
			}
			if io.Retry > 0 {
				iopts = append(iopts, sqsconsumer.WithInProgressRetry(io.Retry.D()))
			}
			if io.Validate {
				iopts = append(iopts, sqsconsumer.WithPayloadValidation())
			}
			if hook := io.Hook; hook != "" {
				iopts = append(iopts, sqsconsumer.WithDuplicateHook(func(ctx context.Context, m *sqsconsumer.Message, result []byte) error {
					r.saw("idempotency:duplicate-hook-" + hook)
					if hook == "fail" {
						return errDuplicate
					}
					return nil
				}))
			}
		}
		mw, err := sqsconsumer.NewIdempotent(r.store, iopts...)
		if err != nil {
			return nil, nil, err
		}
		mws = append(mws, mw)
	}
	if sc.Middleware {
		mws = append(mws, func(next sqsconsumer.Handler) sqsconsumer.Handler {
			return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
				return next.HandleMessage(ctx, m)
			})
		})
	}
	if len(mws) > 0 {
		opts = append(opts, sqsconsumer.WithMiddleware(mws...))
	}
	named := r.scenarioOptions(p)
	if sc.Bundle == 0 {
		for _, n := range named {
			opts = append(opts, n.opt)
		}
		return h, opts, nil
	}
	// A platform's bundle holds the first half of the options, each after
	// another value of its own (the later wins), and other values of the
	// team's options, which the team's, after the bundle, override.
	k := len(named) / 2
	var platform []sqsconsumer.Option
	for _, n := range named[k:] {
		if n.decoy != nil {
			platform = append(platform, n.decoy)
		}
	}
	for _, n := range named[:k] {
		if n.decoy != nil {
			platform = append(platform, n.decoy)
		}
		platform = append(platform, n.opt)
	}
	bundle := sqsconsumer.Options(platform...)
	if sc.Bundle == 2 {
		// Nested, one level deeper, a nil and an empty bundle among them.
		half := len(platform) / 2
		bundle = sqsconsumer.Options(sqsconsumer.Options(platform[:half]...), nil, sqsconsumer.Options(), sqsconsumer.Options(platform[half:]...))
	}
	opts = append(opts, bundle)
	for _, n := range named[k:] {
		opts = append(opts, n.opt)
	}
	return h, opts, nil
}

var errDuplicate = errors.New("the explorer's duplicate hook fails")

// namedOption is one of the scenario's options, and, for one that sets a
// value, the same option with another value in its range (decoy), which
// a bundle gives before it.
type namedOption struct {
	name       string
	opt, decoy sqsconsumer.Option
}

// scenarioOptions are the Consumer's options the scenario draws, in a
// fixed order.
func (r *run) scenarioOptions(p *proc) []namedOption {
	sc := r.sc
	o := sc.Options
	var out []namedOption
	add := func(name string, opt, decoy sqsconsumer.Option) {
		out = append(out, namedOption{name, opt, decoy})
	}
	if v := o.Concurrency; v != nil {
		add("Concurrency", sqsconsumer.WithConcurrency(*v), sqsconsumer.WithConcurrency(*v%7+1))
	}
	if v := o.ReceiveSize; v != nil {
		add("ReceiveSize", sqsconsumer.WithBatchSize(*v), sqsconsumer.WithBatchSize(*v%10+1))
	}
	if v := o.ReadAhead; v != nil {
		add("ReadAhead", sqsconsumer.WithMaxReadAhead(*v), sqsconsumer.WithMaxReadAhead(*v+3))
	}
	if v := o.Pollers; v != nil {
		add("Pollers", sqsconsumer.WithPollers(*v), sqsconsumer.WithPollers(*v+1))
	}
	if v := o.Visibility; v != nil {
		add("Visibility", sqsconsumer.WithVisibilityTimeout(v.D()), sqsconsumer.WithVisibilityTimeout(v.D()+7*time.Second))
	}
	if v := o.Heartbeat; v != nil {
		add("Heartbeat", sqsconsumer.WithHeartbeatInterval(v.D()), sqsconsumer.WithHeartbeatInterval(v.D()+time.Second))
	}
	if v := o.MaxLease; v != nil {
		add("MaxLease", sqsconsumer.WithMaxLeaseDuration(v.D()), sqsconsumer.WithMaxLeaseDuration(v.D()+time.Hour))
	}
	if v := o.CeilingGrace; v != nil {
		add("CeilingGrace", sqsconsumer.WithCeilingGrace(v.D()), sqsconsumer.WithCeilingGrace(v.D()/2))
	}
	if v := o.Adaptive; v != nil {
		add("Adaptive", sqsconsumer.WithAdaptiveVisibility(v[0].D(), v[1].D()), sqsconsumer.WithAdaptiveVisibility(v[0].D()+time.Second, v[1].D()+time.Minute))
	}
	if v := o.Breaker; v != nil {
		b := sqsconsumer.Breaker{Failures: v.Failures, Ratio: v.Ratio, Window: v.Window, CallFailures: v.CallFailures, Pause: v.Pause.D(), MaxPause: v.MaxPause.D()}
		if v.Probe {
			var n atomic.Uint64
			b.Probe = func(ctx context.Context) error {
				k := n.Add(1)
				r.saw("breaker:probe")
				if r.unit(tagProbe, uint64(p.id), k) < 0.5 {
					return errors.New("the explorer's probe fails")
				}
				return nil
			}
		}
		add("Breaker", sqsconsumer.WithBreaker(b), sqsconsumer.WithBreaker(sqsconsumer.Breaker{Failures: 1, Pause: time.Hour}))
	}
	if v := o.Rate; v != nil {
		add("Rate", sqsconsumer.WithRateLimit(v.Limit, v.Burst), sqsconsumer.WithRateLimit(v.Limit+1, v.Burst+1))
	}
	if v := o.GroupLimit; v != nil {
		add("GroupLimit", sqsconsumer.WithGroupLimit(*v), sqsconsumer.WithGroupLimit(*v+1))
	}
	if v := o.FairDispatch; v != nil {
		add("FairDispatch", sqsconsumer.WithFairDispatch(*v), nil)
	}
	if v := o.Backoff; v != nil {
		add("Backoff", sqsconsumer.WithBackoff(backoffFunc(*v)), sqsconsumer.WithBackoff(func(int) time.Duration { return 11 * time.Hour }))
	}
	if v := o.DLQ; v != nil {
		switch v.Kind {
		case "option":
			add("DLQ", sqsconsumer.WithDeadLetterQueue(r.dlqURL), sqsconsumer.WithDeadLetterQueue(r.dlqURL+"-decoy"))
		case "source":
			add("DLQ", sqsconsumer.WithDeadLetterQueue(r.url), nil)
		case "source-by-arn":
			add("DLQ", sqsconsumer.WithDeadLetterQueue(elsewhere(r.url)), nil)
		}
	}
	if v := o.Scaling; v != nil {
		if v.Interval > 0 || v.Both {
			add("Scaling", sqsconsumer.WithScaling(sqsconsumer.ScalingPolicy{Target: v.Target.D(), Interval: v.Interval.D()}), nil)
		}
		if v.Interval == 0 || v.Both {
			add("ScalingTarget", sqsconsumer.WithScalingTarget(v.Target.D()), sqsconsumer.WithScalingTarget(v.Target.D()+time.Minute))
		}
	}
	if v := o.HealthLimits; v != nil {
		add("HealthLimits", sqsconsumer.WithHealthLimits(v[0].D(), v[1].D()), sqsconsumer.WithHealthLimits(time.Hour, time.Hour))
	}
	if v := o.StartupLimit; v != nil {
		add("StartupLimit", sqsconsumer.WithStartupLimit(v.D()), sqsconsumer.WithStartupLimit(v.D()+time.Minute))
	}
	if v := o.HandlerTimeout; v != nil {
		add("HandlerTimeout", sqsconsumer.WithHandlerTimeout(v.D()), sqsconsumer.WithHandlerTimeout(v.D()+time.Second))
	}
	if v := o.ShutdownTimeout; v != nil {
		add("ShutdownTimeout", sqsconsumer.WithShutdownTimeout(v.D()), sqsconsumer.WithShutdownTimeout(v.D()+3*time.Second))
	}
	if v := o.WaitTime; v != nil {
		add("WaitTime", sqsconsumer.WithWaitTime(v.D()), sqsconsumer.WithWaitTime(20*time.Second-v.D()))
	}
	if v := o.CancelIdlePolls; v != nil && *v {
		add("CancelIdlePolls", sqsconsumer.WithCancelIdlePollsAtShutdown(), nil)
	}
	if v := o.PanicPolicy; v != nil {
		kind := *v
		add("PanicPolicy", sqsconsumer.WithPanicPolicy(func(ctx context.Context, m *sqsconsumer.Message, pe *sqsconsumer.PanicError) error {
			r.saw("panic-policy:" + kind)
			switch kind {
			case "permanent":
				return sqsconsumer.Permanent(pe)
			case "retry":
				return sqsconsumer.RetryAfter(pe, time.Second)
			}
			return pe
		}), sqsconsumer.WithPanicPolicy(func(context.Context, *sqsconsumer.Message, *sqsconsumer.PanicError) error { return nil }))
	}
	if v := o.RequireDLQ; v != nil && *v {
		add("RequireDLQ", sqsconsumer.WithRequireDeadLetterQueue(), nil)
	}
	if v := o.AdaptiveConc; v != nil {
		add("AdaptiveConc", sqsconsumer.WithAdaptiveConcurrency(sqsconsumer.AdaptiveConcurrency{Floor: v[0], Initial: v[1]}),
			sqsconsumer.WithAdaptiveConcurrency(sqsconsumer.AdaptiveConcurrency{Floor: v[0] + 1, Initial: v[1] + 2}))
	}
	if v := o.MaxBytes; v != nil {
		add("MaxBytes", sqsconsumer.WithMaxBytes(*v), sqsconsumer.WithMaxBytes(*v*3+1))
	}
	return out
}

// elsewhere is queue URL u under another host: the same queue to the
// in-memory SQS (it routes by account and name), another to a comparison
// of URLs.
func elsewhere(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return u
	}
	pu.Host = "sqs.elsewhere.example"
	return pu.String()
}

func backoffFunc(kind string) func(int) time.Duration {
	switch kind {
	case "fixed":
		return func(int) time.Duration { return 3 * time.Second }
	case "linear":
		return func(n int) time.Duration { return time.Duration(n) * 2 * time.Second }
	case "zero":
		return func(int) time.Duration { return 0 }
	default: // "long"
		return func(int) time.Duration { return 5 * time.Minute }
	}
}

// observe records one event of process p.
func (r *run) observe(p *proc, e sqsconsumer.Event) {
	seq := r.seq.Add(1)
	o := obs{seq: seq, kind: e.Kind, msg: e.MessageID, at: e.Time, vis: e.Visibility, err: e.Err}
	if e.Message != nil && e.Message.Lease != nil {
		o.handle = e.Message.Lease.ReceiptHandle()
	}
	r.mu.Lock()
	p.events = append(p.events, o)
	switch e.Kind {
	case sqsconsumer.EventAdopted, sqsconsumer.EventLeaseLost, sqsconsumer.EventLeaseExpired, sqsconsumer.EventCeilingReached,
		sqsconsumer.EventDeadLettered, sqsconsumer.EventRenewalFailed:
		r.seen["event-seen:"+e.Kind.String()] = true
	}
	switch e.Kind {
	case sqsconsumer.EventReceived:
		if p.held++; p.held == 1 {
			p.heldSince = e.Time
		}
		// A new delivery: an outcome of an earlier one is no longer
		// waiting for its settling call (a handler that released its own
		// lease reports the release before its outcome).
		delete(p.outcomeAt, e.MessageID)
	case sqsconsumer.EventDone:
		p.held--
	}
	switch e.Kind {
	case sqsconsumer.EventStarted:
		p.startedAt[e.MessageID] = e.Time
	case sqsconsumer.EventRenewalFailed:
		// A renewal that timed out on a handle no fault touched: the call
		// waited in the Consumer, not on the wire.
		if errors.Is(e.Err, context.DeadlineExceeded) {
			if h := r.handles[o.handle]; h != nil && !h.faulted {
				r.seen["symptom:calls-stalled"] = true
			}
		}
	case sqsconsumer.EventReleased, sqsconsumer.EventDeleted:
		// A settling call answered long after the handler returned, on a
		// handle no fault touched: it waited in the Consumer.
		if t, ok := p.outcomeAt[e.MessageID]; ok && e.Time.Sub(t) > 2*time.Second+4*r.sc.RTT.D() {
			if h := r.handles[o.handle]; h != nil && !h.faulted {
				r.seen["symptom:calls-stalled"] = true
			}
		}
		delete(p.outcomeAt, e.MessageID)
	case sqsconsumer.EventSucceeded, sqsconsumer.EventFailed:
		p.outcomeAt[e.MessageID] = e.Time
		delete(p.startedAt, e.MessageID)
		if e.Kind == sqsconsumer.EventFailed && errors.Is(e.Err, context.DeadlineExceeded) && r.sc.Handler == "batch" {
			// A Batch member whose handler timeout ran out while it
			// gathered: a failure no handler of the explorer's saw.
			p.downstream = append(p.downstream, e.Time)
		}
	}
	r.mu.Unlock()
}

// logCapture keeps the lines a Consumer logs at Info and above.
type logCapture struct {
	r     *run
	p     *proc
	attrs []slog.Attr
}

func (l *logCapture) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo
}

func (l *logCapture) Handle(_ context.Context, rec slog.Record) error {
	seq := l.r.seq.Add(1)
	attrs := map[string]string{}
	for _, a := range l.attrs {
		attrs[a.Key] = a.Value.String()
	}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	if len(l.p.logs) < 5000 {
		l.p.logs = append(l.p.logs, logRec{seq: seq, at: rec.Time, msg: rec.Message, attrs: attrs})
	}
	if strings.HasPrefix(rec.Message, "sqsconsumer: circuit breaker open") {
		l.r.checkBreakerOpenLocked(l.p, attrs["reason"], rec.Time)
	}
	return nil
}

func (l *logCapture) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCapture{r: l.r, p: l.p, attrs: append(slices.Clone(l.attrs), as...)}
}

func (l *logCapture) WithGroup(string) slog.Handler { return l }

// callSent counts a call of p as it reaches the wire (retry: an attempt
// the SDK retries) and returns its number among p's calls of the action.
func (r *run) callSent(p *proc, action string, retry bool) uint64 {
	now := time.Now()
	limit := 0
	if action == "ReceiveMessage" && r.sc.Pool > 0 {
		// The limit on calls in flight moves: sample it.
		limit = p.c.Stats().MaxCallsInFlight
	}
	r.mu.Lock()
	p.calls[action]++
	key := fmt.Sprintf("%d/%s", p.id, action)
	r.calls[key]++
	n := r.calls[key]
	if p.firstCall.IsZero() {
		p.firstCall = now
	}
	if action == "ReceiveMessage" {
		p.receivesSent++
		p.lastReceive = now
		r.receiving[p.id]++
		if !retry {
			p.receiveTimes = append(p.receiveTimes, now)
		}
		p.recvInFlight = append(p.recvInFlight, now)
		r.checkCallsLocked(p, now, limit)
	}
	r.mu.Unlock()
	if action == "ReceiveMessage" && p.id == 0 {
		r.fireTrigger(trReceive)
	}
	return n
}

// receiveEnded takes the receive sent at sent out of those in flight.
func (r *run) receiveEnded(p *proc, sent time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.IndexFunc(p.recvInFlight, func(t time.Time) bool { return t.Equal(sent) }); i >= 0 {
		p.recvInFlight = slices.Delete(p.recvInFlight, i, i+1)
	}
}

// checkCallsLocked: the receives p has in flight as it sends one (its
// pollers busy with receives) stay within its pollers (Settings().Pollers,
// the bound on its calls in flight), and, while the limit on calls in
// flight follows the HTTP client's pool, within the highest limit since
// the oldest of them was sent (a lowered limit idles the pollers above it
// as their calls end).
func (r *run) checkCallsLocked(p *proc, now time.Time, limit int) {
	n := len(p.recvInFlight)
	if p.pollersBound > 0 && n > p.pollersBound {
		r.violateLocked(chkCalls, "%s: %d receives in flight at %v, more than its %d pollers (Settings().Pollers)", p.name(), n, r.at(now), p.pollersBound)
	}
	if limit == 0 {
		return
	}
	p.limitSamples = append(p.limitSamples, limitSample{now, limit})
	oldest := p.recvInFlight[0]
	most := 0
	for i := len(p.limitSamples) - 1; i >= 0 && !p.limitSamples[i].at.Before(oldest); i-- {
		most = max(most, p.limitSamples[i].limit)
	}
	if n > most {
		r.violateLocked(chkCalls, "%s: %d receives in flight at %v, above every limit on calls in flight (Stats.MaxCallsInFlight) since the oldest was sent at %v (at most %d)",
			p.name(), n, r.at(now), r.at(oldest), most)
	}
	if len(p.limitSamples) > 4096 {
		p.limitSamples = slices.Delete(p.limitSamples, 0, 2048)
	}
}

// firstContact is the error class the wire answers p's call with now
// (nil: none): the scenario's first-contact error, for process 0, for
// good when it cannot succeed, else until it heals.
func (r *run) firstContact(p *proc, action string) *firstContactClass {
	if p.id != 0 || r.sc.FirstContact == "" {
		return nil
	}
	c := firstContactOf(r.sc.FirstContact)
	if c == nil || !c.fatal && r.since() >= r.sc.Heal.D() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p.firstContactFails++
	p.faultTimes = append(p.faultTimes, time.Now())
	// The call that decides: a receive, or the read of the queue's
	// attributes, unless access to them alone is denied while
	// WithVisibilityTimeout makes them optional (receiving needs no
	// right to them: the first receive decides).
	if p.firstDeciding.IsZero() && (action == "ReceiveMessage" || action == "GetQueueAttributes" && !(c.name == "access-denied" && r.sc.Options.Visibility != nil)) {
		p.firstDeciding = time.Now()
	}
	if c.fatal {
		p.permanentFault = true
	}
	r.seen["first-contact:"+c.name] = true
	return c
}

// drawFault decides whether call n of action by p is faulted, and how.
func (r *run) drawFault(p *proc, action string, n uint64) *faultClass {
	if r.sc.FaultRate == 0 {
		return nil
	}
	a := hashString(action)
	if r.unit(tagFault, uint64(p.id), a, n) >= r.sc.FaultRate {
		return nil
	}
	total := 0
	for i := range faultClasses {
		if faultClasses[i].applies(action) {
			total += faultClasses[i].weight
		}
	}
	pick := int(r.draw(tagFaultClass, uint64(p.id), a, n) % uint64(total))
	for i := range faultClasses {
		c := &faultClasses[i]
		if !c.applies(action) {
			continue
		}
		if pick < c.weight {
			return c
		}
		pick -= c.weight
	}
	return nil
}

// noteFault records an injected fault: evidence for the handles the call
// named, and for Health and Run's error.
func (r *run) noteFault(p *proc, action string, fc *faultClass, entries []handleEntry) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen["fault:"+fc.name] = true
	p.faultTimes = append(p.faultTimes, now)
	if fc.permanent && (action == "ReceiveMessage" || action == "GetQueueAttributes") {
		p.permanentFault = true
		if fc.permanent && action == "ReceiveMessage" {
			p.permanentAt = now
		}
	}
	if isHandleCall(action) && (fc.kind == fWhole || fc.kind == fDelay || fc.kind == fLost) {
		p.handleCallFaults = append(p.handleCallFaults, now)
	}
	for _, e := range entries {
		if h := r.handles[e.ReceiptHandle]; h != nil {
			h.faulted = true
		}
	}
}

// callAnswered records the answer of one call of p (delivered: it reached
// the process; resp nil: none came).
func (r *run) callAnswered(p *proc, action string, sent uint64, entries []handleEntry, single singleRequest, resp *http.Response, rbody []byte, delivered bool) {
	answered := r.seq.Add(1)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if action == "ReceiveMessage" {
		r.receiving[p.id]--
		what := "no answer"
		if resp != nil {
			what = fmt.Sprintf("status %d", resp.StatusCode)
		}
		if !delivered {
			what += " (not delivered)"
		}
		p.recvLog = append(p.recvLog, fmt.Sprintf("%v: %s", r.at(now), what))
		if len(p.recvLog) > 6 {
			p.recvLog = p.recvLog[1:]
		}
	}
	if resp == nil {
		return
	}
	ok := resp.StatusCode == http.StatusOK
	if ok && delivered && action == "GetQueueAttributes" && single.QueueURL == r.url && slices.Contains(single.AttributeNames, "VisibilityTimeout") {
		p.queueRead = true
	}
	if ok && delivered {
		// The calls whose answers the Consumer counts for Health: Run's
		// read of the source queue's attributes, receives, visibility
		// changes, deletes (not the dead-letter queue's check, a move,
		// nor a reading of the queue's counts).
		if p.firstAnswer.IsZero() && action != "SendMessage" && (action != "GetQueueAttributes" || single.QueueURL == r.url && slices.Contains(single.AttributeNames, "VisibilityTimeout")) {
			p.firstAnswer = now
		}
		switch action {
		case "ReceiveMessage", "DeleteMessageBatch", "DeleteMessage", "ChangeMessageVisibilityBatch", "ChangeMessageVisibility":
			p.lastAnswer = now
		}
	}
	switch action {
	case "ReceiveMessage":
		if !ok {
			return
		}
		var res receiveResult
		if json.Unmarshal(rbody, &res) != nil {
			return
		}
		for _, m := range res.Messages {
			r.handles[m.ReceiptHandle] = &handleRec{handle: m.ReceiptHandle, msg: m.MessageID, proc: p.id, at: now, seq: answered, lost: !delivered}
			if delivered {
				// What the byte bound counts of it: body, receipt handle,
				// ID, and system attributes.
				n := int64(len(m.Body) + len(m.ReceiptHandle) + len(m.MessageID))
				for k, v := range m.Attributes {
					n += int64(len(k) + len(v))
				}
				if p.minMsg == 0 || n < p.minMsg {
					p.minMsg = n
				}
				p.maxMsg = max(p.maxMsg, n)
			}
		}
	case "SendMessage":
		if ok && delivered {
			p.dlqSends = append(p.dlqSends, answered)
			p.dlqBodies = append(p.dlqBodies, single.MessageBody)
		}
	case "DeleteMessage", "ChangeMessageVisibility", "DeleteMessageBatch", "ChangeMessageVisibilityBatch":
		okIDs := map[string]bool{}
		if ok {
			if strings.HasSuffix(action, "Batch") {
				var res batchResult
				if json.Unmarshal(rbody, &res) == nil {
					for _, s := range res.Successful {
						okIDs[s.ID] = true
					}
				}
			} else {
				okIDs[""] = true
			}
		}
		for _, e := range entries {
			h := r.handles[e.ReceiptHandle]
			if h == nil {
				continue
			}
			if !delivered {
				h.faulted = true
			}
			c := &callRec{sent: sent, answered: answered, at: now, ok: okIDs[e.ID] && delivered}
			if e.Visibility != nil {
				c.timeout = time.Duration(*e.Visibility) * time.Second
			}
			if strings.HasPrefix(action, "Delete") {
				h.deletes = append(h.deletes, c)
			} else {
				h.changes = append(h.changes, c)
			}
		}
	}
}

// holdingStory is what p holds, for a report of a Run that did not return.
func (r *run) holdingStory(p *proc) string {
	st := p.c.Stats()
	h := p.c.Health()
	r.mu.Lock()
	defer r.mu.Unlock()
	var running []string
	for id, n := range p.inner {
		if n > 0 {
			running = append(running, id)
		}
	}
	sort.Strings(running)
	return fmt.Sprintf("    stats: running %d waiting %d asked %d; health %s %v; explorer's handlers running: %v", st.Running, st.Waiting, st.Asked, h.Status, h.Problems, running)
}

// summarize is what the run did, in a few lines (printed for a replay).
func (r *run) summarize() {
	msgs := r.srv.Messages(r.url)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.virtual = time.Since(r.start)
	var b strings.Builder
	deleted, moved, inflight := 0, 0, 0
	for _, m := range msgs {
		switch {
		case m.Deleted:
			deleted++
		case m.MovedToDLQ:
			moved++
		case m.InFlight:
			inflight++
		}
	}
	fmt.Fprintf(&b, "virtual %v; server: %d messages, %d deleted, %d moved by redrive, %d in flight; calls %v\n", r.virtual.Round(time.Millisecond), len(msgs), deleted, moved, inflight, r.srv.Calls())
	for _, p := range r.procs {
		kinds := map[string]int{}
		for _, e := range p.events {
			kinds[e.kind.String()]++
		}
		res := map[string]int{}
		for _, rs := range p.results {
			for _, x := range rs {
				res[x.kind]++
			}
		}
		fmt.Fprintf(&b, "  p%d: started %v cancelled %v returned %v err %v; events %v; outcomes %v; handlers %d batches %d\n",
			p.id, r.at(p.started), r.at(p.cancelAt), r.at(p.retTime), p.runErr, kinds, res, p.handlers, p.batches)
	}
	r.summary = b.String()
}
