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
	// The publisher's message attributes are not here: Unwrap puts them
	// in the handler's Message.MessageAttributes, in the form raw message
	// delivery gives them (Type as DataType; Binary values decoded from
	// base64, the others as StringValue).
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

// parseSNS reads an SNS envelope from the members of its object into n.
func parseSNS(o object, n *SNSNotification) error {
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
		return err
	}
	switch n.Type {
	case snsNotification:
	case snsSubscriptionConfirmation, snsUnsubscribeConfirmation:
		// A cross-account subscription's confirmation arrives in the
		// queue. Confirming means fetching the URL it carries, which a
		// consumer must not do on a message's say-so.
		//lint:ignore ST1005 the message names the JSON field it is about
		return fmt.Errorf("Type is %q: confirm or remove the subscription of %s by hand (see its SubscribeURL); this library does not follow URLs found in messages", n.Type, n.TopicARN)
	default:
		//lint:ignore ST1005 the message names the JSON field it is about
		return fmt.Errorf("Type is %q, want %q", n.Type, snsNotification)
	}
	if n.MessageID == "" {
		return fmt.Errorf("MessageId is empty")
	}
	if !isSNSTopicARN(n.TopicARN) {
		return fmt.Errorf("TopicArn %q is not an SNS topic ARN (arn:PARTITION:sns:REGION:ACCOUNT:NAME)", n.TopicARN)
	}
	if n.Timestamp, err = time.Parse(time.RFC3339Nano, ts); err != nil {
		//lint:ignore ST1005 the message names the JSON field it is about
		return fmt.Errorf("Timestamp %q is not an RFC 3339 time", ts)
	}
	var ok bool
	if n.Message, ok, err = o.str("Message"); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("no %q field", "Message")
	}
	return nil
}

// isSNSTopicARN reports whether s has the form arn:PARTITION:sns:REGION:ACCOUNT:NAME.
func isSNSTopicARN(s string) bool {
	var parts [6]string
	for i := range 5 {
		n := strings.IndexByte(s, ':')
		if n < 0 {
			return false
		}
		parts[i], s = s[:n], s[n+1:]
	}
	parts[5] = s
	return parts[0] == "arn" && parts[1] != "" && parts[2] == "sns" && parts[3] != "" && parts[4] != "" && parts[5] != ""
}

// sqsAttributes returns attrs with the message attributes of the SNS
// envelope o added in SQS's form (what raw message delivery would have
// produced): Binary values decoded from base64, the others as strings. An
// SNS attribute replaces an SQS attribute of the same name. attrs itself
// is not modified.
func sqsAttributes(attrs map[string]types.MessageAttributeValue, o object) (map[string]types.MessageAttributeValue, error) {
	raw, ok := o.get("MessageAttributes")
	if !ok || raw == "null" {
		return attrs, nil
	}
	if raw == "" || raw[0] != '{' {
		return nil, fmt.Errorf("MessageAttributes is %s, want an object", kindOf(raw))
	}
	var buf, abuf [8]member
	ao, err := scanObjectInto(raw, buf[:0])
	if err != nil {
		return nil, fmt.Errorf("MessageAttributes: %w", err)
	}
	if len(ao) == 0 {
		return attrs, nil
	}
	out := make(map[string]types.MessageAttributeValue, len(attrs)+len(ao))
	for k, v := range attrs {
		out[k] = v
	}
	strs := make([]string, 0, 2*len(ao)) // one allocation for the values' pointers
	for _, m := range ao {
		if m.raw == "" || m.raw[0] != '{' {
			return nil, fmt.Errorf("message attribute %q is %s, want an object", m.key, kindOf(m.raw))
		}
		a, err := scanObjectInto(m.raw, abuf[:0])
		if err != nil {
			return nil, fmt.Errorf("message attribute %q: %w", m.key, err)
		}
		typ, ok, err := a.str("Type")
		if err != nil || !ok || typ == "" {
			return nil, fmt.Errorf("message attribute %q has no Type", m.key)
		}
		val, ok, err := a.str("Value")
		if err != nil || !ok {
			return nil, fmt.Errorf("message attribute %q has no string Value", m.key)
		}
		strs = append(strs, typ)
		v := types.MessageAttributeValue{DataType: &strs[len(strs)-1]}
		if strings.HasPrefix(typ, "Binary") {
			b, err := base64.StdEncoding.DecodeString(val)
			if err != nil {
				return nil, fmt.Errorf("message attribute %q of type %s is not base64: %v", m.key, typ, err)
			}
			v.BinaryValue = b
		} else {
			strs = append(strs, val)
			v.StringValue = &strs[len(strs)-1]
		}
		out[m.key] = v
	}
	return out, nil
}
