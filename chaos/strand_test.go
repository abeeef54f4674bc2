package chaos

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/chaos/internal/wire"
	"github.com/sqskit/sqsconsumer/chaos/proxy"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// The stranding scenario (issue 35, case 1): a worker consuming a backlog
// (or a trickle) is stopped with SIGTERM a second in, under CPU load, and
// a second consumer polls the queue from then on. Once the worker has
// exited, every message the worker took must be deleted, visible, or taken
// by the second consumer: one still hidden by a receive of the worker's
// (its visibility timeout, 30 s here, is the worker's alone) is stranded.
// The check tells apart a stranded message the worker reported received
// (the library held it and did not hand it back) from one it never saw
// (its receive's answer was lost before it reached the library).
//
// The modes are the issue's: a standard queue with 3 s handlers, a FIFO
// queue, 30 s handlers cut at a 5 s budget, and a trickle (messages
// arriving while long polls wait). -chaos.client picks the worker's SQS
// client: wire (the suite's, which hands net/http a private copy of each
// request body), sdk (the SDK's default client, as sqs.New makes it) or
// sqsclient; -chaos.other the second consumer's (wire or sdk);
// -chaos.stall=D, with the sdk client, holds the worker's connection writer
// after each receive's body while its answer is read, at most D (what a
// loaded machine may do: the moment the SDK's race needs); -chaos.strand.broken
// sets the worker's -broken mode; -chaos.strand.runs how many rounds of
// the four modes run (default 1, about 20 s). A control run always goes
// first: the sdk client, stalled receives and the library's guard off
// (unguarded-bodies) must strand a receive's worth, never reported
// received.

var (
	clientFlag      = flag.String("chaos.client", "wire", "the stranding scenario's worker client: wire, sdk or sqsclient")
	strandRunsFlag  = flag.Int("chaos.strand.runs", 1, "rounds of the stranding scenario's four modes")
	strandNoLoadFlg = flag.Bool("chaos.strand.noload", false, "run the stranding scenario without CPU load")
	otherFlag       = flag.String("chaos.other", "wire", "the stranding scenario's second consumer's client: wire or sdk")
	stallFlag       = flag.Duration("chaos.stall", 0, "with -chaos.client=sdk: the worker's -stall (its connection writer held after each receive's body while the answer is read, at most this long)")
	strandBrokenFlg = flag.String("chaos.strand.broken", "", "the stranding scenario's worker -broken mode (unguarded-bodies: the library's guard off)")
)

// otherLease is the visibility timeout of the second consumer's receives:
// the server's history tells its receives from the worker's by it.
const otherLease = 600 * time.Second

// otherClient makes the second consumer's client: the suite's (wire) or
// the SDK's default one (sdk).
func otherClient(base, kind string) (*sqs.Client, func()) {
	if kind == "sdk" {
		c := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(base),
			Credentials: credentials.NewStaticCredentialsProvider("chaos", "chaos", "")})
		return c, func() {}
	}
	c := wire.Client(base, 0)
	return c, c.Options().HTTPClient.(*http.Client).CloseIdleConnections
}

// strandCfg is one mode of the stranding scenario.
type strandCfg struct {
	name     string
	fifo     bool
	n        int           // messages sent before the worker starts
	trickle  time.Duration // one more message every trickle until the worker exits (0: none)
	work     string        // the handlers' body: "sleep=3s", or "" for the worker's random 50-400 ms
	shutdown time.Duration
	conc     int
	client   string
	load     bool
	// stall (client sdk) holds the worker's connection writer after each
	// receive's body while its answer is read, as a loaded machine may
	// (the worker's -stall); broken is its -broken.
	stall  time.Duration
	broken string
	pad    int // bytes of padding in each body (default 1,500)
}

// strandRun is what one run found.
type strandRun struct {
	stranded   []string // hidden by the worker's receive after it exited
	unreported int      // of them, never reported received by the worker
	history    []string
	stopTook   time.Duration
	received   int      // the worker's receives of messages (server side)
	otherLost  []string // hidden by a receive of the second consumer's whose answer it never got
}

const strandLease = 30 * time.Second

