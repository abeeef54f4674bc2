package sqsconsumer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/internal/scaling"
)

// The scaling signal's defaults and limits (ScalingPolicy).
const (
	// DefaultScalingInterval is how often the signal reads the queue's
	// counts: one GetQueueAttributes call per replica every 30 s, 86,400
	// a month (about $0.035 at $0.40 per million requests).
	DefaultScalingInterval = 30 * time.Second
	// MinScalingInterval and MaxScalingInterval bound ScalingPolicy.Interval.
	MinScalingInterval = 5 * time.Second
	MaxScalingInterval = 15 * time.Minute
	// DefaultScaleInAfter is how long the arrivals' share of the figure
	// holds before it falls: the highest such share of the last 5 minutes
	// (Kubernetes' default scale-down stabilization window is also 5
	// minutes). The backlog's share is not held (see ScalingPolicy).
	DefaultScaleInAfter = 5 * time.Minute
	// DefaultScalingUtilization is the share of a replica's measured
	// capacity the figure plans for. The rest is headroom for bursts and
	// for the noise of SQS's counts; the scale-in window, which holds the
	// highest arrivals' share of 5 minutes, adds some of its own. In the scaling
	// simulation (package scalesim, 1/10 of 2,000 msg/s) 0.85 settled at
	// 15 to 17 replicas where 12 meet the target; 0.9 settles at 15.
	DefaultScalingUtilization = 0.9
)

// scalingCallTimeout bounds one reading's GetQueueAttributes call.
const scalingCallTimeout = 10 * time.Second

// staleReadings is how many failed readings in a row make the figure
// unknown: the last one is then too old to follow.
const staleReadings = 3

// ScalingPolicy configures the scaling signal (WithScaling): the number
// of replicas of this service the queue needs so that a message waits at
// most Target from its send to its handler's start. Only Target is
// required; the zero value of every other field is its default.
type ScalingPolicy struct {
	// Target is the longest acceptable wait from a message's send to its
	// handler's start. Required, at least a second, at most 12 h.
	Target time.Duration
	// Interval is how often the queue's counts are read
	// (GetQueueAttributes). Default DefaultScalingInterval (30 s), range
	// [MinScalingInterval, MaxScalingInterval] (5 s to 15 min).
	Interval time.Duration
	// ScaleInAfter is how long the arrivals' share of the figure holds
	// before it falls: that share is the highest of the readings of the
	// last ScaleInAfter, so it rises at once and falls only when the
	// arrivals have stayed lower that long. The backlog's share is not
	// held: it follows the smoothed visible count, which falls halfway to
	// each lower reading, so the replicas a drained backlog needed go
	// within a few readings.
	// Default DefaultScaleInAfter (5 min), at most 1 h; 0 takes the
	// default, use a negative value for no holding at all.
	ScaleInAfter time.Duration
	// Utilization is the share of one replica's measured capacity the
	// figure plans for, in (0, 1]. Default DefaultScalingUtilization (0.9).
	Utilization float64
	// ScaleToZero lets the figure be 0 once two readings in a row found
	// the queue empty (nothing visible, in flight or delayed). Without it
	// the figure is at least 1. Note that a replica that is not running
	// cannot serve the figure (see ScalingHandler).
	ScaleToZero bool
	// CountDelayed counts delayed messages (DelaySeconds, delay queues)
	// as backlog. Default off: they cannot be received before their delay
	// ends, and the figure rises when they become visible.
	CountDelayed bool
	// MinReplicas and MaxReplicas clamp the figure; 0 means no clamp.
	// MinReplicas does not lift a 0 that ScaleToZero allowed.
	MinReplicas, MaxReplicas int
	// EMFNamespace, when set, makes each known reading write one line in
	// CloudWatch's embedded metric format to EMFWriter. See docs/scaling.md
	// in the module's repository for the ECS target-tracking policy that
	// follows it. CloudWatch's rules for a namespace apply: 1 to 255
	// characters among letters, digits, space and . - _ / # :, not
	// starting with a colon, and not starting with "AWS/" (reserved for
	// AWS's own metrics, which CloudWatch would drop the lines of).
	EMFNamespace string
	// EMFWriter is where the EMF lines go: one JSON object a line, written
	// with one Write each, whatever WithLogger's level and handler (the
	// lines do not go through the logger). Default os.Stdout, which
	// FireLens and the CloudWatch agent read from a container. Writes of
	// all Consumers are serialized, so one writer may be shared. A failed
	// write is logged at Warn.
	EMFWriter io.Writer
}

