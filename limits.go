package sqsconsumer

import "time"

// SQS's own limits, which every part of the package keeps to (Amazon SQS
// Developer Guide, "Amazon SQS message quotas" and "Amazon SQS visibility
// timeout").
const (
	// MaxVisibilityTimeout is SQS's ceiling: a message may stay invisible
	// for at most 12 hours after the receive that issued its handle.
	MaxVisibilityTimeout = 12 * time.Hour
	// maxWaitTime is SQS's longest long poll.
	maxWaitTime = 20 * time.Second
)
