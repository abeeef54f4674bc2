package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/doctor"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// dlqSetup is a source "work" whose messages SQS moves to "work-dlq" after one
// receive, plus "spare"; n messages are already in the DLQ, and "direct" was sent
// to the DLQ by hand with an sqsconsumer.error attribute, as sqsconsumer does.
type dlqSetup struct {
	srv              *sqstest.Server
	src, dlq, spare  string
	dlqARN, spareARN string
}

func newDLQSetup(t *testing.T, n int, direct bool) dlqSetup {
	t.Helper()
	srv := sqstest.New(t)
	c := srv.Client()
	must := func(u string, err error) string {
		t.Helper()
		require.NoError(t, err)
		return u
	}
	s := dlqSetup{srv: srv}
	s.dlq = must(srv.CreateQueue("work-dlq", map[string]string{"MessageRetentionPeriod": "1209600"}))
	s.dlqARN = "arn:aws:sqs:us-east-1:123456789012:work-dlq"
	s.src = must(srv.CreateQueue("work", map[string]string{"VisibilityTimeout": "0",
		"RedrivePolicy": `{"deadLetterTargetArn":"` + s.dlqARN + `","maxReceiveCount":1}`}))
	s.spare = must(srv.CreateQueue("spare", nil))
	s.spareARN = "arn:aws:sqs:us-east-1:123456789012:spare"
	for i := range n {
		must(srv.Send(s.src, "m"+string(rune('a'+i))))
	}
	for range 2 * n {
		_, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &s.src})
		require.NoError(t, err)
	}
	if direct {
		_, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: &s.dlq, MessageBody: aws.String("direct"),
			MessageAttributes: map[string]types.MessageAttributeValue{
				doctor.AttrReason: {DataType: aws.String("String"), StringValue: aws.String("permanent: charging card: declined")},
				doctor.AttrSource: {DataType: aws.String("String"), StringValue: aws.String("arn:aws:sqs:us-east-1:123456789012:work")},
			}})
		require.NoError(t, err)
	}
	return s
}

func (s dlqSetup) bodies(url string) []string {
	var out []string
	for _, m := range s.srv.Messages(url) {
		if !m.Deleted && !m.MovedToDLQ && !m.Redriven {
			out = append(out, m.Body)
		}
	}
	return out
}

func TestDLQDispatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"no action", []string{"dlq"}, exitUsage, "dlq needs an action"},
		{"help", []string{"dlq", "-help"}, exitOK, "inspect  count and peek"},
		{"unknown action", []string{"dlq", "purge"}, exitUsage, `unknown dlq action "purge"`},
		{"action help", []string{"dlq", "replay", "-help"}, exitOK, "Exit codes:"},
		{"no queue", []string{"dlq", "inspect"}, exitUsage, "-queue-url is required"},
		{"stray argument", []string{"dlq", "inspect", "-queue-url", b.healthy, "extra"}, exitUsage, "unexpected arguments: extra"},
		{"replay needs a filter", []string{"dlq", "replay", "-queue-url", b.healthy}, exitUsage, "-filter or -all is required"},
		{"filter and all", []string{"dlq", "replay", "-queue-url", b.healthy, "-all", "-filter", "age>1h"}, exitUsage, "-all and -filter exclude each other"},
		{"bad filter", []string{"dlq", "replay", "-queue-url", b.healthy, "-filter", "agee>1h"}, exitUsage, `filter "agee>1h": unknown key "agee"`},
		{"bad rate", []string{"dlq", "redrive", "-queue-url", b.healthy, "-rate", "501"}, exitUsage, "-rate must be 1 to 500"},
		{"bad visibility", []string{"dlq", "inspect", "-queue-url", b.healthy, "-visibility", "1500ms"}, exitUsage, "-visibility must be whole seconds"},
		{"bad lease", []string{"dlq", "replay", "-queue-url", b.healthy, "-all", "-lease", "13h"}, exitUsage, "-lease must be whole seconds"},
		{"missing queue", []string{"dlq", "inspect", "-queue-url", b.srv.BaseURL() + "/123456789012/nope"}, exitRead, "reading the attributes of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runCLI(t, inMemory(b.srv), tt.args...)
			require.Equal(t, tt.code, code, "stderr: %s", errOut)
			require.Empty(t, out, "nothing on stdout")
			require.Contains(t, errOut, tt.contains)
		})
	}
	// The first argument picks a subcommand only when it names one: the check
	// itself is unchanged.
	code, _, errOut := runCLI(t, inMemory(b.srv), "-queue-url", b.healthy, "dlq")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "unexpected arguments: dlq")
	_, _, help := runCLI(t, inMemory(b.srv), "-help")
	require.Contains(t, help, "sqsdoctor dlq inspect|redrive|replay")
}

