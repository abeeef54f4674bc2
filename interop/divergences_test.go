package interop

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// A divergence is a step where fauxqs answers differently from sqstest
// because fauxqs departs from what AWS answers. The suite
// logs these instead of failing; any other difference fails.
type divergence struct {
	test   string   // top-level test name
	steps  []string // the steps as recorded by the scenario; later steps may only follow from the first
	fauxqs string   // what fauxqs does
	aws    string   // what AWS does, and so sqstest
	fact   string   // the evidence for AWS's answer, in the terms of expectation.fact
}

func (d divergence) summary() string {
	return fmt.Sprintf("fauxqs %s; AWS %s (source: %s)", d.fauxqs, d.aws, d.fact)
}

// A wireDivergence is a difference of encoding that shows at every step an
// error passes through; normalize maps fauxqs's rendering onto AWS's.
type wireDivergence struct {
	name              string
	fauxqs, aws, fact string
	normalize         func(got string) string
}

// wireDivergences: fauxqs 2.4.1 sends the x-amzn-query-error code of
// errors that AWS sends unprefixed (the awsQueryError codes of the SQS
// model; InvalidParameterValue as recorded from AWS) with an
// "AWS.SimpleQueueService." prefix, so the Go SDK's ErrorCode() differs.
var wireDivergences = []wireDivergence{{
	name:   "AWS.SimpleQueueService. prefix on unprefixed query codes",
	fauxqs: `sends x-amzn-query-error "AWS.SimpleQueueService.InvalidParameterValue" (likewise MissingParameter, InvalidMessageContents), so ErrorCode() carries the prefix`,
	aws:    `sends "InvalidParameterValue;Sender" / "MissingParameter;Sender" (InvalidMessageContents has no modeled query code)`,
	fact:   "recorded: boto3 reports Code=InvalidParameterValue; model query codes",
	normalize: func(got string) string {
		for _, code := range []string{"InvalidParameterValue", "MissingParameter", "InvalidMessageContents"} {
			got = strings.Replace(got, " AWS.SimpleQueueService."+code, " "+code, 1)
		}
		return got
	},
}}

