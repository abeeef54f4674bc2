//go:build linux

package lambdasqs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/lambdasqs"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// The end-to-end test runs internal/e2efunc, built as a Lambda bootstrap
// binary, under the AWS Lambda Runtime Interface Emulator (RIE), and plays
// the SQS event source mapping against sqstest served on loopback: two
// pollers (two execution environments) receive batches, invoke the
// function with the mapping's event shape, delete the records the partial
// batch response does not name and leave the others. The jobs take longer
// than the queue's visibility timeout (3 s), some fail once, and some are
// cut off by the function's deadline once. The test checks that every
// message was processed exactly once (0 duplicates, 0 lost), in order
// within each FIFO group.
//
// SQSCONSUMER_LAMBDA_RIE is the path of the aws-lambda-rie binary
// (.ci/setup.d/50-lambda-rie.sh builds it).

const (
	rieVisibility = 3 // seconds: the queue's visibility timeout
	rieTimeout    = 8 // seconds: the function's timeout
)

func rieBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("SQSCONSUMER_LAMBDA_RIE")
	if p == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("SQSCONSUMER_LAMBDA_RIE is not set, and CI=true: .ci/setup.d/50-lambda-rie.sh should have built the Runtime Interface Emulator")
		}
		t.Skip("SQSCONSUMER_LAMBDA_RIE is not set; run `source .ci/setup.d/50-lambda-rie.sh` (or bash .ci/run) to build the AWS Lambda Runtime Interface Emulator")
	}
	_, err := os.Stat(p)
	require.NoError(t, err, "SQSCONSUMER_LAMBDA_RIE")
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// startRIE runs the function under the emulator and returns its
// invocation URL. It is stopped (with the function) at the end of the test.
func startRIE(t *testing.T, rie, bootstrap string, env []string) string {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr, "--runtime-api-address", freeAddr(t), bootstrap)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, fmt.Sprintf("AWS_LAMBDA_FUNCTION_TIMEOUT=%d", rieTimeout), "LOG_LEVEL=error")
	var out bytes.Buffer
	var outMu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { outMu.Lock(); defer outMu.Unlock(); return out.Write(p) })
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the function is the emulator's child: stop both
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			outMu.Lock()
			t.Logf("emulator output:\n%s", out.String())
			outMu.Unlock()
		}
	})
	url := "http://" + addr + "/2015-03-31/functions/function/invocations"
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return url
		}
		require.True(t, time.Now().Before(deadline), "the emulator did not listen on %s", addr)
		time.Sleep(20 * time.Millisecond) // waiting for another process to listen: nothing to select on
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// poll plays one poller of the event source mapping until ctx ends.
func poll(ctx context.Context, t *testing.T, client *sqs.Client, hc *http.Client, url, arn, invoke string, invocations *int) {
	for ctx.Err() == nil {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			t.Errorf("receive: %v", err)
			return
		}
		if len(out.Messages) == 0 {
			continue
		}
		ev := lambdasqs.Event(arn, "us-east-1", out.Messages)
		body, err := json.Marshal(ev)
		require.NoError(t, err)
		res, err := hc.Post(invoke, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Errorf("invoke: %v", err)
			return
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		*invocations++
		var resp events.SQSEventResponse
		if res.StatusCode != http.StatusOK || json.Unmarshal(raw, &resp) != nil || resp.BatchItemFailures == nil {
			// A function error: the mapping leaves the whole batch.
			t.Errorf("invocation answered %d %s", res.StatusCode, raw)
			continue
		}
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		var del []types.DeleteMessageBatchRequestEntry
		for i, r := range ev.Records {
			if !failed[r.MessageId] {
				del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: aws.String(r.ReceiptHandle)})
			}
		}
		if len(del) > 0 {
			dout, err := client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: del})
			if err == nil && len(dout.Failed) > 0 {
				err = fmt.Errorf("%d entries failed: %+v", len(dout.Failed), dout.Failed)
			}
			if err != nil && ctx.Err() == nil {
				t.Errorf("delete: %v", err)
			}
		}
	}
}

