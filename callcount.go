package sqsconsumer

import (
	"context"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// CallCounts counts the SQS API calls a Consumer made, by action: what a
// user pays for (SQS bills each request, and each 64 KiB of a request's
// payload as one more; see https://aws.amazon.com/sqs/pricing/). A call is
// counted once however many attempts the SDK's retryer made for it (each
// attempt is a billed request: the SDK retries throttling and 5xx answers
// up to 3 attempts by default). The zero value counts nothing.
type CallCounts struct {
	// Receive counts ReceiveMessage calls; EmptyReceive those of them
	// that returned no message (a long poll that waited in vain, still a
	// billed request).
	Receive, EmptyReceive int64
	// Delete counts DeleteMessage calls; DeleteBatch DeleteMessageBatch
	// calls (up to 10 messages each).
	Delete, DeleteBatch int64
	// ChangeVisibility counts ChangeMessageVisibility calls;
	// ChangeVisibilityBatch ChangeMessageVisibilityBatch calls (renewals
	// and releases, up to 10 messages each).
	ChangeVisibility, ChangeVisibilityBatch int64
	// GetQueueAttributes counts every GetQueueAttributes call: at Run's
	// start, the dead-letter queue's check, the scaling signal's
	// readings, and, without the signal, the in-flight quota's check
	// (after 3 empty receives in a row, at most once every 5 minutes: see
	// Health.Warnings); ScalingAttributes counts the scaling signal's
	// alone.
	GetQueueAttributes, ScalingAttributes int64
	// SendMessage counts SendMessage calls (moves to the dead-letter
	// queue).
	SendMessage int64
}

// Total returns the number of calls, every action included
// (ScalingAttributes is part of GetQueueAttributes and counted once).
func (n CallCounts) Total() int64 {
	return n.Receive + n.Delete + n.DeleteBatch + n.ChangeVisibility + n.ChangeVisibilityBatch +
		n.GetQueueAttributes + n.SendMessage
}

// callCounter counts a Consumer's calls as they are made. Safe for
// concurrent use (atomics).
type callCounter struct {
	receive, emptyReceive, del, delBatch, vis, visBatch, attrs, scalingAttrs, send atomic.Int64
}

func (c *callCounter) counts() CallCounts {
	return CallCounts{
		Receive: c.receive.Load(), EmptyReceive: c.emptyReceive.Load(),
		Delete: c.del.Load(), DeleteBatch: c.delBatch.Load(),
		ChangeVisibility: c.vis.Load(), ChangeVisibilityBatch: c.visBatch.Load(),
		GetQueueAttributes: c.attrs.Load(), ScalingAttributes: c.scalingAttrs.Load(),
		SendMessage: c.send.Load(),
	}
}

// countedClient is the client a Consumer calls SQS through: the user's,
// counting each call.
type countedClient struct {
	Client
	n *callCounter
}

// countedSender is a countedClient whose client can also SendMessage.
type countedSender struct {
	countedClient
	s messageSender
}

// countCalls wraps c so that n counts its calls; the result has a
// SendMessage method exactly when c has one.
func countCalls(c Client, n *callCounter) Client {
	cc := countedClient{Client: c, n: n}
	if s, ok := c.(messageSender); ok && !isNil(s) {
		return countedSender{countedClient: cc, s: s}
	}
	return cc
}

// userClient returns the client a Consumer was given, under the counting.
func userClient(c Client) Client {
	switch v := c.(type) {
	case countedClient:
		return v.Client
	case countedSender:
		return v.Client
	}
	return c
}

func (c countedClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.n.receive.Add(1)
	out, err := c.Client.ReceiveMessage(ctx, in, optFns...)
	if err == nil && (out == nil || len(out.Messages) == 0) {
		c.n.emptyReceive.Add(1)
	}
	return out, err
}

func (c countedClient) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	c.n.del.Add(1)
	return c.Client.DeleteMessage(ctx, in, optFns...)
}

func (c countedClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	c.n.delBatch.Add(1)
	return c.Client.DeleteMessageBatch(ctx, in, optFns...)
}

func (c countedClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	c.n.vis.Add(1)
	return c.Client.ChangeMessageVisibility(ctx, in, optFns...)
}

func (c countedClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	c.n.visBatch.Add(1)
	return c.Client.ChangeMessageVisibilityBatch(ctx, in, optFns...)
}

func (c countedClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	c.n.attrs.Add(1)
	return c.Client.GetQueueAttributes(ctx, in, optFns...)
}

func (c countedSender) SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	c.n.send.Add(1)
	return c.s.SendMessage(ctx, in, optFns...)
}
