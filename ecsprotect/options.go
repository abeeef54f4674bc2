package ecsprotect

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Defaults and limits of the options.
const (
	// EnvAgentURI is the environment variable the ECS agent injects into a
	// task's containers; New reads it unless WithAgentURI is given.
	EnvAgentURI = "ECS_AGENT_URI"

	// StatePath is the agent's task scale-in protection path, appended to
	// the agent URI.
	StatePath = "/task-protection/v1/state"

	// DefaultExpiresInMinutes is the protection's lifetime asked of ECS by
	// each enable or renewal, in minutes: 60. The Protector renews at half
	// of it (every 30 minutes), 2 calls an hour while busy. It is also the
	// longest a hung process that stopped renewing keeps holding off a
	// deployment, which is why it is not the 2,880 maximum.
	DefaultExpiresInMinutes = 60

	// MinExpiresInMinutes and MaxExpiresInMinutes bound WithExpiresInMinutes
	// to what ECS accepts: 1 minute to 2,880 minutes (48 hours).
	MinExpiresInMinutes = 1
	MaxExpiresInMinutes = 2880

	// DefaultQuietPeriod is how long nothing must be held before protection
	// is cleared: 2 minutes. A trickle with gaps shorter than that keeps the
	// task protected at 2 calls an hour instead of flapping at two calls a
	// message (ECS's UpdateTaskProtection is throttled per account), and a
	// task that fell idle becomes eligible for scale-in within 2 minutes,
	// well inside the several minutes a scale-in alarm takes to fire.
	DefaultQuietPeriod = 2 * time.Minute

	// MaxQuietPeriod bounds WithQuietPeriod: 1 hour.
	MaxQuietPeriod = time.Hour

	// DefaultCallTimeout bounds each call to the agent: 3 seconds. The
	// agent is local, but it calls ECS's API before it answers.
	DefaultCallTimeout = 3 * time.Second

	// MaxCallTimeout bounds WithCallTimeout: 30 seconds, half of the
	// shortest protection ECS accepts, so a renewal always lands in time.
	MaxCallTimeout = 30 * time.Second
)

// settings is what the options set.
type settings struct {
	uri     string
	uriSet  bool
	client  *http.Client
	logger  *slog.Logger
	quiet   time.Duration
	expires int
	timeout time.Duration
	errs    []error
}

func (s *settings) fail(format string, args ...any) {
	s.errs = append(s.errs, fmt.Errorf(format, args...))
}

// Option configures New.
type Option func(*settings)

// WithAgentURI sets the agent's base URI (for instance
// "http://169.254.170.2/api/<task-id>"), instead of reading ECS_AGENT_URI.
// It must be an absolute http or https URI. An empty uri means "no agent":
// the Protector counts and makes no calls, as when ECS_AGENT_URI is unset.
func WithAgentURI(uri string) Option {
	return func(s *settings) {
		s.uri = uri
		s.uriSet = true
	}
}

// WithHTTPClient sets the client of the agent's calls; tests pass one whose
// Transport answers in memory. The client's own Timeout, if any, applies
// on top of the call timeout. Default: a client of its own whose
// transport ignores HTTP_PROXY and friends (the agent is link-local).
func WithHTTPClient(c *http.Client) Option {
	return func(s *settings) {
		if c == nil {
			s.fail("ecsprotect.WithHTTPClient(nil): client must not be nil")
			return
		}
		s.client = c
	}
}

// WithLogger sets where the Protector logs: WARN for an unavailable or
// failing agent (rate-limited), INFO when a failing agent recovers, DEBUG
// for each call. Default: nothing is logged (a library logs only where it
// is told to); nil keeps the default.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) {
		s.logger = l
	}
}

// WithQuietPeriod sets how long nothing must be held before protection is
// cleared. Range 0 (clear as soon as idle) to MaxQuietPeriod (1 h);
// default DefaultQuietPeriod (2 min).
func WithQuietPeriod(d time.Duration) Option {
	return func(s *settings) {
		if d < 0 || d > MaxQuietPeriod {
			s.fail("ecsprotect.WithQuietPeriod(%v): must be from 0 to %v", d, MaxQuietPeriod)
			return
		}
		s.quiet = d
	}
}

// WithExpiresInMinutes sets the ExpiresInMinutes of each enable or
// renewal, in minutes; the Protector renews at half of it while busy.
// Range MinExpiresInMinutes to MaxExpiresInMinutes (1 to 2,880, as ECS
// accepts); default DefaultExpiresInMinutes (60).
func WithExpiresInMinutes(n int) Option {
	return func(s *settings) {
		if n < MinExpiresInMinutes || n > MaxExpiresInMinutes {
			s.fail("ecsprotect.WithExpiresInMinutes(%d): must be from %d to %d",
				n, MinExpiresInMinutes, MaxExpiresInMinutes)
			return
		}
		s.expires = n
	}
}

// WithCallTimeout bounds each call to the agent, from the request to the
// answer's last byte. Range above 0 to MaxCallTimeout (30 s); default
// DefaultCallTimeout (3 s). Close takes up to about this long.
func WithCallTimeout(d time.Duration) Option {
	return func(s *settings) {
		if d <= 0 || d > MaxCallTimeout {
			s.fail("ecsprotect.WithCallTimeout(%v): must be above 0 and at most %v", d, MaxCallTimeout)
			return
		}
		s.timeout = d
	}
}
