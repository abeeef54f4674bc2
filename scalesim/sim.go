package scalesim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/internal/latency"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// Defaults of a [Config].
const (
	DefaultTarget          = 30 * time.Second
	DefaultHandlerP50      = 400 * time.Millisecond
	DefaultHandlerP99      = 1200 * time.Millisecond
	DefaultConcurrency     = 80
	DefaultStartDelayMin   = 30 * time.Second
	DefaultStartDelayMax   = 60 * time.Second
	DefaultDecisionPeriod  = time.Minute
	DefaultScaleInCooldown = 5 * time.Minute
	DefaultMaxReplicas     = 100
	DefaultTick            = 10 * time.Millisecond
	DefaultDrain           = 30 * time.Minute
)

// produceTick is how often an idle producer looks at the trace's rate again.
const produceTick = 100 * time.Millisecond

// z99 is the standard normal's 0.99 quantile.
const z99 = 2.3263478740408408

// Config is one simulation run. The zero value of each field but Trace and Policy
// means its default.
type Config struct {
	// Trace is the load, at full scale. Required.
	Trace Trace
	// Policy decides the replica count. Required.
	Policy Policy
	// Target is the longest acceptable wait from send to handler start. Default
	// DefaultTarget (30 s).
	Target time.Duration
	// HandlerP50 and HandlerP99 define the handler time at normal speed: a
	// lognormal distribution with that median and 99th percentile. Defaults
	// DefaultHandlerP50 (400 ms) and DefaultHandlerP99 (1.2 s), a mean of
	// 447.2 ms. P99 must be at least P50 (equal means fixed).
	HandlerP50, HandlerP99 time.Duration
	// Concurrency is each replica's handler slots at full scale. Default
	// DefaultConcurrency (80): with the default handler times a replica
	// finishes about 179 messages per second. Must be a multiple of Scale.
	Concurrency int
	// Scale divides rates, bursts and concurrency: the replica counts and waits
	// stay about the same, the messages (and the CPU) fall k-fold. Default 1.
	Scale int
	// StartDelayMin and StartDelayMax bound the time from a scale-out decision
	// to a new replica serving: uniform, from the seeded source. Defaults 30 s
	// and 60 s.
	StartDelayMin, StartDelayMax time.Duration
	// DecisionPeriod is how often the autoscaler decides. Default 1 min.
	DecisionPeriod time.Duration
	// ScaleInCooldown is the time after any scaling activity before a scale-in
	// may happen. Default 5 min (ECS target tracking's default cooldowns).
	ScaleInCooldown time.Duration
	// MinReplicas and MaxReplicas clamp every decision. Defaults 1 and
	// DefaultMaxReplicas (100).
	MinReplicas, MaxReplicas int
	// Tick is the grid handler ends fall on (each handler ends on the first
	// grid point at or after its sampled end): fewer distinct instants make the
	// bubble cheaper. Default DefaultTick (10 ms); the measured handler times
	// include the rounding.
	Tick time.Duration
	// Drain bounds the time after the trace for every message to be handled.
	// Default 30 min.
	Drain time.Duration
	// Seed seeds the handler times and start delays (math/rand/v2 PCG).
	Seed uint64
}

func (c Config) withDefaults() (Config, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Target, DefaultTarget)
	def(&c.HandlerP50, DefaultHandlerP50)
	def(&c.HandlerP99, DefaultHandlerP99)
	def(&c.StartDelayMin, DefaultStartDelayMin)
	def(&c.StartDelayMax, DefaultStartDelayMax)
	def(&c.DecisionPeriod, DefaultDecisionPeriod)
	def(&c.ScaleInCooldown, DefaultScaleInCooldown)
	def(&c.Tick, DefaultTick)
	def(&c.Drain, DefaultDrain)
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Scale == 0 {
		c.Scale = 1
	}
	if c.MinReplicas == 0 {
		c.MinReplicas = 1
	}
	if c.MaxReplicas == 0 {
		c.MaxReplicas = DefaultMaxReplicas
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("scalesim: "+format, args...)) }
	if c.Policy == nil {
		bad("Config.Policy is nil")
	}
	if c.Trace.Duration <= 0 {
		bad("Config.Trace.Duration %v: must be > 0", c.Trace.Duration)
	}
	if c.Target < 0 || c.HandlerP50 < 0 || c.Drain < 0 || c.Tick < 0 || c.DecisionPeriod < 0 || c.ScaleInCooldown < 0 {
		bad("durations must not be negative")
	}
	if c.HandlerP99 < c.HandlerP50 {
		bad("HandlerP99 %v below HandlerP50 %v", c.HandlerP99, c.HandlerP50)
	}
	if c.Scale < 1 || c.Concurrency < 1 || c.Concurrency%c.Scale != 0 {
		bad("Concurrency %d must be a positive multiple of Scale %d", c.Concurrency, c.Scale)
	}
	if c.StartDelayMin < 0 || c.StartDelayMax < c.StartDelayMin {
		bad("start delay [%v, %v]: need 0 <= min <= max", c.StartDelayMin, c.StartDelayMax)
	}
	if c.MinReplicas < 1 || c.MaxReplicas < c.MinReplicas {
		bad("replicas [%d, %d]: need 1 <= min <= max", c.MinReplicas, c.MaxReplicas)
	}
	return c, errors.Join(errs...)
}

