package doctor

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Defaults and limits of InspectOptions.
const (
	// DefaultInspectMax is how many messages InspectDLQ peeks by default.
	DefaultInspectMax = 1000
	// DefaultPeekVisibility is how long a peeked message stays hidden by
	// default: long enough for a scan of DefaultInspectMax messages (100
	// receives) on a slow link. If the process dies during the scan, the
	// messages it peeked reappear after this long.
	DefaultPeekVisibility = 2 * time.Minute
	// DefaultTop is how many reasons and sources InspectDLQ lists by default.
	DefaultTop = 5
)

// InspectOptions tunes InspectDLQ. The zero value takes the defaults.
type InspectOptions struct {
	// Max is how many messages to peek at most; 0 means DefaultInspectMax, a
	// negative value peeks none (the report then has the counters only).
	Max int
	// Visibility is how long each peeked message stays hidden while the scan
	// runs (whole seconds, 1 s to 12 h); 0 means DefaultPeekVisibility. The scan
	// makes every message it peeked visible again when it ends.
	Visibility time.Duration
	// Top is how many reasons and sources to list; 0 means DefaultTop.
	Top int
	// Force peeks at a queue InspectDLQ would otherwise refuse (see
	// PeekRefusal): one that no queue's RedrivePolicy names, or one with a
	// RedrivePolicy of its own, whose maxReceiveCount the peeks count toward.
	Force bool
	// BeforePeek, when set, is called once before the first receive with what
	// the receives will do; not called when none is made (Max negative).
	BeforePeek func(PeekPlan)
}

// Tally is a count of peeked messages sharing a key (a reason, a source queue).
type Tally struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
}

// PeekCost is what a scan did to the dead-letter queue to read its messages.
type PeekCost struct {
	// Receives is the number of ReceiveMessage calls.
	Receives int `json:"receives"`
	// ReceiveCountRaised is how many messages' ApproximateReceiveCount the scan
	// raised by one (each peeked message once). Nothing else counts receives in
	// a DLQ unless it has a RedrivePolicy of its own: see DLQMaxReceiveCount.
	ReceiveCountRaised int `json:"receive_count_raised"`
	// HiddenFor is how long the peeked messages were hidden at most: the
	// scan's visibility timeout (they are released at the end, so only a
	// scan that dies leaves them hidden that long). Other consumers of the
	// DLQ and a running move task pass over them meanwhile.
	HiddenFor time.Duration `json:"-"`
	// Released is how many were made visible again at the end.
	Released int `json:"released"`
	// DLQMaxReceiveCount is the maxReceiveCount of the DLQ's own RedrivePolicy,
	// 0 when it has none. When set, every peek counts toward it, and a message
	// peeked often enough moves on to the next queue.
	DLQMaxReceiveCount int `json:"dlq_max_receive_count"`
}

// DLQReport is what InspectDLQ found.
type DLQReport struct {
	Queue Queue `json:"queue"`
	// The queue's counters (ApproximateNumberOfMessages, ...NotVisible,
	// ...Delayed), read before the scan.
	Visible  int64 `json:"visible"`
	InFlight int64 `json:"in_flight"`
	Delayed  int64 `json:"delayed"`
	// Sources are the queues whose RedrivePolicy names this one
	// (ListDeadLetterSourceQueues); nil when that call failed, SourcesError
	// then saying why.
	Sources      []string `json:"sources"`
	SourcesError string   `json:"sources_error,omitempty"`
	// Peeked is how many distinct messages the scan read.
	Peeked int `json:"peeked"`
	// Oldest and Median are the ages of the peeked messages at the scan, by
	// SentTimestamp.
	Oldest time.Duration `json:"-"`
	Median time.Duration `json:"-"`
	// OldestExpiresIn is how long the oldest peeked message has left before
	// retention deletes it, on a standard DLQ (which counts retention from the
	// original send); ExpiryKnown is false on FIFO DLQs, which restart it at the
	// move, a moment the message does not carry.
	OldestExpiresIn time.Duration `json:"-"`
	ExpiryKnown     bool          `json:"expiry_known"`
	// Reasons groups the peeked messages by the sqsconsumer.error attribute (its
	// first line, at most 120 characters; "" for messages without it), most
	// frequent first, at most Top of them; BySource by source queue name ("" when
	// unknown).
	Reasons  []Tally `json:"reasons"`
	BySource []Tally `json:"by_source"`
	// WithReason is how many peeked messages carry sqsconsumer.error: the ones
	// an sqsconsumer Consumer moved after a Permanent error.
	WithReason int `json:"with_reason"`
	// NotFromSQS is how many peeked messages have no DeadLetterQueueSourceArn
	// (sent to the DLQ by a program, such as sqsconsumer, not moved by SQS): a
	// move task without a destination cannot send them back; Replay can, with
	// sqsconsumer.source.
	NotFromSQS int      `json:"not_from_sqs"`
	Cost       PeekCost `json:"cost"`
}

