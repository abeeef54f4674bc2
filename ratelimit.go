package sqsconsumer

import (
	"math"
	"time"
)

// WithRateLimit limits how many messages a second the Consumer receives,
// with bursts of up to burst messages, in golang.org/x/time/rate's terms:
// limit is a rate.Limit (events per second) and burst a Limiter's burst.
// Default: no limit.
//
// The limit is kept before the receive, never after it: each
// ReceiveMessage asks (MaxNumberOfMessages) only for as many messages as
// the limiter holds tokens for, so no message is received and handed back
// because of the limit, and no receive count is spent on it. A receive
// takes its tokens when it is sent and gives back those it did not use
// (it got fewer messages), so over any span the Consumer receives at most
// limit x span + burst messages. Receives wait until the tokens for a full
// receive are there (the receive size of WithBatchSize, or burst if
// smaller), so at 50 messages a second with receives of 10 the Consumer
// sends five receives a second. Messages redelivered while still held here count too.
//
// limit must be positive and finite, at most 100,000 (messages per
// second); burst from 1 to 100,000. A burst below the receive size makes
// every receive ask for at most burst messages.
func WithRateLimit(limit float64, burst int) Option {
	return option(func(s *settings) {
		if !(limit > 0 && limit <= maxRateLimit) {
			s.fail("WithRateLimit(%v, %d): limit must be above 0 and at most %d messages per second", limit, burst, maxRateLimit)
			return
		}
		if burst < 1 || burst > maxRateLimit {
			s.fail("WithRateLimit(%v, %d): burst must be from 1 to %d", limit, burst, maxRateLimit)
			return
		}
		s.rateLimit, s.rateBurst = limit, burst
	})
}

// maxRateLimit bounds WithRateLimit's limit and burst.
const maxRateLimit = 100_000

// tokenBucket is a token bucket in the manner of x/time/rate: tokens
// accrue at limit a second up to burst, and the bucket starts full. Its
// methods take the time, for table tests; it is not safe for concurrent
// use: its owner's lock guards it (the flow's for WithRateLimit, the
// failure log's for the log's rate).
type tokenBucket struct {
	limit  float64 // tokens a second
	burst  int
	tokens float64 // at at
	at     time.Time
}

func newTokenBucket(limit float64, burst int) *tokenBucket {
	return &tokenBucket{limit: limit, burst: burst, tokens: float64(burst)}
}

// advance adds the tokens accrued up to now.
func (b *tokenBucket) advance(now time.Time) {
	if b.at.IsZero() {
		b.at = now
		return
	}
	if now.After(b.at) {
		b.tokens = min(float64(b.burst), b.tokens+now.Sub(b.at).Seconds()*b.limit)
		b.at = now
	}
}

// tokenSlack absorbs floating-point error: a bucket short of n tokens by
// less than this holds n.
const tokenSlack = 1e-9

// readyAt returns when the bucket will hold n tokens (n <= burst): now or
// earlier if it does already.
func (b *tokenBucket) readyAt(now time.Time, n int) time.Time {
	b.advance(now)
	short := float64(n) - b.tokens
	if short <= tokenSlack {
		return now
	}
	return now.Add(time.Duration(math.Ceil(short / b.limit * float64(time.Second))))
}

// take removes n tokens; readyAt must have allowed them.
func (b *tokenBucket) take(now time.Time, n int) {
	b.advance(now)
	b.tokens = max(b.tokens-float64(n), 0)
}

// giveBack returns n tokens a receive did not use, up to the burst.
func (b *tokenBucket) giveBack(now time.Time, n int) {
	if n <= 0 {
		return
	}
	b.advance(now)
	b.tokens = min(float64(b.burst), b.tokens+float64(n))
}