func TestDLQInspect(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newDLQSetup(t, 3, true)
		time.Sleep(time.Hour)
		code, out, errOut := runCLI(t, inMemory(s.srv), "dlq", "inspect", "-queue-url", s.dlq)
		require.Equal(t, exitFindings, code, "a DLQ with messages exits 1; stderr: %s", errOut)
		for _, want := range []string{
			"dlq       " + s.dlq + " (standard, retention 14d)",
			"used by   " + s.src,
			"messages  4 visible, 0 in flight, 0 delayed",
			"peeked    4 (oldest 1h0m0s, median 1h0m0s; the oldest expires in 13d23h0m0s)",
			"reasons       3  (no sqsconsumer.error",
			"\n              1  permanent: charging card: declined\n",
			"sources       4  work",
			"note      1 of the peeked messages have no DeadLetterQueueSourceArn",
			"cost      2 receive(s); each of the 4 peeked messages' ApproximateReceiveCount rose by 1",
			"for up to 2m0s (4 released at the end)",
		} {
			require.Contains(t, out, want)
		}

		code, out, _ = runCLI(t, inMemory(s.srv), "dlq", "inspect", "-queue-url", s.dlq, "-json", "-max", "2")
		require.Equal(t, exitFindings, code)
		var rep map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		require.EqualValues(t, 2, rep["peeked"])
		require.EqualValues(t, 4, rep["visible"])
		require.EqualValues(t, 1, rep["exit_code"])
		require.EqualValues(t, 2, rep["cost"].(map[string]any)["receive_count_raised"])
		require.EqualValues(t, 120, rep["cost"].(map[string]any)["hidden_for_seconds"])

		code, out, _ = runCLI(t, inMemory(s.srv), "dlq", "inspect", "-queue-url", s.spare, "-max", "0")
		require.Equal(t, exitOK, code, "an empty queue exits 0")
		require.Contains(t, out, "peeked    none")
		require.Contains(t, out, "used by   no queue's RedrivePolicy names it")
	})
}

func TestDLQRedrive(t *testing.T) {
	t.Parallel()
	t.Run("to the sources", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := newDLQSetup(t, 3, false)
			code, out, errOut := runCLI(t, inMemory(s.srv), "dlq", "redrive", "-queue-url", s.dlq)
			require.Equal(t, exitOK, code, "stderr: %s", errOut)
			require.Equal(t, "move task COMPLETED: 3 of 3 moved from "+s.dlqARN+" to their source queues\n", out)
			require.Equal(t, "redrive: RUNNING, 0 moved\nredrive: COMPLETED, 3 of 3 moved\n", errOut, "plain progress lines when stderr is no terminal")
			require.ElementsMatch(t, []string{"ma", "mb", "mc"}, s.bodies(s.src))
		})
	})
	t.Run("to a queue, JSON", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := newDLQSetup(t, 2, false)
			code, out, _ := runCLI(t, inMemory(s.srv), "dlq", "redrive", "-queue-url", s.dlq, "-to", s.spare, "-rate", "1", "-json")
			require.Equal(t, exitOK, code)
			var got map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &got), out)
			require.Equal(t, "COMPLETED", got["status"])
			require.Equal(t, s.spareARN, got["destination_arn"])
			require.EqualValues(t, 1, got["max_messages_per_second"])
			require.EqualValues(t, 0, got["exit_code"])
		})
	})
	t.Run("a task that fails exits 1", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := newDLQSetup(t, 0, true) // only a message without DeadLetterQueueSourceArn
			code, out, _ := runCLI(t, inMemory(s.srv), "dlq", "redrive", "-queue-url", s.dlq)
			require.Equal(t, exitFindings, code)
			require.Contains(t, out, "move task FAILED: 0 of 1 moved")
			require.Contains(t, out, "failure reason: AWS.SimpleQueueService.NonExistentQueue")
		})
	})
	t.Run("Ctrl-C cancels the task", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := newDLQSetup(t, 10, false)
			ctx, interrupt := context.WithCancel(context.Background())
			time.AfterFunc(2500*time.Millisecond, interrupt)
			var out, errOut bytes.Buffer
			code := run(ctx, []string{"dlq", "redrive", "-queue-url", s.dlq, "-to", s.spare, "-rate", "1"}, &out, &errOut, inMemory(s.srv))
			require.Equal(t, exitFindings, code)
			require.Contains(t, errOut.String(), "sqsdoctor: interrupted (context canceled): the move task is CANCELLED")
			require.Contains(t, out.String(), "move task CANCELLED: 3 of 10 moved")
			require.Len(t, s.bodies(s.dlq), 7)
			tasks := s.srv.MoveTasks(s.dlq)
			require.Equal(t, sqstest.TaskCancelled, tasks[len(tasks)-1].Status)
		})
	})
	t.Run("not a DLQ exits 3", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := newDLQSetup(t, 0, false)
			code, _, errOut := runCLI(t, inMemory(s.srv), "dlq", "redrive", "-queue-url", s.spare, "-json")
			require.Equal(t, exitRead, code)
			require.Contains(t, errOut, "Source queue must be configured as a Dead Letter Queue.")
		})
	})
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	tests := []struct {
		task doctor.MoveTask
		want string
	}{
		{doctor.MoveTask{Status: "RUNNING", Moved: 3, ToMove: 10}, "[###.......]  30% 3/10 RUNNING   "},
		{doctor.MoveTask{Status: "COMPLETED", Moved: 10, ToMove: 10}, "[##########] 100% 10/10 COMPLETED "},
		{doctor.MoveTask{Status: "RUNNING", Moved: 0, ToMove: -1}, "[moved 0] RUNNING   "},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, progressBar(tt.task, 10))
	}
	var buf bytes.Buffer
	p := newProgress(&buf, true)
	p.show(doctor.MoveTask{Status: "RUNNING", Moved: 1, ToMove: 2})
	p.show(doctor.MoveTask{Status: "COMPLETED", Moved: 2, ToMove: 2})
	p.end()
	require.Equal(t, "\r"+progressBar(doctor.MoveTask{Status: "RUNNING", Moved: 1, ToMove: 2}, 30)+
		"\r"+progressBar(doctor.MoveTask{Status: "COMPLETED", Moved: 2, ToMove: 2}, 30)+"\n", buf.String(), "a terminal gets one redrawn line")
	require.False(t, isTerminal(&buf))
}

