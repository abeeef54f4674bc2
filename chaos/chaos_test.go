package chaos

// The scenarios run real processes (cmd/sqstest, chaos/worker) over real
// loopback sockets in real time: what they test — SIGKILL, SIGTERM, TCP
// resets — does not exist inside testing/synctest. They therefore wait on the
// wall clock, always in loops bounded in count and time, and assert on
// properties with slack of seconds, never on tight timings.

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/chaos/internal/wire"
	"github.com/sqskit/sqsconsumer/chaos/journal"
	"github.com/sqskit/sqsconsumer/chaos/proxy"
)

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite runs processes for about a minute; skipped with -short")
	}
	binaries(t) // build once, before any scenario's clock starts

	t.Run("crash", func(t *testing.T) {
		t.Parallel()
		cfg := crashCfg{n: 40, kills: 3, conc: 4, lease: 3 * time.Second, deadline: 40 * time.Second}
		if *longFlag {
			cfg.n, cfg.kills, cfg.deadline = 400, 12, 3*time.Minute
		}
		o := runCrash(t, cfg)
		vs, s := crashChecks(o)
		report1(t, "crash", false, s, vs)
		requireNone(t, vs)
	})
	t.Run("crash/control-delete-before-handler", func(t *testing.T) {
		t.Parallel()
		o := runCrash(t, crashCfg{n: 30, kills: 2, conc: 4, lease: 3 * time.Second, broken: "delete-before-handler", deadline: 8 * time.Second})
		vs, s := crashChecks(o)
		report1(t, "crash/control-delete-before-handler", true, s, vs)
		requireViolation(t, vs, "lost")
	})
	t.Run("crash/control-fail-after-record", func(t *testing.T) {
		t.Parallel()
		o := runCrash(t, crashCfg{n: 10, kills: 0, conc: 4, lease: 3 * time.Second, broken: "fail-after-record", deadline: 5 * time.Second})
		vs, s := crashChecks(o)
		report1(t, "crash/control-fail-after-record", true, s, vs)
		requireViolation(t, vs, "duplicates")
	})
	t.Run("crash/control-lease-longer-than-checked", func(t *testing.T) {
		t.Parallel()
		// The worker leases for 15 s; the check expects 3 s: what a
		// library that renewed past its lease, or leaked a receive's
		// longer visibility, would look like.
		o := runCrash(t, crashCfg{n: 30, kills: 1, conc: 4, lease: 15 * time.Second, checkLease: 3 * time.Second, deadline: 25 * time.Second})
		vs, s := crashChecks(o)
		report1(t, "crash/control-lease-longer-than-checked", true, s, vs)
		requireViolation(t, vs, "returns")
	})

	t.Run("stop", func(t *testing.T) {
		t.Parallel()
		o := runStop(t, stopCfg{})
		vs := checkStop(o)
		vs = append(vs, checkStderr(o)...)
		report1(t, "stop", false, stopSummary(o), vs)
		requireNone(t, vs)
	})
	t.Run("stop/control-ignore-cancel", func(t *testing.T) {
		t.Parallel()
		o := runStop(t, stopCfg{broken: "ignore-cancel"})
		vs := checkStop(o)
		report1(t, "stop/control-ignore-cancel", true, stopSummary(o), vs)
		requireViolation(t, vs, "stop-exit")
	})
	t.Run("stop/control-no-budget", func(t *testing.T) {
		t.Parallel()
		o := runStop(t, stopCfg{workerBudget: -1})
		vs := checkStop(o)
		report1(t, "stop/control-no-budget", true, stopSummary(o), vs)
		requireViolation(t, vs, "stop-finish")
	})
	t.Run("stop/control-lost-receive-answer", func(t *testing.T) {
		t.Parallel()
		o := runStop(t, stopCfg{loseAnswer: true})
		vs := checkStop(o)
		report1(t, "stop/control-lost-receive-answer", true, stopSummary(o), vs)
		requireViolation(t, vs, "stop-stranded")
		requireViolation(t, vs, "stop-unstarted")
	})

	t.Run("faults", func(t *testing.T) {
		t.Parallel()
		cfg := faultCfg{n: 60, rate: 0.2, deadline: 60 * time.Second}
		if *longFlag {
			cfg.n, cfg.deadline = 600, 4*time.Minute
		}
		o, early := runFaults(t, cfg)
		vs, s := faultChecks(o)
		vs = append(vs, early...)
		report1(t, "faults", false, s, vs)
		requireNone(t, vs)
	})
	t.Run("faults/control-fake-delete", func(t *testing.T) {
		t.Parallel()
		o, early := runFaults(t, faultCfg{n: 20, rate: 0.12, fakeDelete: true, deadline: 10 * time.Second})
		vs, s := faultChecks(o)
		vs = append(vs, early...)
		report1(t, "faults/control-fake-delete", true, s, vs)
		requireViolation(t, vs, "duplicates")
		requireViolation(t, vs, "empty")
	})
}

