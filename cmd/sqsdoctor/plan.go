package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/doctor"
)

const planUsage = `Usage: sqsdoctor plan -p50 D -p99 D -rate R [-peak R] -target D -concurrency N [flags]
       sqsdoctor plan -stats FILE -rate R [-peak R] -target D [-concurrency N] [flags]

Plans the capacity and cost of a service consuming one SQS queue
(package doctor's Plan): replicas at the average and the peak arrival
rate, the p99 wait from send to handler start they predict, the wait
during a step from average to peak under an autoscaler, the visibility
timeout and heartbeat, maxReceiveCount and retention that agree, and the
month's SQS requests by action with their cost. It calls nothing.

The model: handler time lognormal through p50 and p99 (mean estimated
from them unless -mean), Poisson arrivals; replicas =
ceil(rate / (concurrency / mean x utilization)), at least 1, as the
Consumer's scaling signal computes them; the steady wait from Erlang C
over replicas x concurrency slots with Allen and Cunneen's correction for
non-exponential work, plus the hand-off; the step as a fluid backlog that
grows until the replicas the autoscaler starts serve, then drains. Cost
at -price per million requests (AWS's list price by default), the free
tier shown apart, never deducted.

-stats reads a sqsconsumer.Stats as JSON (json.Marshal of
Consumer.Stats(); "-" for stdin): its handler times, renewals per
message and batch fills (messages per non-empty receive, deletes per
delete call); flags given as well win.

The bill: most requests are receives and deletes, so the batch fills
decide it. Unless measured (-stats) or given (-batch-fill,
-delete-fill), they are estimated from the rate per replica, the receive
round trip (-handoff) and the batch size (-batch-size): a long poll
answers as soon as a message waits, with what else arrived during the
round trip; deletes are coalesced for 25ms. The plan says which it used
and why, and prints the bill's range beside its estimate: every call
full (10 messages a receive at -batch-size 10, 10 a delete) to one
message per call. Exact counts (messages, GetQueueAttributes) print in
full; estimates to three significant digits ("5.94 billion", "$2.38k").

Flags:
`

const planUsageTail = `
Durations take Go's syntax: 90s, 5m, 1h30m. Rates are messages per
second for the whole queue.

-json prints the plan as one JSON object: durations in seconds (keys
ending _seconds), rates in msg/s, money in US dollars, figures unrounded;
"requests" holds the bill: "lines" (each {"action", "calls", "requests",
"dollars", "exact"}), "requests", "dollars", "batch_fill",
"batch_fill_basis", "delete_fill", "delete_fill_basis",
"full_batches" and "single_messages" (each {"requests", "dollars"}),
and more. On bad input {"error": string, "exit_code": 2}.

Exit codes: 0 the plan was printed, 2 bad flags or input, 3 the -stats
file could not be read.
`

// planFlags maps PlanInput fields to the flags that set them, for errors.
var planFlags = map[string]string{
	"HandlerP50": "-p50", "HandlerP99": "-p99", "HandlerMean": "-mean", "HoldP99": "-hold-p99",
	"ArrivalAvg": "-rate", "ArrivalPeak": "-peak", "Target": "-target", "Concurrency": "-concurrency",
	"MessageSize": "-message-size", "BatchSize": "-batch-size", "WaitTime": "-wait-time",
	"ScalingInterval": "-scaling-interval", "Utilization": "-utilization", "PricePerMillion": "-price",
	"HandOff": "-handoff", "BatchFill": "-batch-fill", "DeleteFill": "-delete-fill",
	"RenewalsPerMessage": "-renewals", "MaxReceiveCount": "-max-receive-count", "Retention": "-retention",
	"DecisionPeriod": "-decision-period", "StartDelay": "-start-delay", "DecisionLag": "-decision-lag",
	"ScaleInAfter": "-scale-in-after", "ScaleInCooldown": "-scale-in-cooldown", "StepWindow": "-step-window",
}

