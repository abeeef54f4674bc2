package sqsconsumer

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/sqskit/sqsconsumer/internal/share"
)

// Settings is what a Consumer runs with: every option's value with its
// default resolved, for a startup log line or a platform's policy check
// (Consumer.Settings). It holds no function, logger or writer: those read
// "set" or "unset".
//
// A few values depend on the queue and are known only once Run has read
// its attributes (GetQueueAttributes, before the first receive): the
// visibility timeout when WithVisibilityTimeout was not given, and what
// follows from it (heartbeat interval, ceiling grace, the default stall
// limit), whether the queue is FIFO when its URL does not say, the
// dead-letter queue when WithDeadLetterQueue was not given, and the
// long-poll wait under WithWaitTime(0). Until then Pending lists them (by
// JSON name) and they hold their zero value (null in JSON); once Run has
// read the queue and accepted it Pending is empty and stays so. A Run that
// never got that far (cancelled during the read, a first contact that
// cannot succeed, a queue it refused: options its attributes contradict,
// WithRequireDeadLetterQueue) leaves them pending.
//
// JSON (MarshalJSON) and slog (LogValue) render the fields in this order,
// under the names in their json tags, durations as Go durations ("1m30s"),
// and Breaker and Scaling under their fields' names in snake_case
// ("call_failures", "emf_namespace"); those names are stable.
type Settings struct {
	QueueURL string `json:"queue_url"`
	// Pending lists the JSON names of the fields Run has not resolved
	// yet; empty once Run has read the queue's attributes and accepted
	// the queue.
	Pending []string `json:"pending"`
	// FIFO: the queue is a FIFO queue (its URL, or its FifoQueue
	// attribute).
	FIFO bool `json:"fifo"`

	// The lease (WithVisibilityTimeout, WithHeartbeatInterval,
	// WithMaxLeaseDuration, WithCeilingGrace, WithAdaptiveVisibility).
	// VisibilitySource is "option" or "queue" (the queue's
	// VisibilityTimeout). With WithAdaptiveVisibility the lease moves
	// between AdaptiveVisibilityMin and AdaptiveVisibilityMax (both 0:
	// off) once 20 messages have settled; VisibilityTimeout is where it
	// starts.
	VisibilityTimeout     time.Duration `json:"visibility_timeout"`
	VisibilitySource      string        `json:"visibility_source"`
	HeartbeatInterval     time.Duration `json:"heartbeat_interval"`
	MaxLeaseDuration      time.Duration `json:"max_lease_duration"`
	CeilingGrace          time.Duration `json:"ceiling_grace"`
	AdaptiveVisibilityMin time.Duration `json:"adaptive_visibility_min"`
	AdaptiveVisibilityMax time.Duration `json:"adaptive_visibility_max"`

	// Receiving (WithConcurrency, WithBatchSize, WithWaitTime,
	// WithPollers, WithMaxReadAhead, WithMaxBytes, WithRateLimit,
	// WithFairDispatch, WithGroupLimit). WaitTime is the long-poll wait
	// every receive sends: WithWaitTime's, or under WithWaitTime(0) the
	// queue's ReceiveMessageWaitTimeSeconds (pending until Run reads it),
	// capped by the shutdown timeout; 0 when the queue short-polls.
	// PollersAdaptive: Pollers is the upper bound, and the calls in flight
	// follow what the HTTP client sustains (Stats.MaxCallsInFlight); false
	// when WithPollers fixed them. MaxBytes is in bytes. RateLimit is in
	// messages a second, 0 for none; GroupLimit 0 for none.
	Concurrency     int           `json:"concurrency"`
	BatchSize       int           `json:"batch_size"`
	WaitTime        time.Duration `json:"wait_time"`
	Pollers         int           `json:"pollers"`
	PollersAdaptive bool          `json:"pollers_adaptive"`
	MaxReadAhead    int           `json:"max_read_ahead"`
	MaxBytes        int64         `json:"max_bytes"`
	RateLimit       float64       `json:"rate_limit"`
	RateBurst       int           `json:"rate_burst"`
	FairDispatch    bool          `json:"fair_dispatch"`
	GroupLimit      int           `json:"group_limit"`

	// Handling (WithHandlerTimeout, 0: none; WithBackoff, "default" for
	// DefaultBackoff or "set"; WithMiddleware, how many; WithPanicPolicy,
	// "set" or "unset"; WithBreaker, nil when off, its defaults filled
	// in, Probe rendered "set" or "unset"; WithAdaptiveConcurrency, nil
	// when off, its defaults filled in).
	HandlerTimeout      time.Duration        `json:"handler_timeout"`
	Backoff             string               `json:"backoff"`
	Middleware          int                  `json:"middleware"`
	PanicPolicy         string               `json:"panic_policy"`
	Breaker             *Breaker             `json:"breaker"`
	AdaptiveConcurrency *AdaptiveConcurrency `json:"adaptive_concurrency"`

	// Shutdown (WithShutdownTimeout, WithCancelIdlePollsAtShutdown).
	ShutdownTimeout           time.Duration `json:"shutdown_timeout"`
	CancelIdlePollsAtShutdown bool          `json:"cancel_idle_polls_at_shutdown"`

	// The dead-letter queue: its URL ("" for none), where it came from
	// ("option": WithDeadLetterQueue, "redrive_policy": the queue's
	// RedrivePolicy, "none"), and WithRequireDeadLetterQueue.
	DeadLetterQueue        string `json:"dead_letter_queue"`
	DeadLetterSource       string `json:"dead_letter_source"`
	RequireDeadLetterQueue bool   `json:"require_dead_letter_queue"`

	// WithLogger and WithObserver: "set" or "unset".
	Logger   string `json:"logger"`
	Observer string `json:"observer"`

	// Health's limits (WithHealthLimits, WithStartupLimit): the ones
	// Health judges by, defaults resolved; HandlerLimit 0 for none.
	StallLimit   time.Duration `json:"stall_limit"`
	HandlerLimit time.Duration `json:"handler_limit"`
	StartupLimit time.Duration `json:"startup_limit"`

	// WithScaling (nil when off; its defaults filled in, EMFWriter
	// rendered "set" or "unset") and WithScaleInProtection ("off",
	// "own": the Consumer's own Protector, or "shared": one given).
	Scaling           *ScalingPolicy `json:"scaling"`
	ScaleInProtection string         `json:"scale_in_protection"`
}

