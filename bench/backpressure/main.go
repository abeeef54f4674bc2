// Command backpressure measures, in virtual time, how a Consumer meets a
// downstream that admits R requests a second and answers 429 above it
// (issue 36): with the 429 returned as a plain error, with Throttled
// alone, and with Throttled and WithAdaptiveConcurrency, against the same
// work on a downstream without a limit. It prints the settling time of the success rate, the adaptive
// limit's range once settled, the messages moved to the dead-letter queue
// (maxReceiveCount 5) and the receives per message.
//
//	go run ./bench/backpressure              # R = 50 and 200, a 90 s backlog
//	go run ./bench/backpressure -backlog 60s
//
// The conditions: sqstest in memory (a standard queue, VisibilityTimeout
// 30 s, a RedrivePolicy to a dead-letter queue after 5 receives), every
// SQS call 10 ms longer (after the server's answer), a backlog of R ×
// backlog messages at the start, concurrency 100 (the downstream needs
// R × 100 ms: 5 and 20 handlers), handlers that call a downstream with a
// token bucket of R a second and a burst of R/10: an admitted call takes
// 100 ms on average (80 to 120), a refused one 5 ms and returns
// Throttled(err, 1 s). Settled: every window of successes (5 s, and 1 s;
// slid by 100 ms) from then until 80 % of the backlog's time has a rate
// within 10 % of R. The limit's range and mean are of samples every
// 100 ms over the same span.
//
// A synctest bubble needs a *testing.T, so the program runs its
// simulations as the subtests of one test through testing.Main.
package main

import (
	"flag"
	"fmt"
	"regexp"
	"testing"
	"time"
)

var verbose = flag.Bool("v", false, "print the success rate and the limit every 5 s")

var backlogFor = flag.Duration("backlog", 90*time.Second, "the backlog, in seconds of the downstream's rate")

func main() {
	testing.Main(func(pat, str string) (bool, error) { return regexp.MatchString(pat, str) },
		[]testing.InternalTest{{Name: "BackPressure", F: table}}, nil, nil)
}

func table(t *testing.T) {
	fmt.Printf("Virtual time, sqstest in memory, every call +%v, concurrency %d, downstream: R/s token bucket (burst R/10), %v on average (80 to 120 ms) per admitted call, %v per 429 with Retry-After %v; a backlog of R × %v; maxReceiveCount %d.\n\n",
		callLatency, concurrency, latency, refusalLatency, retryAfter, *backlogFor, maxReceiveCount)
	fmt.Println("| R | mode | settled within 10 % of R (5 s / 1 s windows) | success rate once settled | limit once settled: range, mean (R × 100 ms) | moved to DLQ | receives / message | 429s | limit falls |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range []float64{50, 200} {
		for _, c := range []config{
			{mode: unthrottled}, {mode: plainError}, {mode: throttledOnly}, {mode: adaptive}, {mode: adaptive, initial: concurrency},
		} {
			c.rate, c.backlogFor = r, *backlogFor
			fmt.Println(simulate(t, c).row(c))
		}
	}
}

func (res result) row(c config) string {
	settled, rate, limit := "never", "-", "-"
	switch {
	case c.mode == unthrottled:
		settled = "-"
	case res.settled >= 0:
		settled = res.settled.String() + " / "
		if res.settled1s >= 0 {
			settled += res.settled1s.String()
		} else {
			settled += "never"
		}
		rate = fmt.Sprintf("%.1f/s", res.meanRate)
		if c.mode == adaptive {
			limit = fmt.Sprintf("%d – %d, %.1f (%.0f)", res.limitLo, res.limitHi, res.limitMean, c.rate*latency.Seconds())
		}
	}
	name := c.mode.String()
	if c.initial > 0 {
		name += fmt.Sprintf(", Initial %d", c.initial)
	}
	return fmt.Sprintf("| %.0f | %s | %s | %s | %s | %d of %d | %.3f | %d | %d |",
		c.rate, name, settled, rate, limit, res.dlq, res.messages, res.receives, res.throttled, res.falls)
}