// runPlan is "sqsdoctor plan": it parses args, plans, and writes the
// plan to stdout (problems to stderr); it returns the exit code.
func runPlan(stdin io.Reader, args []string, stdout, stderr io.Writer) int {
	cf := newCLIFlags("sqsdoctor plan", stdout, stderr, "sqsdoctor plan:", "Run sqsdoctor plan -h for usage.",
		"print the plan as JSON", planUsage, planUsageTail)
	fs := cf.fs
	var in doctor.PlanInput
	fs.DurationVar(&in.HandlerP50, "p50", 0, "handler time p50, handler start to return (required without -stats)")
	fs.DurationVar(&in.HandlerP99, "p99", 0, "handler time p99 (required without -stats)")
	fs.DurationVar(&in.HandlerMean, "mean", 0, "mean handler time; default: estimated from -p50 and -p99 (lognormal)")
	fs.DurationVar(&in.HoldP99, "hold-p99", 0, "p99 of receive to settle, which the lease covers; default: -p99")
	fs.Float64Var(&in.ArrivalAvg, "rate", 0, "average arrival rate, msg/s (required)")
	fs.Float64Var(&in.ArrivalPeak, "peak", 0, "peak arrival rate, msg/s; default: -rate")
	fs.DurationVar(&in.Target, "target", 0, "longest acceptable p99 wait from send to handler start (required)")
	fs.IntVar(&in.Concurrency, "concurrency", 0, "handler slots per replica (required)")
	fs.BoolVar(&in.FIFO, "fifo", false, "a FIFO queue (its list price)")
	fs.IntVar(&in.MessageSize, "message-size", 0, "mean message size in bytes, for billing in 64 KiB chunks; default: small")
	fs.IntVar(&in.BatchSize, "batch-size", 0, "receive batch size, 1 to 10; default 10")
	fs.DurationVar(&in.WaitTime, "wait-time", 0, "long-poll wait, 1s to 20s; default 20s")
	fs.DurationVar(&in.ScalingInterval, "scaling-interval", 0, "GetQueueAttributes interval per replica for the signal; default 30s")
	fs.Float64Var(&in.Utilization, "utilization", 0, "share of capacity planned for, (0, 1]; default 0.9, as the Consumer's signal")
	fs.Float64Var(&in.PricePerMillion, "price", 0, "US dollars per million requests; default AWS's list price, 0.40 standard, 0.50 FIFO")
	fs.DurationVar(&in.HandOff, "handoff", 0, "receive round trip added to every wait; default 20ms")
	fs.Float64Var(&in.BatchFill, "batch-fill", 0, "measured messages per non-empty receive; default: estimated")
	fs.Float64Var(&in.DeleteFill, "delete-fill", 0, "measured deletes per delete call; default: estimated")
	fs.Float64Var(&in.RenewalsPerMessage, "renewals", 0, "measured renewals per message; default: estimated")
	fs.IntVar(&in.MaxReceiveCount, "max-receive-count", 0, "the redrive policy's maxReceiveCount; default 5")
	fs.DurationVar(&in.Retention, "retention", 0, "the queue's MessageRetentionPeriod; default: chosen to agree with the time to DLQ")
	fs.DurationVar(&in.DecisionPeriod, "decision-period", 0, "how often the autoscaler decides; default 1m")
	fs.DurationVar(&in.StartDelay, "start-delay", 0, "how long a new replica takes to serve; default 45s")
	fs.DurationVar(&in.DecisionLag, "decision-lag", 0, "step to first decision that sees it; default -scaling-interval + -decision-period")
	fs.DurationVar(&in.ScaleInAfter, "scale-in-after", 0, "how long the signal holds its highest figure; default 5m")
	fs.DurationVar(&in.ScaleInCooldown, "scale-in-cooldown", 0, "autoscaler's wait after an activity before scaling in; default 5m")
	fs.DurationVar(&in.StepWindow, "step-window", 0, "span after the step the step's p99 is over; default: until the backlog drains")
	statsFile := fs.String("stats", "", "a sqsconsumer.Stats as JSON, \"-\" for stdin")
	if code, done := cf.parse(args); done {
		return code
	}
	fail := cf.fail
	if fs.NArg() > 0 {
		return fail(exitUsage, "unexpected arguments: "+strings.Join(fs.Args(), " "))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["peak"] {
		in.ArrivalPeak = max(in.ArrivalAvg, 0)
	}
	if *statsFile != "" {
		base, code, err := readStats(stdin, *statsFile)
		if err != nil {
			return fail(code, err.Error())
		}
		// Flags given win over the Stats' figures.
		for name, pick := range map[string]func(){
			"p50":      func() { in.HandlerP50 = base.HandlerP50 },
			"p99":      func() { in.HandlerP99 = base.HandlerP99 },
			"mean":     func() { in.HandlerMean = base.HandlerMean },
			"hold-p99": func() { in.HoldP99 = base.HoldP99 },
			"renewals": func() { in.RenewalsPerMessage = base.RenewalsPerMessage },
			"concurrency": func() {
				if base.Concurrency > 0 {
					in.Concurrency = base.Concurrency
				}
			},
			"batch-fill": func() {
				in.BatchFill, in.BatchFillSource = base.BatchFill, withFile(base.BatchFillSource, *statsFile)
			},
			"delete-fill": func() {
				in.DeleteFill, in.DeleteFillSource = base.DeleteFill, withFile(base.DeleteFillSource, *statsFile)
			},
		} {
			if !set[name] {
				pick()
			}
		}
	}
	// The plan explains where its batch fills come from.
	if set["batch-fill"] {
		in.BatchFillSource = "given with -batch-fill"
	}
	if set["delete-fill"] {
		in.DeleteFillSource = "given with -delete-fill"
	}
	var missing []string
	for name, unset := range map[string]bool{
		"-p50": in.HandlerP50 == 0 && *statsFile == "", "-p99": in.HandlerP99 == 0 && *statsFile == "",
		"-rate": !set["rate"], "-target": !set["target"], "-concurrency": !set["concurrency"] && in.Concurrency == 0,
	} {
		if unset {
			missing = append(missing, name+" is required")
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fail(exitUsage, missing...)
	}
	p, err := doctor.Plan(in)
	if err != nil {
		var msgs []string
		for _, e := range doctor.InputErrors(err) {
			name := planFlags[e.Field]
			if name == "" {
				name = e.Field
			}
			msgs = append(msgs, name+" "+flagProblem(e.Problem))
		}
		if len(msgs) == 0 {
			msgs = []string{errText(err)}
		}
		return fail(exitUsage, msgs...)
	}
	if cf.wantJSON {
		if !writeJSON(stdout, stderr, p) {
			return exitRead
		}
		return exitOK
	}
	fmt.Fprint(stdout, p)
	return exitOK
}

// withFile adds the -stats file to a fill's source ("" stays "").
func withFile(source, path string) string {
	if source == "" {
		return ""
	}
	if path == "-" {
		path = "stdin"
	}
	return source + " (-stats " + path + ")"
}

// flagProblem rewrites the field names a problem mentions as flags.
func flagProblem(s string) string {
	for field, name := range planFlags {
		s = strings.ReplaceAll(s, field+" (", name+" (")
	}
	return s
}

// readStats reads a sqsconsumer.Stats as JSON from path ("-": stdin) and
// starts a PlanInput from it.
func readStats(stdin io.Reader, path string) (doctor.PlanInput, int, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return doctor.PlanInput{}, exitRead, fmt.Errorf("-stats: %w", err)
	}
	var st sqsconsumer.Stats
	if err := json.Unmarshal(b, &st); err != nil {
		return doctor.PlanInput{}, exitUsage, fmt.Errorf("-stats %s: not a sqsconsumer.Stats in JSON: %w", path, err)
	}
	in, err := doctor.InputFromStats(st)
	if err != nil {
		var ie *doctor.InputError
		if errors.As(err, &ie) {
			return doctor.PlanInput{}, exitUsage, fmt.Errorf("-stats %s: %s", path, ie.Problem)
		}
		return doctor.PlanInput{}, exitUsage, fmt.Errorf("-stats %s: %w", path, err)
	}
	return in, exitOK, nil
}
