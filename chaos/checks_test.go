package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/chaos/journal"
	"github.com/sqskit/sqsconsumer/chaos/proxy"
)

// outcome is everything a scenario recorded: the driver's notes, the
// workers' journal and the proxy's records. The checks read only this, so a
// control can run the same check on a deliberately broken run.
type outcome struct {
	sent    []string // message ids, in sending order
	lease   time.Duration
	slack   time.Duration // allowance for process start, polling and a busy machine
	journal []journal.Entry
	records []proxy.Record
	kills   []kill
	stderr  map[int]string // worker pid -> its standard error
	left    int            // messages left in the queue at the end (visible, in flight, delayed)

	stop *stopOutcome // the SIGTERM scenario only

	took time.Duration // the scenario's wall time
}

type kill struct {
	pid int
	at  time.Time
}

// stopOutcome is what the SIGTERM scenario noted.
type stopOutcome struct {
	pid      int
	budget   time.Duration // the worker's shutdown timeout
	hold     time.Duration // how long the proxy held the receive answer in flight at SIGTERM
	term     time.Time     // SIGTERM sent
	exit     time.Time     // the process exited (or was killed, see killed)
	killed   bool          // it did not exit and the driver killed it
	code     int
	finisher []string             // handlers that end well within the budget
	hanger   []string             // handlers that run until cancelled
	seen     map[string]time.Time // first receive by a second consumer after SIGTERM
}

// violation is one broken property.
type violation struct {
	check string
	msg   string
}

func (v violation) String() string { return v.check + ": " + v.msg }

// delivery is one message handed out by the server, from the proxy's records.
type delivery struct {
	proxy.Delivery
	pid int
	at  time.Time
}

// index is the outcome arranged by message.
type index struct {
	deliveries map[string][]delivery // by message id, in time order
	handleID   map[string]string
	deletedAt  map[string]time.Time // by message id: the server's first confirmed delete
	entries    map[string][]journal.Entry
	killedAt   map[int]time.Time
}

func (o *outcome) index() index {
	ix := index{deliveries: map[string][]delivery{}, handleID: map[string]string{}, deletedAt: map[string]time.Time{},
		entries: map[string][]journal.Entry{}, killedAt: map[int]time.Time{}}
	for _, r := range o.records {
		for _, d := range r.Delivered {
			ix.deliveries[d.MessageID] = append(ix.deliveries[d.MessageID], delivery{Delivery: d, pid: r.PID, at: r.Time})
			ix.handleID[d.Handle] = d.MessageID
		}
	}
	for _, ds := range ix.deliveries {
		sort.Slice(ds, func(i, j int) bool { return ds[i].at.Before(ds[j].at) })
	}
	for _, r := range o.records {
		for _, h := range r.Deleted {
			id := ix.handleID[h]
			if at, ok := ix.deletedAt[id]; id != "" && (!ok || r.Time.Before(at)) {
				ix.deletedAt[id] = r.Time
			}
		}
	}
	for _, e := range o.journal {
		ix.entries[e.MessageID] = append(ix.entries[e.MessageID], e)
	}
	for _, k := range o.kills {
		ix.killedAt[k.pid] = k.at
	}
	return ix
}

