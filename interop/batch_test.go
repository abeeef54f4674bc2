package interop

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func ids[T any](entries []T, id func(T) *string) []string {
	var out []string
	for _, e := range entries {
		out = append(out, aws.ToString(id(e)))
	}
	return out
}

func deleteID(e types.DeleteMessageBatchResultEntry) *string { return e.Id }
func changeID(e types.ChangeMessageVisibilityBatchResultEntry) *string {
	return e.Id
}
func sendID(e types.SendMessageBatchResultEntry) *string { return e.Id }

// describeBatch renders a batch result as "ok ID,ID; failed ID CODE sender|receiver".
func describeBatch(okIDs []string, failed []types.BatchResultErrorEntry) string {
	slices.Sort(okIDs)
	var parts []string
	if len(okIDs) > 0 {
		parts = append(parts, "ok "+strings.Join(okIDs, ","))
	}
	slices.SortFunc(failed, func(a, b types.BatchResultErrorEntry) int {
		return strings.Compare(aws.ToString(a.Id), aws.ToString(b.Id))
	})
	for _, f := range failed {
		fault := "receiver"
		if f.SenderFault {
			fault = "sender"
		}
		parts = append(parts, fmt.Sprintf("failed %s %s %s", aws.ToString(f.Id), aws.ToString(f.Code), fault))
	}
	return strings.Join(parts, "; ")
}

func TestBatchCalls(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		url := s.queue("q", map[string]string{"MaximumMessageSize": "1024"})

		sent, err := s.c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
			{Id: aws.String("e1"), MessageBody: aws.String("hello")},
			{Id: aws.String("e2"), MessageBody: aws.String("two")},
			{Id: aws.String("e3"), MessageBody: aws.String(strings.Repeat("x", 1025))},
		}})
		s.aws("SendMessageBatch with one oversize entry", errString(err), answerOK, factBatchRules)
		if err != nil {
			t.Fatalf("%s: %v", s.impl, err)
		}
		s.aws("SendMessageBatch result", describeBatch(ids(sent.Successful, sendID), sent.Failed), "ok e1,e2; failed e3 InvalidParameterValue sender", factBatchRules+"; oversize entry")
		if len(sent.Failed) == 1 {
			s.awsText("oversize entry message", aws.ToString(sent.Failed[0].Message), "Message must be shorter than 1024 bytes.", factBatchRules)
		}
		for _, e := range sent.Successful {
			if aws.ToString(e.Id) == "e1" {
				s.aws("batch entry MD5OfMessageBody", aws.ToString(e.MD5OfMessageBody), md5Hello, factMD5)
			}
		}

		msgs := receive(s, url, 10, 0)
		got := bodies(msgs)
		slices.Sort(got)
		s.aws("received the two good entries", strings.Join(got, ","), "hello,two", factBatchRules)
		if len(msgs) != 2 {
			t.Fatalf("%s: got %d messages", s.impl, len(msgs))
		}

		del, err := s.c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
			{Id: aws.String("good"), ReceiptHandle: msgs[0].ReceiptHandle},
			{Id: aws.String("bad"), ReceiptHandle: aws.String("garbage")},
		}})
		s.aws("DeleteMessageBatch with a never-issued handle", errString(err), answerOK, "SDK api_op_DeleteMessageBatch.go: per-entry failures")
		if err == nil {
			s.aws("DeleteMessageBatch result", describeBatch(ids(del.Successful, deleteID), del.Failed), "ok good; failed bad ReceiptHandleIsInvalid sender", "per-entry failures; never-issued handle (recorded)")
		}

		chg, err := s.c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
			{Id: aws.String("good"), ReceiptHandle: msgs[1].ReceiptHandle, VisibilityTimeout: 0},
			{Id: aws.String("bad"), ReceiptHandle: aws.String("garbage"), VisibilityTimeout: 0},
		}})
		s.aws("ChangeMessageVisibilityBatch with a never-issued handle", errString(err), answerOK, "SDK api_op_ChangeMessageVisibilityBatch.go: per-entry failures")
		if err == nil {
			s.aws("ChangeMessageVisibilityBatch result", describeBatch(ids(chg.Successful, changeID), chg.Failed),
				"ok good; failed bad ReceiptHandleIsInvalid sender", "per-entry failures; never-issued handle (recorded)")
		}
		chg, err = s.c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
			{Id: aws.String("deleted"), ReceiptHandle: msgs[0].ReceiptHandle, VisibilityTimeout: 0},
		}})
		s.see("ChangeMessageVisibilityBatch on a deleted message", errString(err))
		if err == nil {
			s.info("ChangeMessageVisibilityBatch on a deleted message: entry", describeBatch(ids(chg.Successful, changeID), chg.Failed),
				"deleted message: only the single-call answer (InvalidParameterValue) is recorded")
		}
		s.aws("released entry is receivable", strings.Join(bodies(receive(s, url, 10, 0)), ","), aws.ToString(msgs[1].Body), "Developer Guide 'Amazon SQS visibility timeout'")
	})
}

