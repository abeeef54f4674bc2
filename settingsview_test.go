package sqsconsumer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// settingsJSON is c's Settings as a map, for comparing one field.
func settingsJSON(t *testing.T, c *Consumer) map[string]any {
	t.Helper()
	raw, err := json.Marshal(c.Settings())
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

// A platform's bundle, extended and overridden by a team.
func TestOptionsBundlePlatformAndTeam(t *testing.T) {
	t.Parallel()
	var order []string
	mw := func(name string) Middleware {
		return func(next Handler) Handler {
			return HandlerFunc(func(ctx context.Context, m *Message) error {
				order = append(order, name)
				return next.HandleMessage(ctx, m)
			})
		}
	}
	platform := Options(
		WithConcurrency(20),
		WithLogger(slog.New(slog.DiscardHandler)),
		WithMiddleware(mw("platform")),
		WithBreaker(Breaker{Failures: 3, Ratio: 0.5}),
		WithRequireDeadLetterQueue(),
		LeaseOptions(WithVisibilityTimeout(60*time.Second), WithHeartbeatInterval(10*time.Second)),
		nil, // skipped, as New skips it
	)
	c, err := New(&sqs.Client{}, testQueueURL, noop, platform,
		WithConcurrency(50),               // the team's value wins: it comes later
		WithMiddleware(mw("team")),        // appended: inside the platform's
		WithBreaker(Breaker{Failures: 7}), // replaces the platform's Breaker whole
	)
	require.NoError(t, err)
	s := c.Settings()
	require.Equal(t, 50, s.Concurrency)
	require.Equal(t, 2, s.Middleware)
	require.Equal(t, 60*time.Second, s.VisibilityTimeout, "the platform's value stays where the team says nothing")
	require.Equal(t, "option", s.VisibilitySource)
	require.Equal(t, 10*time.Second, s.HeartbeatInterval)
	require.True(t, s.RequireDeadLetterQueue)
	require.Equal(t, "set", s.Logger)
	require.Equal(t, 7, s.Breaker.Failures)
	require.Zero(t, s.Breaker.Ratio, "not merged with the platform's Breaker")
	require.NoError(t, c.handler.HandleMessage(context.Background(), &Message{}))
	require.Equal(t, []string{"platform", "team"}, order, "the bundle's middleware is outermost")

	// A mandatory option after the team's wins over the team's.
	c, err = New(&sqs.Client{}, testQueueURL, noop, platform, Options(WithConcurrency(500)), Options(WithConcurrency(100)))
	require.NoError(t, err)
	require.Equal(t, 100, c.Settings().Concurrency)

	// An option out of range in a bundle is named as if passed alone.
	_, err = New(&sqs.Client{}, testQueueURL, noop, Options(Options(WithConcurrency(0))))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "WithConcurrency(0)")

	// A bundle keeps its own copy of the options.
	opts := []Option{WithConcurrency(5)}
	b := Options(opts...)
	opts[0] = WithConcurrency(6)
	c, err = New(&sqs.Client{}, testQueueURL, noop, b)
	require.NoError(t, err)
	require.Equal(t, 5, c.Settings().Concurrency)

	// Options() does nothing.
	c, err = New(&sqs.Client{}, testQueueURL, noop, Options())
	require.NoError(t, err)
	require.Equal(t, defaultConcurrency, c.Settings().Concurrency)
}

// LeaseOptions configures NewLease, and New too.
// An Option holds no state: one value (a platform's bundle) applied by
// many New calls, one after another or at once, gives each Consumer the
// same settings and a copy of its own. WithBreaker, WithScaling and
// WithAdaptiveConcurrency once filled their defaults into the value they
// captured: ScalingPolicy's ScaleInAfter -1 (none) then became 0 at the
// first New and DefaultScaleInAfter at the second, every Consumer shared
// one *Breaker and one *ScalingPolicy, and concurrent News raced (seen by
// -race).
func TestOptionsSharedAcrossNews(t *testing.T) {
	t.Parallel()
	shared := Options(
		WithConcurrency(20),
		WithBreaker(Breaker{Ratio: 0.5}),
		WithScaling(ScalingPolicy{Target: time.Minute, ScaleInAfter: -1}),
		WithAdaptiveConcurrency(AdaptiveConcurrency{}),
	)
	const n = 4
	cs := make([]*Consumer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() { cs[i], errs[i] = New(&sqs.Client{}, testQueueURL, noop, shared) })
	}
	wg.Wait()
	c, err := New(&sqs.Client{}, testQueueURL, noop, shared) // after the others
	require.NoError(t, err)
	for i := range cs {
		require.NoError(t, errs[i])
		require.Equal(t, c.Settings(), cs[i].Settings(), "Consumer %d", i)
		require.NotSame(t, c.s.breaker, cs[i].s.breaker)
		require.NotSame(t, c.s.scaling, cs[i].s.scaling)
	}
	require.Zero(t, c.Settings().Scaling.ScaleInAfter, "ScaleInAfter -1: none, at every New")
	require.Equal(t, 1, c.Settings().AdaptiveConcurrency.Floor)
}

