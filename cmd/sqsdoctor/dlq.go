package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sqskit/sqsconsumer/doctor"
)

// dlqCommand is one action of "sqsdoctor dlq".
type dlqCommand struct {
	summary string
	run     func(ctx context.Context, args []string, env dlqEnv) int
}

// dlqCommands are the actions of "sqsdoctor dlq", by name.
var dlqCommands = map[string]dlqCommand{
	"inspect": {"count and peek: ages, reasons, sources, and what peeking costs", runInspect},
	"redrive": {"start an SQS message move task back to the sources (or a queue) and follow it", runRedrive},
	"replay":  {"send the messages a filter selects to their sources, audited, deleting each only after its send", runReplay},
}

// dlqEnv is what every dlq action gets besides its arguments.
type dlqEnv struct {
	stdout, stderr io.Writer
	mk             newClientFunc
}

const dlqUsageText = `Usage: sqsdoctor dlq ACTION -queue-url DLQ_URL [flags]

Acts on the messages in a dead-letter queue. Actions:
%s
Run sqsdoctor dlq ACTION -h for an action's flags, output and exit codes.
The endpoint, region and credentials are found as for sqsdoctor -queue-url
(see sqsdoctor -help).
`

// runDLQ dispatches "sqsdoctor dlq ACTION ...".
func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer, mk newClientFunc) int {
	usage := func() {
		var lines strings.Builder
		for _, name := range slices.Sorted(maps.Keys(dlqCommands)) {
			fmt.Fprintf(&lines, "  %-8s %s\n", name, dlqCommands[name].summary)
		}
		fmt.Fprintf(stderr, dlqUsageText, lines.String())
	}
	const pointer = "Run sqsdoctor dlq -h for usage."
	if len(args) == 0 {
		fmt.Fprintln(stderr, "sqsdoctor: dlq needs an action: inspect, redrive or replay")
		fmt.Fprintln(stderr, pointer)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage()
		return exitOK
	}
	cmd, ok := dlqCommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sqsdoctor: unknown dlq action %q (want inspect, redrive or replay)\n", args[0])
		fmt.Fprintln(stderr, pointer)
		return exitUsage
	}
	return cmd.run(ctx, args[1:], dlqEnv{stdout: stdout, stderr: stderr, mk: mk})
}

// dlqFlags are the flags every dlq action has.
type dlqFlags struct {
	cliFlags
	name     string
	queueURL *string
	endpoint *string
	region   *string
	env      dlqEnv
}

func newDLQFlags(name string, env dlqEnv, usage, tail string) *dlqFlags {
	f := &dlqFlags{name: name, env: env,
		cliFlags: newCLIFlags("sqsdoctor dlq "+name, env.stdout, env.stderr, "sqsdoctor:",
			"Run sqsdoctor dlq "+name+" -h for usage.", "print the result as JSON (see below)", usage, tail)}
	fs := f.fs
	f.queueURL = fs.String("queue-url", "", "URL of the dead-letter queue (required)")
	f.endpoint = fs.String("endpoint", "", "SQS endpoint URL, for a local server; default as for sqsdoctor -queue-url")
	f.region = fs.String("region", "", "AWS region; default: from the queue URL, then the SDK's configuration")
	return f
}