// Empty reports whether the queue's counters show no message at all.
func (r *DLQReport) Empty() bool { return r.Visible+r.InFlight+r.Delayed == 0 }

// InspectDLQ reads a dead-letter queue: its counters, the queues that use it, and,
// by peeking at up to opts.Max messages, their ages and the reasons and sources
// they were dead-lettered with. Peeking is a receive: it raises each message's
// ApproximateReceiveCount by one and hides it for opts.Visibility, until the scan
// releases it at the end (Cost says what it cost). It does not delete or change
// anything else. Unless opts.Force, it peeks only at a dead-letter queue (one a
// RedrivePolicy names) without a RedrivePolicy of its own, and otherwise returns
// the counters with a *PeekRefusal (wrapping ErrUnsafePeek) before any receive. An error is returned when the queue cannot be read or a receive
// fails; the messages already peeked are released first.
func InspectDLQ(ctx context.Context, c DLQClient, dlqURL string, opts InspectOptions) (*DLQReport, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	q, counts, err := readCounters(ctx, c, dlqURL)
	if err != nil {
		return nil, fmt.Errorf("doctor: %w", err)
	}
	rep := &DLQReport{Queue: q, Visible: counts[0], InFlight: counts[1], Delayed: counts[2],
		Cost: PeekCost{HiddenFor: opts.Visibility}}
	if q.Redrive != nil {
		rep.Cost.DLQMaxReceiveCount = q.Redrive.MaxReceiveCount
	}
	if srcs, err := listSources(ctx, c, dlqURL); err != nil {
		rep.SourcesError = err.Error()
	} else {
		rep.Sources = srcs
	}
	if opts.Max > 0 {
		plan, err := checkPeek(q, rep.Visible, rep.Sources, rep.SourcesError, opts.Max, opts.Visibility, opts.Force)
		if err != nil {
			return rep, err
		}
		if opts.BeforePeek != nil {
			opts.BeforePeek(plan)
		}
	}

	now := time.Now()
	var msgs []DeadLetter
	var hs []held
	seen := map[string]bool{}
	for len(msgs) < opts.Max {
		got, err := receiveDLQ(ctx, c, dlqURL, opts.Max-len(msgs), opts.Visibility)
		rep.Cost.Receives++
		if err != nil {
			n, _ := release(ctx, c, dlqURL, hs)
			rep.Cost.Released = n
			return rep, fmt.Errorf("doctor: %w", err)
		}
		fresh := 0
		for _, m := range got {
			hs = append(hs, held{aws.ToString(m.MessageId), aws.ToString(m.ReceiptHandle)})
			if seen[aws.ToString(m.MessageId)] {
				continue // its peek visibility ran out during the scan
			}
			seen[aws.ToString(m.MessageId)] = true
			fresh++
			msgs = append(msgs, parseDeadLetter(m))
		}
		if fresh == 0 {
			break
		}
	}
	n, rerr := release(ctx, c, dlqURL, hs)
	rep.Cost.Released = n
	rep.summarise(msgs, now, opts.Top)
	if rerr != nil {
		return rep, fmt.Errorf("doctor: %w (those messages stay hidden for up to %s)", rerr, fmtDur(opts.Visibility))
	}
	return rep, nil
}

func (o *InspectOptions) fill() error {
	if o.Max == 0 {
		o.Max = DefaultInspectMax
	}
	if o.Max < 0 {
		o.Max = 0
	}
	if o.Visibility == 0 {
		o.Visibility = DefaultPeekVisibility
	}
	if err := checkVisibility("InspectOptions.Visibility", o.Visibility); err != nil {
		return err
	}
	if o.Top == 0 {
		o.Top = DefaultTop
	}
	if o.Top < 0 {
		return fmt.Errorf("doctor: InspectOptions.Top %d: must not be negative", o.Top)
	}
	return nil
}