func TestLeaseOptionsBundle(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "x", 40*time.Second)
		lease := LeaseOptions(WithVisibilityTimeout(40*time.Second), WithHeartbeatInterval(4*time.Second))
		l, err := NewLease(b.client, b.url, msg, lease, WithReceivedAt(sent))
		require.NoError(t, err)
		require.Equal(t, 40*time.Second, l.cfg.lease)
		require.Equal(t, 4*time.Second, l.cfg.interval)
		l.Stop()

		_, err = NewLease(b.client, b.url, msg, LeaseOptions(WithVisibilityTimeout(time.Second)))
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, "WithVisibilityTimeout(1s)")

		c, err := New(b.client, b.url, noop, Options(lease))
		require.NoError(t, err)
		require.Equal(t, 4*time.Second, c.Settings().HeartbeatInterval)
	})
}

// The JSON of Settings is stable: these names, in this order, durations
// as Go durations, pending values null.
func TestSettingsJSONGolden(t *testing.T) {
	t.Parallel()
	c, err := New(&sqs.Client{}, testQueueURL, noop)
	require.NoError(t, err)
	raw, err := json.Marshal(c.Settings())
	require.NoError(t, err)
	const defaults = `{"queue_url":"https://sqs.us-east-1.amazonaws.com/123456789012/jobs",` +
		`"pending":["fifo","visibility_timeout","heartbeat_interval","ceiling_grace","dead_letter_queue","dead_letter_source","stall_limit"],` +
		`"fifo":null,"visibility_timeout":null,"visibility_source":"queue","heartbeat_interval":null,"max_lease_duration":"12h0m0s",` +
		`"ceiling_grace":null,"adaptive_visibility_min":"0s","adaptive_visibility_max":"0s",` +
		`"concurrency":10,"batch_size":10,"wait_time":"20s","pollers":102,"pollers_adaptive":true,"max_read_ahead":1000,"max_bytes":67108864,` +
		`"rate_limit":0,"rate_burst":0,"fair_dispatch":true,"group_limit":0,` +
		`"handler_timeout":"0s","backoff":"default","middleware":0,"panic_policy":"unset","breaker":null,"adaptive_concurrency":null,` +
		`"shutdown_timeout":"20s","cancel_idle_polls_at_shutdown":false,` +
		`"dead_letter_queue":null,"dead_letter_source":null,"require_dead_letter_queue":false,` +
		`"logger":"unset","observer":"unset","stall_limit":null,"handler_limit":"0s","startup_limit":"30s",` +
		`"scaling":null,"scale_in_protection":"off"}`
	require.JSONEq(t, defaults, string(raw))
	require.Equal(t, compact(t, defaults), string(raw), "the same order")

	c, err = New(&sqs.Client{}, testQueueURL+".fifo", noop,
		WithVisibilityTimeout(2*time.Minute), WithBreaker(Breaker{Probe: func(context.Context) error { return nil }}),
		WithScaling(ScalingPolicy{Target: time.Minute, EMFNamespace: "Jobs"}), WithDeadLetterQueue(testQueueURL+"-dlq.fifo"),
		WithRateLimit(50, 10), WithHealthLimits(0, time.Hour), WithPanicPolicy(func(context.Context, *Message, *PanicError) error { return nil }),
		WithBackoff(func(int) time.Duration { return time.Minute }), WithWaitTime(10*time.Second), WithShutdownTimeout(5*time.Second),
		WithAdaptiveConcurrency(AdaptiveConcurrency{Floor: 2}))
	require.NoError(t, err)
	raw, err = json.Marshal(c.Settings())
	require.NoError(t, err)
	const set = `{"queue_url":"https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo","pending":[],` +
		`"fifo":true,"visibility_timeout":"2m0s","visibility_source":"option","heartbeat_interval":"40s","max_lease_duration":"12h0m0s",` +
		`"ceiling_grace":"40s","adaptive_visibility_min":"0s","adaptive_visibility_max":"0s",` +
		`"concurrency":10,"batch_size":10,"wait_time":"5s","pollers":102,"pollers_adaptive":true,"max_read_ahead":1000,"max_bytes":67108864,` +
		`"rate_limit":50,"rate_burst":10,"fair_dispatch":true,"group_limit":0,` +
		`"handler_timeout":"0s","backoff":"set","middleware":0,"panic_policy":"set",` +
		`"breaker":{"failures":5,"ratio":0,"window":20,"call_failures":3,"pause":"30s","max_pause":"5m0s","probe":"set"},` +
		`"adaptive_concurrency":{"floor":2,"initial":10},` +
		`"shutdown_timeout":"5s","cancel_idle_polls_at_shutdown":false,` +
		`"dead_letter_queue":"https://sqs.us-east-1.amazonaws.com/123456789012/jobs-dlq.fifo","dead_letter_source":"option","require_dead_letter_queue":false,` +
		`"logger":"unset","observer":"unset","stall_limit":"2m0s","handler_limit":"1h0m0s","startup_limit":"30s",` +
		`"scaling":{"target":"1m0s","interval":"30s","scale_in_after":"5m0s","utilization":0.9,"scale_to_zero":false,"count_delayed":false,` +
		`"min_replicas":0,"max_replicas":0,"emf_namespace":"Jobs","emf_writer":"unset"},` +
		`"scale_in_protection":"off"}`
	require.Equal(t, compact(t, set), string(raw))

	// slog renders the same names and values.
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("start", "settings", c.Settings())
	var line struct{ Settings json.RawMessage }
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	require.JSONEq(t, set, string(line.Settings))
	buf.Reset()
	slog.New(slog.NewTextHandler(&buf, nil)).Info("start", "settings", c.Settings())
	require.Contains(t, buf.String(), "settings.visibility_timeout=2m0s settings.visibility_source=option")
	require.Contains(t, buf.String(), "settings.breaker.max_pause=5m0s settings.breaker.probe=set")
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, []byte(s)))
	return b.String()
}