// sigma is the lognormal's shape for the configured p50 and p99.
func (c Config) sigma() float64 {
	return math.Log(float64(c.HandlerP99)/float64(c.HandlerP50)) / z99
}

// MeanHandler is the mean of the configured handler-time distribution at normal
// speed, before the rounding to Tick.
func (c Config) MeanHandler() time.Duration {
	c, _ = c.withDefaults()
	s := c.sigma()
	return time.Duration(float64(c.HandlerP50) * math.Exp(s*s/2))
}

// Decision is one autoscaler decision.
type Decision struct {
	At                time.Duration // since the start of the run
	Asked             int           // the policy's answer, unclamped
	Before, After     int           // the service's replicas before and after
	Serving           int           // replicas serving when the decision was taken
	Visible, InFlight int           // the queue's counts at the decision (full scale)
}

// Result is what one run measured. Counts of messages are at the run's scale; the
// rates and capacities are scaled back up to full scale.
type Result struct {
	Trace, Policy string
	Scale         int
	Target        time.Duration

	// Sent is the messages sent; Lost those never handled successfully;
	// Duplicates the handler calls beyond one per message.
	Sent, Lost, Duplicates int64
	// ReleasedStarted is the messages whose handler started on a replica that was
	// then stopped and did not succeed there: released at the graceful stop, they
	// are the duplicates SQS's at-least-once delivery explains.
	ReleasedStarted int64
	// ReplicaMinutes is the integral of the replicas (starting, serving or
	// stopping) over the trace's Duration.
	ReplicaMinutes float64
	// WaitP50 and WaitP99 are over every handler start, from SentTimestamp;
	// SteadyP50 and SteadyP99 over the messages sent in the trace's Steady
	// window (by SentTimestamp: a message sent during a transient counts in it
	// even if it starts after it).
	WaitP50, WaitP99, SteadyP50, SteadyP99 time.Duration
	// SettledP50 and SettledP99 are over the messages sent in the trace's
	// ReplicasWindow, where the replica count is judged.
	SettledP50, SettledP99 time.Duration
	// SteadyMaxReplicas and SteadyMinReplicas are the most and fewest replicas
	// the service had in the trace's ReplicasWindow.
	SteadyMaxReplicas, SteadyMinReplicas int
	// PeakReplicas is the most replicas the service had.
	PeakReplicas int
	// Reversals counts changes of direction between successive scaling actions.
	Reversals int
	// MeanHandler is the measured mean handler time at normal speed (rounding to
	// the tick included); CapacityPerReplica = full-scale concurrency /
	// MeanHandler, in messages per second.
	MeanHandler        time.Duration
	CapacityPerReplica float64
	// Fewest is the fewest replicas that meet the target in steady state:
	// ceil(Trace.Need(Target) / CapacityPerReplica).
	Fewest int
	// Decisions is every decision, in order.
	Decisions []Decision
	// Virtual is how long the run lasted in virtual time, drain included.
	Virtual time.Duration
	// Errors holds what replicas' Run returned other than nil.
	Errors []error
}

// MeetsTarget reports whether the steady p99 wait is within the target.
func (r *Result) MeetsTarget() bool { return r.SteadyP99 <= r.Target }

// Run runs cfg in a testing/synctest bubble of its own (so t must not be in one
// already) against an in-memory sqstest queue and returns what it measured. Each
// replica is a real sqsconsumer.Consumer whose Run the simulation owns and joins;
// the bubble's clock makes an hour of load take seconds to minutes of CPU,
// depending on the messages sent (see the package doc for figures). Run may be
// called from parallel tests.
func Run(t *testing.T, cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var res *Result
	synctest.Test(t, func(t *testing.T) { res, err = run(t.Context(), cfg) })
	return res, err
}