// problems checks the common flags; extra are the action's own problems.
func (f *dlqFlags) problems(extra ...string) []string {
	var ps []string
	if *f.queueURL == "" {
		ps = append(ps, "-queue-url is required")
	} else if u, err := url.Parse(*f.queueURL); err != nil || u.Scheme == "" || u.Host == "" {
		ps = append(ps, fmt.Sprintf("-queue-url %q is not a URL", *f.queueURL))
	}
	if f.fs.NArg() > 0 {
		ps = append(ps, "unexpected arguments: "+strings.Join(f.fs.Args(), " "))
	}
	for _, p := range extra {
		if p != "" {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// client builds the SQS client for the queue URL, as sqsdoctor -queue-url does.
func (f *dlqFlags) client(ctx context.Context) (doctor.DLQClient, error) {
	r := *f.region
	if r == "" {
		r = regionOf(*f.queueURL)
	}
	ep := *f.endpoint
	if ep == "" {
		ep = localEndpoint(*f.queueURL)
	}
	c, err := f.env.mk(ctx, ep, r)
	if err != nil {
		return nil, err
	}
	dc, ok := c.(doctor.DLQClient)
	if !ok {
		return nil, fmt.Errorf("the SQS client (%T) lacks the calls the dlq actions need", c)
	}
	return dc, nil
}

// forceUsage is the -force flag's description, for inspect and replay.
const forceUsage = "receive even from a queue that is no dead-letter queue or has a RedrivePolicy of its own (see above)"

// announce says on stderr, before the first receive, what the receives will
// do (and what -force overrode); what is the action ("dlq inspect") and rest
// what the run does besides.
func (f *dlqFlags) announce(what, rest string) func(doctor.PeekPlan) {
	return func(p doctor.PeekPlan) {
		for _, r := range p.Forced {
			fmt.Fprintf(f.env.stderr, "sqsdoctor: -force: receiving although %s\n", r)
		}
		fmt.Fprintf(f.env.stderr, "sqsdoctor: %s %s%s\n", what, p, rest)
	}
}

// refused reports a PeekRefusal (exitRefused) and reports whether err was one.
func (f *dlqFlags) refused(err error, hint string) (int, bool) {
	var ref *doctor.PeekRefusal
	if !errors.As(err, &ref) {
		return 0, false
	}
	return f.fail(exitRefused, errText(err)+"; nothing was received. "+hint), true
}

const inspectUsage = `Usage: sqsdoctor dlq inspect -queue-url DLQ_URL [flags]

Reads a dead-letter queue: its counters, the queues that use it as their DLQ,
and, peeking at up to -max messages, their ages (by SentTimestamp: for
messages SQS moved, the original send), the reasons sqsconsumer recorded (the
sqsconsumer.error attribute, first line) and their source queues.

What peeking costs: a peek is a ReceiveMessage. Each peeked message's
ApproximateReceiveCount rises by one, and it is hidden for -visibility while
the scan runs (from other consumers of the DLQ and from a running move task);
the scan makes every peeked message visible again when it ends, so only a scan
that dies leaves them hidden that long. Nothing is deleted or sent. The line
"sqsdoctor: dlq inspect receives ..." on stderr says so before the first peek.
On a FIFO DLQ a receive returns one message group at a time: a scan sees the
messages of a group that one receive returns (at most 10).

Which queues: inspect peeks only at a dead-letter queue (a queue some
RedrivePolicy names, as ListDeadLetterSourceQueues tells) that has no
RedrivePolicy of its own. It refuses, before any receive and with exit code 5,
a queue no RedrivePolicy names (its messages are live work: a source queue,
where every peek counts toward maxReceiveCount and can move messages to the
DLQ) and a queue with a RedrivePolicy of its own (every peek counts toward
that maxReceiveCount, and a message that reached it moves on). -max 0 reads
the counters only and is safe on any queue; -force peeks all the same.

Flags:
`

const inspectTail = `
JSON output (-json) is one object on stdout: the queue ("queue", as in
sqsdoctor -json), "visible", "in_flight", "delayed", "sources" (URLs),
"peeked", "oldest_age_seconds", "median_age_seconds",
"oldest_expires_in_seconds" (standard DLQs only), "reasons" and "by_source"
([{"key": string, "count": int}], "" for none), "with_reason", "not_from_sqs"
(messages without DeadLetterQueueSourceArn, which a move task without a
destination cannot send back), "cost" ({"receives", "receive_count_raised",
"hidden_for_seconds", "released", "dlq_max_receive_count" (0 when the queue
has no RedrivePolicy of its own)}), and "exit_code".
` + "\nExit codes:\n  0  the DLQ is empty\n  1  the DLQ holds messages (visible, in flight or delayed)\n" + `  2  bad or missing flags
  3  the queue could not be read; the reason goes to stderr (and, with -json,
     as {"error": string, "exit_code": int} to stdout)
  5  refused: the queue is no dead-letter queue or has a RedrivePolicy of its
     own (see "Which queues"); nothing was received
`

func runInspect(ctx context.Context, args []string, env dlqEnv) int {
	f := newDLQFlags("inspect", env, inspectUsage, inspectTail)
	max := f.fs.Int("max", doctor.DefaultInspectMax, "peek at most this many messages (0: none, counters only)")
	vis := f.fs.Duration("visibility", doctor.DefaultPeekVisibility, "how long each peeked message stays hidden during the scan (whole seconds, 1s to 12h)")
	top := f.fs.Int("top", doctor.DefaultTop, "how many reasons and sources to list")
	timeout := f.fs.Duration("timeout", 5*time.Minute, "give up after this long")
	force := f.fs.Bool("force", false, forceUsage)
	if code, done := f.parse(args); done {
		return code
	}
	var extra []string
	if *max < 0 {
		extra = append(extra, "-max must not be negative")
	}
	if *top < 1 {
		extra = append(extra, "-top must be at least 1")
	}
	if *vis < time.Second || *vis > 12*time.Hour || *vis%time.Second != 0 {
		extra = append(extra, "-visibility must be whole seconds from 1s to 12h")
	}
	if *timeout <= 0 {
		extra = append(extra, "-timeout must be positive")
	}
	if ps := f.problems(extra...); len(ps) > 0 {
		return f.fail(exitUsage, ps...)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := f.client(ctx)
	if err != nil {
		return f.fail(exitRead, errText(err))
	}
	peek := *max
	if peek == 0 {
		peek = -1 // InspectOptions: negative peeks none
	}
	rep, err := doctor.InspectDLQ(ctx, c, *f.queueURL, doctor.InspectOptions{Max: peek, Visibility: *vis, Top: *top,
		Force: *force, BeforePeek: f.announce("dlq inspect", "; nothing is deleted or sent")})
	if code, ok := f.refused(err, "-max 0 reads its counters only; -force peeks all the same."); ok {
		return code
	}
	if err != nil {
		return f.fail(exitRead, errText(err))
	}
	code := exitOK
	if !rep.Empty() {
		code = exitFindings
	}
	if f.wantJSON {
		// The report encodes itself (durations in seconds); exit_code joins it.
		var out map[string]any
		b, err := json.Marshal(rep)
		if err == nil {
			err = json.Unmarshal(b, &out)
		}
		if err != nil {
			fmt.Fprintln(env.stderr, "sqsdoctor: encoding the JSON report:", err)
			return exitRead
		}
		out["exit_code"] = code
		if !writeJSON(env.stdout, env.stderr, out) {
			return exitRead
		}
		return code
	}
	writeInspect(env.stdout, rep)
	return code
}

func writeInspect(w io.Writer, r *doctor.DLQReport) {
	kind := "standard"
	if r.Queue.FIFO {
		kind = "FIFO"
	}
	fmt.Fprintf(w, "dlq       %s (%s, retention %s)\n", r.Queue.URL, kind, fmtSeconds(r.Queue.RetentionPeriod))
	switch {
	case r.Sources == nil:
		fmt.Fprintf(w, "used by   unknown (%s)\n", r.SourcesError)
	case len(r.Sources) == 0:
		fmt.Fprintln(w, "used by   no queue's RedrivePolicy names it")
	default:
		fmt.Fprintf(w, "used by   %s\n", strings.Join(r.Sources, ", "))
	}
	fmt.Fprintf(w, "messages  %d visible, %d in flight, %d delayed\n", r.Visible, r.InFlight, r.Delayed)
	if r.Peeked == 0 {
		fmt.Fprintln(w, "peeked    none")
		return
	}
	ages := fmt.Sprintf("oldest %s, median %s", fmtSeconds(r.Oldest), fmtSeconds(r.Median))
	if r.ExpiryKnown {
		ages += fmt.Sprintf("; the oldest expires in %s", fmtSeconds(r.OldestExpiresIn))
	}
	fmt.Fprintf(w, "peeked    %d (%s)\n", r.Peeked, ages)
	label := "reasons"
	for _, t := range r.Reasons {
		key := t.Key
		if key == "" {
			key = "(no sqsconsumer.error: moved by a redrive policy, or sent by something else)"
		}
		fmt.Fprintf(w, "%-9s %5d  %s\n", label, t.Count, key)
		label = ""
	}
	label = "sources"
	for _, t := range r.BySource {
		key := t.Key
		if key == "" {
			key = "(unknown)"
		}
		fmt.Fprintf(w, "%-9s %5d  %s\n", label, t.Count, key)
		label = ""
	}
	if r.NotFromSQS > 0 {
		fmt.Fprintf(w, "note      %d of the peeked messages have no DeadLetterQueueSourceArn (sent to the DLQ by a program, such as\n"+
			"          sqsconsumer after a Permanent error): 'dlq redrive' without -to cannot send them back; 'dlq replay' can\n", r.NotFromSQS)
	}
	fmt.Fprintf(w, "cost      %d receive(s); each of the %d peeked messages' ApproximateReceiveCount rose by 1, and each was hidden\n"+
		"          for up to %s (%d released at the end)\n", r.Cost.Receives, r.Cost.ReceiveCountRaised, fmtSeconds(r.Cost.HiddenFor), r.Cost.Released)
	if n := r.Cost.DLQMaxReceiveCount; n > 0 {
		fmt.Fprintf(w, "          the DLQ has a RedrivePolicy of its own (maxReceiveCount %d): every peek counts toward it\n", n)
	}
}

// fmtSeconds formats a duration rounded to the second: "2h0m3s", "14d".
func fmtSeconds(d time.Duration) string {
	d = d.Round(time.Second)
	const day = 24 * time.Hour
	if d >= day {
		days, rest := d/day, d%day
		if rest == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%s", days, rest)
	}
	return d.String()
}

const redriveUsage = `Usage: sqsdoctor dlq redrive -queue-url DLQ_URL [-to QUEUE_URL] [-rate N] [flags]

Starts an SQS message move task (StartMessageMoveTask) from the dead-letter
queue, to each message's source queue (the DeadLetterQueueSourceArn SQS adds
when its redrive policy moves a message) or to -to, at -rate messages per
second (1-500; default: SQS chooses), and follows it until it ends. Moved
messages arrive as new messages (new MessageId, receive count 0). SQS runs
the task: progress shows as a bar on a terminal, as one line per change
otherwise (on stderr). Ctrl-C cancels the task (CancelMessageMoveTask) and
waits until it is CANCELLED.

Messages a program sent to the DLQ (sqsconsumer does after a Permanent
error) have no DeadLetterQueueSourceArn: without -to the task fails on them.
Use 'sqsdoctor dlq replay', which reads their sqsconsumer.source attribute.

Flags:
`

const redriveTail = `
Output: one line on stdout when the task ends; with -json one object with
every one of these keys: {"task_handle", "status", "source_arn",
"destination_arn" ("" when moving to the sources), "max_messages_per_second"
(0 when SQS chose), "moved", "to_move" (-1 when SQS did not say),
"failure_reason" ("" when none), "started", "exit_code"}.
` + "\nExit codes:\n  0  the task COMPLETED and moved at least one message\n  1  the task FAILED or was CANCELLED (Ctrl-C included)\n" + `  2  bad or missing flags
  3  the queue could not be read or the task could not start (the queue is no
     DLQ, a task is already running on it, ...); the reason goes to stderr
     (and, with -json, as {"error": string, "exit_code": int} to stdout)
  4  the task COMPLETED but moved nothing (the DLQ was empty)
`

func runRedrive(ctx context.Context, args []string, env dlqEnv) int {
	f := newDLQFlags("redrive", env, redriveUsage, redriveTail)
	to := f.fs.String("to", "", "URL of the queue to move the messages to (default: each message's source)")
	rate := f.fs.Int("rate", 0, "messages moved per second, 1-500 (default: SQS chooses)")
	poll := f.fs.Duration("poll", doctor.DefaultPollInterval, "how often to ask for progress")
	if code, done := f.parse(args); done {
		return code
	}
	var extra []string
	if *rate < 0 || *rate > doctor.MaxRedriveRate {
		extra = append(extra, fmt.Sprintf("-rate must be 1 to %d (or 0 to let SQS choose)", doctor.MaxRedriveRate))
	}
	if *poll <= 0 {
		extra = append(extra, "-poll must be positive")
	}
	if *to != "" {
		if u, err := url.Parse(*to); err != nil || u.Scheme == "" || u.Host == "" {
			extra = append(extra, fmt.Sprintf("-to %q is not a URL", *to))
		}
	}
	if ps := f.problems(extra...); len(ps) > 0 {
		return f.fail(exitUsage, ps...)
	}
	c, err := f.client(ctx)
	if err != nil {
		return f.fail(exitRead, errText(err))
	}
	p := newProgress(env.stderr, isTerminal(env.stderr))
	task, err := doctor.Redrive(ctx, c, *f.queueURL, doctor.RedriveOptions{Destination: *to, Rate: *rate, PollInterval: *poll, Progress: p.show})
	p.end()
	if err != nil && !errors.Is(err, doctor.ErrInterrupted) {
		return f.fail(exitRead, errText(err))
	}
	if err != nil {
		fmt.Fprintln(env.stderr, "sqsdoctor:", errText(err))
	}
	code := exitOK
	switch {
	case task.Status != doctor.TaskCompleted:
		code = exitFindings
	case task.Moved == 0:
		code = exitNothing
		fmt.Fprintln(env.stderr, "sqsdoctor: the move task moved nothing")
	}
	if f.wantJSON {
		// Every key the help lists, set or not (MoveTask's own encoding
		// leaves the unset ones out).
		out := struct {
			Handle         string    `json:"task_handle"`
			Status         string    `json:"status"`
			SourceARN      string    `json:"source_arn"`
			DestinationARN string    `json:"destination_arn"`
			Rate           int       `json:"max_messages_per_second"`
			Moved          int64     `json:"moved"`
			ToMove         int64     `json:"to_move"`
			FailureReason  string    `json:"failure_reason"`
			Started        time.Time `json:"started"`
			ExitCode       int       `json:"exit_code"`
		}{task.Handle, task.Status, task.SourceARN, task.DestinationARN, task.Rate, task.Moved, task.ToMove,
			task.FailureReason, task.Started, code}
		if !writeJSON(env.stdout, env.stderr, out) {
			return exitRead
		}
		return code
	}
	dest := "their source queues"
	if task.DestinationARN != "" {
		dest = task.DestinationARN
	}
	line := fmt.Sprintf("move task %s: %d%s moved from %s to %s", task.Status, task.Moved, ofTotal(task.ToMove), task.SourceARN, dest)
	if task.FailureReason != "" {
		line += " (failure reason: " + task.FailureReason + ")"
	}
	fmt.Fprintln(env.stdout, line)
	return code
}

func ofTotal(n int64) string {
	if n < 0 {
		return ""
	}
	return fmt.Sprintf(" of %d", n)
}

// progress shows a move task's progress: a bar redrawn in place on a terminal,
// one line per change otherwise.
type progress struct {
	w    io.Writer
	tty  bool
	last string
}

func newProgress(w io.Writer, tty bool) *progress { return &progress{w: w, tty: tty} }

func (p *progress) show(t doctor.MoveTask) {
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", progressBar(t, 30))
		p.last = "bar"
		return
	}
	line := fmt.Sprintf("redrive: %s, %d%s moved", t.Status, t.Moved, ofTotal(t.ToMove))
	if line != p.last {
		fmt.Fprintln(p.w, line)
		p.last = line
	}
}

// end finishes the bar's line.
func (p *progress) end() {
	if p.tty && p.last != "" {
		fmt.Fprintln(p.w)
	}
}

// progressBar draws "[#########.....................]  30% 3/10 RUNNING";
// without a known total, "[moved 3] RUNNING".
func progressBar(t doctor.MoveTask, width int) string {
	if t.ToMove <= 0 {
		return fmt.Sprintf("[moved %d] %-10s", t.Moved, t.Status)
	}
	done := min(int(t.Moved*int64(width)/t.ToMove), width)
	return fmt.Sprintf("[%s%s] %3d%% %d/%d %-10s", strings.Repeat("#", done), strings.Repeat(".", width-done),
		min(t.Moved*100/t.ToMove, 100), t.Moved, t.ToMove, t.Status)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

const replayUsage = `Usage: sqsdoctor dlq replay -queue-url DLQ_URL (-filter EXPR ... | -all) [flags]

Sends the messages of the dead-letter queue that match every -filter to their
source queue (DeadLetterQueueSourceArn, else the sqsconsumer.source attribute
sqsconsumer writes) or to -to, one at a time at most -rate per second, and
deletes each from the DLQ only after its send succeeded: a crash leaves a
message in both queues at worst, never in neither, and the audit says which.
The copy keeps the body, the message attributes (without sqsconsumer.error,
.receive_count and .source unless -keep-reason), AWSTraceHeader, and on FIFO
queues MessageGroupId and MessageDeduplicationId (so SQS drops a second copy
within 5 minutes); it is a new message to its queue (receive count 0).

Filters (all must match; letter case is ignored by ~):
  reason~TEXT   sqsconsumer.error contains TEXT     reason=TEXT  equals
  source=NAME   the source queue's name, ARN or URL source~TEXT  contains
  age>DURATION  sent longer ago (90s, 30m, 2h, 3d)  age<DURATION sent sooner
  body~TEXT     the body contains TEXT              body=TEXT    equals
  attr.NAME=V   message attribute NAME is V         attr.NAME~TEXT contains

Replay receives with -lease as visibility timeout and keeps the messages it
does not replay hidden until it ends, then releases them: each examined
message's ApproximateReceiveCount rises by one, with -dry-run too (SQS cannot
read a message without receiving it); the line "sqsdoctor: dlq replay
receives ..." on stderr says so before the first receive. On a FIFO DLQ a group's
messages go in order: after one that is not replayed, the rest of its group
is skipped. Ctrl-C finishes the message in hand, sends no more, and releases
the rest.

Which queues: replay, -dry-run included, receives only from a dead-letter
queue (a queue some RedrivePolicy names, as ListDeadLetterSourceQueues tells)
that has no RedrivePolicy of its own. It refuses, before any receive and with
exit code 5, a queue no RedrivePolicy names (a source queue: every receive
counts toward its maxReceiveCount, so even a dry run would move messages to
the DLQ) and a queue with a RedrivePolicy of its own (the receives count
toward it). -force receives all the same.

Flags:
`

const replayTail = `
Audit: one JSON object per matching message, as its outcome is final, to
stdout (or appended to -audit FILE), with every one of these keys ("" when
not known or not applicable; sent_at is SentTimestamp): {"time", "outcome", "message_id",
"new_message_id", "dlq", "target", "source", "reason", "group_id",
"deduplication_id", "sent_at", "receive_count", "error"}, outcome one of
replayed, would_replay (-dry-run), skipped (nowhere to go, or an earlier
message of its FIFO group stayed), send_failed (still in the DLQ; after a
timeout the send may have reached SQS all the same) and sent_not_deleted (in
both queues). A summary goes to stderr; with -json it is also the last line on
stdout: {"summary": {"examined", "matched", "replayed", "would_replay",
"skipped", "send_failed", "sent_not_deleted", "released", "interrupted"},
"exit_code"}. If the process is killed between a send and its delete, that
message has no audit line: it is in both queues.
` + "\nExit codes:\n  0  every matching message was replayed (with -dry-run: would be), and at\n     least one matched\n  1  a matching message was not replayed (skipped, failed, in both queues) or\n     the run was interrupted\n" + `  2  bad or missing flags
  3  the queue could not be read or a receive failed; the reason goes to
     stderr (and, with -json, as {"error": string, "exit_code": int} to stdout)
  4  no message matched (-dry-run too): check the filter, or the DLQ is empty
  5  refused: the queue is no dead-letter queue or has a RedrivePolicy of its
     own (see "Which queues"); nothing was received
`

type filterFlags []string

func (f *filterFlags) String() string     { return strings.Join(*f, " ") }
func (f *filterFlags) Set(v string) error { *f = append(*f, v); return nil }

func runReplay(ctx context.Context, args []string, env dlqEnv) int {
	f := newDLQFlags("replay", env, replayUsage, replayTail)
	var filters filterFlags
	f.fs.Var(&filters, "filter", "replay only messages matching EXPR (repeatable; see above)")
	all := f.fs.Bool("all", false, "replay every message (instead of -filter)")
	to := f.fs.String("to", "", "URL of the queue to send the messages to (default: each message's source)")
	rate := f.fs.Float64("rate", doctor.DefaultReplayRate, "most messages sent per second")
	dry := f.fs.Bool("dry-run", false, "say what would be sent; send and delete nothing")
	lease := f.fs.Duration("lease", doctor.DefaultReplayLease, "visibility timeout of the received messages (whole seconds, 1s to 12h)")
	max := f.fs.Int("max", 0, "stop after this many matching messages (0: no limit)")
	keep := f.fs.Bool("keep-reason", false, "keep the sqsconsumer.* attributes on the replayed copies")
	auditPath := f.fs.String("audit", "", "append the audit lines to this file instead of stdout")
	force := f.fs.Bool("force", false, forceUsage)
	if code, done := f.parse(args); done {
		return code
	}
	var extra []string
	switch {
	case len(filters) == 0 && !*all:
		extra = append(extra, "-filter or -all is required")
	case len(filters) > 0 && *all:
		extra = append(extra, "-all and -filter exclude each other")
	}
	filter, err := doctor.ParseFilter(filters...)
	if err != nil {
		extra = append(extra, errText(err))
	}
	if !(*rate > 0) {
		extra = append(extra, "-rate must be positive")
	}
	if *lease < time.Second || *lease > 12*time.Hour || *lease%time.Second != 0 {
		extra = append(extra, "-lease must be whole seconds from 1s to 12h")
	}
	if *max < 0 {
		extra = append(extra, "-max must not be negative")
	}
	if *to != "" {
		if u, err := url.Parse(*to); err != nil || u.Scheme == "" || u.Host == "" {
			extra = append(extra, fmt.Sprintf("-to %q is not a URL", *to))
		}
	}
	if ps := f.problems(extra...); len(ps) > 0 {
		return f.fail(exitUsage, ps...)
	}
	auditW := env.stdout
	if *auditPath != "" {
		file, err := os.OpenFile(*auditPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return f.fail(exitUsage, fmt.Sprintf("-audit: %v", err))
		}
		defer file.Close()
		auditW = file
	}
	c, err := f.client(ctx)
	if err != nil {
		return f.fail(exitRead, errText(err))
	}
	enc := json.NewEncoder(auditW)
	var auditErr error
	rest := "; matching messages are sent to their target and then deleted from the DLQ"
	if *dry {
		rest = "; the dry run sends, deletes and moves nothing"
	}
	res, err := doctor.Replay(ctx, c, *f.queueURL, doctor.ReplayOptions{
		Filter: filter, Destination: *to, Rate: *rate, DryRun: *dry, Lease: *lease, Max: *max, KeepReason: *keep,
		Force: *force, BeforePeek: f.announce("dlq replay", rest),
		Audit: func(r doctor.AuditRecord) {
			if err := enc.Encode(r); err != nil && auditErr == nil {
				auditErr = err
			}
		},
	})
	if code, ok := f.refused(err, "-force receives all the same."); ok {
		return code
	}
	if err != nil && !errors.Is(err, doctor.ErrInterrupted) && res.Examined == 0 {
		return f.fail(exitRead, errText(err))
	}
	if err != nil { // interrupted, or stopped after examining some: the summary says how far it got
		fmt.Fprintln(env.stderr, "sqsdoctor:", errText(err))
	}
	if auditErr != nil {
		fmt.Fprintln(env.stderr, "sqsdoctor: writing the audit:", auditErr)
	}
	code := exitOK
	switch {
	case err != nil || !res.Complete() || auditErr != nil:
		code = exitFindings
	case res.Matched == 0:
		code = exitNothing
	}
	fmt.Fprintf(env.stderr, "replay (%s): %d examined, %d matched, %d replayed, %d would be replayed, %d skipped, %d send failed, %d sent but not deleted, %d released\n",
		filter, res.Examined, res.Matched, res.Replayed, res.WouldReplay, res.Skipped, res.SendFailed, res.NotDeleted, res.Released)
	if code == exitNothing {
		fmt.Fprintf(env.stderr, "sqsdoctor: no message matched %s (exit code %d)\n", filter, exitNothing)
	}
	if f.wantJSON {
		out := struct {
			Summary  doctor.ReplayResult `json:"summary"`
			ExitCode int                 `json:"exit_code"`
		}{res, code}
		b, err := json.Marshal(out)
		if err == nil {
			_, err = fmt.Fprintf(env.stdout, "%s\n", b)
		}
		if err != nil {
			fmt.Fprintln(env.stderr, "sqsdoctor: writing the JSON summary:", err)
			return exitRead
		}
	}
	return code
}
