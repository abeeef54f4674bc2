package interop

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func TestLimits(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		url := s.queue("q", nil)
		recv := func(in sqs.ReceiveMessageInput) error {
			in.QueueUrl = aws.String(url)
			_, err := s.c.ReceiveMessage(ctx, &in)
			return err
		}
		sendIn := func(in sqs.SendMessageInput) error {
			in.QueueUrl = aws.String(url)
			_, err := s.c.SendMessage(ctx, &in)
			return err
		}
		send := func(body string) error { return sendIn(sqs.SendMessageInput{MessageBody: aws.String(body)}) }

		err := recv(sqs.ReceiveMessageInput{MaxNumberOfMessages: 11})
		s.aws("ReceiveMessage MaxNumberOfMessages=11", errString(err), errInvalidParameterValue, "ReceiveMessage ranges (recorded)")
		s.awsText("MaxNumberOfMessages=11: message", errMessage(err), "Value 11 for parameter MaxNumberOfMessages is invalid. Reason: "+textMaxNumberOfMessagesRange, "ReceiveMessage ranges (recorded)")
		err = recv(sqs.ReceiveMessageInput{MaxNumberOfMessages: -1})
		s.aws("ReceiveMessage MaxNumberOfMessages=-1", errString(err), errInvalidParameterValue, "SDK api_op_ReceiveMessage.go: 1–10")
		err = recv(sqs.ReceiveMessageInput{WaitTimeSeconds: 21})
		s.aws("ReceiveMessage WaitTimeSeconds=21", errString(err), errInvalidParameterValue, "ReceiveMessage ranges (recorded)")
		s.awsText("WaitTimeSeconds=21: message", errMessage(err), "Value 21 for parameter WaitTimeSeconds is invalid. Reason: "+textWaitTimeSecondsRange, "ReceiveMessage ranges (recorded)")
		err = recv(sqs.ReceiveMessageInput{VisibilityTimeout: 43201})
		s.aws("ReceiveMessage VisibilityTimeout=43201", errString(err), errInvalidParameterValue, "SDK api_op_ReceiveMessage.go: range 0–43200; error text UNCONFIRMED")
		err = recv(sqs.ReceiveMessageInput{MaxNumberOfMessages: 10, WaitTimeSeconds: 0, VisibilityTimeout: 43200})
		s.aws("ReceiveMessage at the limits (10, 43200)", errString(err), answerOK, "SDK api_op_ReceiveMessage.go")

		maxBody := strings.Repeat("m", 1<<20)
		s.aws("SendMessage of 1 MiB", errString(send(maxBody)), answerOK, "Developer Guide 'Amazon SQS message quotas': 1 MiB per message")
		err = send(maxBody + "m")
		s.aws("SendMessage of 1 MiB + 1", errString(err), errInvalidParameterValue, "oversize single send (recorded)")
		s.awsText("1 MiB + 1: message", errMessage(err), "Message must be shorter than 1048576 bytes.", "recorded")
		err = sendIn(sqs.SendMessageInput{MessageBody: aws.String(maxBody[:1<<20-10]),
			MessageAttributes: map[string]types.MessageAttributeValue{"attr": strAttr("0123456789")}})
		s.aws("SendMessage of 1 MiB counting attribute bytes", errString(err), errInvalidParameterValue, "size = body + attribute name, type, value (recorded)")

		err = send("")
		s.aws("SendMessage with an empty body", errString(err), errMissingParameter, "send errors (recorded)")
		s.awsText("empty body: message", errMessage(err), "The request must contain the parameter MessageBody.", "recorded")
		err = sendIn(sqs.SendMessageInput{MessageBody: aws.String("d"), DelaySeconds: 901})
		s.aws("SendMessage DelaySeconds=901", errString(err), errInvalidParameterValue, "SDK api_op_SendMessage.go: DelaySeconds 0–900")
		err = sendIn(sqs.SendMessageInput{MessageBody: aws.String("d"), DelaySeconds: 900})
		s.aws("SendMessage DelaySeconds=900", errString(err), answerOK, "SDK api_op_SendMessage.go: DelaySeconds 0–900")

		eleven := map[string]types.MessageAttributeValue{}
		for i := range 11 {
			eleven[fmt.Sprintf("a%d", i)] = strAttr("v")
		}
		err = sendIn(sqs.SendMessageInput{MessageBody: aws.String("attrs"), MessageAttributes: eleven})
		s.aws("SendMessage with 11 message attributes", errString(err), errInvalidParameterValue, "SDK api_op_SendMessage.go: at most 10 attributes (error code as for other parameter errors: UNCONFIRMED)")
		delete(eleven, "a10")
		err = sendIn(sqs.SendMessageInput{MessageBody: aws.String("attrs"), MessageAttributes: eleven})
		s.aws("SendMessage with 10 message attributes", errString(err), answerOK, "SDK api_op_SendMessage.go: at most 10 attributes")

		err = sendIn(sqs.SendMessageInput{MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"ErrorDetails": strAttr("")}})
		s.aws("empty String attribute", errString(err), errInvalidParameterValue, "send errors (recorded)")
		s.awsText("empty String attribute: message", errMessage(err), "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'.", "recorded")
		err = sendIn(sqs.SendMessageInput{MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"AWS.reserved": strAttr("v")}})
		s.see("attribute name with the AWS. prefix", errString(err))
		err = sendIn(sqs.SendMessageInput{MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"n": {DataType: aws.String("Number"), StringValue: aws.String("not a number")}}})
		s.see("Number attribute that is not a number", errString(err))
		err = sendIn(sqs.SendMessageInput{MessageBody: aws.String("x"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d")})
		s.info("MessageDeduplicationId on a standard queue", errString(err), "Developer Guide 'Amazon SQS fair queues' allows MessageGroupId; dedup id on standard UNCONFIRMED")
	})
}