// emfAllowed are the characters CloudWatch allows in a namespace besides
// letters and digits.
const emfAllowed = " ._-/#:"

// check reports what is wrong with p (its defaults applied) beyond
// WithScaling's own ranges: the EMF namespace, then the figure's policy.
func (p ScalingPolicy) check() error {
	if ns := p.EMFNamespace; ns != "" {
		switch {
		case len(ns) > 255:
			return fmt.Errorf("EMFNamespace is %d characters, CloudWatch allows 255", len(ns))
		case strings.HasPrefix(ns, "AWS/"):
			return fmt.Errorf("EMFNamespace %q starts with \"AWS/\", which CloudWatch reserves for AWS's own metrics", ns)
		case ns[0] == ':':
			return fmt.Errorf("EMFNamespace %q starts with a colon, which CloudWatch does not allow", ns)
		}
		for _, c := range ns {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(emfAllowed, c)) {
				return fmt.Errorf("EMFNamespace %q has %q, which CloudWatch does not allow (letters, digits and %q only)", ns, c, emfAllowed)
			}
		}
	}
	return p.internal().Check()
}

// figure is a Scaling that holds p's own fields and no reading.
func (p ScalingPolicy) figure() Scaling {
	return Scaling{Target: p.Target, Utilization: p.Utilization, ScaleInAfter: p.ScaleInAfter}
}

func (p ScalingPolicy) internal() scaling.Policy {
	return scaling.Policy{Target: p.Target, ScaleInAfter: p.ScaleInAfter, Utilization: p.Utilization,
		ScaleToZero: p.ScaleToZero, CountDelayed: p.CountDelayed, Min: p.MinReplicas, Max: p.MaxReplicas}
}

// Scaling is the scaling signal's latest figure (Consumer.Scaling). It is
// a value: it does not change after it is returned.
type Scaling struct {
	// Known is false while the figure cannot be computed: the signal is
	// off, Run has not read the queue yet, no handler has finished (one
	// replica's capacity is unknown; the first to finish makes the latest
	// reading known at once), or the latest readings failed.
	// Reason says which, plainly; Replicas is then the last known figure
	// (0 if none).
	Known  bool   `json:"known"`
	Reason string `json:"reason,omitempty"`
	// Replicas is the signal: how many replicas like this one the queue
	// needs to meet Target.
	Replicas int `json:"replicas"`
	// Raw is the latest reading's figure before rounding up, the scale-in
	// window and the clamps.
	Raw float64 `json:"raw"`
	// Visible, InFlight and Delayed are the smoothed queue counts
	// (ApproximateNumberOfMessages, ...NotVisible, ...Delayed).
	Visible  float64 `json:"visible"`
	InFlight float64 `json:"in_flight"`
	Delayed  float64 `json:"delayed"`
	// ArrivalRate is the whole queue's inferred arrival rate and Demand
	// the rate the replicas must finish to keep up and start the backlog
	// within Target, both in messages a second.
	ArrivalRate float64 `json:"arrival_rate"`
	Demand      float64 `json:"demand"`
	// CapacityPerReplica is what this replica's handler slots finish a
	// second when never starved (messages a second; 0 when unknown).
	CapacityPerReplica float64 `json:"capacity_per_replica"`
	// SlotTime is the mean time a message holds a handler slot here: with
	// Demand, the handler slots the queue keeps busy (Demand × SlotTime),
	// which a fleet adds up across queues that share its budget.
	SlotTime time.Duration `json:"-"`
	// Target, Utilization and ScaleInAfter are the policy's (0 when the
	// signal is off).
	Target       time.Duration `json:"-"`
	Utilization  float64       `json:"-"`
	ScaleInAfter time.Duration `json:"-"`
	// At is when the latest reading was taken (zero before one).
	At time.Time `json:"at"`
	// Err is the latest reading's failure, "" when it succeeded.
	Err string `json:"error,omitempty"`
}