// cheapCalls spares the simulated replicas' calls the work the in-memory
// SQS does not check: no signature (anonymous credentials) and no payload
// hash. Signing was about a tenth of a simulation's CPU; the calls, their
// counts and their answers are the same.
func cheapCalls(o *sqs.Options) {
	o.Credentials = aws.AnonymousCredentials{}
	o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
}

// replica is one copy of the service.
type replica struct {
	cancel  context.CancelFunc
	created time.Time
	ending  bool // scaled in
	ended   time.Time
	c       *sqsconsumer.Consumer // set when it serves (Run called)
}

type sim struct {
	cfg    Config
	srv    *sqstest.Server
	client *sqs.Client
	url    string
	start  time.Time
	setup  Setup
	opts   []sqsconsumer.Option
	sigma  float64
	wg     sync.WaitGroup // the replicas' goroutines and the producer

	// Waits from send to handler start: all, those sent in the trace's
	// steady window, those sent in its replicas window. Safe for
	// concurrent use on their own.
	waitAll, waitSteady, waitSettled latency.Histogram

	mu         sync.Mutex // guards the fields below
	rng        *rand.Rand
	calls      []uint8       // handler calls per message (by sequence number), saturating
	done       []uint8       // successes per message, saturating
	handled    int64         // messages with at least one success
	handlerSum time.Duration // normal-speed handler times
	handlerN   int64
	replicas   []*replica // every replica ever, oldest first
	released   int64      // started but not succeeded on replicas scaled in
	errs       []error
}

