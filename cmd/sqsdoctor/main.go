// Command sqsdoctor checks an SQS queue's settings, and its dead-letter
// queue's, against the rules that keep messages from being lost or
// processed twice, and prints what it finds with a severity each. It exits
// non-zero when it finds an error, so it can guard a deployment in CI.
//
// Usage:
//
//	sqsdoctor -queue-url URL [-endpoint URL] [-region R] [-json] [-p99 D]
//	          [-lambda-timeout D] [-batching-window D] [-shutdown D]
//	          [-heartbeat] [-strict] [-timeout D]
//	sqsdoctor dlq inspect -queue-url DLQ_URL [-max N] [-visibility D] [-force] [-json]
//	sqsdoctor dlq redrive -queue-url DLQ_URL [-to URL] [-rate N] [-json]
//	sqsdoctor dlq replay  -queue-url DLQ_URL (-filter EXPR ... | -all) [-to URL]
//	          [-rate R] [-dry-run] [-lease D] [-max N] [-audit FILE] [-force] [-json]
//	sqsdoctor plan (-p50 D -p99 D | -stats FILE) -rate R [-peak R] -target D
//	          -concurrency N [-json] [more: sqsdoctor plan -help]
//
// The dlq actions act on what is in a dead-letter queue: inspect counts and
// peeks (saying what peeking costs), redrive runs an SQS message move task
// (Ctrl-C cancels it), replay sends filtered messages back with an audit line
// each. Their logic lives in package doctor (InspectDLQ, Redrive, Replay).
// inspect and replay (-dry-run too) receive only from a dead-letter queue
// without a RedrivePolicy of its own: any other queue they refuse before a
// receive (exit code 5) unless -force, since a receive there counts toward a
// maxReceiveCount and can move messages. A replay that matched nothing and a
// redrive that moved nothing exit 4. Flag errors are one line on stderr and a
// pointer to -h; -h exits 0.
//
// plan prints a capacity and cost plan (replicas, waits, lease, SQS
// requests a month) from handler times and arrival rates, or from a
// Consumer's Stats as JSON; it calls nothing (package doctor's Plan).
//
// Run sqsdoctor -help for the checks, the JSON schema and the exit codes.
// The checks themselves live in package doctor, for use from Go tests; its
// Advise runs them on the figures a sqsconsumer.Consumer measured (Stats).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer/doctor"
	"github.com/sqskit/sqsconsumer/sqsclient"
)

// Exit codes.
const (
	exitOK       = 0 // no error finding (with -strict: no warning either)
	exitFindings = 1 // at least one error finding (with -strict: or warning)
	exitUsage    = 2 // bad or missing flags
	exitRead     = 3 // the queue could not be read
	// exitNothing: a dlq replay matched no message, or a redrive moved none
	// (a mistyped filter must not read as success in a script).
	exitNothing = 4
	// exitRefused: dlq inspect or replay refused to receive from a queue
	// that is no DLQ or has a RedrivePolicy of its own (without -force).
	exitRefused = 5
)

const usageText = `Usage: sqsdoctor -queue-url URL [flags]
       sqsdoctor dlq inspect|redrive|replay -queue-url DLQ_URL [flags]
                 (acts on what is in a dead-letter queue: sqsdoctor dlq -help)
       sqsdoctor plan -p50 D -p99 D -rate R -target D -concurrency N [flags]
                 (a capacity and cost plan: sqsdoctor plan -help)

Checks an SQS queue's settings and its dead-letter queue's (found through
RedrivePolicy) and prints findings, most severe first, each with a
severity: error (messages are lost or many processed twice), warn (costs
duplicates, latency or money), info (what was checked, with the figures).

Checks:
  redrive_policy     the queue has a DLQ and it exists (error on standard
                     queues without one, warn on FIFO)
  max_receive_count  maxReceiveCount is not 1 (warn)
  time_to_dlq        maxReceiveCount x VisibilityTimeout is far below
                     (under a quarter of) MessageRetentionPeriod (error
                     when not below it, warn at a quarter or more)
  dlq_retention      on standard queues the DLQ keeps messages longer than
                     the source, since a moved message keeps its enqueue
                     time (error when not longer)
  retention          MessageRetentionPeriod outlasts an outage: error below
                     1 day (an outage from one evening to the next
                     working day's fix), warn below 4 days (a weekend's)
  long_polling       ReceiveMessageWaitTimeSeconds is above 0 (warn)
  visibility_p99     with -p99: VisibilityTimeout >= p99 x 2 (error below
                     p99, warn below p99 x 2; with -heartbeat, warn below
                     10s or above twice the recommended lease)
  lambda_visibility  with -lambda-timeout: VisibilityTimeout >= 6 x the
                     function timeout + the batching window (error)
  shutdown           with -shutdown: without -heartbeat, a budget longer
                     than VisibilityTimeout only duplicates work (warn);
                     with -p99, a budget below p99 cuts work short (warn)
  in_flight_quota    messages in flight against SQS's in-flight quota
                     (about 120,000 per queue), at which long polls
                     answer nothing and no error: warn from 108,000,
                     error at the quota with messages visible

Flags:
`

