// Command scaling runs the autoscaling simulation of package scalesim over the
// standard traces of issue 26 and prints the README's markdown table: for each
// trace and policy, replica-minutes, waits from send to handler start, the replicas
// once settled against the fewest that meet the target, reversals, messages lost
// and duplicates.
//
//	go run ./bench/scaling                         # scale 1/10, every trace and policy
//	go run ./bench/scaling -scale 1                # the full rate (about 3 CPU-hours)
//	go run ./bench/scaling -trace step -policy ours,keda
//
// A synctest bubble needs a *testing.T, so the program runs its simulations as the
// subtests of one test through testing.Main; -test.parallel bounds how many run at
// once (default GOMAXPROCS). The sim sustains about 4,000 messages of virtual
// throughput per CPU second at full rate (4,275 measured on a 2-core machine,
// without -race), fewer per message at high scales (see package scalesim); the
// program prints what it measured under the table.
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqskit/sqsconsumer/scalesim"
)

var (
	scale    = flag.Int("scale", 10, "divide rates, bursts and handler slots by this (1 = full rate); a divisor of the concurrency")
	traces   = flag.String("trace", "all", "comma-separated traces: "+strings.Join(scalesim.Names, ","))
	policies = flag.String("policy", "all", "comma-separated policies: "+strings.Join(scalesim.PolicyNames, ","))
	seed     = flag.Uint64("seed", 1, "seed of arrivals, handler times and start delays")
	verbose  = flag.Bool("decisions", false, "print every autoscaler decision of each run")
)

func list(s string, all []string) []string {
	if s == "all" {
		return all
	}
	return strings.Split(s, ",")
}

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	testing.Main(func(pat, str string) (bool, error) { return regexp.MatchString(pat, str) },
		[]testing.InternalTest{{Name: "Scaling", F: scaling}}, nil, nil)
}

func scaling(t *testing.T) {
	type run struct {
		cfg scalesim.Config
		res *scalesim.Result
	}
	var runs []*run
	for _, tn := range list(*traces, scalesim.Names) {
		tr, err := scalesim.Standard(tn)
		if err != nil {
			t.Fatal(err)
		}
		for _, pn := range list(*policies, scalesim.PolicyNames) {
			p, err := scalesim.PolicyByName(pn)
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, &run{cfg: scalesim.Config{Trace: tr, Policy: p, Scale: *scale, Seed: *seed}})
		}
	}
	if len(runs) == 0 {
		t.Fatal("nothing to run")
	}
	c0, w0 := cpu(), time.Now()
	t.Run("runs", func(t *testing.T) { // each run writes its own res; t.Run waits for them
		for _, r := range runs {
			t.Run(r.cfg.Trace.Name+"/"+r.cfg.Policy.Name(), func(t *testing.T) {
				t.Parallel()
				res, err := scalesim.Run(t, r.cfg)
				if err != nil {
					t.Error(err)
				}
				r.res = res
			})
		}
	})
	out := os.Stdout
	if err := scalesim.Conditions(out, runs[0].cfg); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(out)
	_ = scalesim.TableHeader(out)
	var sent int64
	for _, r := range runs {
		if r.res == nil {
			continue
		}
		sent += r.res.Sent
		_ = scalesim.TableRow(out, r.res)
	}
	c := cpu() - c0
	fmt.Fprintf(out, "\n%d messages in %v of CPU (%v wall): %.0f messages per CPU second.\n",
		sent, c.Round(time.Second), time.Since(w0).Round(time.Second), float64(sent)/c.Seconds())
	if *verbose {
		for _, r := range runs {
			if r.res == nil {
				continue
			}
			fmt.Fprintf(out, "\n%s / %s: capacity %.1f msg/s per replica (mean handler %v)\n", r.res.Trace, r.res.Policy, r.res.CapacityPerReplica, r.res.MeanHandler)
			for _, d := range r.res.Decisions {
				fmt.Fprintf(out, "  %8v asked %3d  %3d -> %3d  serving %3d  visible %8d  in flight %6d\n",
					d.At, d.Asked, d.Before, d.After, d.Serving, d.Visible, d.InFlight)
			}
		}
	}
}