func (ix index) count(id, kind string) int {
	n := 0
	for _, e := range ix.entries[id] {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// checkLost: every message sent was handled to completion at least once.
func checkLost(o *outcome) []violation {
	ix := o.index()
	var lost []string
	for _, id := range o.sent {
		if ix.count(id, journal.Done) == 0 {
			lost = append(lost, id)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	return []violation{{"lost", fmt.Sprintf("%d of %d messages never completed: %s", len(lost), len(o.sent), short(lost))}}
}

// checkEmpty: nothing is left in the queue.
func checkEmpty(o *outcome) []violation {
	if o.left == 0 {
		return nil
	}
	return []violation{{"empty", fmt.Sprintf("%d messages left in the queue at the end", o.left)}}
}

// checkStderr: no worker panicked, raced or died of a runtime error.
func checkStderr(o *outcome) []violation {
	var vs []violation
	for pid, s := range o.stderr {
		for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
			if i := strings.Index(s, bad); i >= 0 {
				vs = append(vs, violation{"stderr", fmt.Sprintf("worker %d wrote %q: %.300s", pid, bad, s[i:])})
			}
		}
	}
	return vs
}

// checkReturns: every message a killed worker held — handed to it and not
// deleted by the server — is handed out again within one lease (plus slack)
// of the kill. It returns the recovery times, kill to redelivery.
func checkReturns(o *outcome) ([]violation, []time.Duration) {
	ix := o.index()
	var vs []violation
	var rec []time.Duration
	limit := o.lease + o.slack
	for _, k := range o.kills {
		for id, ds := range ix.deliveries {
			last := -1
			for i, d := range ds {
				if d.at.After(k.at) {
					break
				}
				last = i
			}
			if last < 0 || ds[last].pid != k.pid {
				continue // not held by the killed process
			}
			var next *delivery
			if last+1 < len(ds) {
				next = &ds[last+1]
			}
			if del, ok := ix.deletedAt[id]; ok && (next == nil || del.Before(next.at)) {
				continue // its delete reached the server: nothing to come back
			}
			if next == nil {
				vs = append(vs, violation{"returns", fmt.Sprintf("message %s held by killed worker %d never handed out again", id, k.pid)})
				continue
			}
			d := next.at.Sub(k.at)
			rec = append(rec, d)
			if d > limit {
				vs = append(vs, violation{"returns", fmt.Sprintf("message %s held by killed worker %d came back %v after the kill, more than lease %v + slack %v",
					id, k.pid, d.Round(time.Millisecond), o.lease, o.slack)})
			}
		}
	}
	return vs, rec
}

// Causes a duplicate may have.
const (
	causeKilled = "killed-before-delete" // the worker finished, then died before its delete landed
)

// checkDuplicates: a message completed more than once only when the earlier
// completion's delete could not land: its worker was killed after it, or
// the proxy recorded a fault on a delete or renewal carrying the handle it
// was handled under, before the message came back; and never after the
// worker saw its delete confirmed. It returns the duplicates' count by
// cause.
func checkDuplicates(o *outcome) ([]violation, map[string]int) {
	ix := o.index()
	var vs []violation
	causes := map[string]int{}
	for id, es := range ix.entries {
		var dones []journal.Entry
		for _, e := range es {
			if e.Kind == journal.Done {
				dones = append(dones, e)
			}
		}
		sort.Slice(dones, func(i, j int) bool { return dones[i].Time.Before(dones[j].Time) })
		for _, d := range dones[:max(len(dones)-1, 0)] {
			cause := ix.explain(o, id, d)
			if cause == "" {
				vs = append(vs, violation{"duplicates", fmt.Sprintf("message %s completed again after worker %d completed it (receive %d at %s) with no kill or recorded fault to explain it",
					id, d.PID, d.ReceiveCount, d.Time.Format("15:04:05.000"))})
				cause = "unexplained"
			}
			causes[cause]++
		}
	}
	return vs, causes
}

// explain returns the cause of the redelivery that followed completion d
// of message id, or "".
func (ix index) explain(o *outcome, id string, d journal.Entry) string {
	// The delivery d handled: the last one to its worker before it ended,
	// and the next delivery of the message after it.
	ds := ix.deliveries[id]
	from, to := time.Time{}, time.Time{}
	handles := map[string]bool{}
	for i, dl := range ds {
		if dl.pid != d.PID || dl.at.After(d.Time) {
			continue
		}
		from, to = dl.at, time.Time{}
		handles = map[string]bool{dl.Handle: true}
		if i+1 < len(ds) {
			to = ds[i+1].at
		}
	}
	// A delete the worker saw confirmed must hold, whatever else happened:
	// a message that comes back after it was not deleted.
	for _, e := range ix.entries[id] {
		if e.Kind == "ev:deleted" && e.PID == d.PID && !e.Time.Before(d.Time) && (to.IsZero() || e.Time.Before(to)) {
			return ""
		}
	}
	if at, ok := ix.killedAt[d.PID]; ok && !at.Before(d.Time) {
		return causeKilled
	}
	if from.IsZero() {
		return ""
	}
	for _, r := range o.records {
		if r.Fault.Class == proxy.None || r.Fault.Class == proxy.FakeDelete || r.Time.Before(from) || (!to.IsZero() && r.Start.After(to)) {
			continue
		}
		if !slices.ContainsFunc(r.Handles, func(h string) bool { return handles[h] }) {
			continue
		}
		switch r.Action {
		case "DeleteMessage", "DeleteMessageBatch":
			return "delete-" + string(r.Fault.Class)
		case "ChangeMessageVisibility", "ChangeMessageVisibilityBatch":
			return "renewal-" + string(r.Fault.Class)
		}
	}
	return ""
}

// checkStop checks a SIGTERM: the process exits within the budget (plus
// slack); handlers that end within the budget complete and are deleted;
// handlers past it are cancelled with ErrShutdown and their messages visible
// again promptly; messages handed to the worker but never started — those
// of the receive in flight at SIGTERM among them — are visible to another
// consumer without waiting for the budget; and no message is stranded:
// everything not deleted is visible to another consumer soon after the exit,
// not a lease later.
func checkStop(o *outcome) []violation {
	s := o.stop
	ix := o.index()
	var vs []violation
	took := s.exit.Sub(s.term)
	if s.killed || took > s.budget+o.slack {
		vs = append(vs, violation{"stop-exit", fmt.Sprintf("worker %d took %v to exit after SIGTERM (killed by the driver: %v), budget %v + slack %v",
			s.pid, took.Round(time.Millisecond), s.killed, s.budget, o.slack)})
	} else if s.code != 0 {
		vs = append(vs, violation{"stop-exit", fmt.Sprintf("worker %d exited with status %d after SIGTERM", s.pid, s.code)})
	}
	for _, id := range s.finisher {
		del, ok := ix.deletedAt[id]
		if ix.count(id, journal.Done) == 0 || !ok || del.After(s.exit) {
			vs = append(vs, violation{"stop-finish", fmt.Sprintf("message %s, whose handler ends within the budget, was not completed and deleted before the exit", id)})
		}
	}
	prompt := s.exit.Add(o.slack)
	for _, id := range s.hanger {
		cancelled := false
		for _, e := range ix.entries[id] {
			if e.Kind == journal.Cancel && e.PID == s.pid && strings.Contains(e.Detail, sqsconsumer.ErrShutdown.Error()) {
				cancelled = true
			}
		}
		if !cancelled {
			vs = append(vs, violation{"stop-overrun", fmt.Sprintf("message %s: the handler past the budget was not cancelled with ErrShutdown", id)})
		}
		if at, ok := s.seen[id]; !ok || at.After(prompt) {
			vs = append(vs, violation{"stop-overrun", fmt.Sprintf("message %s: released at shutdown, not visible to another consumer by %v after the exit", id, o.slack)})
		}
	}
	unstartedBy := s.term.Add(s.hold + o.slack)
	for id, ds := range ix.deliveries {
		if !slices.ContainsFunc(ds, func(d delivery) bool { return d.pid == s.pid }) {
			continue
		}
		started := slices.ContainsFunc(ix.entries[id], func(e journal.Entry) bool { return e.Kind == journal.Start && e.PID == s.pid })
		if started {
			continue
		}
		if at, ok := s.seen[id]; !ok || at.After(unstartedBy) {
			vs = append(vs, violation{"stop-unstarted", fmt.Sprintf("message %s, handed to the worker and never started, not visible to another consumer within %v of SIGTERM",
				id, s.hold+o.slack)})
		}
	}
	var stranded []string
	for _, id := range o.sent {
		if _, deleted := ix.deletedAt[id]; deleted {
			continue
		}
		if at, ok := s.seen[id]; !ok || at.After(prompt) {
			stranded = append(stranded, id)
		}
	}
	if len(stranded) > 0 {
		vs = append(vs, violation{"stop-stranded", fmt.Sprintf("%d messages not deleted and not visible to another consumer within %v of the exit (lease %v): %s",
			len(stranded), o.slack, o.lease, short(stranded))})
	}
	return vs
}

func short(ids []string) string {
	if len(ids) > 5 {
		return strings.Join(ids[:5], ", ") + fmt.Sprintf(" and %d more", len(ids)-5)
	}
	return strings.Join(ids, ", ")
}
