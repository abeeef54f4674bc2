package payload

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sqskit/sqsconsumer"
)

// benchOrder is the inner payload of the benchmarks: 117 bytes of JSON.
const benchOrder = `{"order_id":"o-1001","amount_cents":2599,"items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1},{"sku":"C-3","qty":5}]}`

type benchOrderT struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Items       []struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	} `json:"items"`
}

// benchSNS is a 1 KB SNS notification (signature and URLs at their real
// lengths) carrying benchOrder and two attributes.
func benchSNS(b *testing.B) string {
	env := map[string]any{
		"Type": "Notification", "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
		"TopicArn": "arn:aws:sns:eu-west-1:210987654321:orders", "Subject": "order placed",
		"Message": benchOrder, "Timestamp": "2026-03-14T09:26:53.589Z", "SignatureVersion": "1",
		"Signature":      "bm90IGEgcmVhbCBzaWduYXR1cmU6IDI1NiBieXRlcyBsaWtlIGFuIFJTQS0yMDQ4IHNpZ25hdHVyZSB0aGF0IFNOUyBtYWtlcyB3aXRoIFNIQTEgb3IgU0hBMjU2LCBwYWRkZWQgdG8gbGVuZ3RoIHdpdGggbW9yZSB3b3JkcyBhYm91dCBub3RoaW5nIGluIHBhcnRpY3VsYXIsIHVudGlsIGl0IGlzIGV4YWN0bHkgYXMgbG9uZyBhcyB0aGUgcmVhbCB0aGluZyB0aGF0IFNOUyBwdXRzIGluIFNpZ25hdHVyZVZlcnNpb24gMSBhbmQgMiBub3RpZmljYXRpbw==",
		"SigningCertURL": "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem",
		"UnsubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:eu-west-1:210987654321:orders:0e8a4c1f-9d3b-4a7e-b2c5-6f1d8e9a0b3c",
		"MessageAttributes": map[string]any{
			"tenant":   map[string]string{"Type": "String", "Value": "acme"},
			"priority": map[string]string{"Type": "Number", "Value": "3"},
		},
	}
	body, err := json.Marshal(env)
	if err != nil {
		b.Fatal(err)
	}
	if len(body) < 1024 || len(body) > 1200 {
		b.Fatalf("notification is %d bytes, want about 1 KB", len(body))
	}
	return string(body)
}

var sinkOrder benchOrderT

// BenchmarkRawNoop is a handler that does nothing with a raw-delivered
// message: the floor.
func BenchmarkRawNoop(b *testing.B) {
	h := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error { return nil })
	runBench(b, h, benchOrder)
}

// BenchmarkRawDecode is the handler a raw-delivery queue needs: it
// decodes the body itself with encoding/json.
func BenchmarkRawDecode(b *testing.B) {
	h := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		var o benchOrderT
		if err := json.Unmarshal([]byte(m.Body), &o); err != nil {
			return err
		}
		sinkOrder = o
		return nil
	})
	runBench(b, h, benchOrder)
}

// BenchmarkTypedRaw is Handle[T] on the raw-delivered body: Handle's own
// cost over BenchmarkRawDecode.
func BenchmarkTypedRaw(b *testing.B) {
	h, err := Handle(func(ctx context.Context, m *sqsconsumer.Message, o benchOrderT) error { sinkOrder = o; return nil })
	if err != nil {
		b.Fatal(err)
	}
	runBench(b, h, benchOrder)
}

// BenchmarkUnwrapSNS is Unwrap(SNS) alone on the 1 KB notification, with
// a handler that does nothing.
func BenchmarkUnwrapSNS(b *testing.B) {
	mw, err := Unwrap(SNS)
	if err != nil {
		b.Fatal(err)
	}
	runBench(b, mw(sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error { return nil })), benchSNS(b))
}

// BenchmarkUnwrapSNSTyped is the whole path on the 1 KB notification:
// Unwrap(SNS) and Handle[T] decoding the message.
func BenchmarkUnwrapSNSTyped(b *testing.B) {
	for _, f := range []Format{SNS, Auto} {
		b.Run(f.String(), func(b *testing.B) {
			mw, err := Unwrap(f)
			if err != nil {
				b.Fatal(err)
			}
			h, err := Handle(func(ctx context.Context, m *sqsconsumer.Message, o benchOrderT) error { sinkOrder = o; return nil })
			if err != nil {
				b.Fatal(err)
			}
			runBench(b, mw(h), benchSNS(b))
		})
	}
}

func runBench(b *testing.B, h sqsconsumer.Handler, body string) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	ctx := context.Background()
	m := &sqsconsumer.Message{ID: "id", Body: body}
	start, ok := cpuTime()
	for b.Loop() {
		if err := h.HandleMessage(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	if end, ok2 := cpuTime(); ok && ok2 {
		// Run with -cpu 1 for this to be the work of one goroutine (and
		// its garbage collection).
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}
