package scalesim

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer"
)

// Policy decides how many replicas the queue needs, once per decision period. The
// autoscaler model applies the answer (clamped to the run's minimum and maximum)
// with ECS-like rules: scale-out at once, scale-in after the cooldown.
type Policy interface {
	// Name identifies the policy in results and tables.
	Name() string
	// Options are the Consumer options the policy needs on every replica (ours
	// enables the signal); nil for none.
	Options(v Setup) []sqsconsumer.Option
	// Desired returns the replicas wanted now. An error ends the run.
	Desired(ctx context.Context, v View) (int, error)
}

// Setup is what a policy may know about the run before it starts.
type Setup struct {
	// Target is the longest acceptable wait from send to handler start.
	Target time.Duration
	// Concurrency is each replica's handler slots (after the scale factor).
	Concurrency int
	// MeanHandler is the mean of the handler-time distribution at normal speed.
	MeanHandler time.Duration
}

// View is what a policy sees at a decision.
type View struct {
	Setup
	// Client reaches the simulated queue, as a real scaler's would.
	Client   *sqs.Client
	QueueURL string
	// Current is the replicas the service has now (starting or serving), the
	// service's desired count.
	Current int
	// Serving are the replicas' Consumers that have started (Run called), oldest
	// first. Never empty while the minimum is at least 1, after the first start.
	Serving []*sqsconsumer.Consumer
	// Visible and InFlight are the queue's counts at the decision, read once
	// with GetQueueAttributes as KEDA's aws-sqs-queue scaler and AWS's
	// backlog-per-instance Lambda read them.
	Visible, InFlight float64
}

// queueCounts reads the visible and in-flight counts with GetQueueAttributes, as
// KEDA's aws-sqs-queue scaler and AWS's backlog-per-instance Lambda do (View's
// Visible and InFlight).
func queueCounts(ctx context.Context, v View) (visible, inFlight float64, err error) {
	out, err := v.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(v.QueueURL),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		return 0, 0, fmt.Errorf("scalesim: GetQueueAttributes: %w", err)
	}
	vis, err1 := strconv.ParseFloat(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)], 64)
	inf, err2 := strconv.ParseFloat(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)], 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("scalesim: GetQueueAttributes answered %v", out.Attributes)
	}
	return vis, inf, nil
}

// perReplica is AWS's acceptable backlog per instance, acceptable latency / average
// processing time, times the replica's concurrency: a replica works on that many
// messages at once, so it drains a backlog that many times as fast as the
// one-at-a-time instance the guidance assumes.
func perReplica(s Setup) float64 {
	return s.Target.Seconds() / s.MeanHandler.Seconds() * float64(s.Concurrency)
}

// KEDA is KEDA's aws-sqs-queue scaler: replicas = ceil((visible + in flight) /
// queueLength) (KEDA counts ApproximateNumberOfMessagesNotVisible unless
// scaleOnInFlight is false), with queueLength from AWS's guidance: target latency /
// mean handler time × concurrency, rounded to a whole number as KEDA's setting is.
type KEDA struct{}

// Name is "keda".
func (KEDA) Name() string { return "keda" }

// Options is nil: KEDA needs nothing from the Consumer.
func (KEDA) Options(Setup) []sqsconsumer.Option { return nil }

// QueueLength is the queueLength this policy sets for s, at least 1.
func (KEDA) QueueLength(s Setup) float64 { return max(1, math.Round(perReplica(s))) }

// Desired implements Policy.
func (k KEDA) Desired(_ context.Context, v View) (int, error) {
	return int(math.Ceil((v.Visible + v.InFlight) / k.QueueLength(v.Setup))), nil
}

// BacklogPerInstance is AWS's "scaling based on Amazon SQS" policy under ECS target
// tracking: the metric is visible messages / replicas serving, the target value
// acceptable latency / average processing time × concurrency (see perReplica), and
// target tracking sets replicas = ceil(current × metric / target), current being the
// replicas serving. (With current = serving that is ceil(visible / target value).)
type BacklogPerInstance struct{}

// Name is "backlog".
func (BacklogPerInstance) Name() string { return "backlog" }

// Options is nil: the policy needs nothing from the Consumer.
func (BacklogPerInstance) Options(Setup) []sqsconsumer.Option { return nil }

// TargetValue is the acceptable backlog per replica for s.
func (BacklogPerInstance) TargetValue(s Setup) float64 { return perReplica(s) }

// Desired implements Policy.
func (b BacklogPerInstance) Desired(_ context.Context, v View) (int, error) {
	serving := len(v.Serving)
	if serving == 0 {
		return v.Current, nil // no metric: the Lambda divides by the running count
	}
	metric := v.Visible / float64(serving)
	return int(math.Ceil(float64(serving) * metric / b.TargetValue(v.Setup))), nil
}