// scaler is a Consumer's scaling signal: it owns the Signal and the
// latest figure. Its readings run on one goroutine that Run starts and
// joins; Scaling may be read from any goroutine.
type scaler struct {
	p        ScalingPolicy
	client   Client
	queueURL string
	conc     int            // the Consumer's handler slots
	stats    *statsRecorder // the Consumer's: the recent mean time not visible
	ev       *eventSink     // the Consumer's logger

	// waiting is set while the figure is unknown only because no handler
	// has finished here yet; the first finish then kicks the scaler
	// (completed), which figures the last reading at once rather than at
	// the next one, up to Interval later: a fresh replica answers within
	// one handler's time, so that an autoscaler's polls landing on it do
	// not count failures in a row.
	waiting atomic.Bool
	kick    chan struct{} // capacity 1

	mu     sync.Mutex // guards the fields below
	sig    *scaling.Signal
	fig    Scaling
	failed int             // failed readings in a row
	last   scaling.Reading // the latest successful reading's counts
}

// completed tells the scaler that a handler finished: cheap (one atomic
// load) unless the figure waits for it. Safe from any goroutine, with
// any lock held.
func (sc *scaler) completed() {
	if sc != nil && sc.waiting.Load() && sc.waiting.CompareAndSwap(true, false) {
		select {
		case sc.kick <- struct{}{}:
		default:
		}
	}
}

// lastCounts is the latest successful reading's raw counts (At zero
// before any), for the in-flight quota's check (quota.go).
func (sc *scaler) lastCounts() scaling.Reading {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.last
}

// figure is the latest figure; nil (the signal is off) is never Known.
func (sc *scaler) figure() Scaling {
	if sc == nil {
		return Scaling{Reason: "the scaling signal is off: set WithScalingTarget"}
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.fig
}

type scalingJSON struct {
	Scaling
	TargetSeconds float64 `json:"target_seconds"`
}

// run reads the queue's counts every interval until ctx is done.
func (sc *scaler) run(ctx context.Context, fl *flow[*delivery]) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sc.kick:
			sc.refigure(fl)
			continue
		case <-t.C:
		}
		sc.scale(ctx, fl)
		t.Reset(sc.p.Interval)
	}
}

// refigure figures the latest reading's counts again with the capacity
// measured since: no call to SQS, no EMF line and no change to the
// Signal's smoothing or window (it is no new reading; the next one
// goes on from the last).
func (sc *scaler) refigure(fl *flow[*delivery]) {
	capacity, mean := fl.capacityNow(), sc.stats.meanNotVisible()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.fig.Known || sc.failed > 0 || sc.last.At.IsZero() {
		return
	}
	r := sc.last
	r.Capacity, r.MeanInFlight = capacity, mean
	sc.apply(sc.sig.Peek(r))
}

// scale takes one reading and updates the figure.
func (sc *scaler) scale(ctx context.Context, fl *flow[*delivery]) {
	sc.stats.calls.scalingAttrs.Add(1)
	cctx, cancel := context.WithTimeout(ctx, scalingCallTimeout)
	out, err := sc.client.GetQueueAttributes(cctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(sc.queueURL),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	cancel()
	var r scaling.Reading
	if err == nil {
		r, err = queueCounts(out)
	}
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down
		}
		sc.mu.Lock()
		sc.failed++
		failed := sc.failed
		sc.fig.Err = err.Error()
		if failed >= staleReadings {
			sc.fig.Known = false
			sc.fig.Reason = fmt.Sprintf("the last %d readings of the queue's counts failed", failed)
		}
		sc.mu.Unlock()
		sc.ev.log(slog.LevelWarn, "sqsconsumer: scaling signal: reading the queue's counts failed", "error", err, "failures_in_a_row", failed)
		return
	}
	r.At = time.Now()
	r.Capacity = fl.capacityNow()
	r.MeanInFlight = sc.stats.meanNotVisible()
	sc.mu.Lock()
	sc.failed = 0
	sc.last = r
	sc.apply(sc.sig.Update(r))
	fig := sc.fig
	sc.mu.Unlock()
	if sc.p.EMFNamespace != "" && fig.Known {
		sc.writeEMF(fig)
	}
}