// Run resolves what depends on the queue, and logs the result once.
func TestSettingsResolvedAtRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, false, 5, map[string]string{"VisibilityTimeout": "45"})
		var logs bytes.Buffer
		c, err := New(b.client, b.url, noop, WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		require.NoError(t, err)
		require.Equal(t, []string{"fifo", "visibility_timeout", "heartbeat_interval", "ceiling_grace", "dead_letter_queue", "dead_letter_source", "stall_limit"},
			c.Settings().Pending)
		stop := running(t, c)
		synctest.Wait()
		s := c.Settings()
		require.Empty(t, s.Pending)
		require.False(t, s.FIFO)
		require.Equal(t, 45*time.Second, s.VisibilityTimeout)
		require.Equal(t, "queue", s.VisibilitySource)
		require.Equal(t, 15*time.Second, s.HeartbeatInterval)
		require.Equal(t, 15*time.Second, s.CeilingGrace)
		require.Equal(t, b.dlq, s.DeadLetterQueue)
		require.Equal(t, "redrive_policy", s.DeadLetterSource)
		require.Equal(t, defaultStallLimit, s.StallLimit)
		raw, err := json.Marshal(s)
		require.NoError(t, err)
		require.Contains(t, string(raw), `"pending":[],"fifo":false,"visibility_timeout":"45s"`)
		require.NoError(t, stop())
		require.Equal(t, s, c.Settings(), "final once read")

		var line struct {
			Msg      string
			Settings json.RawMessage
		}
		first, _, _ := strings.Cut(logs.String(), "\n")
		require.NoError(t, json.Unmarshal([]byte(first), &line))
		require.Equal(t, "sqsconsumer: running", line.Msg)
		require.JSONEq(t, string(raw), string(line.Settings))
		require.Equal(t, 1, strings.Count(logs.String(), "sqsconsumer: running"))
	})
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		c, err := New(b.client, b.url, noop)
		require.NoError(t, err)
		stop := running(t, c)
		synctest.Wait()
		require.Equal(t, "none", c.Settings().DeadLetterSource)
		require.Empty(t, c.Settings().DeadLetterQueue)
		require.NoError(t, stop())
	})
}