// divergences lists what fauxqs 2.4.1 (interop/fauxqs/package.json) does
// differently from AWS, found by running this suite. Each entry names the
// test and its steps; the first step is the divergence, any later ones are
// its consequences in the same scenario.
var divergences = []divergence{
	// Receipt handles.
	{test: "TestStaleHandles", steps: []string{"(a) DeleteMessage, never-issued handle", "(a) DeleteMessage, never-issued handle: message"},
		fauxqs: "answers 200 to DeleteMessage with a never-issued handle", aws: "ReceiptHandleIsInvalid", fact: "never-issued handle (recorded)"},
	{test: "TestFIFOStaleHandles", steps: []string{"never-issued handle: DeleteMessage"},
		fauxqs: "answers 200 to DeleteMessage with a never-issued handle (FIFO)", aws: "ReceiptHandleIsInvalid", fact: "never-issued handle (recorded)"},
	{test: "TestBatchCalls", steps: []string{"DeleteMessageBatch result"},
		fauxqs: "reports a never-issued handle as a successful DeleteMessageBatch entry", aws: "a Failed entry with code ReceiptHandleIsInvalid", fact: "never-issued handle (recorded); per-entry failures"},
	{test: "TestStaleHandles", steps: []string{"(a) ChangeMessageVisibility, never-issued handle"},
		fauxqs: "answers MessageNotInflight to ChangeMessageVisibility with a never-issued handle", aws: "ReceiptHandleIsInvalid", fact: "never-issued handle (recorded)"},
	{test: "TestStaleHandles", steps: []string{"(b) ChangeMessageVisibility, superseded handle", "(b) ChangeMessageVisibility, superseded handle: message"},
		fauxqs: "answers MessageNotInflight to ChangeMessageVisibility with a superseded handle", aws: `InvalidParameterValue "…Message does not exist or is not available for visibility timeout change."`, fact: "superseded handle: report mapbox/ecs-watchbot#135"},
	{test: "TestStaleHandles", steps: []string{"(d) ChangeMessageVisibility after delete", "(d) ChangeMessageVisibility after delete: message"},
		fauxqs: "answers MessageNotInflight to ChangeMessageVisibility on a deleted message", aws: `InvalidParameterValue "…Message does not exist or is not available for visibility timeout change."`, fact: "deleted message (recorded); MessageNotInflight has no known real trigger"},
	{test: "TestFIFOStaleHandles", steps: []string{"expired handle: DeleteMessage", "expired handle: DeleteMessage message", "expired handle: batch entry failure", "expired handle: batch entry message", "both messages still there"},
		fauxqs: "deletes a FIFO message with an expired handle (single and batch)", aws: `rejects it: InvalidParameterValue "…The receipt handle has expired." (batch entry ReceiptHandleIsInvalid)`, fact: "FIFO expired handle (recorded; batch: report sqsmover#54)"},
	{test: "TestStaleHandles", steps: []string{"ceiling: 43200 s, 1 s after receive", "ceiling: message"},
		fauxqs: "lets ChangeMessageVisibility take a message past 12 h after its receive", aws: `InvalidParameterValue "…Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"`, fact: "12-hour ceiling: Developer Guide 'Amazon SQS visibility timeout'; report localstack#3956"},

	// Queues: CreateQueue, PurgeQueue, queue attributes.
	{test: "TestQueueLifecycle", steps: []string{"CreateQueue again, different attribute"},
		fauxqs: `sends query code "AWS.SimpleQueueService.QueueNameExists"`, aws: `"QueueAlreadyExists" (the SDK's ErrorCode())`, fact: "model query code"},
	{test: "TestQueueLifecycle", steps: []string{"FIFO-only attribute on a standard queue"},
		fauxqs: "accepts ContentBasedDeduplication on a standard queue", aws: `InvalidAttributeName "Unknown Attribute ContentBasedDeduplication."`, fact: "queue attributes (recorded)"},
	{test: "TestQueueLifecycle", steps: []string{"CreateQueue with an invalid name"},
		fauxqs: `accepts the queue name "bad name!"`, aws: "allows only [A-Za-z0-9_-], ≤80 characters (sqstest: InvalidParameterValue)", fact: "SDK api_op_CreateQueue.go"},
	{test: "TestPurgeQueue", steps: []string{"second PurgeQueue within 60 s"},
		fauxqs: "allows a second PurgeQueue at once", aws: "403 PurgeQueueInProgress within 60 s", fact: "one PurgeQueue per 60 s (recorded)"},

	// Messages: SendMessage, message attributes, system attributes.
	{test: "TestSendReceive", steps: []string{"body with U+1F600 (beyond the BMP)", "unicode bodies round-trip"},
		fauxqs: "rejects characters above U+FFFF with InvalidMessageContents", aws: "allows #x10000–#x10FFFF", fact: "SDK api_op_SendMessage.go; Developer Guide 'Amazon SQS message quotas'"},
	{test: "TestSendReceive", steps: []string{"receive with MessageAttributeNames [Hello]: MD5OfMessageAttributes"},
		fauxqs: "returns the MD5 of all the message's attributes when a filter returns only some", aws: "the MD5 of the returned set", fact: "MD5 over the returned attributes (recorded)"},
	{test: "TestSendReceive", steps: []string{"receive with MessageAttributeNames [Hel.*, Nope]: attributes", "receive with MessageAttributeNames [Hel.*, Nope]: MD5OfMessageAttributes"},
		fauxqs: `treats "Hel.*" as the prefix "Hel." (returns no attribute named Hello)`, aws: `"Hel.*" matches names starting with "Hel"`, fact: "MessageAttributeNames filters (recorded)"},
	{test: "TestLimits", steps: []string{"SendMessage DelaySeconds=901"},
		fauxqs: "accepts DelaySeconds 901", aws: "0–900", fact: "SDK api_op_SendMessage.go"},
	{test: "TestLimits", steps: []string{"SendMessage with 11 message attributes"},
		fauxqs: "accepts 11 message attributes", aws: "at most 10", fact: "SDK api_op_SendMessage.go; Developer Guide 'Amazon SQS message attributes'"},
	{test: "TestLimits", steps: []string{"empty String attribute", "empty String attribute: message"},
		fauxqs: "accepts an empty String attribute value", aws: `InvalidParameterValue "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'."`, fact: "send errors (recorded)"},
	{test: "TestLimits", steps: []string{"attribute name with the AWS. prefix"},
		fauxqs: `accepts an attribute named "AWS.reserved"`, aws: `rejects the "AWS." prefix (sqstest: InvalidParameterValue)`, fact: "Developer Guide 'Amazon SQS message attributes'"},
	{test: "TestLimits", steps: []string{"MaxNumberOfMessages=11: message"},
		fauxqs: `words it "Value for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10."`, aws: `"Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."`, fact: "ReceiveMessage ranges (recorded)"},
	{test: "TestRedrive", steps: []string{"DLQ receive count continues"},
		fauxqs: "counts the receive that moved the message, so the first DLQ receive shows 3", aws: "2 (the moving receive returns nothing and is not counted)", fact: "receive count in the DLQ (recorded)"},
	{test: "TestRedrive", steps: []string{"DeadLetterQueueSourceArn is set"},
		fauxqs: "does not add DeadLetterQueueSourceArn to moved messages", aws: "adds it", fact: "DeadLetterQueueSourceArn (recorded)"},

	// Batches.
	{test: "TestBatchLimits", steps: []string{"11 entries: message"},
		fauxqs: `words it "Maximum number of entries per request are 10."`, aws: `adds " You have sent 11."`, fact: "batch rules (recorded)"},
	{test: "TestBatchLimits", steps: []string{"too long: message"},
		fauxqs: `words it "Batch requests cannot be longer than 1048576 bytes."`, aws: `adds " You have sent 1200000 bytes."`, fact: "batch rules (recorded)"},
	{test: "TestBatchLimits", steps: []string{"SendMessageBatch, 81-character Id"},
		fauxqs: "accepts a batch entry Id of 81 characters", aws: "InvalidBatchEntryId (at most 80)", fact: "batch entry Id at most 80 characters (recorded); Developer Guide 'Amazon SQS message quotas'"},

	// FIFO.
	{test: "TestFIFOGroupsAndDedup", steps: []string{"receive Max=2: the group's first two, in order", "next receive skips the locked group", "after deleting the in-flight messages the group flows again"},
		fauxqs: "returns at most one message per message group per receive", aws: "as many messages of a group as possible, in order (Max=2 gives g1-m1,g1-m2)", fact: "FIFO group lock (recorded)"},
	{test: "TestFIFOGroupsAndDedup", steps: []string{"batch with an entry lacking MessageGroupId fails as a whole", "batch entry without MessageGroupId: message", "batch entries in request order"},
		fauxqs: "answers 200, enqueues the valid entries and fails the one without MessageGroupId with MissingParameter", aws: "fails the whole call: 400 InvalidParameterValue", fact: "FIFO send rules (recorded)"},
	{test: "TestFIFOSendRules", steps: []string{"MessageGroupId with a control character"},
		fauxqs: "accepts a MessageGroupId containing a space and U+0001", aws: "alphanumeric and punctuation only (sqstest: InvalidParameterValue)", fact: "SDK api_op_SendMessage.go; MessageGroupId text (recorded)"},
	{test: "TestFIFOSendRules", steps: []string{"MessageGroupId of 129 characters"},
		fauxqs: "accepts a 129-character MessageGroupId", aws: "at most 128", fact: "SDK api_op_SendMessage.go"},
	{test: "TestFIFOSendRules", steps: []string{"ReceiveRequestAttemptId of 129 characters"},
		fauxqs: "accepts a 129-character ReceiveRequestAttemptId", aws: "at most 128", fact: "SDK api_op_ReceiveMessage.go"},
}