const usageTail = `
Durations take Go's syntax: 90s, 5m, 1h30m.

Comparative words in messages follow the figures: "far below" means under
a quarter, "far above" over four times, and comparisons print the ratio.

Endpoint: a queue URL on localhost or a loopback address (such as
http://127.0.0.1:9324/000000000000/jobs, as cmd/sqstest serves) is its own
endpoint: its scheme and host are used as -endpoint when -endpoint is not
given. Any other URL goes to AWS unless -endpoint says otherwise.

Credentials: without an endpoint, the AWS SDK's default chain (environment,
shared config, SSO, instance role) and region. With one (a local SQS such
as sqstest or ElasticMQ), static credentials: AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) when set, else "test"/"test".
The region defaults to the one in the queue URL (sqs.REGION.amazonaws.com),
then AWS_REGION, then us-east-1 with an endpoint.

JSON output (-json) is one object on stdout, whatever the exit code. When
the queue was checked (exit codes 0 and 1):
  {
    "queue": {                                  the queue checked
      "url": string,
      "arn": string,                            omitted when unknown
      "fifo": bool,
      "visibility_timeout_seconds": int,
      "message_retention_period_seconds": int,
      "receive_message_wait_time_seconds": int,
      "redrive_policy": {                       omitted without a DLQ
        "dead_letter_target_arn": string,
        "max_receive_count": int
      },
      "counts": {                               approximate message counts
        "visible": int,
        "in_flight": int
      }
    },
    "dlq": { same fields as "queue" },          omitted when there is none
                                                or it could not be read
    "findings": [                               most severe first
      {"check": string,                         one of the checks above
       "severity": "error" | "warn" | "info",
       "message": string,
       "values": {string: number}}              the figures behind the finding,
                                                omitted when none: durations in
                                                seconds (keys ending _seconds,
                                                e.g. retention_seconds,
                                                time_to_dlq_seconds),
                                                max_receive_count, and ratio:
                                                the figure judged over the
                                                bound it is compared with
    ],
    "counts": {"error": int, "warn": int, "info": int},
    "exit_code": int
  }
When it was not (exit codes 2 and 3), the reason, also written to stderr:
  {"error": string, "exit_code": int}
-help prints this text to stderr and nothing to stdout.

Exit codes:
  0  no error finding (with -strict: no warning either)
  1  at least one error finding (with -strict: or a warning)
  2  bad or missing flags
  3  the queue could not be read (network, credentials, permissions, no
     such queue); the reason goes to stderr, and to stdout only with -json
`

// newClientFunc builds the SQS client for an endpoint ("" = AWS) and
// region ("" = the SDK's default).
type newClientFunc func(ctx context.Context, endpoint, region string) (doctor.Client, error)

func main() {
	// Ctrl-C (or SIGTERM) cancels the context: "dlq redrive" then cancels its
	// move task, "dlq replay" finishes the message in hand. A second Ctrl-C
	// kills the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, newClient)
	stop()
	os.Exit(code)
}

// subcommands are the commands named by sqsdoctor's first argument; without one,
// sqsdoctor checks a queue's settings. Each gets the arguments after its name.
var subcommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer, mk newClientFunc) int{
	"dlq": runDLQ,
	"plan": func(_ context.Context, args []string, stdout, stderr io.Writer, _ newClientFunc) int {
		return runPlan(os.Stdin, args, stdout, stderr)
	},
}