// settingsView is Consumer.Settings: s as New resolved it, completed by
// r (nil before Run read the queue), member (the fleet's, nil if none)
func settingsView(s *settings, queueURL string, member *share.Member, r *run) Settings {
	v := Settings{
		QueueURL:                  queueURL,
		Pending:                   []string{},
		FIFO:                      strings.HasSuffix(queueURL, ".fifo"),
		VisibilityTimeout:         s.visibility,
		VisibilitySource:          "option",
		MaxLeaseDuration:          s.maxLease,
		AdaptiveVisibilityMin:     s.adaptiveMin,
		AdaptiveVisibilityMax:     s.adaptiveMax,
		Concurrency:               s.concurrency,
		BatchSize:                 s.receiveSize,
		WaitTime:                  s.pollWait(0, false),
		Pollers:                   s.pollers,
		PollersAdaptive:           s.adaptPollers,
		MaxReadAhead:              s.maxAhead,
		MaxBytes:                  s.maxBytes,
		RateLimit:                 s.rateLimit,
		RateBurst:                 s.rateBurst,
		FairDispatch:              !s.fifoDispatch,
		GroupLimit:                s.groupLimit,
		HandlerTimeout:            s.handlerTimeout,
		Backoff:                   "set",
		Middleware:                len(s.middleware),
		PanicPolicy:               setOrUnset(s.panicPolicy != nil),
		ShutdownTimeout:           s.shutdownTimeout,
		CancelIdlePollsAtShutdown: s.cancelIdlePolls,
		DeadLetterQueue:           s.deadLetterURL,
		DeadLetterSource:          "option",
		RequireDeadLetterQueue:    s.requireDLQ,
		Logger:                    setOrUnset(s.logger != nil),
		Observer:                  setOrUnset(s.observer != nil),
		ScaleInProtection:         "off",
	}
	if s.visibility == 0 {
		v.VisibilitySource = "queue"
	}
	if reflect.ValueOf(s.backoff).Pointer() == reflect.ValueOf(DefaultBackoff).Pointer() {
		v.Backoff = "default"
	}
	if s.breaker != nil {
		b := *s.breaker
		v.Breaker = &b
	}
	if s.adaptive {
		v.AdaptiveConcurrency = &AdaptiveConcurrency{Floor: s.adaptiveFloor, Initial: s.adaptiveInitial}
	}
	if s.scaling != nil {
		p := *s.scaling
		v.Scaling = &p
	}
	switch {
	case s.protect && s.ownProtect:
		v.ScaleInProtection = "own"
	case s.protect:
		v.ScaleInProtection = "shared"
	}
	if r != nil {
		v.WaitTime = r.pollWait
	}
	lim := healthLimits{s: s, member: member, pollWait: v.WaitTime}
	v.HandlerLimit, v.StartupLimit = lim.handler(), lim.startup()

	if r != nil {
		v.FIFO = r.reg.fifo
		v.VisibilityTimeout, v.HeartbeatInterval, v.CeilingGrace = r.cfg.lease, r.cfg.interval, r.cfg.grace
		v.DeadLetterQueue = r.dlq.url
	} else {
		if !v.FIFO {
			v.Pending = append(v.Pending, "fifo")
		}
		if s.visibility == 0 {
			v.Pending = append(v.Pending, "visibility_timeout")
		} else {
			v.VisibilityTimeout = s.visibility
		}
		if v.VisibilityTimeout > 0 || s.heartbeat > 0 {
			v.HeartbeatInterval = heartbeatInterval(v.VisibilityTimeout, s.heartbeat)
		} else {
			v.Pending = append(v.Pending, "heartbeat_interval")
		}
		if v.HeartbeatInterval > 0 || s.ceilingGraceSet {
			v.CeilingGrace = ceilingGrace(v.HeartbeatInterval, s.ceilingGrace, s.ceilingGraceSet)
		} else {
			v.Pending = append(v.Pending, "ceiling_grace")
		}
		if s.deadLetterURL == "" {
			v.Pending = append(v.Pending, "dead_letter_queue", "dead_letter_source")
		}
		if s.waitTime == 0 {
			v.WaitTime = 0 // the queue's
			v.Pending = append(v.Pending, "wait_time")
		}
	}
	switch {
	case s.deadLetterURL != "":
	case slices.Contains(v.Pending, "dead_letter_queue"):
		v.DeadLetterSource = ""
	case v.DeadLetterQueue != "":
		v.DeadLetterSource = "redrive_policy"
	default:
		v.DeadLetterSource = "none"
	}
	lim.interval, lim.pollWait = v.HeartbeatInterval, v.WaitTime
	// In a fleet the default stall limit follows the wait.
	waitPending := member != nil && slices.Contains(v.Pending, "wait_time")
	if s.stallLimit > 0 || v.HeartbeatInterval > 0 && !waitPending {
		v.StallLimit = lim.stall()
	} else {
		v.Pending = append(v.Pending, "stall_limit")
	}
	return v
}