var (
	divergenceMu   sync.Mutex
	divergenceSeen = map[string]bool{} // key → differed at least once
)

func divergenceKey(test, step string) string { return test + " / " + step }

func lookupDivergence(test, step string) (divergence, bool) {
	for _, d := range divergences {
		if d.test == test && slices.Contains(d.steps, step) {
			return d, true
		}
	}
	return divergence{}, false
}

// markSeen notes that a step listed as a divergence ran, and whether the two
// implementations differed there.
func markSeen(test, step string, differed bool) {
	if _, ok := lookupDivergence(test, step); !ok {
		return
	}
	divergenceMu.Lock()
	defer divergenceMu.Unlock()
	divergenceSeen[divergenceKey(test, step)] = divergenceSeen[divergenceKey(test, step)] || differed
}

// TestMain reports divergence-table entries that no longer differ (fauxqs
// was fixed, or the scenario changed), so the table stays true.
func TestMain(m *testing.M) {
	code := m.Run()
	divergenceMu.Lock()
	var stale []string
	for k, differed := range divergenceSeen {
		if !differed {
			stale = append(stale, k)
		}
	}
	divergenceMu.Unlock()
	sort.Strings(stale)
	for _, k := range stale {
		fmt.Printf("interop: divergence %q no longer observed: remove it from divergences_test.go\n", k)
	}
	os.Exit(code)
}

func lookupWireDivergence(fauxqs, sqstest string) (wireDivergence, bool) {
	for _, wd := range wireDivergences {
		if wd.normalize(fauxqs) == sqstest {
			return wd, true
		}
	}
	return wireDivergence{}, false
}