// run is the whole command minus the process: it parses args, checks the
// queue, writes the report to stdout (problems to stderr) and returns the
// exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, mk newClientFunc) int {
	if len(args) > 0 {
		if sub, ok := subcommands[args[0]]; ok {
			return sub(ctx, args[1:], stdout, stderr, mk)
		}
	}
	cf := newCLIFlags("sqsdoctor", stdout, stderr, "sqsdoctor:", "Run sqsdoctor -h for usage.",
		"print the report as JSON (schema below)", usageText, usageTail)
	fs := cf.fs
	var (
		queueURL   = fs.String("queue-url", "", "URL of the queue to check (required)")
		endpoint   = fs.String("endpoint", "", "SQS endpoint URL, for a local server; default: the queue URL's scheme and host when it is on localhost or a loopback address, else AWS")
		region     = fs.String("region", "", "AWS region; default: from the queue URL, then the SDK's configuration")
		p99        = fs.Duration("p99", 0, "measured p99 of receive-to-settle time, in-process queueing included; enables visibility_p99")
		lambda     = fs.Duration("lambda-timeout", 0, "timeout of a Lambda function consuming the queue; enables lambda_visibility")
		window     = fs.Duration("batching-window", 0, "the event source mapping's MaximumBatchingWindowInSeconds, with -lambda-timeout")
		shutdown   = fs.Duration("shutdown", 0, "consumers' shutdown budget (sqsconsumer's WithShutdownTimeout); enables shutdown")
		heartbeat  = fs.Bool("heartbeat", false, "consumers renew visibility while they work, as sqsconsumer does")
		strict     = fs.Bool("strict", false, "exit 1 on warnings too")
		timeout    = fs.Duration("timeout", 30*time.Second, "give up reading the queue after this long")
		exitStatus = exitOK
	)
	fail := cf.fail
	if code, done := cf.parse(args); done {
		return code
	}
	wantJSON := cf.wantJSON
	var problems []string
	if *queueURL == "" {
		problems = append(problems, "-queue-url is required")
	} else if u, err := url.Parse(*queueURL); err != nil || u.Scheme == "" || u.Host == "" {
		problems = append(problems, fmt.Sprintf("-queue-url %q is not a URL", *queueURL))
	}
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Sprintf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	for name, d := range map[string]time.Duration{"-p99": *p99, "-lambda-timeout": *lambda, "-batching-window": *window, "-shutdown": *shutdown} {
		if d < 0 {
			problems = append(problems, name+" must not be negative")
		}
	}
	if *timeout <= 0 {
		problems = append(problems, "-timeout must be positive")
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fail(exitUsage, problems...)
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	r := *region
	if r == "" {
		r = regionOf(*queueURL)
	}
	ep := *endpoint
	if ep == "" {
		ep = localEndpoint(*queueURL)
	}
	client, err := mk(ctx, ep, r)
	if err != nil {
		return fail(exitRead, errText(err))
	}
	rep, err := doctor.Check(ctx, client, *queueURL, doctor.Options{
		P99: *p99, LambdaTimeout: *lambda, BatchingWindow: *window, ShutdownTimeout: *shutdown, Heartbeat: *heartbeat,
	})
	if err != nil {
		return fail(exitRead, errText(err))
	}
	slices.SortStableFunc(rep.Findings, func(a, b doctor.Finding) int { return int(b.Severity - a.Severity) })
	switch w := rep.Worst(); {
	case w == doctor.SeverityError, *strict && w == doctor.SeverityWarn:
		exitStatus = exitFindings
	}

	if wantJSON {
		out := struct {
			*doctor.Report
			Counts   map[string]int `json:"counts"`
			ExitCode int            `json:"exit_code"`
		}{rep, counts(rep), exitStatus}
		if !writeJSON(stdout, stderr, out) {
			return exitRead
		}
		return exitStatus
	}
	writeText(stdout, rep)
	return exitStatus
}

