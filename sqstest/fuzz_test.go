package sqstest_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// FuzzHandler feeds arbitrary actions and bodies to the server. Whatever arrives, the
// answer is a JSON document, an error answer carries an AWS __type and an AWS status,
// and nothing panics. It runs in a synctest bubble so that long polls take no time.
//
// Random receipt handles and map order make coverage vary between runs, so the fuzzer
// minimises often; keep that short:
//
//	go test ./sqstest -run XXX -fuzz FuzzHandler -fuzztime 1m -fuzzminimizetime 2s
func FuzzHandler(f *testing.F) {
	const q = `"QueueUrl":"http://sqstest.local/123456789012/q"`
	const fq = `"QueueUrl":"http://sqstest.local/123456789012/q.fifo"`
	seeds := []struct{ action, body string }{
		{"ReceiveMessage", `{` + q + `,"MaxNumberOfMessages":10,"WaitTimeSeconds":20,"MessageAttributeNames":["All"],"MessageSystemAttributeNames":["All"]}`},
		{"ReceiveMessage", `{` + fq + `,"MaxNumberOfMessages":3,"VisibilityTimeout":0}`},
		{"ReceiveMessage", `{` + q + `,"MaxNumberOfMessages":"10"}`},
		{"ReceiveMessage", `{` + q + `,"WaitTimeSeconds":1e400}`},
		{"SendMessage", `{` + q + `,"MessageBody":"hi","MessageAttributes":{"a":{"DataType":"Binary","BinaryValue":"aGk="}}}`},
		{"SendMessage", `{` + fq + `,"MessageBody":"hi","MessageGroupId":"g","MessageDeduplicationId":"d"}`},
		{"SendMessage", `{` + q + `,"MessageBody":"\ud800"}`},
		{"SendMessageBatch", `{` + q + `,"Entries":[{"Id":"a","MessageBody":"x"},{"Id":"a","MessageBody":"y"}]}`},
		{"SendMessageBatch", `{` + q + `,"Entries":[null]}`},
		{"DeleteMessage", `{` + q + `,"ReceiptHandle":"garbage"}`},
		{"DeleteMessageBatch", `{` + q + `,"Entries":[{"Id":"1","ReceiptHandle":""}]}`},
		{"ChangeMessageVisibility", `{` + q + `,"ReceiptHandle":"h","VisibilityTimeout":-2147483648}`},
		{"ChangeMessageVisibilityBatch", `{` + q + `,"Entries":[{"Id":"1","ReceiptHandle":"h","VisibilityTimeout":43200}]}`},
		{"CreateQueue", `{"QueueName":"x","Attributes":{"RedrivePolicy":"{\"deadLetterTargetArn\":\"a\",\"maxReceiveCount\":1e99}"}}`},
		{"CreateQueue", `{"QueueName":"x.fifo","Attributes":{"FifoQueue":"true"},"tags":{"a":"b"}}`},
		{"SetQueueAttributes", `{` + q + `,"Attributes":{"VisibilityTimeout":"99999999999999999999"}}`},
		{"GetQueueAttributes", `{` + q + `,"AttributeNames":["All"]}`},
		{"ListQueues", `{"MaxResults":0,"NextToken":"!!"}`},
		{"PurgeQueue", `{` + q + `}`},
		{"DeleteQueue", `{"QueueUrl":"/"}`},
		{"GetQueueUrl", `{"QueueName":null}`},
		{"Nope", `{}`},
		{"ReceiveMessage", `not json`},
		{"ReceiveMessage", `[1,2,3]`},
		{"ReceiveMessage", ``},
	}
	for _, s := range seeds {
		f.Add(s.action, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, action string, body []byte) {
		synctest.Test(t, func(t *testing.T) {
			srv := sqstest.New(t)
			url, err := srv.CreateQueue("q", nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Send(url, "m"); err != nil {
				t.Fatal(err)
			}
			if _, err := srv.CreateQueue("q.fifo", map[string]string{"ContentBasedDeduplication": "true"}); err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(body)))
			req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, req)

			var doc map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
				t.Fatalf("answer is not a JSON object: %v: %q", err, rec.Body)
			}
			switch {
			case rec.Code == http.StatusOK:
			case rec.Code >= 400 && rec.Code < 600:
				if typ, _ := doc["__type"].(string); !strings.Contains(typ, "#") {
					t.Fatalf("error answer without an AWS __type: %q", rec.Body)
				}
			default:
				t.Fatalf("status %d", rec.Code)
			}
		})
	})
}
