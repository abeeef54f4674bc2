package sqsconsumer

import (
	"slices"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// Options bundles opts into one Option, applied in the order given, as if
// each had been passed to New in its place: a platform's defaults as one
// value that a team passes first and extends after.
//
//	// The platform's SDK:
//	var Defaults = sqsconsumer.Options(
//		sqsconsumer.WithLogger(log), sqsconsumer.WithConcurrency(20),
//		sqsconsumer.WithRequireDeadLetterQueue(), sqsconsumer.WithMiddleware(tracing))
//	// A team:
//	sqsconsumer.New(client, url, h, platform.Defaults, sqsconsumer.WithConcurrency(50))
//
// Precedence is the order of the options, bundles flattened: for an
// option that sets a value (WithConcurrency, WithVisibilityTimeout,
// WithBreaker, WithScaling, WithLogger, WithPanicPolicy, ...) the last one
// wins, whole (a later WithBreaker replaces the earlier Breaker, it does
// not merge fields), so a team overrides a platform default by passing
// its own after the bundle. WithMiddleware appends: the bundle's
// middleware stays, outside the team's when the bundle comes first. The
// switches without an argument (WithRequireDeadLetterQueue,
// WithCancelIdlePollsAtShutdown) cannot be turned off by a later option.
// A platform that must keep a value whatever the team passes applies its
// own options after the team's (New(c, url, h, Defaults,
// Options(teamOpts...), Mandatory)), or checks Consumer.Settings after
// New. An option out of range in a bundle is reported by New as if passed
// alone; conflicts are judged on the result, after every option applied.
// No option can be unset: a team's option that conflicts with one in the
// bundle (WithAdaptiveVisibility after a bundle's WithHeartbeatInterval)
// fails New naming both, so a platform bundles only what every team can
// live with, or offers several bundles.
//
// A nil element is skipped, as New skips a nil option. The bundle keeps
// its own copy of opts; it holds no state and may be shared by any
// number of Consumers and goroutines. Options() is an option that does
// nothing. Bundles nest. For options that must also configure NewLease,
// use LeaseOptions.
func Options(opts ...Option) Option {
	return optionBundle(slices.Clone(opts))
}

// LeaseOptions bundles LeaseOptions into one LeaseOption, applied in
// order as Options does: one value that configures NewLease (and
// lambdasqs.WithLeaseOptions) and, since every LeaseOption is an Option,
// New too; Options may hold it. A nil element is skipped.
func LeaseOptions(opts ...LeaseOption) LeaseOption {
	return leaseOptionBundle(slices.Clone(opts))
}

// optionBundle is the Option Options returns.
type optionBundle []Option

func (b optionBundle) apply(s *settings) {
	if broken.Is(broken.BundleReversed) {
		for _, o := range slices.Backward(b) {
			if o != nil {
				o.apply(s)
			}
		}
		return
	}
	for _, o := range b {
		if o != nil {
			o.apply(s)
		}
	}
}

// leaseOptionBundle is the LeaseOption LeaseOptions returns.
type leaseOptionBundle []LeaseOption

func (b leaseOptionBundle) apply(s *settings) {
	for _, o := range b {
		if o != nil {
			o.apply(s)
		}
	}
}

func (leaseOptionBundle) leaseOption() {}
