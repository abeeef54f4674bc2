package sqsconsumer

// An exhaustive model test of the Lease's state machine. It drives the real
// Lease (NewLease, Start, Delete, Release, Extend, Adopt, Stop) inside
// testing/synctest against a scripted Client whose every call blocks until
// the explorer answers it, and enumerates, depth first, every sequence of
// choices up to a bound. At each step the explorer chooses one of:
//
//   - answer one of the calls in flight with one of the answers SQS can give
//     it in the model's ground truth: accepted; throttled (transient);
//     handle refused (ReceiptHandleIsInvalid or MessageNotInflight: the
//     message went to someone else); accepted but the answer lost on the way
//     back (a connection reset after SQS acted); and, for a renewal, SQS's
//     "beyond the limit" refusal (its clock ahead of ours);
//   - let time run until the next thing happens: a call arrives (a renewal
//     falls due, a retry) or times out, or an hour passes; or, with calls
//     in flight, let a heartbeat interval pass with them unanswered;
//   - call Delete (the handler succeeded), Release (it failed), Extend,
//     Adopt (SQS redelivered the message to this process after expiring it
//     early), or Stop.
//
// Delete and Release exclude each other (a handler either succeeds or
// fails); each operation happens at most once per path. When the bound is
// reached the path ends: Stop, and every call still in flight times out.
//
// The ground truth is a small SQS: the current receipt handle, the handles
// SQS has refused (the message went to another consumer), whether the
// message was deleted or released, and when each handle was received (the
// ceiling counts from there). A delete with a refused handle is refused too
// (as on FIFO queues; a standard queue answers success and deletes nothing,
// which no client can tell apart — the lease avoids sending one at all).
//
// Checked on every path, at every call and at its end:
//
//   - never deleted after a lost handle: once the lease has declared the
//     handle lost no delete is sent, and after any refusal of a handle a
//     delete with it is sent only as the retry of a delete that was already
//     in flight when the refusal came (the lease then waits for the delete's
//     own answer);
//   - never renewed past the ceiling: no visibility change asks for
//     visibility beyond the maximum lease duration after the receive of its
//     handle;
//   - no renewal overrides a release or follows a confirmed delete: no
//     heartbeat renewal reaches SQS after a release took effect, or after
//     the lease was told its delete succeeded;
//   - a lost handle is never mistaken for our own delete landing first: the
//     lease reports the message deleted (EventDeleted, Delete returning
//     nil) only if SQS really deleted it through this lease;
//   - always one settled state: at most one of EventDeleted, EventReleased,
//     EventLeaseLost and EventLeaseExpired, consistent with Err and with
//     what Delete and Release returned; a reported release took effect.
//
// The bound is the number of choices per path: 6 by default (about 48,000
// paths, 10 s), 5 with -short or -race (about 9,500 paths, 8 s with -race);
// -lease.model.depth=7 explores about 230,000 paths in a minute. The count
// is logged. A few
// paths in a thousand replay with a different number of options (the
// lease's retry jitter moves a timer); they are explored as they come.
// A failure prints the path's choices; -lease.model.path=... replays it.
//
// Lease is a 30 s lease renewed every 10 s with a maximum lease duration of
// 60 s, so the ceiling is reached within a few renewals.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
)

var (
	leaseModelDepth = flag.Int("lease.model.depth", 0, "bound (choices per path) of TestLeaseModel; 0: the default")
	leaseModelPath  = flag.String("lease.model.path", "", "replay one path of TestLeaseModel: its choices, comma-separated, as a failure prints them")
)

const (
	modelLease    = 30 * time.Second
	modelMaxLease = 60 * time.Second // the ceiling, reached after three renewals
	modelRelease  = 7 * time.Second
	modelExtend   = 45 * time.Second
)

// model answers.
const (
	ansOK          = iota // SQS acted and said so
	ansThrottled          // transient, SQS did nothing
	ansRefused            // the handle is no good: the message went to someone else
	ansAnswerLost         // SQS acted; the answer never arrived
	ansCeilingSkew        // renewal refused as beyond SQS's limit
	numAnswers
)

var answerNames = [numAnswers]string{"ok", "throttled", "refused", "answer-lost", "ceiling-refused"}