func strandModes(client string, load bool, stall time.Duration) []strandCfg {
	modes := []strandCfg{
		{name: "standard", n: 200, work: "sleep=3s", shutdown: 10 * time.Second},
		{name: "fifo", fifo: true, n: 200, work: "sleep=3s", shutdown: 10 * time.Second},
		{name: "long", n: 200, work: "sleep=30s", shutdown: 5 * time.Second},
		{name: "trickle", n: 0, trickle: 20 * time.Millisecond, shutdown: 10 * time.Second},
	}
	for i := range modes {
		modes[i].conc, modes[i].client, modes[i].load, modes[i].broken = 20, client, load, *strandBrokenFlg
		if client == "sdk" {
			modes[i].stall = stall
		}
	}
	return modes
}

// runStrand runs one mode: the worker starts on the queue, SIGTERM comes a
// second after its first handler started, a second consumer polls from
// then until the check, 1.5 s after the worker exited.
func runStrand(t *testing.T, cfg strandCfg) strandRun {
	t.Helper()
	dir := t.TempDir()
	srv, base, _ := serveSQS(t)
	name, attrs := "strand", map[string]string(nil)
	if cfg.fifo {
		name, attrs = "strand.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}
	}
	queue, err := srv.CreateQueue(name, attrs)
	require.NoError(t, err)
	sent := 0
	send := func() error {
		var opts []sqstest.SendOption
		if cfg.fifo {
			opts = append(opts, sqstest.WithGroupID("g"+strconv.Itoa(sent%10)))
		}
		// The padding makes a receive's answer (ten messages) larger than
		// what net/http reads ahead: an answer the SDK is still decoding
		// when its connection is closed under it is lost.
		_, err := srv.Send(queue, fmt.Sprintf("%s n=%d pad=%s", cfg.work, sent, strings.Repeat("x", cmpInt(cfg.pad, 1500))), opts...)
		sent++
		return err
	}
	for range cfg.n {
		require.NoError(t, send())
	}
	var stopLoad chan struct{}
	var loadWG *sync.WaitGroup
	if cfg.load {
		stopLoad = make(chan struct{})
		loadWG = burn(stopLoad)
	}
	jpath := filepath.Join(dir, "journal")
	args := []string{"-endpoint", base, "-queue", queue, "-journal", jpath, "-client", cfg.client,
		"-concurrency", strconv.Itoa(cfg.conc), "-lease", strandLease.String(), "-shutdown", cfg.shutdown.String(), "-wait", "20s", "-broken", cfg.broken}
	if cfg.stall > 0 {
		args = append(args, "-stall", cfg.stall.String())
	}
	w := startWorker(t, dir, args...)
	trickleDone := make(chan struct{})
	var trickleWG sync.WaitGroup
	if cfg.trickle > 0 {
		trickleWG.Go(func() {
			tick := time.NewTicker(cfg.trickle)
			defer tick.Stop()
			for {
				select {
				case <-trickleDone:
					return
				case <-tick.C:
					if err := send(); err != nil {
						t.Errorf("trickle: %v", err)
						return
					}
				}
			}
		})
	}
	require.True(t, waitFor(20*time.Second, func() bool { return running(t, jpath, w.pid) > 0 }), "the worker started no handler")
	time.Sleep(time.Second)
	term := w.signal(t, syscall.SIGTERM)

	other, closeOther := otherClient(base, *otherFlag)
	defer closeOther()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]bool{}
	wg.Go(func() {
		for ctx.Err() == nil {
			out, err := other.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue), MaxNumberOfMessages: 10,
				WaitTimeSeconds: 1, VisibilityTimeout: int32(otherLease / time.Second), MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			mu.Lock()
			for _, m := range out.Messages {
				seen[*m.MessageId] = true
			}
			mu.Unlock()
		}
	})
	exited := w.wait(cfg.shutdown + 15*time.Second)
	close(trickleDone)
	trickleWG.Wait()
	if cfg.load {
		close(stopLoad)
		loadWG.Wait()
	}
	require.True(t, exited, "the worker did not exit; stderr:\n%s", w.errOutput())
	time.Sleep(1500 * time.Millisecond)
	cancel()
	wg.Wait()

	var r strandRun
	r.stopTook = w.exitAt.Sub(term)
	received := map[string]int{}
	for _, e := range readJournal(t, jpath) {
		if e.Kind == "ev:"+sqsconsumer.EventReceived.String() || e.Kind == "ev:"+sqsconsumer.EventAdopted.String() {
			received[e.MessageID]++
		}
	}
	now := time.Now()
	for _, st := range srv.Messages(queue) {
		if n := len(st.Receives); n > 0 && st.InFlight && !st.Deleted && st.Receives[n-1].VisibilityTimeout == otherLease && !seen[st.ID] {
			r.otherLost = append(r.otherLost, st.ID)
		}
		mine := 0
		for _, rc := range st.Receives {
			if rc.VisibilityTimeout == strandLease {
				mine++
			}
		}
		r.received += mine
		if st.Deleted || !st.InFlight || len(st.Receives) == 0 || st.Receives[len(st.Receives)-1].VisibilityTimeout != strandLease {
			continue
		}
		r.stranded = append(r.stranded, st.ID)
		if received[st.ID] < mine {
			r.unreported++
		}
		r.history = append(r.history, fmt.Sprintf("%s reported_received=%d of %d, visible in %v\n    %s", st.ID, received[st.ID], mine,
			st.VisibleAt.Sub(now).Round(time.Millisecond), strings.ReplaceAll(historyOf(st), "\n", "\n    ")))
	}
	if len(r.stranded) > 0 {
		t.Logf("worker stderr:\n%s", w.errOutput())
	}
	return r
}