// settingsShown says where each field of settings shows in Settings:
// the JSON name of its Settings field, or why it does not show ("-: ").
// A field added to settings without an entry here fails
// TestSettingsShowEverySetting.
var settingsShown = map[string]string{
	"visibility":      "visibility_timeout",
	"heartbeat":       "heartbeat_interval",
	"maxLease":        "max_lease_duration",
	"ceilingGrace":    "ceiling_grace",
	"ceilingGraceSet": "ceiling_grace",
	"concurrency":     "concurrency",
	"receiveSize":     "batch_size",
	"waitTime":        "wait_time",
	"pollers":         "pollers",
	"adaptPollers":    "pollers_adaptive",
	"maxBytes":        "max_bytes",
	"maxAhead":        "max_read_ahead",
	"shutdownTimeout": "shutdown_timeout",
	"cancelIdlePolls": "cancel_idle_polls_at_shutdown",
	"handlerTimeout":  "handler_timeout",
	"backoff":         "backoff",
	"middleware":      "middleware",
	"logger":          "logger",
	"observer":        "observer",
	"stats":           "-: the Consumer's statistics recorder, set by New, not an option",
	"adaptiveMin":     "adaptive_visibility_min",
	"adaptiveMax":     "adaptive_visibility_max",
	"rateLimit":       "rate_limit",
	"rateBurst":       "rate_burst",
	"fifoDispatch":    "fair_dispatch",
	"fairSet":         "fair_dispatch",
	"groupLimit":      "group_limit",
	"receivedAt":      "-: NewLease only (New refuses WithReceivedAt)",
	"errs":            "-: the options' errors, which New returns",
	"deadLetterURL":   "dead_letter_queue",
	"breaker":         "breaker",
	"adaptive":        "adaptive_concurrency",
	"adaptiveFloor":   "adaptive_concurrency",
	"adaptiveInitial": "adaptive_concurrency",
	"stallLimit":      "stall_limit",
	"startupLimit":    "startup_limit",
	"handlerLimit":    "handler_limit",
	"scaling":         "scaling",
	"scalingBy":       "scaling",
	"protect":         "scale_in_protection",
	"protector":       "scale_in_protection",
	"ownProtect":      "scale_in_protection",
	"requireDLQ":      "require_dead_letter_queue",
	"panicPolicy":     "panic_policy",
}

// Every field of settings, what the options write, shows in Settings.
func TestSettingsShowEverySetting(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, f := range (Settings{}).fields() {
		names[f.name] = true
	}
	st := reflect.TypeFor[settings]()
	for i := range st.NumField() {
		name := st.Field(i).Name
		shown, ok := settingsShown[name]
		require.True(t, ok, "settings.%s does not show in Settings: add a field to Settings (settingsview.go) and list it in settingsShown, or list why it must not show", name)
		if !strings.HasPrefix(shown, "-: ") {
			require.True(t, names[shown], "settings.%s: Settings has no field %q", name, shown)
		}
	}
	require.Len(t, settingsShown, st.NumField(), "settingsShown lists a field settings no longer has")
}