type opKind string

const (
	opRenew   opKind = "renew"
	opExtend  opKind = "extend"
	opRelease opKind = "release"
	opDelete  opKind = "delete"
)

type modelOpKey struct{}

// modelCall is one call of the lease, waiting for its answer.
type modelCall struct {
	op     opKind
	handle string
	secs   int32
	at     time.Time
	reply  chan error
}

// modelSQS is the scripted Client and the ground truth.
type modelSQS struct {
	mu      sync.Mutex
	pending []*modelCall
	events  chan struct{} // a call arrived or gave up

	current    string
	receivedAt map[string]time.Time // true hand-over of each handle
	refused    map[string]bool      // SQS refused the handle: the message is someone else's
	// refusedNoDelete: SQS refused the handle before any delete with it
	// was sent: no delete with it may follow. (After a delete was sent,
	// whatever its answer, a refusal may be that delete having landed:
	// the lease waits for the delete's own answer.)
	refusedNoDelete map[string]bool
	deleteSent      map[string]bool
	deleted         bool // SQS deleted the message through this lease
	released        bool // a release took effect
	deleteConfirmed bool // the lease was told its delete succeeded
	releaseApplied  bool // a release took effect, at some point
	// releaseConfirmed: the lease was told its release succeeded.
	releaseConfirmed bool
	// lastApplied is the last visibility change SQS applied.
	lastApplied opKind
	leaseLost   func() bool
	violations  []string
	log         []string
}

func (s *modelSQS) notify() {
	select {
	case s.events <- struct{}{}:
	default:
	}
}

func (s *modelSQS) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *modelSQS) call(ctx context.Context, op opKind, handle string, secs int32) error {
	c := &modelCall{op: op, handle: handle, secs: secs, at: time.Now(), reply: make(chan error, 1)}
	s.mu.Lock()
	s.log = append(s.log, fmt.Sprintf("%v %s(%s, %d)", c.at.Sub(modelStart), op, handle, secs))
	// Checks on arrival.
	switch op {
	case opDelete:
		if s.leaseLost() {
			s.violate("delete sent with %s after the lease declared it lost", handle)
		}
		if s.refusedNoDelete[handle] {
			s.violate("delete sent with %s after SQS refused that handle", handle)
		}
	default:
		if limit := s.receivedAt[handle].Add(modelMaxLease); c.at.Add(time.Duration(secs) * time.Second).After(limit) {
			s.violate("%s asks for visibility until %v, past the ceiling %v", op, c.at.Add(time.Duration(secs)*time.Second).Sub(modelStart), limit.Sub(modelStart))
		}
		if op == opRenew && s.releaseConfirmed {
			s.violate("renewal sent after the release was confirmed")
		}
		if op == opRenew && s.deleteConfirmed {
			s.violate("renewal sent after the delete was confirmed")
		}
		for _, p := range s.pending {
			if op == opRenew && p.op == opRelease || op == opRelease && p.op == opRenew {
				s.violate("renewal and release in flight at once")
			}
		}
	}
	if op == opDelete {
		s.deleteSent[handle] = true
	}
	s.pending = append(s.pending, c)
	s.mu.Unlock()
	s.notify()
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		s.mu.Lock()
		for i, p := range s.pending {
			if p == c {
				s.pending = append(s.pending[:i], s.pending[i+1:]...)
				break
			}
		}
		s.log = append(s.log, fmt.Sprintf("%v %s(%s) gave up", time.Since(modelStart), op, handle))
		s.mu.Unlock()
		s.notify()
		return ctx.Err()
	}
}

// answers lists the answers the ground truth allows for c now.
func (s *modelSQS) answers(c *modelCall) []int {
	switch {
	case s.refused[c.handle]:
		return []int{ansThrottled, ansRefused}
	case s.deleted:
		if c.op == opDelete {
			return []int{ansOK, ansThrottled, ansAnswerLost} // deleting a deleted message succeeds
		}
		return []int{ansThrottled, ansRefused}
	case c.handle != s.current:
		// Superseded by a newer receive of ours: a visibility change is
		// refused, a delete succeeds and deletes nothing (standard queue).
		if c.op == opDelete {
			return []int{ansOK, ansThrottled}
		}
		return []int{ansThrottled, ansRefused}
	}
	as := []int{ansOK, ansThrottled, ansRefused, ansAnswerLost}
	if c.op == opRenew {
		as = append(as, ansCeilingSkew)
	}
	return as
}

