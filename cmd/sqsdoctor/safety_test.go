package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// jobsSetup is the setup: "jobs" (visibility 5 s, maxReceiveCount n)
// redriving to "jobs-dlq", with two messages SQS moved to the DLQ and three
// live ones in jobs, one of them received once.
type jobsSetup struct {
	srv      *sqstest.Server
	src, dlq string
}

func newJobsSetup(t *testing.T, n int) jobsSetup {
	t.Helper()
	srv := sqstest.New(t)
	c := srv.Client()
	dlq, err := srv.CreateQueue("jobs-dlq", map[string]string{"MessageRetentionPeriod": "1209600"})
	require.NoError(t, err)
	src, err := srv.CreateQueue("jobs", map[string]string{"VisibilityTimeout": "5",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:jobs-dlq","maxReceiveCount":%d}`, n)})
	require.NoError(t, err)
	for _, b := range []string{"dead-1", "dead-2"} {
		_, err := srv.Send(src, b)
		require.NoError(t, err)
	}
	for range n + 1 {
		_, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &src, MaxNumberOfMessages: 10})
		require.NoError(t, err)
		time.Sleep(6 * time.Second)
	}
	for _, b := range []string{"live-1", "live-2", "live-3"} {
		_, err := srv.Send(src, b)
		require.NoError(t, err)
	}
	_, err = c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &src, MaxNumberOfMessages: 1})
	require.NoError(t, err)
	time.Sleep(6 * time.Second)
	return jobsSetup{srv: srv, src: src, dlq: dlq}
}

// where is every message's queue and ApproximateReceiveCount, by body.
func (s jobsSetup) where() map[string]string {
	out := map[string]string{}
	for _, url := range []string{s.src, s.dlq} {
		for _, m := range s.srv.Messages(url) {
			if !m.Deleted && !m.MovedToDLQ && !m.Redriven && !m.Expired && !m.Purged {
				out[m.Body] = fmt.Sprintf("%s receives=%d", url[strings.LastIndexByte(url, '/')+1:], m.ReceiveCount)
			}
		}
	}
	return out
}

// The dry run that moved messages: inspect and replay -dry-run on the
// source queue. Both are refused before any receive, saying why and what the
// receives would cost, and every message keeps its queue and receive count.
func TestDLQRefusesTheSourceQueue(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("maxReceiveCount %d", n), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := newJobsSetup(t, n)
				before := s.where()
				s.srv.ResetCalls()
				for _, args := range [][]string{
					{"dlq", "inspect", "-queue-url", s.src},
					{"dlq", "replay", "-queue-url", s.src, "-all", "-dry-run"},
					{"dlq", "replay", "-queue-url", s.src, "-filter", "body~live", "-dry-run"},
					{"dlq", "replay", "-queue-url", s.src, "-all", "-to", s.dlq},
				} {
					code, out, errOut := runCLI(t, inMemory(s.srv), args...)
					require.Equal(t, exitRefused, code, "%v: %s", args, errOut)
					require.Empty(t, out)
					require.Len(t, strings.Split(strings.TrimSpace(errOut), "\n"), 1, "one line: %s", errOut)
					for _, want := range []string{
						"sqsdoctor: refusing to receive from " + s.src,
						"it is not a dead-letter queue: no queue's RedrivePolicy names it",
						fmt.Sprintf("it has a RedrivePolicy of its own (maxReceiveCount %d, to jobs-dlq)", n),
						"every one of the 3 visible messages of " + s.src + ": each one's ApproximateReceiveCount would rise by 1",
						"nothing was received", "-force",
					} {
						require.Contains(t, errOut, want, "%v", args)
					}
				}
				code, out, _ := runCLI(t, inMemory(s.srv), "dlq", "inspect", "-queue-url", s.src, "-json")
				require.Equal(t, exitRefused, code)
				var e errorJSON
				require.NoError(t, json.Unmarshal([]byte(out), &e))
				require.Equal(t, exitRefused, e.ExitCode)
				require.Contains(t, e.Error, "refusing to receive")

				require.Zero(t, s.srv.CallCount("ReceiveMessage"))
				require.Equal(t, before, s.where(), "nothing moved, no receive count changed")

				code, out, _ = runCLI(t, inMemory(s.srv), "dlq", "inspect", "-queue-url", s.src, "-max", "0")
				require.Equal(t, exitFindings, code, "counters only: allowed, the queue holds messages")
				require.Contains(t, out, "messages  3 visible")
				require.Equal(t, before, s.where())
			})
		})
	}
}