func run(ctx context.Context, cfg Config) (*Result, error) {
	srv := sqstest.NewServer(sqstest.WithHistoryLimit(1000))
	defer srv.Close()
	url, err := srv.CreateQueue("scalesim", map[string]string{"VisibilityTimeout": "30"})
	if err != nil {
		return nil, err
	}
	s := &sim{
		cfg: cfg, srv: srv, client: srv.Client(cheapCalls), url: url, start: time.Now(),
		rng:   rand.New(rand.NewPCG(cfg.Seed, 0x5ca1e)),
		sigma: cfg.sigma(),
	}
	s.setup = Setup{Target: cfg.Target, Concurrency: cfg.Concurrency / cfg.Scale, MeanHandler: cfg.MeanHandler()}
	s.opts = append([]sqsconsumer.Option{sqsconsumer.WithConcurrency(s.setup.Concurrency)}, cfg.Policy.Options(s.setup)...)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for range cfg.MinReplicas {
		s.addReplica(runCtx, 0)
	}
	s.wg.Add(1)
	go s.produce(runCtx)

	res := &Result{Trace: cfg.Trace.Name, Policy: cfg.Policy.Name(), Scale: cfg.Scale, Target: cfg.Target}
	dirs := []int{}
	lastScale := s.start.Add(-cfg.ScaleInCooldown)
	tick := time.NewTicker(cfg.DecisionPeriod)
	defer tick.Stop()
	var runErr error
	for {
		<-tick.C
		at := time.Since(s.start)
		if at >= cfg.Trace.Duration {
			s.mu.Lock()
			drained := s.handled == int64(len(s.done))
			s.mu.Unlock()
			if drained || at >= cfg.Trace.Duration+cfg.Drain {
				break
			}
		}
		v := s.view()
		var err error
		if v.Visible, v.InFlight, err = queueCounts(ctx, v); err != nil {
			runErr = err
			break
		}
		asked, err := cfg.Policy.Desired(ctx, v)
		if err != nil {
			runErr = err
			break
		}
		vis, inf := v.Visible, v.InFlight
		want := min(max(asked, cfg.MinReplicas), cfg.MaxReplicas)
		d := Decision{At: at, Asked: asked, Before: v.Current, After: v.Current, Serving: len(v.Serving),
			Visible: int(vis) * cfg.Scale, InFlight: int(inf) * cfg.Scale}
		switch {
		case want > v.Current:
			for range want - v.Current {
				s.addReplica(runCtx, s.startDelay())
			}
			d.After, lastScale = want, time.Now()
			dirs = append(dirs, +1)
		case want < v.Current && time.Since(lastScale) >= cfg.ScaleInCooldown:
			s.removeReplicas(v.Current - want)
			d.After, lastScale = want, time.Now()
			dirs = append(dirs, -1)
		}
		res.Decisions = append(res.Decisions, d)
	}
	res.Virtual = time.Since(s.start)
	stop()
	s.wg.Wait()

	for i := 1; i < len(dirs); i++ {
		if dirs[i] != dirs[i-1] {
			res.Reversals++
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res.Errors = s.errs
	res.Sent = int64(len(s.done))
	for i := range s.done {
		if s.done[i] == 0 {
			res.Lost++
		}
		if s.calls[i] > 1 {
			res.Duplicates += int64(s.calls[i]) - 1
		}
	}
	res.ReleasedStarted = s.released
	res.WaitP50, res.WaitP99 = s.waitAll.Quantile(0.50), s.waitAll.Quantile(0.99)
	res.SteadyP50, res.SteadyP99 = s.waitSteady.Quantile(0.50), s.waitSteady.Quantile(0.99)
	res.SettledP50, res.SettledP99 = s.waitSettled.Quantile(0.50), s.waitSettled.Quantile(0.99)
	if s.handlerN > 0 {
		res.MeanHandler = s.handlerSum / time.Duration(s.handlerN)
		res.CapacityPerReplica = float64(cfg.Concurrency) / res.MeanHandler.Seconds()
		if cfg.Trace.Need != nil {
			res.Fewest = int(math.Ceil(cfg.Trace.Need(cfg.Target) / res.CapacityPerReplica))
		}
	}
	end := s.start.Add(cfg.Trace.Duration)
	for _, r := range s.replicas {
		to := r.ended
		if to.IsZero() || to.After(end) {
			to = end
		}
		if to.After(r.created) {
			res.ReplicaMinutes += to.Sub(r.created).Minutes()
		}
	}
	res.SteadyMinReplicas = math.MaxInt
	for _, d := range res.Decisions {
		res.PeakReplicas = max(res.PeakReplicas, d.After)
		if cfg.Trace.ReplicasWindow.Contains(d.At) {
			res.SteadyMaxReplicas = max(res.SteadyMaxReplicas, d.After)
			res.SteadyMinReplicas = min(res.SteadyMinReplicas, d.After)
		}
	}
	if res.SteadyMinReplicas == math.MaxInt {
		res.SteadyMinReplicas = 0
	}
	return res, runErr
}

// view is the policy's view now.
func (s *sim) view() View {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := View{Setup: s.setup, Client: s.client, QueueURL: s.url}
	for _, r := range s.replicas {
		if r.ending {
			continue
		}
		v.Current++
		if r.c != nil {
			v.Serving = append(v.Serving, r.c)
		}
	}
	return v
}

func (s *sim) startDelay() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	span := s.cfg.StartDelayMax - s.cfg.StartDelayMin
	if span == 0 {
		return s.cfg.StartDelayMin
	}
	// Whole seconds, so that replicas start on few distinct instants.
	return s.cfg.StartDelayMin + time.Duration(s.rng.Int64N(int64(span/time.Second)+1))*time.Second
}

// addReplica starts a replica that serves after delay.
func (s *sim) addReplica(ctx context.Context, delay time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	r := &replica{cancel: cancel, created: time.Now()}
	s.mu.Lock()
	s.replicas = append(s.replicas, r)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		if delay > 0 {
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				s.mu.Lock()
				r.ended = time.Now()
				s.mu.Unlock()
				return
			}
		}
		c, err := sqsconsumer.New(s.client, s.url, sqsconsumer.HandlerFunc(s.handle), s.opts...)
		if err != nil {
			s.mu.Lock()
			s.errs = append(s.errs, err)
			r.ended = time.Now()
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		r.c = c
		s.mu.Unlock()
		err = c.Run(ctx)
		st := c.Stats()
		s.mu.Lock()
		defer s.mu.Unlock()
		r.ended = time.Now()
		if err != nil {
			s.errs = append(s.errs, err)
		}
		if r.ending {
			s.released += st.Started - st.Succeeded
		}
	}()
}

// removeReplicas scales in by n: replicas still starting go first (newest
// first), then the newest serving. Each stops gracefully: its Run's context is
// cancelled, and the Consumer releases what it holds.
func (s *sim) removeReplicas(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, serving := range []bool{false, true} {
		for i := len(s.replicas) - 1; i >= 0 && n > 0; i-- {
			r := s.replicas[i]
			if r.ending || (r.c != nil) != serving || !r.ended.IsZero() {
				continue
			}
			r.ending = true
			r.cancel()
			n--
		}
	}
}