// answer applies a to the ground truth and sends the lease its answer.
func (s *modelSQS) answer(c *modelCall, a int) {
	for i, p := range s.pending {
		if p == c {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			break
		}
	}
	s.log = append(s.log, fmt.Sprintf("%v answer %s(%s): %s", time.Since(modelStart), c.op, c.handle, answerNames[a]))
	live := !s.refused[c.handle] && !s.deleted && c.handle == s.current
	if (a == ansOK || a == ansAnswerLost) && live {
		switch c.op {
		case opDelete:
			s.deleted = true
		case opRelease:
			s.released, s.releaseApplied = true, true
			s.lastApplied = opRelease
		case opRenew, opExtend:
			s.lastApplied = c.op
		}
	}
	var err error
	switch a {
	case ansOK:
		// Confirmed only if SQS really acted (a stale handle's delete
		// succeeds without deleting).
		switch {
		case c.op == opDelete && s.deleted:
			s.deleteConfirmed = true
		case c.op == opRelease && live:
			s.releaseConfirmed = true
		}
	case ansThrottled:
		err = &smithy.GenericAPIError{Code: "RequestThrottled", Message: "Rate exceeded"}
	case ansRefused:
		s.refused[c.handle] = true
		if !s.deleteSent[c.handle] {
			s.refusedNoDelete[c.handle] = true
		}
		if c.op == opDelete {
			s.refusedNoDelete[c.handle] = true
			err = &types.MessageNotInflight{Message: aws.String("The message referred to is not in flight.")}
		} else {
			err = &types.ReceiptHandleIsInvalid{Message: aws.String("The input receipt handle is not a valid receipt handle.")}
		}
	case ansAnswerLost:
		err = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	case ansCeilingSkew:
		err = &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: fmt.Sprintf("Value %d for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]", c.secs)}
	}
	c.reply <- err
}

func (s *modelSQS) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	op := opRenew
	if k, ok := ctx.Value(modelOpKey{}).(opKind); ok {
		op = k
	}
	return &sqs.ChangeMessageVisibilityOutput{}, s.call(ctx, op, aws.ToString(in.ReceiptHandle), in.VisibilityTimeout)
}

func (s *modelSQS) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return &sqs.DeleteMessageOutput{}, s.call(ctx, opDelete, aws.ToString(in.ReceiptHandle), 0)
}

var errModelUnused = errors.New("model: the lease does not make this call")

func (s *modelSQS) ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return nil, errModelUnused
}

func (s *modelSQS) DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return nil, errModelUnused
}

func (s *modelSQS) ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return nil, errModelUnused
}

func (s *modelSQS) GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return nil, errModelUnused
}

// modelStart is the virtual time every path starts at (synctest's epoch).
var modelStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// chooser replays a prefix of choices and extends it with zeros,
// recording the number of options at each step.
type chooser struct {
	prefix   []int
	n        []int
	pos      int
	diverged bool
}

func (c *chooser) pick(n int) int {
	if c.pos < len(c.prefix) {
		ch := c.prefix[c.pos]
		if c.n[c.pos] != n {
			c.diverged = true
			c.n[c.pos] = n
		}
		if ch >= n {
			ch = n - 1
			c.prefix[c.pos] = ch
		}
		c.pos++
		return ch
	}
	c.prefix = append(c.prefix, 0)
	c.n = append(c.n, n)
	c.pos++
	return 0
}

// advance moves to the next unexplored path; false when none is left.
func (c *chooser) advance() bool {
	c.prefix, c.n = c.prefix[:c.pos], c.n[:c.pos]
	for i := len(c.prefix) - 1; i >= 0; i-- {
		if c.prefix[i]+1 < c.n[i] {
			c.prefix, c.n = c.prefix[:i+1], c.n[:i+1]
			c.prefix[i]++
			c.pos = 0
			return true
		}
	}
	return false
}

