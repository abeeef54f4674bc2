package ecsprotect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// ErrNoAgent is Stats.LastError when there is no agent URI (ECS_AGENT_URI
// unset and no WithAgentURI): protection is unavailable and no call is
// made.
var ErrNoAgent = errors.New("ecsprotect: no ECS agent (ECS_AGENT_URI is not set): scale-in protection unavailable")

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("ecsprotect: Protector closed")

const (
	retryMin    = time.Second     // first retry after a failed call
	retryMax    = time.Minute     // retries double up to this
	warnEvery   = 5 * time.Minute // at most one WARN per this, after the first
	maxBodySize = 64 << 10        // bytes read of an answer
)

// Protector keeps its task protected from scale-in while anything is
// held. Acquire and Release are safe for concurrent use by any number of
// goroutines and Consumers and never wait on the network; one goroutine,
// started by Start and joined by Close, makes every call to the agent.
type Protector struct {
	endpoint string // "" when there is no agent
	client   *http.Client
	logger   *slog.Logger
	quiet    time.Duration
	expires  int
	timeout  time.Duration

	wake chan struct{} // buffered 1: the count crossed zero

	mu        sync.Mutex
	held      int64
	idleSince time.Time // when held last fell to 0
	started   bool
	closed    bool
	stop      context.CancelFunc
	done      chan struct{}
	stats     Stats
	lastWarn  time.Time
	unwarned  int // failures since the last WARN
	failing   bool
	expiresAt time.Time // when the confirmed protection lapses
	closeErr  error     // the clearing call's error at Close
}

// Stats is a snapshot of a Protector's state and counters.
type Stats struct {
	// Available reports whether there is an agent to call (ECS_AGENT_URI
	// or WithAgentURI set).
	Available bool
	// Held is the number of Acquire calls not yet Released.
	Held int64
	// Protected reports whether the task is protected now, as far as the
	// agent's last successful answer says (and it has not lapsed).
	Protected bool
	// ExpiresAt is when the current protection lapses unless renewed: the
	// agent's ExpirationDate. Zero when not protected.
	ExpiresAt time.Time
	// Calls counts calls made to the agent, failed ones included;
	// Enables, Renewals and Clears count the successful ones by kind.
	Calls, Failures, Enables, Renewals, Clears uint64
	// LastError is the last call's failure (an *AgentError for an answer
	// of the agent), ErrNoAgent without an agent, or nil.
	LastError error
	// LastErrorAt is when LastError happened.
	LastErrorAt time.Time
}

// AgentError is a failed call's answer: the agent's "error" or "failure"
// object, or a status without either.
type AgentError struct {
	Status    int    // HTTP status of the answer
	RequestID string // "requestID" of an error answer
	Arn       string // task ARN the agent named
	Code      string // error's Code, e.g. "AccessDeniedException", "RequestCanceled"
	Message   string // error's Message, or a snippet of an answer that was not JSON
	Reason    string // failure's Reason, e.g. "TASK_NOT_VALID"
	Detail    string // failure's Detail
}

func (e *AgentError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ecsprotect: agent answered %d", e.Status)
	if e.Code != "" {
		fmt.Fprintf(&b, " %s", e.Code)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, " failure %s", e.Reason)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	return b.String()
}

