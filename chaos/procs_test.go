package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/chaos/internal/wire"
)

// bins are the suite's two programs, built once per test binary.
type bins struct{ worker, sqstest string }

var (
	buildOnce sync.Once
	built     bins
	buildErr  error
	buildDir  string // removed by TestMain
)

// binaries builds chaos/worker (with -race when this test binary has it, so
// the worker's races fail the suite too) and cmd/sqstest.
func binaries(t *testing.T) bins {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "chaos-bin-")
		if buildErr != nil {
			return
		}
		gobin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("the go command is needed to build the worker: %w", err)
			return
		}
		built = bins{worker: filepath.Join(buildDir, "worker"), sqstest: filepath.Join(buildDir, "sqstest")}
		var race []string
		if raceEnabled {
			race = []string{"-race"}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		build := func(out, pkg string, flags ...string) {
			defer wg.Done()
			args := append(append([]string{"build", "-o", out}, flags...), pkg)
			b, err := exec.Command(gobin, args...).CombinedOutput()
			if err != nil {
				mu.Lock()
				buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
				mu.Unlock()
			}
		}
		wg.Add(2)
		go build(built.worker, "github.com/sqskit/sqsconsumer/chaos/worker", race...)
		go build(built.sqstest, "github.com/sqskit/sqsconsumer/cmd/sqstest")
		wg.Wait()
	})
	require.NoError(t, buildErr)
	return built
}

// sqsProc is a running cmd/sqstest with one standard queue, "chaos".
type sqsProc struct {
	base   string      // http://127.0.0.1:PORT
	queue  string      // the queue's URL
	client *sqs.Client // direct, not through any proxy
}

// startSQS starts cmd/sqstest on a free loopback port; it is stopped (by its
// own PID) when the test ends.
func startSQS(t *testing.T) sqsProc {
	t.Helper()
	cmd := exec.Command(binaries(t).sqstest, "-listen", "127.0.0.1:0", "-queue", "chaos")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() { // keep draining: the process must never block on stdout
		}
	}()
	var base string
	select {
	case l := <-line:
		var ok bool
		base, ok = strings.CutPrefix(l, "sqstest listening on ")
		require.True(t, ok, "sqstest printed %q", l)
	case <-time.After(20 * time.Second):
		t.Fatal("sqstest did not print its address within 20 s")
	}
	c := wire.Client(base, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	q, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("chaos")})
	require.NoError(t, err)
	t.Cleanup(c.Options().HTTPClient.(*http.Client).CloseIdleConnections)
	return sqsProc{base: base, queue: *q.QueueUrl, client: c}
}

// send sends one message per body, ten at a time, and returns their ids in
// order.
func (s sqsProc) send(t *testing.T, bodies []string) []string {
	t.Helper()
	ids := make([]string, 0, len(bodies))
	for start := 0; start < len(bodies); start += 10 {
		end := min(start+10, len(bodies))
		var entries []types.SendMessageBatchRequestEntry
		for i := start; i < end; i++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(bodies[i])})
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		out, err := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &s.queue, Entries: entries})
		cancel()
		require.NoError(t, err)
		require.Empty(t, out.Failed)
		byEntry := map[string]string{}
		for _, ok := range out.Successful {
			byEntry[*ok.Id] = *ok.MessageId
		}
		for i := start; i < end; i++ {
			ids = append(ids, byEntry[strconv.Itoa(i)])
		}
	}
	return ids
}

// left returns how many messages the queue still has: visible, in flight
// and delayed.
func (s sqsProc) left(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	out, err := s.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &s.queue,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	require.NoError(t, err)
	n := 0
	for _, v := range out.Attributes {
		k, err := strconv.Atoi(v)
		require.NoError(t, err)
		n += k
	}
	return n
}

// workerProc is one run of the worker binary.
type workerProc struct {
	cmd     *exec.Cmd
	pid     int
	stderr  string // path of its standard error
	started time.Time

	exited chan struct{} // closed when it has exited; then exitAt and code are set
	exitAt time.Time
	code   int // exit status; -1 when killed by a signal
}

// startWorker starts the worker with args (its -endpoint, -queue and
// -journal among them); it is killed (by its own PID) if still running when
// the test ends.
func startWorker(t *testing.T, dir string, args ...string) *workerProc {
	t.Helper()
	cmd := exec.Command(binaries(t).worker, args...)
	// A -race binary sleeps 1 s at exit by default; that second is not the
	// library's, and would eat the stop check's slack.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	f, err := os.CreateTemp(dir, "stderr-")
	require.NoError(t, err)
	cmd.Stderr = f
	w := &workerProc{cmd: cmd, stderr: f.Name(), exited: make(chan struct{})}
	require.NoError(t, cmd.Start())
	w.pid, w.started = cmd.Process.Pid, time.Now()
	go func() {
		_ = cmd.Wait()
		w.exitAt = time.Now()
		w.code = cmd.ProcessState.ExitCode()
		f.Close()
		close(w.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.exited
	})
	return w
}

// signal sends sig to the worker and returns when it was sent.
func (w *workerProc) signal(t *testing.T, sig syscall.Signal) time.Time {
	t.Helper()
	at := time.Now()
	require.NoError(t, w.cmd.Process.Signal(sig))
	return at
}

// wait waits up to d for the worker to exit and reports whether it did.
func (w *workerProc) wait(d time.Duration) bool {
	select {
	case <-w.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// errOutput returns the worker's standard error so far.
func (w *workerProc) errOutput() string {
	b, _ := os.ReadFile(w.stderr)
	return string(b)
}