type modelOutcome struct {
	path       string
	violations []string
	log        []string
	final      string
}

// runModelPath plays one path: the choices come from ch.
func runModelPath(t *testing.T, ch *chooser, depth int) modelOutcome {
	var out modelOutcome
	synctest.Test(t, func(t *testing.T) {
		s := &modelSQS{events: make(chan struct{}, 1), current: "h1",
			receivedAt: map[string]time.Time{"h1": time.Now()}, refused: map[string]bool{}, refusedNoDelete: map[string]bool{}, deleteSent: map[string]bool{}}
		var evMu sync.Mutex
		events := map[EventKind]int{}
		var terminal []EventKind
		obs := ObserverFunc(func(e Event) {
			s.mu.Lock()
			s.log = append(s.log, fmt.Sprintf("%v event %s %v", time.Since(modelStart), e.Kind, e.Err))
			s.mu.Unlock()
			evMu.Lock()
			defer evMu.Unlock()
			events[e.Kind]++
			switch e.Kind {
			case EventDeleted, EventReleased, EventLeaseLost, EventLeaseExpired:
				terminal = append(terminal, e.Kind)
			}
		})
		l, err := NewLease(s, "https://sqs.us-east-1.amazonaws.com/123456789012/model", types.Message{MessageId: aws.String("m"), ReceiptHandle: aws.String("h1")},
			WithVisibilityTimeout(modelLease), WithMaxLeaseDuration(modelMaxLease), WithReceivedAt(time.Now()), WithObserver(obs))
		require.NoError(t, err)
		s.leaseLost = func() bool {
			evMu.Lock()
			defer evMu.Unlock()
			return events[EventLeaseLost] > 0
		}
		hctx := l.Start(context.Background())

		var wg sync.WaitGroup
		var resMu sync.Mutex
		results := map[opKind]error{}
		run := func(op opKind, f func(context.Context) error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := f(context.WithValue(context.Background(), modelOpKey{}, op))
				resMu.Lock()
				results[op] = err
				resMu.Unlock()
			}()
		}
		done := map[string]bool{}
		stopped := false
		wait := func() {
			select {
			case <-s.events:
			default:
			}
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			select {
			case <-s.events:
			case <-timer.C:
			}
		}
		for step := 0; step < depth; step++ {
			synctest.Wait()
			type option struct {
				name string
				do   func()
			}
			var opts []option
			s.mu.Lock()
			for _, c := range s.pending {
				for _, a := range s.answers(c) {
					opts = append(opts, option{fmt.Sprintf("answer %s %s", c.op, answerNames[a]), func() {
						s.mu.Lock()
						s.answer(c, a)
						s.mu.Unlock()
					}})
				}
			}
			s.mu.Unlock()
			opts = append(opts, option{"wait", wait})
			if len(opts) > 1 {
				// Calls in flight: let a heartbeat interval pass with
				// them unanswered (a renewal falls due meanwhile).
				opts = append(opts, option{"tick", func() { time.Sleep(modelLease / 3) }})
			}
			if !stopped {
				if !done["settle"] {
					opts = append(opts, option{"delete", func() {
						done["settle"] = true
						run(opDelete, l.Delete)
					}}, option{"release", func() {
						done["settle"] = true
						run(opRelease, func(ctx context.Context) error { return l.Release(ctx, modelRelease) })
					}})
				}
				if !done["extend"] {
					opts = append(opts, option{"extend", func() {
						done["extend"] = true
						run(opExtend, func(ctx context.Context) error { return l.Extend(ctx, modelExtend) })
					}})
				}
				if !done["adopt"] && !s.deleted && !s.refused[s.current] {
					opts = append(opts, option{"adopt", func() {
						done["adopt"] = true
						s.mu.Lock()
						// SQS expired the lease early and this process
						// received the message again.
						s.current = "h2"
						s.receivedAt["h2"] = time.Now()
						s.released, s.lastApplied = false, "receive"
						s.log = append(s.log, fmt.Sprintf("%v adopt h2", time.Since(modelStart)))
						s.mu.Unlock()
						l.Adopt("h2", time.Now())
					}})
				}
				opts = append(opts, option{"stop", func() {
					stopped = true
					l.Stop()
				}})
			}
			o := opts[ch.pick(len(opts))]
			s.mu.Lock()
			s.log = append(s.log, fmt.Sprintf("%v choose %s", time.Since(modelStart), o.name))
			s.mu.Unlock()
			o.do()
		}
		// The bound: stop, and let every call in flight time out.
		synctest.Wait()
		if !stopped {
			l.Stop()
		}
		finished := make(chan struct{})
		go func() {
			wg.Wait()
			close(finished)
		}()
		for i := 0; ; i++ {
			synctest.Wait()
			select {
			case <-finished:
			default:
				require.Less(t, i, 1000, "the lease's calls do not end")
				time.Sleep(time.Minute)
				continue
			}
			break
		}
		synctest.Wait()

		// Checks at the end.
		s.mu.Lock()
		defer s.mu.Unlock()
		evMu.Lock()
		defer evMu.Unlock()
		if len(terminal) > 1 {
			s.violate("more than one settled state: %v", terminal)
		}
		if events[EventDeleted] > 0 && !s.deleted {
			s.violate("the lease reported a delete SQS never made")
		}
		if err, ok := results[opDelete]; ok && err == nil && (!s.deleted || events[EventDeleted] == 0) {
			s.violate("Delete returned nil; SQS deleted: %v, EventDeleted: %d", s.deleted, events[EventDeleted])
		}
		if events[EventReleased] > 0 && !s.releaseApplied {
			s.violate("the lease reported a release SQS never made")
		}
		if events[EventReleased] > 0 && (s.lastApplied == opRenew || s.lastApplied == opExtend) {
			s.violate("the lease reported a release, but a %s overrode it", s.lastApplied)
		}
		if err, ok := results[opRelease]; ok && err == nil && events[EventReleased] == 0 {
			s.violate("Release returned nil without EventReleased")
		}
		lerr := l.Err()
		switch {
		case events[EventLeaseLost] > 0 && !errors.Is(lerr, ErrLeaseLost),
			events[EventLeaseExpired] > 0 && !errors.Is(lerr, ErrLeaseExpired),
			(events[EventDeleted] > 0 || events[EventReleased] > 0) && lerr != nil:
			s.violate("Err() = %v disagrees with the events %v", lerr, terminal)
		}
		if hctx.Err() == nil {
			s.violate("the handler's context is still live after Stop")
		}
		out.violations, out.log = s.violations, s.log
		out.final = fmt.Sprint(terminal)
	})
	return out
}