// apply makes f the figure. sc.mu must be held.
func (sc *scaler) apply(f scaling.Figure) {
	sc.fig = sc.p.figure()
	sc.fig.Known, sc.fig.Reason, sc.fig.Replicas, sc.fig.Raw = f.Known, f.Reason, f.Replicas, f.Raw
	sc.fig.Visible, sc.fig.InFlight, sc.fig.Delayed = f.Visible, f.InFlight, f.Delayed
	sc.fig.ArrivalRate, sc.fig.Demand, sc.fig.At = f.ArrivalRate, f.Demand, f.At
	if !math.IsInf(f.Capacity, 0) && f.Capacity > 0 {
		sc.fig.CapacityPerReplica = f.Capacity
		sc.fig.SlotTime = time.Duration(float64(sc.conc) / f.Capacity * float64(time.Second))
	}
	// Unknown for want of a completion here (a reading that succeeded is
	// unknown for no other reason): the next one kicks refigure.
	sc.waiting.Store(!f.Known)
}

// queueCounts parses the counts of a GetQueueAttributes answer.
func queueCounts(out *sqs.GetQueueAttributesOutput) (scaling.Reading, error) {
	var r scaling.Reading
	if out == nil {
		return r, fmt.Errorf("sqsconsumer: GetQueueAttributes returned no answer")
	}
	for _, f := range []struct {
		name types.QueueAttributeName
		dst  *int64
	}{
		{types.QueueAttributeNameApproximateNumberOfMessages, &r.Visible},
		{types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, &r.InFlight},
		{types.QueueAttributeNameApproximateNumberOfMessagesDelayed, &r.Delayed},
	} {
		v, ok := out.Attributes[string(f.name)]
		if !ok {
			return r, fmt.Errorf("sqsconsumer: GetQueueAttributes returned no %s", f.name)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return r, fmt.Errorf("sqsconsumer: GetQueueAttributes returned %s %q, not a count", f.name, v)
		}
		*f.dst = n
	}
	return r, nil
}

// emfDirective is the "_aws" member of an embedded-metric-format line
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html).
type emfDirective struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []emfMetric `json:"CloudWatchMetrics"`
}

type emfMetric struct {
	Namespace  string       `json:"Namespace"`
	Dimensions [][]string   `json:"Dimensions"`
	Metrics    []emfMetricV `json:"Metrics"`
}

type emfMetricV struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

// emfMetrics are the metrics each line carries.
var emfMetrics = []emfMetricV{
	{"DesiredReplicas", "Count"}, {"Backlog", "Count"}, {"ArrivalRate", "Count/Second"},
}

// emfLine is one embedded-metric-format line: the "_aws" directive and
// the metric values as top-level members, dimensioned by QueueName.
type emfLine struct {
	AWS             emfDirective `json:"_aws"`
	QueueName       string       `json:"QueueName"`
	DesiredReplicas int          `json:"DesiredReplicas"`
	Backlog         float64      `json:"Backlog"`
	ArrivalRate     float64      `json:"ArrivalRate"`
}

// emfMu serializes the EMF lines of every Consumer of the process, which
// may share a writer (os.Stdout by default).
var emfMu sync.Mutex

// writeEMF writes f as one CloudWatch embedded-metric-format line to the
// policy's writer, not through the logger: a logger's level, handler or
// groups must not lose the metric.
func (sc *scaler) writeEMF(f Scaling) {
	line, err := json.Marshal(emfLine{
		AWS: emfDirective{
			Timestamp: f.At.UnixMilli(),
			CloudWatchMetrics: []emfMetric{{
				Namespace: sc.p.EMFNamespace, Dimensions: [][]string{{"QueueName"}}, Metrics: emfMetrics,
			}},
		},
		QueueName:       queueName(sc.queueURL),
		DesiredReplicas: f.Replicas,
		Backlog:         math.Round(f.Visible),
		ArrivalRate:     math.Round(f.ArrivalRate*100) / 100,
	})
	if err != nil {
		return // the values are finite numbers and strings: cannot happen
	}
	w := sc.p.EMFWriter
	if w == nil {
		w = os.Stdout
	}
	emfMu.Lock()
	_, err = w.Write(append(line, '\n'))
	emfMu.Unlock()
	if err != nil {
		sc.ev.log(slog.LevelWarn, "sqsconsumer: scaling signal: writing the EMF line failed", "error", err)
	}
}

// queueName is the last path element of a queue URL.
func queueName(url string) string {
	return url[strings.LastIndexByte(url, '/')+1:]
}