// New returns a Protector, not yet started. It reads ECS_AGENT_URI unless
// WithAgentURI is given; with neither, the Protector counts, makes no call
// and logs once at Start that protection is unavailable (see the package
// doc). New fails only on an invalid option or an invalid URI; the error
// names it.
func New(opts ...Option) (*Protector, error) {
	s := settings{
		quiet:   DefaultQuietPeriod,
		expires: DefaultExpiresInMinutes,
		timeout: DefaultCallTimeout,
	}
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	source := "ecsprotect.WithAgentURI"
	if !s.uriSet {
		s.uri, _ = os.LookupEnv(EnvAgentURI)
		source = EnvAgentURI
	}
	var endpoint string
	if s.uri != "" {
		u, err := url.Parse(s.uri)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			s.fail("%s %q: must be an absolute http or https URI", source, s.uri)
		} else {
			endpoint = strings.TrimSuffix(s.uri, "/") + StatePath
		}
	}
	if err := errors.Join(s.errs...); err != nil {
		return nil, err
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.client == nil {
		s.client = defaultClient()
	}
	p := &Protector{
		endpoint: endpoint,
		client:   s.client,
		logger:   s.logger,
		quiet:    s.quiet,
		expires:  s.expires,
		timeout:  s.timeout,
		wake:     make(chan struct{}, 1),
	}
	p.stats.Available = endpoint != ""
	if endpoint == "" {
		p.stats.LastError = ErrNoAgent
	}
	return p, nil
}

// defaultClient is a client whose transport ignores proxy settings: the
// agent is link-local, and HTTP_PROXY must not send it elsewhere.
func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = (&net.Dialer{Timeout: DefaultCallTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConns = 1
	return &http.Client{Transport: t}
}

// Acquire records that one more message is held. The first Acquire after
// the Protector was idle wakes its goroutine, which enables protection
// with one call. Acquire never blocks on the network, before Start and
// after Close included (it then only counts). Safe for concurrent use.
func (p *Protector) Acquire() {
	p.mu.Lock()
	p.held++
	first := p.held == 1
	p.mu.Unlock()
	if first {
		p.notify()
	}
}

// Release records that a message acquired with Acquire is no longer held.
// When nothing is held any more the quiet period starts; protection is
// cleared at its end unless something is acquired before. Release never
// blocks on the network. It panics if it is called more often than
// Acquire, as sync.WaitGroup does on a negative count. Safe for
// concurrent use.
func (p *Protector) Release() {
	p.mu.Lock()
	if p.held == 0 {
		p.mu.Unlock()
		panic("ecsprotect: Release without Acquire")
	}
	p.held--
	last := p.held == 0
	if last {
		p.idleSince = time.Now()
	}
	p.mu.Unlock()
	if last {
		p.notify()
	}
}

func (p *Protector) notify() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot of the Protector's state and counters. Safe for
// concurrent use.
func (p *Protector) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Held = p.held
	if st.Protected && !p.expiresAt.IsZero() && !time.Now().Before(p.expiresAt) {
		st.Protected = false // lapsed without a renewal
	}
	if st.Protected {
		st.ExpiresAt = p.expiresAt
	}
	return st
}

// Start starts the Protector's goroutine. Without an agent it logs once at
// WARN that protection is unavailable and starts nothing. Calling Start
// twice is a no-op; Start after Close returns ErrClosed. Safe for
// concurrent use.
func (p *Protector) Start() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	if p.started {
		p.mu.Unlock()
		return nil
	}
	p.started = true
	if p.endpoint == "" {
		p.mu.Unlock() // log without the lock Acquire and Release take
		p.logger.Warn("ecsprotect: ECS_AGENT_URI is not set; task scale-in protection is unavailable",
			"error", ErrNoAgent)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	p.done = make(chan struct{})
	go p.loop(ctx)
	p.mu.Unlock()
	return nil
}

// Close stops the Protector's goroutine and joins it, then clears the
// protection if it may be set, with one call bounded by the call timeout.
// Call it after the holders have drained (after the Consumers' Run has
// returned): it clears the protection even if something is still held.
// A call in flight when Close is called is cancelled, so Close returns
// within about one call timeout. Close returns the clearing call's error,
// which is also logged and counted in Stats (never fatal: a caller may
// ignore it; the protection then lapses after ExpiresInMinutes). Later
// calls return nil. Safe for concurrent use.
func (p *Protector) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	stop, done := p.stop, p.done
	p.mu.Unlock()
	if stop == nil {
		return nil // never started, or no agent: nothing was called
	}
	stop()
	<-done
	p.mu.Lock()
	err := p.closeErr
	p.mu.Unlock()
	return err
}
