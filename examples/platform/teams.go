package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/examples/platform/queuesdk"
)

// The three product teams' handlers, as each team writes them against the
// company's SDK: plain Go errors wrapped with the company's classes, logs
// through sqsconsumer.Logger(ctx), no retry, DLQ or panic handling of
// their own.

// order is the body of a message of the orders queue.
type order struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// paymentsLimit is how many calls at once the payments service takes; it
// answers 429 with Retry-After: 1 above that.
const paymentsLimit = 4

// payments is the orders team's handler and a stand-in for its
// downstream, the payments service. Its methods are safe for concurrent
// use.
type payments struct {
	mu       sync.Mutex // guards the fields below
	inflight int
	charged  int
	refused  int
}

func (p *payments) handle(ctx context.Context, m *sqsconsumer.Message) error {
	var o order
	if err := json.Unmarshal([]byte(m.Body), &o); err != nil || o.OrderID == "" {
		return fmt.Errorf("order %q: %w", m.Body, queuesdk.ErrValidation)
	}
	if err := p.charge(ctx, o); err != nil {
		return err
	}
	sqsconsumer.Logger(ctx).Info("order charged", "order_id", o.OrderID, "amount_cents", o.AmountCents)
	return nil
}

// charge calls the payments service: 200 ms, or a 429 when it is busy.
func (p *payments) charge(ctx context.Context, _ order) error {
	p.mu.Lock()
	if p.inflight >= paymentsLimit {
		p.refused++
		p.mu.Unlock()
		return queuesdk.RateLimited("payments", "1")
	}
	p.inflight++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inflight--
		p.mu.Unlock()
	}()
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	p.mu.Lock()
	p.charged++
	p.mu.Unlock()
	return nil
}

// mailer is the notifications team's handler: its mail provider turns
// away one first attempt in eight (a retry goes through), and a bug in its
// parsing panics on the body "crash". Its methods are safe for concurrent
// use.
type mailer struct {
	mu    sync.Mutex // guards the fields below
	calls int
	sent  int
}

func (e *mailer) handle(ctx context.Context, m *sqsconsumer.Message) error {
	recipient := strings.Fields(m.Body)[1] // the bug: "crash" has one field
	e.mu.Lock()
	e.calls++
	n := e.calls
	e.mu.Unlock()
	if n%8 == 0 && m.ReceiveCount == 1 {
		return fmt.Errorf("smtp: 421 try again later: %w", queuesdk.ErrTransient)
	}
	time.Sleep(50 * time.Millisecond)
	e.mu.Lock()
	e.sent++
	e.mu.Unlock()
	sqsconsumer.Logger(ctx).Debug("email sent", "to", recipient)
	return nil
}

// reporter is the analytics team's handler: a report is a long job of N
// one-second steps (N is the body), resumable from its checkpoint. The
// checkpoints live in this map; in production, in the team's database.
// Its methods are safe for concurrent use.
type reporter struct {
	mu          sync.Mutex     // guards the fields below
	checkpoint  map[string]int // message ID -> steps done
	interrupted int
	done        int
}

func newReporter() *reporter { return &reporter{checkpoint: map[string]int{}} }

func (r *reporter) handle(ctx context.Context, m *sqsconsumer.Message) error {
	steps, err := strconv.Atoi(m.Body)
	if err != nil || steps < 1 {
		return fmt.Errorf("report %q: %w", m.Body, queuesdk.ErrValidation)
	}
	r.mu.Lock()
	step := r.checkpoint[m.ID]
	r.mu.Unlock()
	for ; step < steps; step++ {
		select {
		case <-sqsconsumer.Draining(ctx): // the process is stopping: save, hand the message back
			r.mu.Lock()
			r.checkpoint[m.ID] = step
			r.interrupted++
			r.mu.Unlock()
			return fmt.Errorf("report at step %d of %d: %w", step, steps, queuesdk.ErrInterrupted)
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Second):
		}
	}
	r.mu.Lock()
	delete(r.checkpoint, m.ID)
	r.done++
	r.mu.Unlock()
	sqsconsumer.Logger(ctx).Info("report done", "steps", steps)
	return nil
}
