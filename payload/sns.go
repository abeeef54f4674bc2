package payload

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SNSNotification is the envelope Amazon SNS wraps around a message it
// delivers to an SQS queue when the subscription's raw message delivery is
// off (the default). Its JSON form is documented at
// https://docs.aws.amazon.com/sns/latest/dg/sns-message-and-json-formats.html
// (HTTP/HTTPS notification JSON format: SQS subscriptions receive the same
// document as the message body). The signature is not verified: who may
// send to the queue is the queue policy's business.
type SNSNotification struct {
	// Type is "Notification".
	Type string
	// MessageID is the ID SNS gave the published message: the same in
	// every subscribed queue, unlike the SQS message ID.
	MessageID string
	// TopicARN is the topic the message was published to.
	TopicARN string
	// Subject is the publisher's subject, "" when it gave none.
	Subject string
	// Message is the published message: the body the handler sees.
	Message string
	// Timestamp is when SNS accepted the publish.
	Timestamp time.Time
	// SequenceNumber is set by FIFO topics, "" otherwise.
	SequenceNumber string
	// SignatureVersion, Signature, SigningCertURL and UnsubscribeURL are
	// carried as received.
	SignatureVersion string
	Signature        string
	SigningCertURL   string
	UnsubscribeURL   string
	// MessageAttributes are the publisher's message attributes as the
	// envelope carries them. Unwrap also copies them into the handler's
	// Message.MessageAttributes, in SQS's form.
	MessageAttributes map[string]SNSAttribute
}

// SNSAttribute is one message attribute in an SNS envelope: Type is
// String, String.Array, Number or Binary (and custom suffixes such as
// Number.float); Value is the value as text, base64 for Binary.
type SNSAttribute struct {
	Type  string
	Value string
}

// snsTypes are the values of Type that SNS sends to an SQS subscriber.
const (
	snsNotification             = "Notification"
	snsSubscriptionConfirmation = "SubscriptionConfirmation"
	snsUnsubscribeConfirmation  = "UnsubscribeConfirmation"
)

// snsClaim reports whether the object claims to be an SNS envelope: it
// has the four members every SNS message to a queue carries. A plain JSON
// body with all four is an SNS envelope by any other name.
func snsClaim(o object) bool {
	return o.has("Type", "MessageId", "TopicArn", "Timestamp")
}

// parseSNS reads an SNS envelope from the members of its object.
func parseSNS(o object) (*SNSNotification, error) {
	n := &SNSNotification{}
	var err error
	field := func(key string, dst *string, required bool) {
		if err != nil {
			return
		}
		v, ok, e := o.str(key)
		switch {
		case e != nil:
			err = e
		case !ok && required:
			err = fmt.Errorf("no %q field", key)
		default:
			*dst = v
		}
	}
	var ts string
	field("Type", &n.Type, true)
	field("MessageId", &n.MessageID, true)
	field("TopicArn", &n.TopicARN, true)
	field("Timestamp", &ts, true)
	field("Subject", &n.Subject, false)
	field("SequenceNumber", &n.SequenceNumber, false)
	field("SignatureVersion", &n.SignatureVersion, false)
	field("Signature", &n.Signature, false)
	field("SigningCertURL", &n.SigningCertURL, false)
	field("UnsubscribeURL", &n.UnsubscribeURL, false)
	if err != nil {
		return nil, err
	}
	switch n.Type {
	case snsNotification:
	case snsSubscriptionConfirmation, snsUnsubscribeConfirmation:
		// A cross-account subscription's confirmation arrives in the
		// queue. Confirming means fetching the URL it carries, which a
		// consumer must not do on a message's say-so.
		return nil, fmt.Errorf("Type is %q: confirm or remove the subscription of %s by hand (see its SubscribeURL); this library does not follow URLs found in messages", n.Type, n.TopicARN)
	default:
		return nil, fmt.Errorf("Type is %q, want %q", n.Type, snsNotification)
	}
	if n.MessageID == "" {
		return nil, fmt.Errorf("MessageId is empty")
	}
	if !isSNSTopicARN(n.TopicARN) {
		return nil, fmt.Errorf("TopicArn %q is not an SNS topic ARN (arn:PARTITION:sns:REGION:ACCOUNT:NAME)", n.TopicARN)
	}
	if n.Timestamp, err = time.Parse(time.RFC3339Nano, ts); err != nil {
		return nil, fmt.Errorf("Timestamp %q is not an RFC 3339 time", ts)
	}
	var ok bool
	if n.Message, ok, err = o.str("Message"); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("no %q field", "Message")
	}
	if raw, ok := o.get("MessageAttributes"); ok && raw != "null" {
		if n.MessageAttributes, err = parseSNSAttributes(raw); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// isSNSTopicARN reports whether s has the form arn:PARTITION:sns:REGION:ACCOUNT:NAME.
func isSNSTopicARN(s string) bool {
	parts := strings.SplitN(s, ":", 6)
	return len(parts) == 6 && parts[0] == "arn" && parts[1] != "" && parts[2] == "sns" &&
		parts[3] != "" && parts[4] != "" && parts[5] != ""
}

func parseSNSAttributes(raw string) (map[string]SNSAttribute, error) {
	if raw == "" || raw[0] != '{' {
		return nil, fmt.Errorf("MessageAttributes is %s, want an object", kindOf(raw))
	}
	o, err := scanObject(raw)
	if err != nil {
		return nil, fmt.Errorf("MessageAttributes: %w", err)
	}
	attrs := make(map[string]SNSAttribute, len(o))
	for _, m := range o {
		if m.raw == "" || m.raw[0] != '{' {
			return nil, fmt.Errorf("message attribute %q is %s, want an object", m.key, kindOf(m.raw))
		}
		ao, err := scanObject(m.raw)
		if err != nil {
			return nil, fmt.Errorf("message attribute %q: %w", m.key, err)
		}
		typ, ok, err := ao.str("Type")
		if err != nil || !ok || typ == "" {
			return nil, fmt.Errorf("message attribute %q has no Type", m.key)
		}
		val, ok, err := ao.str("Value")
		if err != nil || !ok {
			return nil, fmt.Errorf("message attribute %q has no string Value", m.key)
		}
		attrs[m.key] = SNSAttribute{Type: typ, Value: val}
	}
	return attrs, nil
}

// sqsAttributes returns attrs with the SNS attributes added in SQS's form
// (what raw message delivery would have produced): Binary values decoded
// from base64, the others as strings. An SNS attribute replaces an SQS
// attribute of the same name. attrs itself is not modified.
func sqsAttributes(attrs map[string]types.MessageAttributeValue, sns map[string]SNSAttribute) (map[string]types.MessageAttributeValue, error) {
	if len(sns) == 0 {
		return attrs, nil
	}
	out := make(map[string]types.MessageAttributeValue, len(attrs)+len(sns))
	for k, v := range attrs {
		out[k] = v
	}
	for k, a := range sns {
		typ := a.Type
		v := types.MessageAttributeValue{DataType: &typ}
		if strings.HasPrefix(a.Type, "Binary") {
			b, err := base64.StdEncoding.DecodeString(a.Value)
			if err != nil {
				return nil, fmt.Errorf("message attribute %q of type %s is not base64: %v", k, a.Type, err)
			}
			v.BinaryValue = b
		} else {
			val := a.Value
			v.StringValue = &val
		}
		out[k] = v
	}
	return out, nil
}