// TestCheckStderrControl shows the stderr check catches what it looks for;
// a worker that panics on purpose would only repeat the library's own panic
// recovery tests.
func TestCheckStderrControl(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"panic: boom\n\ngoroutine 1", "==================\nWARNING: DATA RACE\nRead at", "fatal error: concurrent map writes"} {
		requireViolation(t, checkStderr(&outcome{stderr: map[int]string{7: "{\"level\":\"WARN\"}\n" + s}}), "stderr")
	}
	require.Empty(t, checkStderr(&outcome{stderr: map[int]string{7: `{"level":"WARN","msg":"sqsconsumer: receive failed; backing off"}`}}))
}

func requireNone(t *testing.T, vs []violation) {
	t.Helper()
	for _, v := range vs {
		t.Errorf("violation: %s", v)
	}
}

// requireViolation requires that a control run broke check: the check can
// see what it is meant to see.
func requireViolation(t *testing.T, vs []violation, check string) {
	t.Helper()
	for _, v := range vs {
		if v.check == check {
			return
		}
	}
	t.Errorf("control: the %q check reported nothing on a broken run (violations: %v)", check, vs)
}

func report1(t *testing.T, name string, control bool, s summary, vs []violation) {
	t.Helper()
	s.name, s.control, s.violations = name, control, vs
	t.Logf("seed %d: %s", seed, s)
	if control {
		for i, v := range vs {
			if i == 3 {
				t.Logf("control caught %d more", len(vs)-i)
				break
			}
			t.Logf("control caught: %s", v)
		}
	}
	record(s)
}

// waitFor polls cond every 50 ms until it holds or d has passed, and
// reports whether it held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readJournal(t *testing.T, path string) []journal.Entry {
	t.Helper()
	es, err := journal.Read(path)
	require.NoError(t, err)
	return es
}

// allDone reports whether every id has a completion in the journal.
func allDone(t *testing.T, path string, ids []string) bool {
	done := map[string]bool{}
	for _, e := range readJournal(t, path) {
		if e.Kind == journal.Done {
			done[e.MessageID] = true
		}
	}
	for _, id := range ids {
		if !done[id] {
			return false
		}
	}
	return true
}

// running counts pid's handlers that started and have not ended.
func running(t *testing.T, path string, pid int) int {
	n := 0
	for _, e := range readJournal(t, path) {
		if e.PID != pid {
			continue
		}
		switch e.Kind {
		case journal.Start:
			n++
		case journal.Done, journal.Cancel:
			n--
		}
	}
	return n
}

type crashCfg struct {
	n, kills, conc int
	lease          time.Duration // the worker's
	checkLease     time.Duration // what checkReturns assumes; 0: lease
	broken         string
	deadline       time.Duration // for the queue to drain after the last kill
}

// runCrash sends cfg.n messages, then kills the worker with SIGKILL
// cfg.kills times, each at a random moment while a handler runs, restarting
// it at once; then lets it drain the queue and stops it with SIGTERM.
func runCrash(t *testing.T, cfg crashCfg) *outcome {
	began := time.Now()
	r := rng(t.Name())
	dir := t.TempDir()
	sq := startSQS(t)
	px, err := proxy.Start(sq.base, nil)
	require.NoError(t, err)
	t.Cleanup(px.Close)
	bodies := make([]string, cfg.n)
	for i := range bodies {
		bodies[i] = "n=" + strconv.Itoa(i)
	}
	ids := sq.send(t, bodies)
	jpath := filepath.Join(dir, "journal")
	args := []string{"-endpoint", px.URL(), "-queue", sq.queue, "-journal", jpath, "-concurrency", strconv.Itoa(cfg.conc),
		"-lease", cfg.lease.String(), "-wait", "1s", "-shutdown", "2s", "-seed", strconv.FormatUint(seed, 10), "-broken", cfg.broken}
	o := &outcome{sent: ids, lease: cmp(cfg.checkLease, cfg.lease), slack: 3 * time.Second, stderr: map[int]string{}}
	var workers []*workerProc
	w := startWorker(t, dir, args...)
	for range cfg.kills {
		time.Sleep(300*time.Millisecond + time.Duration(r.Int64N(int64(900*time.Millisecond))))
		waitFor(3*time.Second, func() bool { return running(t, jpath, w.pid) > 0 })
		o.kills = append(o.kills, kill{pid: w.pid, at: w.signal(t, syscall.SIGKILL)})
		require.True(t, w.wait(10*time.Second), "worker %d survived SIGKILL", w.pid)
		workers = append(workers, w)
		w = startWorker(t, dir, args...)
	}
	waitFor(cfg.deadline, func() bool { return allDone(t, jpath, ids) && sq.left(t) == 0 })
	w.signal(t, syscall.SIGTERM)
	if !w.wait(10 * time.Second) {
		w.signal(t, syscall.SIGKILL)
		w.wait(10 * time.Second)
	}
	workers = append(workers, w)
	o.left = sq.left(t)
	o.journal = readJournal(t, jpath)
	o.records = px.Records()
	for _, w := range workers {
		o.stderr[w.pid] = w.errOutput()
	}
	o.took = time.Since(began)
	return o
}