// optionShown sets, for each exported option, a value other than its
// default, and the JSON field of Settings that must show it. An option
// added to the package without an entry fails
// TestSettingsShowEveryOption.
func optionShown() map[string]struct {
	opt   Option
	field string
} {
	type entry = struct {
		opt   Option
		field string
	}
	return map[string]entry{
		"WithVisibilityTimeout":         {WithVisibilityTimeout(60 * time.Second), "visibility_timeout"},
		"WithHeartbeatInterval":         {WithHeartbeatInterval(5 * time.Second), "heartbeat_interval"},
		"WithMaxLeaseDuration":          {WithMaxLeaseDuration(time.Hour), "max_lease_duration"},
		"WithCeilingGrace":              {WithCeilingGrace(7 * time.Second), "ceiling_grace"},
		"WithObserver":                  {WithObserver(ObserverFunc(func(Event) {})), "observer"},
		"WithLogger":                    {WithLogger(slog.New(slog.DiscardHandler)), "logger"},
		"WithConcurrency":               {WithConcurrency(7), "concurrency"},
		"WithBatchSize":                 {WithBatchSize(3), "batch_size"},
		"WithWaitTime":                  {WithWaitTime(5 * time.Second), "wait_time"},
		"WithPollers":                   {WithPollers(3), "pollers"},
		"WithMaxReadAhead":              {WithMaxReadAhead(9), "max_read_ahead"},
		"WithMaxBytes":                  {WithMaxBytes(1 << 20), "max_bytes"},
		"WithShutdownTimeout":           {WithShutdownTimeout(9 * time.Second), "shutdown_timeout"},
		"WithCancelIdlePollsAtShutdown": {WithCancelIdlePollsAtShutdown(), "cancel_idle_polls_at_shutdown"},
		"WithHandlerTimeout":            {WithHandlerTimeout(3 * time.Second), "handler_timeout"},
		"WithBackoff":                   {WithBackoff(func(int) time.Duration { return time.Second }), "backoff"},
		"WithMiddleware":                {WithMiddleware(func(h Handler) Handler { return h }), "middleware"},
		"WithAdaptiveVisibility":        {WithAdaptiveVisibility(10*time.Second, time.Minute), "adaptive_visibility_max"},
		"WithBreaker":                   {WithBreaker(Breaker{}), "breaker"},
		"WithAdaptiveConcurrency":       {WithAdaptiveConcurrency(AdaptiveConcurrency{}), "adaptive_concurrency"},
		"WithScalingTarget":             {WithScalingTarget(time.Minute), "scaling"},
		"WithScaling":                   {WithScaling(ScalingPolicy{Target: time.Minute}), "scaling"},
		"WithScaleInProtection":         {WithScaleInProtection(nil), "scale_in_protection"},
		"WithDeadLetterQueue":           {WithDeadLetterQueue(testQueueURL + "-dlq"), "dead_letter_queue"},
		"WithRequireDeadLetterQueue":    {WithRequireDeadLetterQueue(), "require_dead_letter_queue"},
		"WithFairDispatch":              {WithFairDispatch(false), "fair_dispatch"},
		"WithGroupLimit":                {WithGroupLimit(2), "group_limit"},
		"WithHealthLimits":              {WithHealthLimits(5*time.Minute, time.Minute), "handler_limit"},
		"WithStartupLimit":              {WithStartupLimit(time.Minute), "startup_limit"},
		"WithRateLimit":                 {WithRateLimit(5, 2), "rate_limit"},
		"WithPanicPolicy":               {WithPanicPolicy(func(context.Context, *Message, *PanicError) error { return nil }), "panic_policy"},
	}
}

// notConsumerOptions are the exported Option constructors that configure
// no Consumer setting of their own.
var notConsumerOptions = map[string]string{
	"WithReceivedAt": "NewLease only: New refuses it",
	"Options":        "a bundle of other options",
	"LeaseOptions":   "a bundle of other options",
}

// exportedOptions lists the package's exported functions that return an
// Option or a LeaseOption, from its source.
func exportedOptions(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && (id.Name == "Option" || id.Name == "LeaseOption") {
				names = append(names, fn.Name.Name)
			}
		}
	}
	sort.Strings(names)
	return names
}

// Every option shows in Settings: with it, its field differs from the
// default Consumer's.
func TestSettingsShowEveryOption(t *testing.T) {
	t.Parallel()
	table := optionShown()
	found := exportedOptions(t)
	require.Contains(t, found, "WithConcurrency", "the scan finds the options")
	for _, name := range found {
		_, listed := table[name]
		_, excluded := notConsumerOptions[name]
		require.True(t, listed || excluded, "option %s is not in optionShown: give it a Settings field and an entry", name)
	}
	for name := range table {
		require.True(t, slices.Contains(found, name), "optionShown lists %s, which the package no longer exports", name)
	}
	def, err := New(&sqs.Client{}, testQueueURL, noop)
	require.NoError(t, err)
	base := settingsJSON(t, def)
	for name, e := range table {
		c, err := New(&sqs.Client{}, testQueueURL, noop, e.opt)
		require.NoError(t, err, name)
		got := settingsJSON(t, c)
		require.Contains(t, got, e.field, name)
		require.NotEqual(t, fmt.Sprint(base[e.field]), fmt.Sprint(got[e.field]), "%s does not show in Settings.%s", name, e.field)
	}
}

// A Settings value read from Go says the same as its JSON.
func TestSettingsGoValues(t *testing.T) {
	t.Parallel()
	p := &recorder{}
	c, err := New(&sqs.Client{}, testQueueURL, noop, WithObserver(p), WithScaleInProtection(nil),
		WithAdaptiveVisibility(10*time.Second, time.Hour), WithVisibilityTimeout(30*time.Second), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	s := c.Settings()
	require.Equal(t, "set", s.Observer)
	require.Equal(t, "own", s.ScaleInProtection)
	require.Equal(t, time.Hour, s.AdaptiveVisibilityMax)
	require.Equal(t, 10*time.Second, s.HeartbeatInterval)
	// The default stall limit follows the longest adaptive lease.
	require.Equal(t, 2*heartbeatInterval(time.Hour, 0), s.StallLimit)
}