func TestLambdaRIEEndToEnd(t *testing.T) {
	rie := rieBinary(t)
	dir := t.TempDir()
	bootstrap := filepath.Join(dir, "bootstrap")
	build := exec.Command("go", "build", "-o", bootstrap, "./internal/e2efunc")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the function: %s", out)

	for _, tt := range []struct {
		name  string
		queue string
		batch bool
	}{
		{"standard queue, Wrap", "jobs", false},
		{"FIFO queue, WrapBatch", "jobs.fifo", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := sqstest.NewServer()
			defer srv.Close()
			hs := httptest.NewServer(srv.Handler())
			defer hs.Close()
			attrs := map[string]string{"VisibilityTimeout": fmt.Sprint(rieVisibility)}
			fifo := strings.HasSuffix(tt.queue, ".fifo")
			if fifo {
				attrs["FifoQueue"], attrs["ContentBasedDeduplication"] = "true", "true"
			}
			url, err := srv.CreateQueue(tt.queue, attrs)
			require.NoError(t, err)
			arn := "arn:aws:sqs:us-east-1:123456789012:" + tt.queue

			// Jobs longer than the visibility timeout; some fail once, some
			// are cut off by the function's deadline once.
			var names []string
			groups := map[string][]string{}
			for i := range 16 {
				mode := "ok"
				switch i % 8 {
				case 3:
					mode = "failonce"
				case 6:
					mode = "longonce"
				}
				work := 4000 + 100*(i%5) // 4 to 4.4 s against a 3 s visibility timeout
				var opts []sqstest.SendOption
				g := fmt.Sprintf("g%d", i%2)
				if fifo {
					work = 1100 // one after another in a batch: 2.2 s and more for the later ones
					opts = append(opts, sqstest.WithGroupID(g))
				}
				name := fmt.Sprintf("n%02d", i)
				_, err := srv.Send(url, fmt.Sprintf("%s %d %s", name, work, mode), opts...)
				require.NoError(t, err)
				names = append(names, name)
				groups[g] = append(groups[g], name)
			}

			logPath := filepath.Join(t.TempDir(), "completions")
			env := []string{"E2E_VISIBILITY=" + fmt.Sprint(rieVisibility), "E2E_LOG=" + logPath,
				"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "AWS_ENDPOINT_URL_SQS=" + hs.URL}
			if tt.batch {
				env = append(env, "E2E_BATCH=1")
			}
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(hs.URL),
				Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
				HTTPClient:  &http.Client{Transport: sqstest.RebufferingTransport(tr)}})
			hc := &http.Client{Transport: tr, Timeout: 2 * rieTimeout * time.Second}

			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			invocations := make([]int, 2)
			for i := range 2 {
				invoke := startRIE(t, rie, bootstrap, env)
				wg.Go(func() { poll(ctx, t, client, hc, url, arn, invoke, &invocations[i]) })
			}
			done := func() bool {
				for _, st := range srv.Messages(url) {
					if !st.Deleted {
						return false
					}
				}
				return true
			}
			tick := time.NewTicker(100 * time.Millisecond)
			for !done() && ctx.Err() == nil {
				<-tick.C
			}
			tick.Stop()
			cancel()
			wg.Wait()
			drained := done()

			f, err := os.Open(logPath)
			require.NoError(t, err)
			defer f.Close()
			count := map[string]int{}
			var order []string
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				count[fields[1]]++
				order = append(order, fields[1])
			}
			dups, lost := 0, 0
			for _, n := range names {
				switch c := count[n]; {
				case c == 0:
					lost++
				case c > 1:
					dups += c - 1
				}
			}
			t.Logf("%d messages, %d invocations, %d duplicates, %d lost", len(names), invocations[0]+invocations[1], dups, lost)
			require.True(t, drained, "the queue was not drained in time")
			require.Zero(t, dups, "duplicates: %v", count)
			require.Zero(t, lost, "lost: %v", count)
			receivedTwice := 0
			for _, st := range srv.Messages(url) {
				if st.ReceiveCount > 1 {
					receivedTwice++
				}
			}
			require.GreaterOrEqual(t, receivedTwice, 4, "the failures and cut-off jobs came back")
			if fifo {
				for g, want := range groups {
					var got []string
					for _, n := range order {
						if slices.Contains(want, n) {
							got = append(got, n)
						}
					}
					require.Equal(t, want, got, "group %s in order", g)
				}
			}
		})
	}
}