// On the DLQ a dry run says beforehand what its receives do, and does only that:
// every message stays in the DLQ, its receive count one higher.
func TestDLQDryRunOnTheDLQ(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("maxReceiveCount %d", n), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := newJobsSetup(t, n)
				before := s.where()
				code, _, errOut := runCLI(t, inMemory(s.srv), "dlq", "replay", "-queue-url", s.dlq, "-all", "-dry-run")
				require.Equal(t, exitOK, code, errOut)
				require.Contains(t, errOut, "sqsdoctor: dlq replay receives every one of the 2 visible messages of "+s.dlq+
					": each one's ApproximateReceiveCount rises by 1 and it is hidden for up to 15m (released at the end); the dry run sends, deletes and moves nothing\n")
				after := s.where()
				for body, w := range before {
					if rc, ok := strings.CutPrefix(w, "jobs-dlq receives="); ok {
						var was int
						_, err := fmt.Sscan(rc, &was)
						require.NoError(t, err)
						require.Equal(t, fmt.Sprintf("jobs-dlq receives=%d", was+1), after[body], "%s: one receive more, as announced", body)
					} else {
						require.Equal(t, w, after[body], body)
					}
				}

				// -force is told, and says what it overrides.
				code, _, errOut = runCLI(t, inMemory(s.srv), "dlq", "inspect", "-queue-url", s.src, "-force", "-max", "1")
				require.Equal(t, exitFindings, code, errOut)
				require.Contains(t, errOut, "sqsdoctor: -force: receiving although it is not a dead-letter queue")
				require.Contains(t, errOut, "sqsdoctor: dlq inspect receives up to 1 of the 3 visible messages of "+s.src)
			})
		})
	}
}

// A replay whose filter matches nothing, and a redrive that moves nothing, exit
// 4: a mistyped filter in a script does not read as success.
func TestDLQNothingMatchedOrMoved(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newDLQSetup(t, 2, false)
		for _, args := range [][]string{
			{"dlq", "replay", "-queue-url", s.dlq, "-filter", "body~mistyped", "-dry-run"},
			{"dlq", "replay", "-queue-url", s.dlq, "-filter", "body~mistyped"},
		} {
			code, out, errOut := runCLI(t, inMemory(s.srv), args...)
			require.Equal(t, exitNothing, code, "%v: %s", args, errOut)
			require.Empty(t, out)
			require.Contains(t, errOut, "sqsdoctor: no message matched body~mistyped (exit code 4)")
		}
		code, out, _ := runCLI(t, inMemory(s.srv), "dlq", "replay", "-queue-url", s.dlq, "-filter", "body~mistyped", "-json")
		require.Equal(t, exitNothing, code)
		require.Contains(t, out, `"exit_code":4`)
		require.Len(t, s.bodies(s.dlq), 2)

		code, _, errOut := runCLI(t, inMemory(s.srv), "dlq", "redrive", "-queue-url", s.dlq)
		require.Equal(t, exitOK, code, errOut)
		code, out, errOut = runCLI(t, inMemory(s.srv), "dlq", "redrive", "-queue-url", s.dlq, "-json")
		require.Equal(t, exitNothing, code, "the DLQ is empty now: %s", errOut)
		require.Contains(t, errOut, "sqsdoctor: the move task moved nothing")
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.EqualValues(t, exitNothing, got["exit_code"])

		// Every key redrive's help lists, set or not.
		require.ElementsMatch(t, []string{"task_handle", "status", "source_arn", "destination_arn", "max_messages_per_second",
			"moved", "to_move", "failure_reason", "started", "exit_code"}, slices.Collect(maps.Keys(got)))
		_, _, help := runCLI(t, inMemory(s.srv), "dlq", "redrive", "-h")
		for k := range got {
			require.Contains(t, help, `"`+k+`"`, "the help lists %s", k)
		}
		for _, code := range []string{"\n  0  ", "\n  1  ", "\n  4  the task COMPLETED but moved nothing"} {
			require.Contains(t, help, code)
		}
		_, _, help = runCLI(t, inMemory(s.srv), "dlq", "replay", "-h")
		require.Contains(t, help, "\n  4  no message matched")
		require.Contains(t, help, "\n  5  refused")
	})
}