// errorJSON is what -json prints when the queue could not be checked.
type errorJSON struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// writeJSON writes v, indented, to stdout; on failure it says why on
// stderr and returns false.
func writeJSON(stdout, stderr io.Writer, v any) bool {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(stderr, "sqsdoctor: writing the JSON report:", err)
		return false
	}
	return true
}

// errText is err's message without package doctor's "doctor: " prefix,
// which the command replaces with its own.
func errText(err error) string {
	return strings.TrimPrefix(err.Error(), "doctor: ")
}

// jsonRequested reports whether args set -json, reading them as fs.Parse
// will but without stopping at a bad or unknown flag, so that even a
// parse error can be answered in JSON. Like fs.Parse it stops at "--" or
// the first argument that is not a flag or a flag's value.
func jsonRequested(fs *flag.FlagSet, args []string) bool {
	want := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if name == "json" {
			if !hasVal {
				want = true
			} else if b, err := strconv.ParseBool(val); err == nil {
				want = b
			}
			continue
		}
		switch f := fs.Lookup(name); {
		case hasVal:
		case f != nil && !isBoolFlag(f):
			i++ // the flag's value
		case f == nil && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-"):
			i++ // an unknown flag: guess that a plain word after it is its value
		}
	}
	return want
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// localEndpoint returns the scheme and host of queueURL when it is an
// http or https URL on localhost (or a name under .localhost) or a
// loopback address, as cmd/sqstest serves; "" otherwise.
func localEndpoint(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	h := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip := net.ParseIP(h); h == "localhost" || strings.HasSuffix(h, ".localhost") || (ip != nil && ip.IsLoopback()) {
		return u.Scheme + "://" + u.Host
	}
	return ""
}

func counts(rep *doctor.Report) map[string]int {
	return map[string]int{
		"error": rep.Count(doctor.SeverityError),
		"warn":  rep.Count(doctor.SeverityWarn),
		"info":  rep.Count(doctor.SeverityInfo),
	}
}

func writeText(w io.Writer, rep *doctor.Report) {
	fmt.Fprintf(w, "queue  %s\n", rep.Queue)
	if rep.DLQ != nil {
		fmt.Fprintf(w, "dlq    %s\n", *rep.DLQ)
	}
	fmt.Fprintln(w)
	for _, f := range rep.Findings {
		fmt.Fprintf(w, "%-5s  %-17s  %s\n", strings.ToUpper(f.Severity.String()), f.Check, f.Message)
	}
	c := counts(rep)
	fmt.Fprintf(w, "\n%d error(s), %d warning(s), %d info\n", c["error"], c["warn"], c["info"])
}

var queueURLRegion = regexp.MustCompile(`^sqs(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com`)

// regionOf returns the region named by an AWS queue URL's host
// (sqs.REGION.amazonaws.com), "" for any other URL.
func regionOf(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return ""
	}
	if m := queueURLRegion.FindStringSubmatch(u.Hostname()); m != nil {
		return m[1]
	}
	return ""
}

// newClient builds the SQS client. For a custom endpoint it configures the
// client directly with static credentials: config.LoadDefaultConfig would
// also read AWS_CA_BUNDLE and the shared files, which a local server does
// not need and which can break a custom setup.
func newClient(ctx context.Context, endpoint, region string) (doctor.Client, error) {
	if endpoint != "" {
		if region == "" {
			region = os.Getenv("AWS_REGION")
		}
		if region == "" {
			region = "us-east-1"
		}
		id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		token := os.Getenv("AWS_SESSION_TOKEN")
		if id == "" || secret == "" {
			id, secret, token = "test", "test", ""
		}
		// Over a socket the Go SDK can lose a ReceiveMessage answer to a
		// race of its own and retry, leaving the first answer's messages
		// hidden (package sqsclient): a dlq scan would stop short and
		// replay would miss messages. sqsclient's client closes that window.
		return sqsclient.New(sqs.Options{
			Region:       region,
			BaseEndpoint: aws.String(endpoint),
			Credentials:  credentials.NewStaticCredentialsProvider(id, secret, token),
		}, sqsclient.HTTPOptions{})
	}
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	return sqsclient.NewFromConfig(cfg, sqsclient.HTTPOptions{})
}