// produce sends the trace's messages until its end: steady arrivals as a Poisson
// process (exponential gaps at the trace's rate of the moment, divided by the
// scale), each sent at its arrival time rounded up to the millisecond
// (SentTimestamp's resolution, so the waits measured are exact), and bursts in
// one instant.
func (s *sim) produce(ctx context.Context) {
	defer s.wg.Done()
	tr, k := s.cfg.Trace, float64(s.cfg.Scale)
	bursts := slices.Clone(tr.Bursts)
	arrivals := rand.New(rand.NewPCG(s.cfg.Seed, 0xa771)) // this goroutine's alone
	rate := func(at time.Duration) float64 {
		if tr.Rate == nil {
			return 0
		}
		return tr.Rate(at) / k
	}
	// draw returns the arrival after from, exact (not rounded), and whether it
	// is one: while the rate is 0 it is only the time to look again.
	draw := func(from time.Duration) (time.Duration, bool) {
		r := rate(from)
		if r <= 0 {
			return from + produceTick, false
		}
		return from + time.Duration(arrivals.ExpFloat64()/r*float64(time.Second)), true
	}
	ms := func(d time.Duration) time.Duration {
		return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
	}
	next, real := draw(0)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		at := time.Since(s.start)
		if at >= tr.Duration {
			return
		}
		n := 0
		for ms(next) <= at {
			if real {
				n++
			}
			next, real = draw(next)
		}
		for len(bursts) > 0 && bursts[0].At <= at {
			n += int(math.Round(float64(bursts[0].N) / k))
			bursts = bursts[1:]
		}
		if n > 0 {
			s.mu.Lock()
			first := len(s.done)
			s.calls = append(s.calls, make([]uint8, n)...)
			s.done = append(s.done, make([]uint8, n)...)
			s.mu.Unlock()
			for i := range n {
				if _, err := s.srv.Send(s.url, strconv.Itoa(first+i)); err != nil {
					s.mu.Lock()
					s.errs = append(s.errs, fmt.Errorf("scalesim: send: %w", err))
					s.mu.Unlock()
					return
				}
			}
		}
		wake := ms(next)
		if len(bursts) > 0 && bursts[0].At < wake {
			wake = bursts[0].At
		}
		timer.Reset(max(wake-time.Since(s.start), 0))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// handle is every replica's handler: it records the wait from SentTimestamp,
// then sleeps for a handler time drawn from the configured lognormal (times the
// trace's slowdown), ending on the tick grid.
func (s *sim) handle(ctx context.Context, m *sqsconsumer.Message) error {
	now := time.Now()
	at := now.Sub(s.start)
	seq, err := strconv.Atoi(m.Body)
	if err != nil {
		return fmt.Errorf("scalesim: body %q: %w", m.Body, err)
	}
	sentMs, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64)
	if err != nil {
		return fmt.Errorf("scalesim: SentTimestamp %q: %w", m.Attributes["SentTimestamp"], err)
	}
	wait := now.Sub(time.UnixMilli(sentMs))
	slow := 1.0
	if s.cfg.Trace.Slowdown != nil {
		slow = s.cfg.Trace.Slowdown(at)
	}
	s.waitAll.Record(wait)
	sentAt := time.UnixMilli(sentMs).Sub(s.start)
	if s.cfg.Trace.Steady.Contains(sentAt) {
		s.waitSteady.Record(wait)
	}
	if s.cfg.Trace.ReplicasWindow.Contains(sentAt) {
		s.waitSettled.Record(wait)
	}

	s.mu.Lock()
	d := time.Duration(float64(s.cfg.HandlerP50) * math.Exp(s.sigma*s.rng.NormFloat64()) * slow)
	if tk := s.cfg.Tick; tk > 0 {
		d = (at+d+tk-1)/tk*tk - at
	}
	if s.calls[seq] < math.MaxUint8 {
		s.calls[seq]++
	}
	if slow == 1 {
		s.handlerSum += d
		s.handlerN++
	}
	s.mu.Unlock()

	timer := time.NewTimer(d)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
		return context.Cause(ctx)
	}
	s.mu.Lock()
	if s.done[seq] == 0 {
		s.handled++
	}
	if s.done[seq] < math.MaxUint8 {
		s.done[seq]++
	}
	s.mu.Unlock()
	return nil
}