func TestBatchLimits(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		url := s.queue("q", nil)
		entries := func(n int, id func(int) string) []types.SendMessageBatchRequestEntry {
			out := make([]types.SendMessageBatchRequestEntry, n)
			for i := range out {
				out[i] = types.SendMessageBatchRequestEntry{Id: aws.String(id(i)), MessageBody: aws.String("m")}
			}
			return out
		}
		seq := func(i int) string { return fmt.Sprintf("e%d", i) }
		send := func(e []types.SendMessageBatchRequestEntry) error {
			_, err := s.c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: e})
			return err
		}

		err := send(entries(11, seq))
		s.aws("SendMessageBatch, 11 entries", errString(err), errTooManyEntries, factBatchRules)
		s.awsText("11 entries: message", errMessage(err), "Maximum number of entries per request are 10. You have sent 11.", factBatchRules)
		err = send(entries(10, seq))
		s.aws("SendMessageBatch, 10 entries", errString(err), answerOK, factLimits)
		err = send([]types.SendMessageBatchRequestEntry{})
		s.aws("SendMessageBatch, no entries", errString(err), errEmptyBatch, factBatchRules+"; empty batch")
		err = send(entries(2, func(int) string { return "same" }))
		s.aws("SendMessageBatch, repeated Id", errString(err), errIDsNotDistinct, factBatchRules)
		err = send(entries(1, func(int) string { return "bad id!" }))
		s.aws("SendMessageBatch, invalid Id", errString(err), errInvalidBatchEntryID, factBatchRules)
		s.awsText("invalid Id: message", errMessage(err), "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.", factBatchRules)
		err = send(entries(1, func(int) string { return strings.Repeat("i", 81) }))
		s.aws("SendMessageBatch, 81-character Id", errString(err), errInvalidBatchEntryID, factLimits)

		big := strings.Repeat("b", 600_000)
		err = send([]types.SendMessageBatchRequestEntry{
			{Id: aws.String("a"), MessageBody: aws.String(big)}, {Id: aws.String("b"), MessageBody: aws.String(big)}})
		s.aws("SendMessageBatch, 1,200,000 bytes in all", errString(err), errBatchRequestTooLong, factBatchRules)
		s.awsText("too long: message", errMessage(err), "Batch requests cannot be longer than 1048576 bytes. You have sent 1200000 bytes.", factBatchRules)

		_, err = s.c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{}})
		s.aws("DeleteMessageBatch, no entries", errString(err), errEmptyBatch, factBatchRules)
		many := make([]types.DeleteMessageBatchRequestEntry, 11)
		for i := range many {
			many[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(seq(i)), ReceiptHandle: aws.String("h")}
		}
		_, err = s.c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: many})
		s.aws("DeleteMessageBatch, 11 entries", errString(err), errTooManyEntries, factBatchRules)
		_, err = s.c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
			{Id: aws.String("x"), ReceiptHandle: aws.String("h")}, {Id: aws.String("x"), ReceiptHandle: aws.String("h")}}})
		s.aws("ChangeMessageVisibilityBatch, repeated Id", errString(err), errIDsNotDistinct, factBatchRules)
	})
}
