package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqsclient"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// queue is where a run sends and consumes: the in-memory server or a real
// SQS queue, behind the same few functions.
type queue struct {
	where  string // for the report
	url    string
	client sqsconsumer.Client
	// sendBodies enqueues the bodies in order and returns their message IDs.
	sendBodies func(ctx context.Context, bodies []string) ([]string, error)
	// calls returns the API requests made so far, by action.
	calls func() map[string]int
	// states returns the server's view of every message (nil against AWS).
	states func() []sqstest.MessageState
}

func (q *queue) send(ctx context.Context, jobs []job) ([]string, error) {
	bodies := make([]string, len(jobs))
	for i, j := range jobs {
		bodies[i] = j.body()
	}
	return q.sendBodies(ctx, bodies)
}

// memoryQueue starts an in-memory SQS and creates a queue on it. The client
// reaches the server through an in-memory transport: no socket is opened.
func memoryQueue() (*queue, error) {
	srv := sqstest.NewServer()
	url, err := srv.CreateQueue("quickstart", nil)
	if err != nil {
		return nil, err
	}
	return &queue{
		where:  "in-memory SQS (sqstest)",
		url:    url,
		client: srv.Client(),
		sendBodies: func(_ context.Context, bodies []string) ([]string, error) {
			ids := make([]string, len(bodies))
			for i, b := range bodies {
				id, err := srv.Send(url, b)
				if err != nil {
					return nil, err
				}
				ids[i] = id
			}
			return ids, nil
		},
		calls:  srv.Calls,
		states: func() []sqstest.MessageState { return srv.Messages(url) },
	}, nil
}

// awsQueue uses the real queue at url with the default AWS configuration.
// API calls are counted on the client side.
func awsQueue(ctx context.Context, url string) (*queue, error) {
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	sc, err := sqsclient.NewFromConfig(awsCfg, sqsclient.HTTPOptions{})
	if err != nil {
		return nil, err
	}
	cc := &countingClient{c: sc, n: map[string]int{}}
	return &queue{
		where:  "SQS " + url,
		url:    url,
		client: cc,
		sendBodies: func(ctx context.Context, bodies []string) ([]string, error) {
			return sendBatches(ctx, sc, url, bodies)
		},
		calls: cc.calls,
	}, nil
}

// sendBatches sends bodies ten at a time with SendMessageBatch.
func sendBatches(ctx context.Context, c *sqs.Client, url string, bodies []string) ([]string, error) {
	ids := make([]string, len(bodies))
	for start := 0; start < len(bodies); start += 10 {
		end := min(start+10, len(bodies))
		entries := make([]types.SendMessageBatchRequestEntry, 0, end-start)
		for i := start; i < end; i++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{
				Id:          aws.String(strconv.Itoa(i)),
				MessageBody: aws.String(bodies[i]),
			})
		}
		out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			return nil, err
		}
		if len(out.Failed) > 0 {
			f := out.Failed[0]
			return nil, fmt.Errorf("SendMessageBatch: %d entries failed, e.g. %s: %s", len(out.Failed), aws.ToString(f.Code), aws.ToString(f.Message))
		}
		for _, s := range out.Successful {
			i, err := strconv.Atoi(aws.ToString(s.Id))
			if err != nil || i < start || i >= end {
				return nil, fmt.Errorf("SendMessageBatch: unexpected entry id %q", aws.ToString(s.Id))
			}
			ids[i] = aws.ToString(s.MessageId)
		}
	}
	return ids, nil
}

// countingClient counts the requests a Consumer makes, by action.
type countingClient struct {
	c  *sqs.Client
	mu sync.Mutex // guards n
	n  map[string]int
}

func (c *countingClient) count(action string) {
	c.mu.Lock()
	c.n[action]++
	c.mu.Unlock()
}

func (c *countingClient) calls() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.n))
	for k, v := range c.n {
		m[k] = v
	}
	return m
}

func (c *countingClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.count("ReceiveMessage")
	return c.c.ReceiveMessage(ctx, in, optFns...)
}

func (c *countingClient) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	c.count("DeleteMessage")
	return c.c.DeleteMessage(ctx, in, optFns...)
}

func (c *countingClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	c.count("DeleteMessageBatch")
	return c.c.DeleteMessageBatch(ctx, in, optFns...)
}

func (c *countingClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	c.count("ChangeMessageVisibility")
	return c.c.ChangeMessageVisibility(ctx, in, optFns...)
}

func (c *countingClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	c.count("ChangeMessageVisibilityBatch")
	return c.c.ChangeMessageVisibilityBatch(ctx, in, optFns...)
}

func (c *countingClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	c.count("GetQueueAttributes")
	return c.c.GetQueueAttributes(ctx, in, optFns...)
}

var _ sqsconsumer.Client = (*countingClient)(nil)