func TestDLQReplay(t *testing.T) {
	t.Parallel()
	t.Run("dry run, then for real, with an audit file", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := newDLQSetup(t, 2, true)
			code, out, errOut := runCLI(t, inMemory(s.srv), "dlq", "replay", "-queue-url", s.dlq, "-filter", "reason~declined", "-dry-run")
			require.Equal(t, exitOK, code, "stderr: %s", errOut)
			lines := auditLines(t, out)
			require.Len(t, lines, 1)
			require.Equal(t, "would_replay", lines[0]["outcome"])
			require.Equal(t, s.src, lines[0]["target"], "the source comes from sqsconsumer.source")
			require.Contains(t, errOut, "replay (reason~declined): 3 examined, 1 matched, 0 replayed, 1 would be replayed")
			require.Len(t, s.bodies(s.dlq), 3, "a dry run changes nothing")

			audit := filepath.Join(t.TempDir(), "audit.jsonl")
			code, out, errOut = runCLI(t, inMemory(s.srv), "dlq", "replay", "-queue-url", s.dlq, "-all", "-audit", audit, "-json")
			require.Equal(t, exitOK, code, "stderr: %s", errOut)
			b, err := os.ReadFile(audit)
			require.NoError(t, err)
			lines = auditLines(t, string(b))
			require.Len(t, lines, 3)
			for _, l := range lines {
				require.Equal(t, "replayed", l["outcome"])
				require.NotEmpty(t, l["new_message_id"])
			}
			var sum struct {
				Summary  doctor.ReplayResult `json:"summary"`
				ExitCode int                 `json:"exit_code"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &sum), out)
			require.Equal(t, 3, sum.Summary.Replayed)
			require.Empty(t, s.bodies(s.dlq))
			require.ElementsMatch(t, []string{"ma", "mb", "direct"}, s.bodies(s.src))
		})
	})
	t.Run("a failed send exits 1", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := newDLQSetup(t, 2, false)
			s.srv.FailNext("SendMessage", 1, sqstest.FaultAccessDenied)
			code, out, errOut := runCLI(t, inMemory(s.srv), "dlq", "replay", "-queue-url", s.dlq, "-filter", "source=work")
			require.Equal(t, exitFindings, code)
			lines := auditLines(t, out)
			require.Equal(t, "send_failed", lines[0]["outcome"])
			require.Contains(t, lines[0]["error"], "AccessDenied")
			require.Equal(t, "replayed", lines[1]["outcome"])
			require.Contains(t, errOut, "1 replayed, 0 would be replayed, 0 skipped, 1 send failed")
			require.Len(t, s.bodies(s.dlq), 1, "the failed one stays in the DLQ")
		})
	})
	t.Run("Ctrl-C stops after the message in hand", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := newDLQSetup(t, 5, false)
			ctx, interrupt := context.WithCancel(context.Background())
			time.AfterFunc(1500*time.Millisecond, interrupt)
			var out, errOut bytes.Buffer
			code := run(ctx, []string{"dlq", "replay", "-queue-url", s.dlq, "-all", "-rate", "1"}, &out, &errOut, inMemory(s.srv))
			require.Equal(t, exitFindings, code)
			require.Len(t, auditLines(t, out.String()), 2, "sent at 0 s and 1 s")
			require.Contains(t, errOut.String(), "interrupted")
			require.Len(t, s.bodies(s.dlq), 3)
			require.Len(t, s.bodies(s.src), 2)
		})
	})
}

// auditLines decodes JSON lines; a line with "summary" ends the audit.
func auditLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		if _, ok := m["summary"]; ok {
			break
		}
		lines = append(lines, m)
	}
	return lines
}