func cmp(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

func crashChecks(o *outcome) ([]violation, summary) {
	var vs []violation
	lost := checkLost(o)
	vs = append(vs, lost...)
	vs = append(vs, checkEmpty(o)...)
	vs = append(vs, checkStderr(o)...)
	rv, rec := checkReturns(o)
	vs = append(vs, rv...)
	dv, dups := checkDuplicates(o)
	vs = append(vs, dv...)
	s := summary{messages: len(o.sent), kills: len(o.kills), faults: faultCounts(o.records), dups: dups, recovery: rec, elapsed: o.took}
	s.lost = lostCount(o)
	return vs, s
}

func lostCount(o *outcome) int {
	ix := o.index()
	n := 0
	for _, id := range o.sent {
		if ix.count(id, journal.Done) == 0 {
			n++
		}
	}
	return n
}

type faultCfg struct {
	n          int
	rate       float64
	fakeDelete bool // control: every delete answered as done, never forwarded
	deadline   time.Duration
}

// faultClasses are the faults the faults scenario draws from.
var faultClasses = []proxy.Class{proxy.Error500, proxy.Throttle400, proxy.Throttle403, proxy.ResetBefore, proxy.HTML,
	proxy.Delay, proxy.Truncated, proxy.LostAnswer}

// runFaults runs one worker through the fault proxy until the queue is
// drained, then stops it. early holds violations seen while it ran (the
// worker exiting on its own).
func runFaults(t *testing.T, cfg faultCfg) (o *outcome, early []violation) {
	began := time.Now()
	dir := t.TempDir()
	sq := startSQS(t)
	const lease = 3 * time.Second // heartbeat every 1 s; Delay faults hold answers 1.5 s
	random := proxy.Random(seed, cfg.rate, faultClasses, 1500*time.Millisecond,
		"ReceiveMessage", "DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch")
	var policy proxy.Policy = random
	if cfg.fakeDelete {
		policy = proxy.Funcs{BeforeFunc: func(c *proxy.Call) proxy.Fault {
			if c.Action == "DeleteMessageBatch" || c.Action == "DeleteMessage" {
				return proxy.Fault{Class: proxy.FakeDelete}
			}
			return random.Before(c)
		}}
	}
	px, err := proxy.Start(sq.base, policy)
	require.NoError(t, err)
	t.Cleanup(px.Close)
	bodies := make([]string, cfg.n)
	for i := range bodies {
		bodies[i] = "n=" + strconv.Itoa(i)
	}
	ids := sq.send(t, bodies)
	jpath := filepath.Join(dir, "journal")
	// Handlers up to 2.5 s outlive the 1 s heartbeat, so renewals meet
	// faults too.
	w := startWorker(t, dir, "-endpoint", px.URL(), "-queue", sq.queue, "-journal", jpath, "-concurrency", "10",
		"-lease", lease.String(), "-wait", "1s", "-shutdown", "3s", "-max", "2500ms", "-seed", strconv.FormatUint(seed, 10))
	waitFor(cfg.deadline, func() bool {
		select {
		case <-w.exited:
			return true
		default:
		}
		return allDone(t, jpath, ids) && sq.left(t) == 0
	})
	select {
	case <-w.exited:
		early = append(early, violation{"worker-exit", fmt.Sprintf("worker %d exited on its own with status %d", w.pid, w.code)})
	default:
	}
	px.SetPolicy(nil)
	w.signal(t, syscall.SIGTERM)
	if !w.wait(10 * time.Second) {
		early = append(early, violation{"stop-exit", "worker did not exit within 10 s of SIGTERM"})
		w.signal(t, syscall.SIGKILL)
		w.wait(10 * time.Second)
	}
	o = &outcome{sent: ids, lease: lease, slack: 3 * time.Second, left: sq.left(t), stderr: map[int]string{w.pid: w.errOutput()}}
	o.journal = readJournal(t, jpath)
	o.records = px.Records()
	o.took = time.Since(began)
	return o, early
}

func faultChecks(o *outcome) ([]violation, summary) {
	var vs []violation
	vs = append(vs, checkLost(o)...)
	vs = append(vs, checkEmpty(o)...)
	vs = append(vs, checkStderr(o)...)
	dv, dups := checkDuplicates(o)
	vs = append(vs, dv...)
	return vs, summary{messages: len(o.sent), faults: faultCounts(o.records), lost: lostCount(o), dups: dups, elapsed: o.took}
}

type stopCfg struct {
	broken       string
	workerBudget time.Duration // the worker's -shutdown if not the checked budget; <0 for 0
	loseAnswer   bool          // the proxy loses the receive answer in flight instead of holding it
}

// runStop starts a worker with two handlers that end within the shutdown
// budget and two that run until cancelled; arranges for a receive answer
// carrying two more messages to be in flight (held by the proxy) and sends
// SIGTERM then. A second consumer receives from the queue from SIGTERM until
// shortly after the worker exits, noting when each message became visible.
func runStop(t *testing.T, cfg stopCfg) *outcome {
	const (
		budget = 4 * time.Second
		hold   = 1500 * time.Millisecond
		lease  = 20 * time.Second // long: a stranded message stays away for all of it
		slack  = 2 * time.Second
	)
	began := time.Now()
	dir := t.TempDir()
	sq := startSQS(t)
	var armed atomic.Bool
	held := make(chan struct{}, 1)
	px, err := proxy.Start(sq.base, proxy.Funcs{AfterFunc: func(c *proxy.Call) proxy.Fault {
		if c.Action != "ReceiveMessage" || len(c.Delivered) == 0 || !armed.CompareAndSwap(true, false) {
			return proxy.Fault{}
		}
		held <- struct{}{}
		if cfg.loseAnswer {
			return proxy.Fault{Class: proxy.LostAnswer}
		}
		return proxy.Fault{Class: proxy.Delay, Delay: hold}
	}})
	require.NoError(t, err)
	t.Cleanup(px.Close)

	s := &stopOutcome{budget: budget, hold: hold, seen: map[string]time.Time{}}
	s.finisher = sq.send(t, []string{"sleep=2s", "sleep=2s"})
	s.hanger = sq.send(t, []string{"sleep=hang", "sleep=hang"})
	jpath := filepath.Join(dir, "journal")
	wb := budget
	if cfg.workerBudget != 0 {
		wb = max(cfg.workerBudget, 0)
	}
	w := startWorker(t, dir, "-endpoint", px.URL(), "-queue", sq.queue, "-journal", jpath, "-concurrency", "6",
		"-lease", lease.String(), "-wait", "2s", "-shutdown", wb.String(), "-broken", cfg.broken)
	s.pid = w.pid
	require.True(t, waitFor(10*time.Second, func() bool { return running(t, jpath, w.pid) == 4 }), "the worker did not start its four handlers")
	armed.Store(true)
	late := sq.send(t, []string{"n=late-1", "n=late-2"}) // taken by the poll in flight
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no receive answer to hold came through the proxy")
	}
	s.term = w.signal(t, syscall.SIGTERM)

	// The second consumer, straight to sqstest.
	other := wire.Client(sq.base, 0)
	defer other.Options().HTTPClient.(*http.Client).CloseIdleConnections()
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			out, err := other.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &sq.queue, MaxNumberOfMessages: 10,
				WaitTimeSeconds: 1, VisibilityTimeout: 60, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			now := time.Now()
			mu.Lock()
			for _, m := range out.Messages {
				if _, ok := s.seen[*m.MessageId]; !ok {
					s.seen[*m.MessageId] = now
				}
			}
			mu.Unlock()
		}
	})
	if !w.wait(budget + slack + time.Second) {
		s.killed = true
		w.signal(t, syscall.SIGKILL)
		w.wait(10 * time.Second)
	}
	s.exit, s.code = w.exitAt, w.code
	time.Sleep(time.Until(s.exit.Add(slack + 500*time.Millisecond)))
	cancel()
	wg.Wait()

	o := &outcome{sent: append(append(append([]string(nil), s.finisher...), s.hanger...), late...), lease: lease, slack: slack,
		stderr: map[int]string{w.pid: w.errOutput()}, stop: s}
	o.journal = readJournal(t, jpath)
	o.records = px.Records()
	o.took = time.Since(began)
	return o
}

func stopSummary(o *outcome) summary {
	s := summary{messages: len(o.sent), faults: faultCounts(o.records), elapsed: o.took}
	s.stopTook = o.stop.exit.Sub(o.stop.term)
	return s
}
