package interop

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// The recorded-answer table: cases whose answers real AWS gave, as recorded by
// LocalStack's AWS-validated SQS tests (repository localstack/localstack, JSON
// protocol; tests/aws/services/sqs/test_sqs.snapshot.json with
// test_sqs.validation.json, and test_sqs_move_task.snapshot.json with
// test_sqs_move_task.validation.json). Each case repeats the recorded test's
// requests as JSON written by hand, the way boto3 sends them (so a DelaySeconds of 0
// or a "True" is sent, which the Go SDK would leave out or never write), and checks
// each answer against what AWS answered, stated in our words.
//
// TestRecordedAnswers runs every case against sqstest always (in memory, inside
// testing/synctest, so the recordings' sleeps take no time): any difference fails.
// With SQSCONSUMER_FAUXQS_ENDPOINT set it runs them against fauxqs too, over real
// sockets and real time, where fauxqs implements the actions; a step where fauxqs
// differs must be listed in the case's fauxqs divergences, and a listed divergence
// that stops differing fails too, so the list stays true.

// recording is one case of the table.
type recording struct {
	test string // the LocalStack test, as in its validation file
	file string // "test_sqs" or "test_sqs_move_task" (under tests/aws/services/sqs/)
	date string // when LocalStack last validated it against AWS
	// before says what sqstest answered before issue 25: "match", or what differed.
	before string
	// fauxqsSkip, when set, says why the case does not run against fauxqs.
	fauxqsSkip string
	// fauxqs lists the steps where fauxqs differs from AWS, with what it does.
	fauxqs map[string]string
	run    func(r *replay)
}

// notInFauxqs is why the move-task cases skip fauxqs 2.4.1: its README lists
// ListDeadLetterSourceQueues, StartMessageMoveTask, CancelMessageMoveTask and
// ListMessageMoveTasks as not supported.
const notInFauxqs = "fauxqs 2.4.1 does not implement message move tasks (its README's SQS table says No)"

// reply is one HTTP answer.
type reply struct {
	status int
	code   string // the x-amzn-query-error code, else the __type's short name
	msg    string
	body   map[string]any
}

// String renders an answer for comparison: "200" or "400 Code: message".
func (a reply) String() string {
	if a.status == http.StatusOK {
		return "200"
	}
	return fmt.Sprintf("%d %s: %s", a.status, a.code, a.msg)
}

// errAnswer is how a recorded error answer renders.
func errAnswer(status int, code, msg string) string {
	return fmt.Sprintf("%d %s: %s", status, code, msg)
}

// replay is one implementation's run of one case.
type replay struct {
	t        *testing.T
	impl     string
	hc       *http.Client
	endpoint string
	prefix   string
	sleep    func(time.Duration)

	steps []string
	got   map[string]string
	want  map[string]string
}

// call posts one action with a JSON body; extra are header name/value pairs.
func (r *replay) call(action string, body map[string]any, extra ...string) reply {
	r.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		r.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(r.t.Context(), http.MethodPost, r.endpoint+"/", bytes.NewReader(b))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amzn-Query-Mode", "true")
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		r.t.Fatalf("%s: %s: %v", r.impl, action, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("%s: %s: reading the answer: %v", r.impl, action, err)
	}
	a := reply{status: resp.StatusCode, body: map[string]any{}}
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&a.body); err != nil {
			r.t.Fatalf("%s: %s: answer is not JSON: %q", r.impl, action, raw)
		}
	}
	if code, _, ok := strings.Cut(resp.Header.Get("x-amzn-query-error"), ";"); ok {
		a.code = code
	} else if typ, _ := a.body["__type"].(string); typ != "" {
		a.code = typ[strings.LastIndex(typ, "#")+1:]
	}
	for _, k := range []string{"message", "Message"} {
		if m, ok := a.body[k].(string); ok {
			a.msg = m
		}
	}
	return a
}

// must is call that ends the run when the answer is not 200.
func (r *replay) must(action string, body map[string]any, extra ...string) reply {
	r.t.Helper()
	a := r.call(action, body, extra...)
	if a.status != http.StatusOK {
		r.t.Fatalf("%s: %s: %s", r.impl, action, a)
	}
	return a
}

// queue creates a queue named after the case and returns its URL.
func (r *replay) queue(suffix string, attrs map[string]string) string {
	r.t.Helper()
	name := r.prefix + "-" + suffix
	if base, ok := strings.CutSuffix(suffix, ".fifo"); ok {
		name = r.prefix + "-" + base + ".fifo"
	}
	body := map[string]any{"QueueName": name}
	if attrs != nil {
		body["Attributes"] = attrs
	}
	return str(r.must("CreateQueue", body).body["QueueUrl"])
}

func (r *replay) arn(url string) string {
	r.t.Helper()
	a := r.must("GetQueueAttributes", map[string]any{"QueueUrl": url, "AttributeNames": []string{"QueueArn"}})
	return str(attrsOf(a)["QueueArn"])
}

// receive is a ReceiveMessage with the given extra members.
func (r *replay) receive(url string, members map[string]any) []map[string]any {
	r.t.Helper()
	body := map[string]any{"QueueUrl": url}
	for k, v := range members {
		body[k] = v
	}
	return messagesOf(r.must("ReceiveMessage", body))
}

// collect receives from url until n messages came or a 1 s long poll answered none,
// and returns their bodies, sorted.
func (r *replay) collect(url string, n int) []string {
	r.t.Helper()
	var got []string
	for len(got) < n {
		ms := r.receive(url, map[string]any{"MaxNumberOfMessages": 10, "WaitTimeSeconds": 1, "VisibilityTimeout": 60})
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			got = append(got, str(m["Body"]))
		}
	}
	sort.Strings(got)
	return got
}

// expect records a step: what the implementation answered and what AWS answered.
func (r *replay) expect(step, got, want string) {
	r.t.Helper()
	if _, dup := r.got[step]; dup {
		r.t.Fatalf("case bug: step %q twice", step)
	}
	r.steps = append(r.steps, step)
	r.got[step], r.want[step] = got, want
}

func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	}
	return fmt.Sprint(v)
}

func attrsOf(a reply) map[string]any {
	m, _ := a.body["Attributes"].(map[string]any)
	return m
}

func messagesOf(a reply) []map[string]any {
	var out []map[string]any
	list, _ := a.body["Messages"].([]any)
	for _, m := range list {
		if mm, ok := m.(map[string]any); ok {
			out = append(out, mm)
		}
	}
	return out
}