// TestLeaseModel explores every path up to the bound and checks the
// properties listed at the top of this file on each.
func TestLeaseModel(t *testing.T) {
	t.Parallel()
	depth := *leaseModelDepth
	if depth == 0 {
		depth = 6
		if testing.Short() || raceEnabled {
			depth = 5
		}
	}
	ch := &chooser{}
	if *leaseModelPath != "" {
		for _, f := range strings.Split(*leaseModelPath, ",") {
			var c int
			_, err := fmt.Sscan(f, &c)
			require.NoError(t, err, "-lease.model.path")
			ch.prefix = append(ch.prefix, c)
			ch.n = append(ch.n, c+1)
		}
		depth = len(ch.prefix)
	}
	paths, diverged := 0, 0
	finals := map[string]int{}
	var first *modelOutcome
	failures := 0
	for {
		out := runModelPath(t, ch, depth)
		out.path = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ch.prefix)), ","), "[]")
		paths++
		finals[out.final]++
		if ch.diverged {
			diverged++
			ch.diverged = false
		}
		if len(out.violations) > 0 {
			failures++
			if first == nil {
				first = &out
			}
		}
		if *leaseModelPath != "" || !ch.advance() {
			break
		}
	}
	t.Logf("depth %d: %d paths explored (%d replayed with a different number of options), outcomes %v", depth, paths, diverged, finals)
	if first != nil {
		t.Fatalf("%d of %d paths break a property; the first (replay with -lease.model.path=%s):\n  %s\npath:\n  %s", failures, paths, first.path, strings.Join(first.violations, "\n  "), strings.Join(first.log, "\n  "))
	}
}