// TestChaosShutdownStrands runs the stranding scenario's four modes
// -chaos.strand.runs times each, under CPU load.
func TestChaosShutdownStrands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes for over a minute; skipped with -short")
	}
	binaries(t)
	t.Run("control-unguarded-bodies", func(t *testing.T) {
		// The SDK's own client with its writer held after each
		// receive's body while the answer is read, and the library's
		// guard off: a receive answered at once loses its answer, and
		// the check must see its messages stranded, never reported
		// received.
		// The hold meets the race only when a receive is answered with
		// 16 KB or more while the writer is held; on a loaded machine a
		// run's receives may all come back smaller, so the control has up
		// to three runs to strand something (it needed one in every run
		// on a quiet machine).
		cfg := strandModes("sdk", false, 100*time.Millisecond)[0]
		cfg.broken = "unguarded-bodies"

		var r strandRun
		for try := 1; try <= 3; try++ {
			r = runStrand(t, cfg)
			t.Logf("control, run %d: receives=%d stranded=%d (never reported received: %d)", try, r.received, len(r.stranded), r.unreported)
			if len(r.stranded) > 0 {
				break
			}
		}
		record(summary{name: "strand/control-unguarded-bodies", control: true, messages: r.received, violations: make([]violation, len(r.stranded))})
		require.NotEmpty(t, r.stranded, "the check sees a lost receive answer")
		require.Positive(t, r.unreported, "whose messages the worker never saw")
	})
	s := summary{name: "strand/" + *clientFlag, faults: map[proxy.Class]int{}, dups: map[string]int{}}
	began := time.Now()
	var vs []violation
	tries, failed := 0, 0
	for round := range *strandRunsFlag {
		for _, cfg := range strandModes(*clientFlag, !*strandNoLoadFlg, *stallFlag) {
			r := runStrand(t, cfg)
			tries++
			s.messages += r.received
			s.stopTook = max(s.stopTook, r.stopTook)
			t.Logf("round %d %s (%s): receives=%d stranded=%d (never reported received: %d) stop=%v; second consumer (%s) lost %d", round+1, cfg.name, cfg.client,
				r.received, len(r.stranded), r.unreported, r.stopTook.Round(time.Millisecond), *otherFlag, len(r.otherLost))
			if len(r.stranded) > 0 {
				failed++
			}
			for _, h := range r.history {
				vs = append(vs, violation{"stranded", fmt.Sprintf("round %d %s: %s", round+1, cfg.name, h)})
			}
		}
	}
	s.elapsed = time.Since(began)
	s.violations = vs
	record(s)
	t.Logf("%d tries, %d with stranded messages", tries, failed)
	requireNone(t, vs)
}

func cmpInt(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}