// checkVisibility refuses a visibility timeout SQS would not take.
func checkVisibility(name string, d time.Duration) error {
	if d < time.Second || d > 12*time.Hour || d%time.Second != 0 {
		return fmt.Errorf("doctor: %s %s: must be whole seconds from 1s to 12h (SQS's visibility timeout range)", name, d)
	}
	return nil
}

func (r *DLQReport) summarise(msgs []DeadLetter, now time.Time, top int) {
	r.Peeked = len(msgs)
	r.Cost.ReceiveCountRaised = len(msgs)
	if len(msgs) == 0 {
		return
	}
	ages := make([]time.Duration, 0, len(msgs))
	reasons, sources := map[string]int{}, map[string]int{}
	for _, d := range msgs {
		if !d.SentAt.IsZero() {
			ages = append(ages, max(now.Sub(d.SentAt), 0))
		}
		if d.Reason != "" {
			r.WithReason++
		}
		if !d.SourceFromSQS {
			r.NotFromSQS++
		}
		reasons[shortReason(d.Reason)]++
		src := ""
		if d.Source != "" {
			src = queueName(d.Source)
		}
		sources[src]++
	}
	if len(ages) > 0 {
		slices.Sort(ages)
		r.Oldest, r.Median = ages[len(ages)-1], ages[(len(ages)-1)/2]
		if !r.Queue.FIFO {
			r.OldestExpiresIn, r.ExpiryKnown = max(r.Queue.RetentionPeriod-r.Oldest, 0), true
		}
	}
	r.Reasons, r.BySource = topTallies(reasons, top), topTallies(sources, top)
}

// topTallies sorts counts, most frequent first (ties by key), and keeps n.
func topTallies(counts map[string]int, n int) []Tally {
	out := make([]Tally, 0, len(counts))
	for k, v := range counts {
		out = append(out, Tally{k, v})
	}
	slices.SortFunc(out, func(a, b Tally) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// readCounters reads the queue and its three message counters.
func readCounters(ctx context.Context, c Client, url string) (Queue, [3]int64, error) {
	var counts [3]int64
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return Queue{}, counts, fmt.Errorf("reading the attributes of %s: %w", url, err)
	}
	q, err := parseAttributes(url, out.Attributes)
	if err != nil {
		return q, counts, fmt.Errorf("the attributes of %s: %w", url, err)
	}
	for i, name := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
		counts[i], _ = strconv.ParseInt(out.Attributes[name], 10, 64)
	}
	return q, counts, nil
}

// listSources lists the queues whose RedrivePolicy names the queue at url.
func listSources(ctx context.Context, c DLQClient, url string) ([]string, error) {
	srcs := []string{}
	p := sqs.NewListDeadLetterSourceQueuesPaginator(c, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(url), MaxResults: aws.Int32(1000)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing the queues that use %s as their DLQ: %w", url, err)
		}
		srcs = append(srcs, out.QueueUrls...)
	}
	return srcs, nil
}

// MarshalJSON encodes the report with its durations in seconds: the fields above
// plus oldest_age_seconds, median_age_seconds and, when known,
// oldest_expires_in_seconds.
func (r DLQReport) MarshalJSON() ([]byte, error) {
	type plain DLQReport
	v := struct {
		plain
		Oldest  float64  `json:"oldest_age_seconds"`
		Median  float64  `json:"median_age_seconds"`
		Expires *float64 `json:"oldest_expires_in_seconds,omitempty"`
	}{plain: plain(r), Oldest: r.Oldest.Seconds(), Median: r.Median.Seconds()}
	if r.ExpiryKnown {
		e := r.OldestExpiresIn.Seconds()
		v.Expires = &e
	}
	return json.Marshal(v)
}

// MarshalJSON encodes the cost with HiddenFor as hidden_for_seconds.
func (c PeekCost) MarshalJSON() ([]byte, error) {
	type plain PeekCost
	return json.Marshal(struct {
		plain
		Hidden float64 `json:"hidden_for_seconds"`
	}{plain(c), c.HiddenFor.Seconds()})
}
