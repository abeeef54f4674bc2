// Command fairness measures, on a fair queue in virtual time, how long the
// quiet tenants' messages wait from send to handler start beside a noisy
// tenant, with the Consumer's fair dispatch and with arrival-order
// dispatch, and prints the README's markdown table (issue 31).
//
//	go run ./bench/fairness               # 60 s of sending per run
//	go run ./bench/fairness -send 30s
//
// The conditions: sqstest in memory (a standard queue, so a fair queue:
// the server delivers quiet tenants' messages first), every SQS call 10 ms
// longer (after the server's answer), nine quiet tenants sending 2
// messages a second each and one noisy tenant sending bursts of 2,000
// every 10 s (from the start), handlers of 50 ms, concurrency 20, one and
// four Consumers sharing the queue. Each configuration runs once with the
// noisy tenant and once without it. Throughput is the messages handled
// over the time from the first send to the last handler's return; calls
// per message are the Consumers' SQS calls over the messages handled.
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
		[]testing.InternalTest{{Name: "Fairness", F: table}}, nil, nil)
}

// row is one line of the table: a dispatch and a number of Consumers,
// with and without the noisy tenant.
type row struct {
	consumers int
	d         dispatch
	with      result
	without   result
}

func rows(t *testing.T, send time.Duration, consumers []int, ds []dispatch) []row {
	var out []row
	for _, n := range consumers {
		for _, d := range ds {
			r := row{consumers: n, d: d}
			r.with = simulate(t, config{consumers: n, noisy: true, d: d, send: send})
			r.without = simulate(t, config{consumers: n, noisy: false, d: d, send: send})
			out = append(out, r)
		}
	}
	return out
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func table(t *testing.T) {
	began := time.Now()
	rs := rows(t, *sendFor, []int{1, 4}, []dispatch{fifoOrder, fairOrder, fairLimit, fairBounce})
	fmt.Printf("Virtual time, sqstest in memory (a fair queue), every call +%v, %d quiet tenants at %d msg/s each, one noisy tenant bursting %d every %v, handlers %v, concurrency %d, %v of sending.\n\n",
		callLatency, quietTenants, quietRate, noisyBurst, noisyEvery, handlerTime, concurrency, *sendFor)
	fmt.Println("| Consumers | dispatch | quiet p99 wait, noisy absent | quiet p99 wait, noisy present | bound (1.5 × absent + 50 ms) | quiet p50 / max, present | noisy p99 wait | throughput, present (× arrival order) | calls/msg, present | Stats.TopGroups[0], NoisyGroups |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	var base map[int]result = map[int]result{}
	for _, r := range rs {
		if !r.d.fair {
			base[r.consumers] = r.with
		}
		bound := r.without.quietP99*3/2 + 50*time.Millisecond
		verdict := "meets"
		if r.with.quietP99 > bound {
			verdict = "misses"
		}
		fmt.Printf("| %d | %s | %s | %s | %s (%s) | %s / %s | %s | %.1f msg/s (%.3f) | %.3f | %s, %d |\n",
			r.consumers, r.d.name, ms(r.without.quietP99), ms(r.with.quietP99), ms(bound), verdict,
			ms(r.with.quietP50), ms(r.with.quietMax), ms(r.with.noisyP99),
			r.with.throughput, r.with.throughput/base[r.consumers].throughput, r.with.callsPerMessage,
			r.with.topGroup, r.with.noisyGroups)
	}
	fmt.Fprintf(os.Stderr, "\n(%d runs in %v of wall time)\n", 2*len(rs), time.Since(began).Round(time.Second))
}