func setOrUnset(set bool) string {
	if set {
		return "set"
	}
	return "unset"
}

// MarshalJSON renders s as one JSON object: the fields in order, under
// their stable names, durations as Go durations ("20s"), pending values
// as null.
func (s Settings) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := writeJSON(&b, s.fields()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// LogValue renders s for log/slog as MarshalJSON does, as a group.
func (s Settings) LogValue() slog.Value { return logValue(s.fields()) }

// field is one named value of Settings as rendered: nil, a bool, an int,
// a float64, a string, a []string, or []field for a nested struct.
type field struct {
	name  string
	value any
}

// fields renders s: its fields in order, pending ones nil.
func (s Settings) fields() []field {
	out := renderStruct(reflect.ValueOf(s))
	for i := range out {
		if slices.Contains(s.Pending, out[i].name) {
			out[i].value = nil
		}
	}
	return out
}

var durationType = reflect.TypeFor[time.Duration]()

// renderStruct renders the exported fields of the struct v, named by
// their json tags or else their names in snake_case.
func renderStruct(v reflect.Value) []field {
	t := v.Type()
	out := make([]field, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = snakeCase(f.Name)
		}
		out = append(out, field{name, renderValue(v.Field(i))})
	}
	return out
}

// renderValue renders one field's value (see field).
func renderValue(v reflect.Value) any {
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Kind() == reflect.Func || v.Kind() == reflect.Interface:
		return setOrUnset(!v.IsNil())
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return renderStruct(v.Elem())
	}
	return v.Interface()
}

// snakeCase turns a Go field name into snake_case: CallFailures
// call_failures, EMFNamespace emf_namespace.
func snakeCase(name string) string {
	var b strings.Builder
	rs := []rune(name)
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

func writeJSON(b *bytes.Buffer, fs []field) error {
	b.WriteByte('{')
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(f.name)
		b.Write(name)
		b.WriteByte(':')
		if nested, ok := f.value.([]field); ok {
			if err := writeJSON(b, nested); err != nil {
				return err
			}
			continue
		}
		val, err := json.Marshal(f.value)
		if err != nil {
			return err
		}
		b.Write(val)
	}
	b.WriteByte('}')
	return nil
}

func logValue(fs []field) slog.Value {
	attrs := make([]slog.Attr, len(fs))
	for i, f := range fs {
		if nested, ok := f.value.([]field); ok {
			attrs[i] = slog.Attr{Key: f.name, Value: logValue(nested)}
			continue
		}
		attrs[i] = slog.Any(f.name, f.value)
	}
	return slog.GroupValue(attrs...)
}