// The JSON of inspect and replay carries every key their help lists.
func TestDLQJSONHasEveryListedKey(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newDLQSetup(t, 2, true)
		code, out, errOut := runCLI(t, inMemory(s.srv), "dlq", "inspect", "-queue-url", s.dlq, "-json")
		require.Equal(t, exitFindings, code, errOut)
		var rep map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		for _, k := range []string{"queue", "visible", "in_flight", "delayed", "sources", "peeked", "oldest_age_seconds", "median_age_seconds",
			"oldest_expires_in_seconds", "reasons", "by_source", "with_reason", "not_from_sqs", "cost", "exit_code"} {
			require.Contains(t, rep, k)
		}
		cost := rep["cost"].(map[string]any)
		require.ElementsMatch(t, []string{"receives", "receive_count_raised", "hidden_for_seconds", "released", "dlq_max_receive_count"},
			slices.Collect(maps.Keys(cost)))

		code, out, errOut = runCLI(t, inMemory(s.srv), "dlq", "replay", "-queue-url", s.dlq, "-filter", "reason~declined", "-dry-run", "-json")
		require.Equal(t, exitOK, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2, "one audit line and the summary")
		var audit, sum map[string]any
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &audit))
		require.NoError(t, json.Unmarshal([]byte(lines[1]), &sum))
		require.ElementsMatch(t, []string{"time", "outcome", "message_id", "new_message_id", "dlq", "target", "source", "reason", "group_id",
			"deduplication_id", "sent_at", "receive_count", "error"}, slices.Collect(maps.Keys(audit)))
		require.ElementsMatch(t, []string{"examined", "matched", "replayed", "would_replay", "skipped", "send_failed", "sent_not_deleted",
			"released", "interrupted"}, slices.Collect(maps.Keys(sum["summary"].(map[string]any))))
		require.Contains(t, sum, "exit_code")
	})
}

// Every subcommand answers a bad flag with one line and the pointer to -h, and
// -h with its usage and exit code 0.
func TestFlagErrorsAndHelpEverywhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, cmd := range [][]string{{}, {"dlq", "inspect"}, {"dlq", "redrive"}, {"dlq", "replay"}, {"plan"}} {
		name := strings.Join(append([]string{"sqsdoctor"}, cmd...), " ")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, bad := range [][]string{{"-nope"}, {"-json=maybe"}, {"extra", "args"}} {
				code, out, errOut := runCLI(t, inMemory(b.srv), append(slices.Clone(cmd), bad...)...)
				require.Equal(t, exitUsage, code)
				require.Empty(t, out)
				lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
				require.Len(t, lines, 2, "one line and the pointer: %q", errOut)
				require.Equal(t, "Run "+name+" -h for usage.", lines[1])
			}
			for _, h := range []string{"-h", "-help", "--help"} {
				code, out, errOut := runCLI(t, inMemory(b.srv), append(slices.Clone(cmd), h)...)
				require.Equal(t, exitOK, code, h)
				require.Empty(t, out)
				require.Contains(t, errOut, "Usage: "+name)
				require.Contains(t, errOut, "xit code", "the help documents the exit codes")
			}
		})
	}
	for _, args := range [][]string{{"dlq"}, {"dlq", "purge"}} {
		code, _, errOut := runCLI(t, inMemory(b.srv), args...)
		require.Equal(t, exitUsage, code)
		require.Len(t, strings.Split(strings.TrimSuffix(errOut, "\n"), "\n"), 2, errOut)
		require.Contains(t, errOut, "Run sqsdoctor dlq -h for usage.")
	}
	code, _, errOut := runCLI(t, inMemory(b.srv), "dlq", "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, errOut, "Usage: sqsdoctor dlq ACTION")
}