// keys lists a JSON object's member names, sorted, comma-separated.
func keys(v any) string {
	m, _ := v.(map[string]any)
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

func has(m map[string]any, k string) string {
	if _, ok := m[k]; ok {
		return "present"
	}
	return "absent"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// TestRecordedAnswers runs the table; see the comment at the top of this file.
func TestRecordedAnswers(t *testing.T) {
	t.Parallel()
	endpoint := os.Getenv(envEndpoint)
	for _, rc := range recordings {
		t.Run(rc.test, func(t *testing.T) {
			t.Parallel()
			t.Run(implSQSTest, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					srv := sqstest.New(t)
					r := newReplay(t, implSQSTest, &http.Client{Transport: srv.Transport()}, srv.BaseURL(), time.Sleep)
					rc.run(r)
					for _, step := range r.steps {
						if r.got[step] != r.want[step] {
							t.Errorf("sqstest differs from AWS (%s, %s.snapshot.json) at %q:\n  got:  %s\n  AWS:  %s", rc.test, rc.file, step, r.got[step], r.want[step])
						}
					}
				})
			})
			t.Run(implFauxqs, func(t *testing.T) {
				switch {
				case endpoint == "":
					t.Skip(skipMessage)
				case rc.fauxqsSkip != "":
					t.Skip(rc.fauxqsSkip)
				}
				t.Parallel()
				tr := http.DefaultTransport.(*http.Transport).Clone()
				tr.Proxy = nil
				t.Cleanup(tr.CloseIdleConnections)
				r := newReplay(t, implFauxqs, &http.Client{Transport: tr, Timeout: 30 * time.Second}, endpoint, time.Sleep)
				rc.run(r)
				checkFauxqs(t, rc, r)
			})
		})
	}
}

func newReplay(t *testing.T, impl string, hc *http.Client, endpoint string, sleep func(time.Duration)) *replay {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return &replay{t: t, impl: impl, hc: hc, endpoint: strings.TrimRight(endpoint, "/"), prefix: "rec-" + hex.EncodeToString(b),
		sleep: sleep, got: map[string]string{}, want: map[string]string{}}
}

// checkFauxqs applies the table's rule to a fauxqs run: a difference from AWS is
// logged when listed, an error otherwise; a listed step that matched is an error.
func checkFauxqs(t *testing.T, rc recording, r *replay) {
	for _, step := range r.steps {
		what, listed := rc.fauxqs[step]
		if wd, known := lookupWireDivergence(r.got[step], r.want[step]); known && !listed && r.got[step] != r.want[step] {
			t.Logf("known fauxqs wire divergence at %q (%s): fauxqs %s, AWS %s", step, wd.name, r.got[step], r.want[step])
			continue
		}
		switch differs := r.got[step] != r.want[step]; {
		case differs && listed:
			t.Logf("known fauxqs divergence at %q: %s\n  fauxqs: %s\n  AWS:    %s", step, what, r.got[step], r.want[step])
		case differs:
			t.Errorf("fauxqs differs from AWS (%s) at %q and the case does not list it:\n  fauxqs: %s\n  AWS:    %s", rc.test, step, r.got[step], r.want[step])
		case listed:
			t.Errorf("fauxqs no longer differs at %q (%s): remove it from the case's divergences", step, what)
		}
	}
	for step := range rc.fauxqs {
		if !slices.Contains(r.steps, step) {
			t.Errorf("case bug: divergence step %q is not a step of %s", step, rc.test)
		}
	}
}

// Recorded error texts used by several cases.
const (
	textNoDedup       = "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"
	textNeedGroup     = "The request must contain the parameter MessageGroupId."
	textUnknownFifo   = "Unknown Attribute FifoQueue."
	textSourceMissing = "The resource that you specified for the SourceArn parameter doesn't exist."
	textOneTask       = "There is already a task running. Only one active task is allowed for a source queue arn at a given time."
)

// dlqPipe builds the move-task recordings' fixture: a source queue whose messages
// move to a DLQ after one receive, and a third queue as destination. It returns the
// URLs and the DLQ's and destination's ARNs.
func dlqPipe(r *replay) (src, dlq, dest, dlqARN, destARN string) {
	dlq = r.queue("dlq", nil)
	dlqARN = r.arn(dlq)
	src = r.queue("src", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + dlqARN + `","maxReceiveCount":1}`})
	dest = r.queue("dest", nil)
	return src, dlq, dest, dlqARN, r.arn(dest)
}

// deadLetter sends the bodies to src and receives 2×n times with VisibilityTimeout
// 0, which moves them all to the DLQ (as the recordings do).
func deadLetter(r *replay, src string, bodies ...string) {
	for _, b := range bodies {
		r.must("SendMessage", map[string]any{"QueueUrl": src, "MessageBody": b})
	}
	for range 2 * len(bodies) {
		r.receive(src, map[string]any{"VisibilityTimeout": 0})
	}
}

func numbered(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("message-%d", i)
	}
	return out
}

// listTask is ListMessageMoveTasks' only (most recent) entry.
func listTask(r *replay, sourceARN string) map[string]any {
	a := r.must("ListMessageMoveTasks", map[string]any{"SourceArn": sourceARN})
	list, _ := a.body["Results"].([]any)
	if len(list) == 0 {
		r.t.Fatalf("%s: ListMessageMoveTasks: no task", r.impl)
	}
	e, _ := list[0].(map[string]any)
	return e
}

// waitTask lists the task once a second until done says so (30 tries, as the
// recordings' retry loops).
func waitTask(r *replay, sourceARN string, done func(map[string]any) bool) map[string]any {
	e := listTask(r, sourceARN)
	for i := 0; i < 30 && !done(e); i++ {
		r.sleep(time.Second)
		e = listTask(r, sourceARN)
	}
	return e
}

func taskHandleFor(taskID, sourceARN string) string {
	return base64.StdEncoding.EncodeToString([]byte(`{"taskId":"` + taskID + `","sourceArn":"` + sourceARN + `"}`))
}

