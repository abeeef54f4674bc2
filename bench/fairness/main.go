// Command fairness measures, on a fair queue in virtual time, how long the
// quiet tenants' messages wait from send to handler start beside noisy
// tenants, with the Consumer's fair dispatch and with arrival-order
// dispatch, and prints the README's markdown tables (issues 31 and 35).
//
//	go run ./bench/fairness               # 60 s of sending per run
//	go run ./bench/fairness -send 30s
//
// The conditions: sqstest in memory (a standard queue, so a fair queue:
// the server delivers quiet tenants' messages first), every SQS call 10 ms
// longer (after the server's answer: the round trip), handlers of 50 ms,
// concurrency 20, one and four Consumers sharing the queue, and three
// mixes of ten tenants: one, two or three noisy tenants bursting 2,000
// messages together every 10 s (from the start, 2,000, 1,000 or 666 each),
// the other nine, eight or seven quiet, sending 2 messages a second each,
// spread over the second. Each configuration runs once with the noisy
// tenants and once without them. A quiet message's wait is split into its
// wait in SQS (from the send to the receive that got it) and here (from
// that receive's answer to the handler's start). Throughput is the messages handled over
// the time from the first send to the last handler's return; calls per
// message are the Consumers' SQS calls over the messages handled.
//
// A synctest bubble needs a *testing.T, so the program runs its
// simulations as the subtests of one test through testing.Main.
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"
)

var sendFor = flag.Duration("send", time.Minute, "how long the tenants send, in virtual time")

func main() {
	testing.Main(func(pat, str string) (bool, error) { return regexp.MatchString(pat, str) },
		[]testing.InternalTest{{Name: "Fairness", F: tables}}, nil, nil)
}

// row is one line of a table: a dispatch and a number of Consumers, with
// and without the noisy tenants.
type row struct {
	consumers int
	d         dispatch
	with      result
	without   result
}

func rows(t *testing.T, m mix, send time.Duration, consumers []int, ds []dispatch) []row {
	var out []row
	for _, n := range consumers {
		for _, d := range ds {
			r := row{consumers: n, d: d}
			r.with = simulate(t, config{consumers: n, mix: m, noisy: true, d: d, send: send})
			r.without = simulate(t, config{consumers: n, mix: m, noisy: false, d: d, send: send})
			out = append(out, r)
		}
	}
	return out
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// bound is issue 35's: the quiet tenants' p99 wait beside the noisy ones
// within their p99 alone plus one round trip plus 20 ms.
func bound(alone time.Duration) time.Duration { return alone + callLatency + 20*time.Millisecond }

func tables(t *testing.T) {
	began := time.Now()
	fmt.Printf("Virtual time, sqstest in memory (a fair queue), every call +%v (the round trip), handlers %v, concurrency %d, %v of sending; quiet tenants at %d msg/s each, noisy tenants bursting %d together every %v.\n",
		callLatency, handlerTime, concurrency, *sendFor, quietRate, noisyTotal, noisyEvery)
	runs := 0
	for _, m := range mixes {
		ds := []dispatch{fifoOrder, fairOrder, fairLimit}
		if m == oneNoisy {
			ds = append(ds, fairBounce)
		}
		rs := rows(t, m, *sendFor, []int{1, 4}, ds)
		runs += 2 * len(rs)
		fmt.Printf("\n**%s**, %d each:\n\n", m.name, m.burst())
		fmt.Println("| Consumers | dispatch | quiet p99 wait, noisy absent | quiet p99 wait, noisy present | bound (absent + round trip + 20 ms) | quiet p50 / max, present | quiet p99 in SQS / here, present | noisy p99 wait | throughput, present (× arrival order) | calls/msg, present (× arrival order) | Stats.TopGroups[0], NoisyGroups |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
		base := map[int]result{}
		for _, r := range rs {
			if !r.d.fair {
				base[r.consumers] = r.with
			}
			b := bound(r.without.quietP99)
			verdict := "meets"
			if r.with.quietP99 > b {
				verdict = "misses"
			}
			fifo := base[r.consumers]
			fmt.Printf("| %d | %s | %s | %s | %s (%s) | %s / %s | %s / %s | %s | %.1f msg/s (%.3f) | %.3f (%.2f) | %s, %d |\n",
				r.consumers, r.d.name, ms(r.without.quietP99), ms(r.with.quietP99), ms(b), verdict,
				ms(r.with.quietP50), ms(r.with.quietMax), ms(r.with.quietInSQS), ms(r.with.quietHere), ms(r.with.noisyP99),
				r.with.throughput, r.with.throughput/fifo.throughput, r.with.callsPerMessage, r.with.callsPerMessage/fifo.callsPerMessage,
				r.with.topGroup, r.with.noisyGroups)
		}
	}
	fmt.Fprintf(os.Stderr, "\n(%d runs in %v of wall time)\n", runs, time.Since(began).Round(time.Second))
}
