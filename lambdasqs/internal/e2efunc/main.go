// Command e2efunc is the Lambda function of lambdasqs's end-to-end test
// (rie_test.go): built as a bootstrap binary and run under the AWS Lambda
// Runtime Interface Emulator, it handles SQS events through lambdasqs.
//
// A message body is "NAME WORK_MS MODE": the job takes WORK_MS
// milliseconds (it stops when its context is cancelled); MODE "failonce"
// fails the first delivery, "longonce" makes the first delivery take an
// hour (the function's deadline cuts it off), "ok" always succeeds. Each
// completed job appends "MESSAGE_ID NAME\n" to the file E2E_LOG before
// returning, so the test can count how often each message was processed.
//
// E2E_BATCH=1 uses lambdasqs.WrapBatch (jobs run one after another, in the
// event's order), otherwise lambdasqs.Wrap (one job per record, at once).
// E2E_VISIBILITY is the queue's visibility timeout in seconds.
// AWS_ENDPOINT_URL_SQS points the client at the test's server.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/lambdasqs"
	"github.com/sqskit/sqsconsumer/sqstest"
)

var logMu sync.Mutex

func main() {
	vis, err := strconv.Atoi(os.Getenv("E2E_VISIBILITY"))
	if err != nil {
		log.Fatalf("E2E_VISIBILITY: %v", err)
	}
	client := sqs.New(sqs.Options{
		Region:       os.Getenv("AWS_REGION"),
		BaseEndpoint: aws.String(os.Getenv("AWS_ENDPOINT_URL_SQS")),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		// The server is the test's sqstest over loopback: see package
		// sqstest, "Over a real socket".
		HTTPClient: &http.Client{Transport: sqstest.RebufferingTransport(nil)},
	})
	opts := []lambdasqs.Option{lambdasqs.WithVisibilityTimeout(time.Duration(vis) * time.Second)}
	var h lambdasqs.Handler
	if os.Getenv("E2E_BATCH") == "1" {
		h, err = lambdasqs.WrapBatch(client, batch, opts...)
	} else {
		h, err = lambdasqs.Wrap(client, sqsconsumer.HandlerFunc(job), opts...)
	}
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(h)
}

func batch(ctx context.Context, msgs []*sqsconsumer.Message) error {
	fails := sqsconsumer.BatchFailures{}
	for i, m := range msgs {
		if err := job(ctx, m); err != nil {
			for _, later := range msgs[i:] {
				fails[later.ID] = err
			}
			break
		}
	}
	return fails
}

func job(ctx context.Context, m *sqsconsumer.Message) error {
	f := strings.Fields(m.Body)
	if len(f) != 3 {
		return fmt.Errorf("bad body %q", m.Body)
	}
	ms, err := strconv.Atoi(f[1])
	if err != nil {
		return err
	}
	work := time.Duration(ms) * time.Millisecond
	switch {
	case f[2] == "failonce" && m.ReceiveCount == 1:
		return errors.New("failing the first delivery")
	case f[2] == "longonce" && m.ReceiveCount == 1:
		work = time.Hour
	}
	t := time.NewTimer(work)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	logMu.Lock()
	defer logMu.Unlock()
	out, err := os.OpenFile(os.Getenv("E2E_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	if _, err := fmt.Fprintf(out, "%s %s\n", m.ID, f[0]); err != nil {
		return err
	}
	return out.Sync()
}