var recordings = []recording{
	// FIFO sends.
	{test: "test_fifo_queue_send_message_with_zero_delay_defaults_to_queue_delay[sqs]", file: "test_sqs", date: "2025-07-31",
		before: "fixed: sqstest refused DelaySeconds=0 on a FIFO queue",
		run: func(r *replay) {
			q := r.queue("zero.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "DelaySeconds": "2"})
			a := r.call("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "message-1", "MessageGroupId": "1", "DelaySeconds": 0})
			r.expect("send with DelaySeconds 0", a.String(), "200")
			r.expect("send: MD5OfMessageBody", str(a.body["MD5OfMessageBody"]), "3d6b824fd8c1520e9a047d21fee6fb1f")
			r.expect("send: SequenceNumber", has(a.body, "SequenceNumber"), "present")
			first := r.must("ReceiveMessage", map[string]any{"QueueUrl": q, "WaitTimeSeconds": 1})
			r.expect("receive during the queue's delay: no Messages member", has(first.body, "Messages"), "absent")
			r.sleep(3 * time.Second)
			late := r.receive(q, map[string]any{"MaxNumberOfMessages": 1})
			r.expect("receive after the delay", fmt.Sprint(len(late)), "1")
		}},
	{test: "test_fifo_queue_send_message_with_delay_seconds_fails[sqs]", file: "test_sqs", date: "2024-04-30", before: "match",
		run: func(r *replay) {
			q := r.queue("delay.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
			a := r.call("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "message-1", "MessageGroupId": "1", "DelaySeconds": 2})
			r.expect("send with DelaySeconds 2", a.String(), errAnswer(400, "InvalidParameterValue",
				"Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type."))
		}},
	{test: "test_posting_to_fifo_requires_deduplicationid_group_id[sqs]", file: "test_sqs", date: "2024-04-30", before: "match",
		fauxqs: map[string]string{"send without MessageDeduplicationId": `ends the message with a period (and prefixes the code with "AWS.SimpleQueueService.")`},
		run: func(r *replay) {
			q := r.queue("ids.fifo", map[string]string{"FifoQueue": "true"})
			a := r.call("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "test", "MessageGroupId": "g"})
			r.expect("send without MessageDeduplicationId", a.String(), errAnswer(400, "InvalidParameterValue", textNoDedup))
			a = r.call("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "test", "MessageDeduplicationId": "d"})
			r.expect("send without MessageGroupId", a.String(), errAnswer(400, "MissingParameter", textNeedGroup))
		}},
	{test: "test_send_batch_missing_deduplication_id_for_fifo_queue[sqs]", file: "test_sqs", date: "2024-04-30",
		before: "fixed: sqstest answered 200 and failed the one entry",
		fauxqs: map[string]string{"batch with an entry lacking MessageDeduplicationId": "answers 200 and fails the entry alone"},
		run: func(r *replay) {
			q := r.queue("nodedup.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false"})
			a := r.call("SendMessageBatch", map[string]any{"QueueUrl": q, "Entries": []any{
				map[string]any{"Id": "message-1", "MessageBody": "messageBody", "MessageGroupId": "test-group", "MessageDeduplicationId": "dedup-1"},
				map[string]any{"Id": "message-2", "MessageBody": "messageBody", "MessageGroupId": "test-group"},
			}})
			r.expect("batch with an entry lacking MessageDeduplicationId", a.String(), errAnswer(400, "InvalidParameterValue", textNoDedup))
		}},
	{test: "test_send_batch_missing_message_group_id_for_fifo_queue[sqs]", file: "test_sqs", date: "2024-04-30",
		before: "fixed: sqstest answered 200 and failed the one entry",
		fauxqs: map[string]string{"batch with an entry lacking MessageGroupId": "answers 200 and fails the entry alone"},
		run: func(r *replay) {
			q := r.queue("nogroup.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false"})
			a := r.call("SendMessageBatch", map[string]any{"QueueUrl": q, "Entries": []any{
				map[string]any{"Id": "message-1", "MessageBody": "messageBody", "MessageGroupId": "test-group", "MessageDeduplicationId": "dedup-1"},
				map[string]any{"Id": "message-2", "MessageBody": "messageBody", "MessageDeduplicationId": "dedup-2"},
			}})
			r.expect("batch with an entry lacking MessageGroupId", a.String(), errAnswer(400, "InvalidParameterValue", textNeedGroup))
		}},

	// Capitalised booleans.
	{test: "test_fifo_delete_after_visibility_timeout[sqs]", file: "test_sqs", date: "2025-03-28",
		before: `fixed: sqstest refused FifoQueue "True" (then the .fifo name)`,
		fauxqs: map[string]string{"send without a deduplication id (content-based deduplication is on)": `takes ContentBasedDeduplication "True" for false and refuses the send`},
		run: func(r *replay) {
			a := r.call("CreateQueue", map[string]any{"QueueName": r.prefix + "-caps.fifo",
				"Attributes": map[string]string{"VisibilityTimeout": "1", "FifoQueue": "True", "ContentBasedDeduplication": "True"}})
			r.expect(`CreateQueue with "True" booleans`, a.String(), "200")
			if a.status != http.StatusOK {
				return
			}
			q := str(a.body["QueueUrl"])
			a = r.call("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "foobar", "MessageGroupId": "1"})
			r.expect("send without a deduplication id (content-based deduplication is on)", a.String(), "200")
			if a.status != http.StatusOK {
				return
			}
			ms := r.receive(q, map[string]any{"WaitTimeSeconds": 5})
			r.expect("receive", fmt.Sprint(len(ms)), "1")
			if len(ms) != 1 {
				return
			}
			h := str(ms[0]["ReceiptHandle"])
			r.expect("MD5OfBody", str(ms[0]["MD5OfBody"]), "3858f62230ac3c915f300c664312c63f")
			r.sleep(time.Second)
			del := r.call("DeleteMessage", map[string]any{"QueueUrl": q, "ReceiptHandle": h})
			r.expect("delete after the lease lapsed", del.String(), errAnswer(400, "InvalidParameterValue",
				"Value "+h+" for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."))
		}},
	{test: "test_sqs_fifo_same_dedup_id_different_message_groups[sqs]", file: "test_sqs", date: "2024-04-30",
		before: `fixed: sqstest refused FifoQueue "True"`,
		run: func(r *replay) {
			a := r.call("CreateQueue", map[string]any{"QueueName": r.prefix + "-dedup.fifo",
				"Attributes": map[string]string{"FifoQueue": "True", "ContentBasedDeduplication": "False"}})
			r.expect(`CreateQueue with "True"/"False"`, a.String(), "200")
			if a.status != http.StatusOK {
				return
			}
			q := str(a.body["QueueUrl"])
			r.must("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "Test", "MessageGroupId": "group1", "MessageDeduplicationId": "same-dedup"})
			ms := r.receive(q, nil)
			r.expect("first group receives", fmt.Sprint(len(ms)), "1")
			if len(ms) == 1 {
				r.must("DeleteMessage", map[string]any{"QueueUrl": q, "ReceiptHandle": ms[0]["ReceiptHandle"]})
			}
			r.must("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "Test", "MessageGroupId": "group2", "MessageDeduplicationId": "same-dedup"})
			r.expect("same dedup id in another group: deduplicated", fmt.Sprint(len(r.receive(q, nil))), "0")
		}},

	// FifoQueue and the FIFO-only attributes.
	{test: "test_set_unsupported_attribute_fifo[sqs]", file: "test_sqs", date: "2024-05-14",
		before: "fixed: sqstest refused FifoQueue=true on a FIFO queue",
		fauxqs: map[string]string{
			"set FifoQueue=true on a standard queue": "accepts it",
			"set FifoQueue=false on a FIFO queue":    "accepts it",
		},
		run: func(r *replay) {
			std := r.queue("std", nil)
			a := r.call("SetQueueAttributes", map[string]any{"QueueUrl": std, "Attributes": map[string]string{"FifoQueue": "true"}})
			r.expect("set FifoQueue=true on a standard queue", a.String(), errAnswer(400, "InvalidAttributeName", textUnknownFifo))
			fifo := r.queue("fifo.fifo", map[string]string{"FifoQueue": "true"})
			a = r.call("SetQueueAttributes", map[string]any{"QueueUrl": fifo, "Attributes": map[string]string{"FifoQueue": "true"}})
			r.expect("set FifoQueue=true on a FIFO queue", a.String(), "200")
			a = r.call("SetQueueAttributes", map[string]any{"QueueUrl": fifo, "Attributes": map[string]string{"FifoQueue": "false"}})
			r.expect("set FifoQueue=false on a FIFO queue", a.String(), errAnswer(400, "InvalidAttributeValue",
				"Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported."))
		}},
	{test: "test_set_unsupported_attribute_standard[sqs]", file: "test_sqs", date: "2024-05-14", before: "match",
		fauxqs: map[string]string{
			"set FifoQueue=true":  "accepts it",
			"set FifoQueue=false": "accepts it",
		},
		run: func(r *replay) {
			std := r.queue("std", nil)
			for _, v := range []string{"true", "false"} {
				a := r.call("SetQueueAttributes", map[string]any{"QueueUrl": std, "Attributes": map[string]string{"FifoQueue": v}})
				r.expect("set FifoQueue="+v, a.String(), errAnswer(400, "InvalidAttributeName", textUnknownFifo))
			}
		}},
	{test: "test_create_standard_queue_with_fifo_attribute_raises_error[sqs]", file: "test_sqs", date: "2024-05-15",
		before: `fixed: sqstest created the queue with FifoQueue=false and answered "Unknown Attribute FifoThroughputLimit."`,
		fauxqs: map[string]string{
			"FifoQueue=false":           "creates the queue",
			"ContentBasedDeduplication": "creates the queue",
			"DeduplicationScope":        "creates the queue",
			"FifoThroughputLimit":       "creates the queue",
		},
		run: func(r *replay) {
			for _, c := range []struct{ attr, val, msg string }{
				{"FifoQueue", "false", textUnknownFifo},
				{"ContentBasedDeduplication", "false", "Unknown Attribute ContentBasedDeduplication."},
				{"DeduplicationScope", "queue", "You can specify the DeduplicationScope only when FifoQueue is set to true."},
				{"FifoThroughputLimit", "perQueue", "You can specify the FifoThroughputLimit only when FifoQueue is set to true."},
			} {
				step := c.attr
				if c.attr == "FifoQueue" {
					step = "FifoQueue=false"
				}
				a := r.call("CreateQueue", map[string]any{"QueueName": r.prefix + "-" + strings.ToLower(c.attr), "Attributes": map[string]string{c.attr: c.val}})
				r.expect(step, a.String(), errAnswer(400, "InvalidAttributeName", c.msg))
			}
		}},

	// Trace header.
	{test: "test_aws_trace_header_propagation[sqs]", file: "test_sqs", date: "2025-06-27",
		before: "fixed: sqstest ignored the X-Amzn-Trace-Id header",
		fauxqs: map[string]string{
			"attributes returned":                 "ignores the X-Amzn-Trace-Id header: no AWSTraceHeader",
			"AWSTraceHeader from the HTTP header": "ignores the X-Amzn-Trace-Id header",
		},
		run: func(r *replay) {
			const trace = "Root=1-3152b799-8954dae64eda91bc9a23a7e8;Parent=7fa8c0f79203be72;Sampled=1"
			q := r.queue("trace", nil)
			r.must("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "test",
				"MessageAttributes": map[string]any{"timestamp": map[string]any{"StringValue": "1493147359900", "DataType": "Number"}}},
				"X-Amzn-Trace-Id", trace)
			ms := r.receive(q, map[string]any{"AttributeNames": []string{"SentTimestamp", "AWSTraceHeader"}, "MaxNumberOfMessages": 1,
				"MessageAttributeNames": []string{"All"}, "VisibilityTimeout": 2, "WaitTimeSeconds": 2})
			r.expect("receive", fmt.Sprint(len(ms)), "1")
			if len(ms) == 1 {
				attrs, _ := ms[0]["Attributes"].(map[string]any)
				r.expect("attributes returned", keys(attrs), "AWSTraceHeader,SentTimestamp")
				r.expect("AWSTraceHeader from the HTTP header", str(attrs["AWSTraceHeader"]), trace)
				r.expect("MD5OfMessageAttributes", str(ms[0]["MD5OfMessageAttributes"]), "235c5c510d26fb653d073faed50ae77c")
			}
		}},

	// Encryption attributes.
	{test: "test_sse_queue_attributes[sqs]", file: "test_sqs", date: "2024-04-30",
		before: "match (the call sets SqsManagedSseEnabled=false itself)",
		run: func(r *replay) {
			names := []string{"KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled"}
			kms := r.queue("kms", nil)
			r.must("SetQueueAttributes", map[string]any{"QueueUrl": kms, "Attributes": map[string]string{
				"KmsMasterKeyId": "testKeyId", "KmsDataKeyReusePeriodSeconds": "6000", "SqsManagedSseEnabled": "false"}})
			a := attrsOf(r.must("GetQueueAttributes", map[string]any{"QueueUrl": kms, "AttributeNames": names}))
			r.expect("KMS attributes", fmt.Sprintf("%s %s %s", str(a["KmsMasterKeyId"]), str(a["KmsDataKeyReusePeriodSeconds"]), str(a["SqsManagedSseEnabled"])), "testKeyId 6000 false")
			sse := r.queue("sse", nil)
			r.must("SetQueueAttributes", map[string]any{"QueueUrl": sse, "Attributes": map[string]string{"SqsManagedSseEnabled": "true"}})
			a = attrsOf(r.must("GetQueueAttributes", map[string]any{"QueueUrl": sse, "AttributeNames": names}))
			r.expect("SQS-managed only", keys(a)+" "+str(a["SqsManagedSseEnabled"]), "SqsManagedSseEnabled true")
		}},
	{test: "test_sse_kms_and_sqs_are_mutually_exclusive[sqs]", file: "test_sqs", date: "2024-04-30",
		before: "fixed: sqstest accepted both",
		fauxqs: map[string]string{"KMS and SQS-managed together": "accepts both"},
		run: func(r *replay) {
			q := r.queue("both", nil)
			a := r.call("SetQueueAttributes", map[string]any{"QueueUrl": q, "Attributes": map[string]string{"KmsMasterKeyId": "testKeyId", "SqsManagedSseEnabled": "true"}})
			r.expect("KMS and SQS-managed together", a.String(), errAnswer(400, "InvalidAttributeName",
				"You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE."))
		}},
	{test: "test_set_queue_attributes_default_values[sqs]", file: "test_sqs", date: "2025-12-10",
		before: `fixed: sqstest kept SqsManagedSseEnabled "true", and listed KmsMasterKeyId "" and KmsDataKeyReusePeriodSeconds "300" after the reset`,
		fauxqs: map[string]string{
			"after setting a KMS key": "keeps SqsManagedSseEnabled true",
			"after the reset":         `lists KmsMasterKeyId "" and KmsDataKeyReusePeriodSeconds 300, SqsManagedSseEnabled true`,
		},
		run: func(r *replay) {
			q := r.queue("defaults", nil)
			all := func() map[string]any {
				return attrsOf(r.must("GetQueueAttributes", map[string]any{"QueueUrl": q, "AttributeNames": []string{"All"}}))
			}
			r.expect("initial attributes", keys(all()), "ApproximateNumberOfMessages,ApproximateNumberOfMessagesDelayed,ApproximateNumberOfMessagesNotVisible,"+
				"CreatedTimestamp,DelaySeconds,LastModifiedTimestamp,MaximumMessageSize,MessageRetentionPeriod,QueueArn,ReceiveMessageWaitTimeSeconds,SqsManagedSseEnabled,VisibilityTimeout")
			r.must("SetQueueAttributes", map[string]any{"QueueUrl": q, "Attributes": map[string]string{"KmsMasterKeyId": "testKeyId", "KmsDataKeyReusePeriodSeconds": "6000"}})
			a := all()
			r.expect("after setting a KMS key", fmt.Sprintf("%s %s %s", str(a["KmsMasterKeyId"]), str(a["KmsDataKeyReusePeriodSeconds"]), str(a["SqsManagedSseEnabled"])), "testKeyId 6000 false")
			r.must("SetQueueAttributes", map[string]any{"QueueUrl": q, "Attributes": map[string]string{"KmsMasterKeyId": "", "KmsDataKeyReusePeriodSeconds": "300"}})
			a = all()
			r.expect("after the reset", fmt.Sprintf("key %s, period %s, SqsManagedSseEnabled %s", has(a, "KmsMasterKeyId"), has(a, "KmsDataKeyReusePeriodSeconds"), str(a["SqsManagedSseEnabled"])),
				"key absent, period absent, SqsManagedSseEnabled false")
		}},

	// Queue names and redrive policies.
	{test: "test_set_empty_redrive_policy[sqs]", file: "test_sqs", date: "2024-08-20",
		before: "fixed: sqstest answered NonExistentQueue to a bare queue name and refused a RedrivePolicy naming the queue itself",
		run: func(r *replay) {
			q := r.queue("dl-queue", nil)
			name := r.prefix + "-dl-queue"
			arn := r.arn(q)
			a := r.call("SetQueueAttributes", map[string]any{"QueueUrl": name, "Attributes": map[string]string{"RedrivePolicy": ""}})
			r.expect("SetQueueAttributes by queue name", a.String(), "200")
			a = r.call("GetQueueAttributes", map[string]any{"QueueUrl": name, "AttributeNames": []string{"All"}})
			r.expect("GetQueueAttributes by queue name", a.String(), "200")
			r.expect("no RedrivePolicy", has(attrsOf(a), "RedrivePolicy"), "absent")
			a = r.call("SetQueueAttributes", map[string]any{"QueueUrl": q, "Attributes": map[string]string{
				"RedrivePolicy": `{"deadLetterTargetArn": "` + arn + `", "maxReceiveCount": "42"}`}})
			r.expect("RedrivePolicy naming the queue itself", a.String(), "200")
			got := attrsOf(r.must("GetQueueAttributes", map[string]any{"QueueUrl": q, "AttributeNames": []string{"All"}}))
			r.expect("RedrivePolicy reads back with the ARN", yesNo(strings.Contains(str(got["RedrivePolicy"]), arn)), "yes")
			r.must("SetQueueAttributes", map[string]any{"QueueUrl": q, "Attributes": map[string]string{"RedrivePolicy": ""}})
			got = attrsOf(r.must("GetQueueAttributes", map[string]any{"QueueUrl": q, "AttributeNames": []string{"All"}}))
			r.expect(`RedrivePolicy "" removes it`, has(got, "RedrivePolicy"), "absent")
		}},
	{test: "test_dead_letter_queue_with_fifo_and_content_based_deduplication[sqs]", file: "test_sqs", date: "2024-05-21", before: "match",
		run: func(r *replay) {
			dlq := r.queue("dlq.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "MessageRetentionPeriod": "1209600"})
			q := r.queue("src.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "60",
				"RedrivePolicy": `{"deadLetterTargetArn": "` + r.arn(dlq) + `", "maxReceiveCount": 2}`})
			id := str(r.must("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "foobar", "MessageGroupId": "1"}).body["MessageId"])
			for range 3 {
				r.receive(q, map[string]any{"WaitTimeSeconds": 1, "VisibilityTimeout": 0})
			}
			moved := r.receive(dlq, map[string]any{"WaitTimeSeconds": 10})
			r.expect("the DLQ has the message, same MessageId", fmt.Sprintf("%d %s", len(moved), yesNo(len(moved) == 1 && str(moved[0]["MessageId"]) == id)), "1 yes")
			id2 := str(r.must("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "foobar2", "MessageGroupId": "1"}).body["MessageId"])
			next := r.receive(q, map[string]any{"WaitTimeSeconds": 1})
			r.expect("the group flows on in the source", yesNo(len(next) == 1 && str(next[0]["MessageId"]) == id2), "yes")
		}},

	// Batches.
	{test: "test_send_message_batch_with_oversized_contents_with_updated_maximum_message_size[sqs]", file: "test_sqs", date: "2024-04-30",
		before: `partial: sqstest answered "Failed": []`,
		fauxqs: map[string]string{"answer members": `sends "Failed": []`},
		run: func(r *replay) {
			q := r.queue("size", nil)
			r.must("SetQueueAttributes", map[string]any{"QueueUrl": q, "Attributes": map[string]string{"MaximumMessageSize": "2048"}})
			a := r.call("SendMessageBatch", map[string]any{"QueueUrl": q, "Entries": []any{
				map[string]any{"Id": "1", "MessageBody": strings.Repeat("a", 2048-len("k")-len("String")-len("x")),
					"MessageAttributes": map[string]any{"k": map[string]any{"DataType": "String", "StringValue": "x"}}},
				map[string]any{"Id": "2", "MessageBody": "a"},
			}})
			r.expect("SendMessageBatch", a.String(), "200")
			r.expect("answer members", keys(a.body), "Successful")
			ok, _ := a.body["Successful"].([]any)
			var md5s []string
			for _, e := range ok {
				m, _ := e.(map[string]any)
				md5s = append(md5s, str(m["Id"])+":"+str(m["MD5OfMessageBody"])+"/"+str(m["MD5OfMessageAttributes"]))
			}
			r.expect("entries' MD5s", strings.Join(md5s, " "), "1:f44facf5a7ee0af446ecf3e0f854441e/a45daa70926828a2f0a1db3418e6feb4 2:0cc175b9c0f1b6a831c399e269772661/")
		}},
	{test: "test_send_batch_message_size", file: "test_sqs", date: "2024-04-30", before: "match",
		fauxqs: map[string]string{"the oversized entry fails alone": `words it as for a single send: "One or more parameters are invalid. …"`},
		run: func(r *replay) {
			q := r.queue("small", map[string]string{"MaximumMessageSize": "1024"})
			a := r.must("SendMessageBatch", map[string]any{"QueueUrl": q, "Entries": []any{
				map[string]any{"Id": "a4cff0d1-1961-44bd-ae53-c6d5ed71ed08", "MessageBody": strings.Repeat("a", 1024)},
				map[string]any{"Id": "35b535ed-b76a-4ebd-b749-6eb35cdb55ee", "MessageBody": strings.Repeat("a", 1025)},
			}})
			failed, _ := a.body["Failed"].([]any)
			var got []string
			for _, e := range failed {
				m, _ := e.(map[string]any)
				got = append(got, fmt.Sprintf("%s %s sender=%s: %s", str(m["Id"]), str(m["Code"]), str(m["SenderFault"]), str(m["Message"])))
			}
			r.expect("the oversized entry fails alone", strings.Join(got, "; "), "35b535ed-b76a-4ebd-b749-6eb35cdb55ee InvalidParameterValue sender=true: "+
				"One or more parameters cannot be validated. Reason: Message must be shorter than 1024 bytes.")
			r.expect("successful entries", fmt.Sprint(len(a.body["Successful"].([]any))), "1")
		}},
	{test: "test_too_many_entries_in_batch_request[sqs]", file: "test_sqs", date: "2024-04-30", before: "match",
		fauxqs: map[string]string{"20 entries": `words it "Maximum number of entries per request are 10." without the count`},
		run: func(r *replay) {
			q := r.queue("many", nil)
			var entries []any
			for i := range 20 {
				entries = append(entries, map[string]any{"Id": fmt.Sprintf("message-%d", i), "MessageBody": fmt.Sprintf("messageBody-%d", i)})
			}
			a := r.call("SendMessageBatch", map[string]any{"QueueUrl": q, "Entries": entries})
			r.expect("20 entries", a.String(), errAnswer(400, "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "Maximum number of entries per request are 10. You have sent 20."))
		}},
	{test: "test_invalid_batch_id[sqs]", file: "test_sqs", date: "2024-04-30", before: "match",
		run: func(r *replay) {
			q := r.queue("badid", nil)
			a := r.call("SendMessageBatch", map[string]any{"QueueUrl": q, "Entries": []any{map[string]any{"Id": "message:abc", "MessageBody": "messageBody-abc"}}})
			r.expect("Id with a colon", a.String(), errAnswer(400, "AWS.SimpleQueueService.InvalidBatchEntryId",
				"A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long."))
		}},

	// Messages.
	{test: "test_fair_queue_with_message_group_id[sqs]", file: "test_sqs", date: "2025-08-18",
		before: "match (the UNCONFIRMED label on it is gone)",
		fauxqs: map[string]string{
			"system attributes": "does not return MessageGroupId on a standard queue",
			"MessageGroupId":    "does not return MessageGroupId on a standard queue",
		},
		run: func(r *replay) {
			q := r.queue("fair", nil)
			a := r.must("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "message", "MessageGroupId": "test"})
			r.expect("send answer", keys(a.body)+" "+str(a.body["MD5OfMessageBody"]), "MD5OfMessageBody,MessageId 78e731027d8fd50ed642340b7c9a63b3")
			ms := r.receive(q, map[string]any{"WaitTimeSeconds": 5, "AttributeNames": []string{"All"}})
			r.expect("receive", fmt.Sprint(len(ms)), "1")
			if len(ms) == 1 {
				attrs, _ := ms[0]["Attributes"].(map[string]any)
				r.expect("system attributes", keys(attrs), "ApproximateFirstReceiveTimestamp,ApproximateReceiveCount,MessageGroupId,SenderId,SentTimestamp")
				r.expect("MessageGroupId", str(attrs["MessageGroupId"]), "test")
			}
		}},
	{test: "test_send_empty_message[sqs]", file: "test_sqs", date: "2025-09-22", before: "match",
		run: func(r *replay) {
			q := r.queue("empty", nil)
			a := r.call("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": ""})
			r.expect("empty body", a.String(), errAnswer(400, "MissingParameter", "The request must contain the parameter MessageBody."))
		}},
	{test: "test_receive_empty_queue[sqs]", file: "test_sqs", date: "2025-02-10", before: "match",
		run: func(r *replay) {
			q := r.queue("nothing", nil)
			a := r.must("ReceiveMessage", map[string]any{"QueueUrl": q, "MaxNumberOfMessages": 1})
			r.expect("short poll: answer members", keys(a.body), "")
			a = r.must("ReceiveMessage", map[string]any{"QueueUrl": q, "MaxNumberOfMessages": 1, "WaitTimeSeconds": 1})
			r.expect("long poll: answer members", keys(a.body), "")
		}},
	{test: "test_delete_after_visibility_timeout[sqs]", file: "test_sqs", date: "2025-03-28", before: "match",
		run: func(r *replay) {
			q := r.queue("lapsed", map[string]string{"VisibilityTimeout": "1"})
			r.must("SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "foobar"})
			ms := r.receive(q, map[string]any{"WaitTimeSeconds": 5})
			if len(ms) != 1 {
				r.t.Fatalf("%s: got %d messages", r.impl, len(ms))
			}
			r.sleep(time.Second)
			a := r.call("DeleteMessage", map[string]any{"QueueUrl": q, "ReceiptHandle": ms[0]["ReceiptHandle"]})
			r.expect("delete after the lease lapsed", a.String(), "200")
			r.expect("the message is gone", keys(r.must("ReceiveMessage", map[string]any{"QueueUrl": q}).body), "")
		}},

	// Queues.
	{test: "test_successive_purge_calls_fail[sqs]", file: "test_sqs", date: "2024-04-30", before: "match",
		fauxqs: map[string]string{"second purge": "allows it"},
		run: func(r *replay) {
			q := r.queue("purge", nil)
			r.must("PurgeQueue", map[string]any{"QueueUrl": q})
			a := r.call("PurgeQueue", map[string]any{"QueueUrl": q})
			r.expect("second purge", a.String(), errAnswer(403, "AWS.SimpleQueueService.PurgeQueueInProgress",
				"Only one PurgeQueue operation on "+r.prefix+"-purge is allowed every 60 seconds."))
		}},
	{test: "test_non_existent_queue", file: "test_sqs", date: "2024-04-30", before: "match",
		run: func(r *replay) {
			q := r.queue("gone", nil)
			r.must("DeleteQueue", map[string]any{"QueueUrl": q})
			a := r.call("GetQueueAttributes", map[string]any{"QueueUrl": q})
			r.expect("GetQueueAttributes of a deleted queue", a.String(), errAnswer(400, "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist."))
			a = r.call("GetQueueUrl", map[string]any{"QueueName": r.prefix + "-gone"})
			r.expect("GetQueueUrl of a deleted queue", a.String(), errAnswer(400, "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist."))
		}},

	// Message move tasks (test_sqs_move_task.*): none existed in sqstest before.
	{test: "test_cancel_with_invalid_task_handle", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			a := r.call("CancelMessageMoveTask", map[string]any{"TaskHandle": "foobared"})
			r.expect("cancel with a handle that is no handle", a.String(), errAnswer(400, "InvalidParameterValue", "Value for parameter TaskHandle is invalid."))
		}},
	{test: "test_cancel_with_invalid_source_arn_in_task_handle", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			h := taskHandleFor("10f57157-fc38-4da9-a113-4de7e12d05dd", "arn:aws:sqs:us-east-1:878966065785:test-queue-doesnt-exist-123456")
			a := r.call("CancelMessageMoveTask", map[string]any{"TaskHandle": h})
			r.expect("cancel naming a missing source", a.String(), errAnswer(404, "ResourceNotFoundException", textSourceMissing))
		}},
	{test: "test_cancel_with_invalid_task_id_in_task_handle", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			q := r.queue("source", nil)
			a := r.call("CancelMessageMoveTask", map[string]any{"TaskHandle": taskHandleFor("10f57157-fc38-4da9-a113-4de7e12d05aa", r.arn(q))})
			r.expect("cancel naming no task", a.String(), errAnswer(404, "ResourceNotFoundException", "Task does not exist."))
		}},
	{test: "test_source_needs_redrive_policy", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			src, dest := r.queue("source", nil), r.queue("destination", nil)
			a := r.call("StartMessageMoveTask", map[string]any{"SourceArn": r.arn(src), "DestinationArn": r.arn(dest)})
			r.expect("start from a queue that is no DLQ", a.String(), errAnswer(400, "InvalidParameterValue", "Source queue must be configured as a Dead Letter Queue."))
		}},
	{test: "test_destination_needs_to_exist", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			_, _, _, dlqARN, destARN := dlqPipe(r)
			a := r.call("StartMessageMoveTask", map[string]any{"SourceArn": dlqARN, "DestinationArn": destARN + "doesntexist"})
			r.expect("start to a missing destination", a.String(), errAnswer(404, "ResourceNotFoundException",
				"The resource that you specified for the DestinationArn parameter doesn't exist."))
		}},
	{test: "test_basic_move_task_workflow", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			src, dlq, dest, dlqARN, destARN := dlqPipe(r)
			deadLetter(r, src, "message-1", "message-2")
			a := r.call("StartMessageMoveTask", map[string]any{"SourceArn": dlqARN, "DestinationArn": destARN})
			r.expect("start", a.String()+" "+keys(a.body), "200 TaskHandle")
			raw, _ := base64.StdEncoding.DecodeString(str(a.body["TaskHandle"]))
			var h struct{ TaskID, SourceArn string }
			_ = json.Unmarshal(raw, &h)
			r.expect("the handle is base64 JSON of a UUID and the source ARN", fmt.Sprintf("%d %s", len(h.TaskID), yesNo(h.SourceArn == dlqARN)), "36 yes")
			r.expect("messages in the destination", strings.Join(r.collect(dest, 2), ","), "message-1,message-2")
			e := waitTask(r, dlqARN, func(e map[string]any) bool { return str(e["ApproximateNumberOfMessagesMoved"]) == "2" })
			r.expect("task entry", keys(e), "ApproximateNumberOfMessagesMoved,ApproximateNumberOfMessagesToMove,DestinationArn,SourceArn,StartedTimestamp,Status")
			r.expect("task values", fmt.Sprintf("%s moved=%s toMove=%s dest=%s", str(e["Status"]), str(e["ApproximateNumberOfMessagesMoved"]),
				str(e["ApproximateNumberOfMessagesToMove"]), yesNo(str(e["DestinationArn"]) == destARN)), "COMPLETED moved=2 toMove=2 dest=yes")
			r.expect("the DLQ is empty", keys(r.must("ReceiveMessage", map[string]any{"QueueUrl": dlq, "WaitTimeSeconds": 1}).body), "")
		}},
	{test: "test_move_task_workflow_with_default_destination", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			src, dlq, _, dlqARN, _ := dlqPipe(r)
			deadLetter(r, src, "message-1", "message-2")
			r.must("StartMessageMoveTask", map[string]any{"SourceArn": dlqARN})
			r.expect("messages back in the source", strings.Join(r.collect(src, 2), ","), "message-1,message-2")
			e := waitTask(r, dlqARN, func(e map[string]any) bool { return str(e["ApproximateNumberOfMessagesMoved"]) == "2" })
			r.expect("task entry", keys(e), "ApproximateNumberOfMessagesMoved,ApproximateNumberOfMessagesToMove,SourceArn,StartedTimestamp,Status")
			r.expect("task values", fmt.Sprintf("%s %s/%s", str(e["Status"]), str(e["ApproximateNumberOfMessagesMoved"]), str(e["ApproximateNumberOfMessagesToMove"])), "COMPLETED 2/2")
			r.expect("the DLQ is empty", keys(r.must("ReceiveMessage", map[string]any{"QueueUrl": dlq, "WaitTimeSeconds": 1}).body), "")
		}},
	{test: "test_move_task_workflow_with_multiple_sources_as_default_destination", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			src1, _, _, dlqARN, _ := dlqPipe(r)
			src2 := r.queue("src2", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + dlqARN + `","maxReceiveCount":1}`})
			deadLetter(r, src1, "message-1-1", "message-1-2")
			deadLetter(r, src2, "message-2-1", "message-2-2")
			r.must("StartMessageMoveTask", map[string]any{"SourceArn": dlqARN})
			r.expect("first source", strings.Join(r.collect(src1, 2), ","), "message-1-1,message-1-2")
			r.expect("second source", strings.Join(r.collect(src2, 2), ","), "message-2-1,message-2-2")
			e := waitTask(r, dlqARN, func(e map[string]any) bool { return str(e["ApproximateNumberOfMessagesMoved"]) == "4" })
			r.expect("task values", fmt.Sprintf("%s %s/%s", str(e["Status"]), str(e["ApproximateNumberOfMessagesMoved"]), str(e["ApproximateNumberOfMessagesToMove"])), "COMPLETED 4/4")
		}},
	{test: "test_move_task_with_throughput_limit", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			src, _, dest, dlqARN, destARN := dlqPipe(r)
			deadLetter(r, src, numbered(4)...)
			a := r.call("StartMessageMoveTask", map[string]any{"SourceArn": dlqARN, "DestinationArn": destARN, "MaxNumberOfMessagesPerSecond": 1})
			r.expect("start at one message per second", a.String(), "200")
			started := time.Now()
			r.expect("all four arrive", strings.Join(r.collect(dest, 4), ","), "message-0,message-1,message-2,message-3")
			r.expect("it took at least 3 s", yesNo(time.Since(started) >= 3*time.Second), "yes")
		}},
	{test: "test_move_task_cancel", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			src, dlq, dest, dlqARN, destARN := dlqPipe(r)
			deadLetter(r, src, numbered(10)...)
			h := str(r.must("StartMessageMoveTask", map[string]any{"SourceArn": dlqARN, "DestinationArn": destARN, "MaxNumberOfMessagesPerSecond": 1}).body["TaskHandle"])
			r.expect("two arrive", fmt.Sprint(len(r.collect(dest, 2))), "2")
			e := listTask(r, dlqARN)
			r.expect("while running", fmt.Sprintf("%s %s rate=%s toMove=%s handle=%s", keys(e), str(e["Status"]), str(e["MaxNumberOfMessagesPerSecond"]),
				str(e["ApproximateNumberOfMessagesToMove"]), yesNo(str(e["TaskHandle"]) == h)),
				"ApproximateNumberOfMessagesMoved,ApproximateNumberOfMessagesToMove,DestinationArn,MaxNumberOfMessagesPerSecond,SourceArn,StartedTimestamp,Status,TaskHandle RUNNING rate=1 toMove=10 handle=yes")
			c := r.must("CancelMessageMoveTask", map[string]any{"TaskHandle": h})
			r.expect("cancel answer", keys(c.body), "ApproximateNumberOfMessagesMoved")
			e = waitTask(r, dlqARN, func(e map[string]any) bool { return str(e["Status"]) == "CANCELLED" })
			r.expect("after cancelling", fmt.Sprintf("%s %s", keys(e), str(e["Status"])),
				"ApproximateNumberOfMessagesMoved,ApproximateNumberOfMessagesToMove,DestinationArn,MaxNumberOfMessagesPerSecond,SourceArn,StartedTimestamp,Status CANCELLED")
			r.expect("messages are left in the DLQ", yesNo(len(r.receive(dlq, nil)) > 0), "yes")
		}},
	{test: "test_move_task_delete_destination_queue_while_running", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			src, dlq, dest, dlqARN, destARN := dlqPipe(r)
			deadLetter(r, src, numbered(10)...)
			r.must("StartMessageMoveTask", map[string]any{"SourceArn": dlqARN, "DestinationArn": destARN, "MaxNumberOfMessagesPerSecond": 1})
			r.must("DeleteQueue", map[string]any{"QueueUrl": dest})
			e := waitTask(r, dlqARN, func(e map[string]any) bool { return str(e["Status"]) != "RUNNING" })
			r.expect("the task fails", fmt.Sprintf("%s %s %s", keys(e), str(e["Status"]), str(e["FailureReason"])),
				"ApproximateNumberOfMessagesMoved,ApproximateNumberOfMessagesToMove,DestinationArn,FailureReason,MaxNumberOfMessagesPerSecond,SourceArn,StartedTimestamp,Status FAILED AWS.SimpleQueueService.NonExistentQueue")
			r.expect("messages are left in the DLQ", yesNo(len(r.receive(dlq, nil)) > 0), "yes")
		}},
	{test: "test_start_multiple_move_tasks", file: "test_sqs_move_task", date: "2024-04-30", before: "unsupported", fauxqsSkip: notInFauxqs,
		run: func(r *replay) {
			src, _, _, dlqARN, destARN := dlqPipe(r)
			deadLetter(r, src, numbered(10)...)
			in := map[string]any{"SourceArn": dlqARN, "DestinationArn": destARN, "MaxNumberOfMessagesPerSecond": 1}
			r.must("StartMessageMoveTask", in)
			a := r.call("StartMessageMoveTask", in)
			r.expect("a second task on the same source", a.String(), errAnswer(400, "InvalidParameterValue", textOneTask))
		}},
}

// TestRecordingsTable keeps the table well formed: every case names its test once
// and says what sqstest answered before.
func TestRecordingsTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, rc := range recordings {
		if seen[rc.test] {
			t.Errorf("%s twice", rc.test)
		}
		seen[rc.test] = true
		if rc.file != "test_sqs" && rc.file != "test_sqs_move_task" {
			t.Errorf("%s: file %q", rc.test, rc.file)
		}
		if rc.before == "" || rc.date == "" || rc.run == nil {
			t.Errorf("%s: incomplete", rc.test)
		}
	}
}
