package payload

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// S3Notification is an Amazon S3 event notification as S3 sends it to an
// SQS queue (or an SNS topic): the structure documented at
// https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html.
// The handler's body stays the notification's JSON text; this is its
// parsed form.
type S3Notification struct {
	// Records holds one record per event; S3 sends one a message, but the
	// format allows several.
	Records []S3Record
}

// S3Record is one event of an S3 notification.
type S3Record struct {
	// EventVersion is the record format's version, e.g. "2.1" or "2.3".
	EventVersion string
	// EventSource is "aws:s3".
	EventSource string
	AWSRegion   string
	EventTime   time.Time
	// EventName is the event type without the "s3:" prefix, e.g.
	// "ObjectCreated:Put" or "ObjectRemoved:Delete".
	EventName string
	// PrincipalID is the user who caused the event.
	PrincipalID string
	// SourceIP is the request's source IP address.
	SourceIP string
	// ConfigurationID is the ID of the bucket's notification configuration.
	ConfigurationID string
	Bucket          S3Bucket
	Object          S3Object
}

// S3Bucket is the bucket an S3 event concerns.
type S3Bucket struct {
	Name    string
	ARN     string
	OwnerID string
}

// S3Object is the object an S3 event concerns.
type S3Object struct {
	// Key is the object key, decoded: S3 sends it URL-encoded ("red
	// flower.jpg" arrives as "red+flower.jpg"); RawKey is that form.
	Key    string
	RawKey string
	// Size is in bytes; 0 for events that carry none (deletions).
	Size      int64
	ETag      string
	VersionID string
	// Sequencer orders the events of one key: compare equal-length
	// hexadecimal strings, after padding the shorter with leading zeros.
	Sequencer string
}

// s3Claim reports whether the object claims to be an S3 event
// notification: its only member is Records, an array whose elements all
// say "eventSource": "aws:s3".
func s3Claim(o object) bool {
	if len(o) != 1 || o[0].key != "Records" || !strings.HasPrefix(o[0].raw, "[") {
		return false
	}
	elems, err := scanArray(o[0].raw)
	if err != nil || len(elems) == 0 {
		return false
	}
	for _, el := range elems {
		if !strings.HasPrefix(el, "{") {
			return false
		}
		eo, err := scanObject(el)
		if err != nil {
			return false
		}
		if src, ok, err := eo.str("eventSource"); err != nil || !ok || src != "aws:s3" {
			return false
		}
	}
	return true
}

// s3TestEvent reports whether the object is the test message S3 sends when
// a notification configuration is saved: {"Service":"Amazon S3",
// "Event":"s3:TestEvent", ...}.
func s3TestEvent(o object) bool {
	svc, _, err1 := o.str("Service")
	ev, _, err2 := o.str("Event")
	return err1 == nil && err2 == nil && svc == "Amazon S3" && ev == "s3:TestEvent"
}

// s3Wire is the JSON form of one record.
type s3Wire struct {
	EventVersion string `json:"eventVersion"`
	EventSource  string `json:"eventSource"`
	AWSRegion    string `json:"awsRegion"`
	EventTime    string `json:"eventTime"`
	EventName    string `json:"eventName"`
	UserIdentity struct {
		PrincipalID string `json:"principalId"`
	} `json:"userIdentity"`
	RequestParameters struct {
		SourceIPAddress string `json:"sourceIPAddress"`
	} `json:"requestParameters"`
	S3 *struct {
		ConfigurationID string `json:"configurationId"`
		Bucket          struct {
			Name          string `json:"name"`
			ARN           string `json:"arn"`
			OwnerIdentity struct {
				PrincipalID string `json:"principalId"`
			} `json:"ownerIdentity"`
		} `json:"bucket"`
		Object struct {
			Key       *string `json:"key"`
			Size      int64   `json:"size"`
			ETag      string  `json:"eTag"`
			VersionID string  `json:"versionId"`
			Sequencer string  `json:"sequencer"`
		} `json:"object"`
	} `json:"s3"`
}

// parseS3 reads an S3 event notification.
func parseS3(body string) (*S3Notification, error) {
	var wire struct {
		Records []s3Wire `json:"Records"`
	}
	if err := json.Unmarshal([]byte(body), &wire); err != nil {
		return nil, err
	}
	if len(wire.Records) == 0 {
		return nil, fmt.Errorf("no Records")
	}
	n := &S3Notification{Records: make([]S3Record, len(wire.Records))}
	for i, w := range wire.Records {
		if w.EventSource != "aws:s3" {
			return nil, fmt.Errorf("Records[%d].eventSource is %q, want \"aws:s3\"", i, w.EventSource)
		}
		if w.EventName == "" {
			//lint:ignore ST1005 the message names the JSON field it is about
			return nil, fmt.Errorf("Records[%d] has no eventName", i)
		}
		if w.S3 == nil || w.S3.Bucket.Name == "" || w.S3.Object.Key == nil {
			//lint:ignore ST1005 the message names the JSON field it is about
			return nil, fmt.Errorf("Records[%d] names no bucket and key (s3.bucket.name, s3.object.key)", i)
		}
		t, err := time.Parse(time.RFC3339Nano, w.EventTime)
		if err != nil {
			return nil, fmt.Errorf("Records[%d].eventTime %q is not an RFC 3339 time", i, w.EventTime)
		}
		key, err := url.QueryUnescape(*w.S3.Object.Key)
		if err != nil {
			return nil, fmt.Errorf("Records[%d].s3.object.key %q is not URL-encoded: %v", i, *w.S3.Object.Key, err)
		}
		n.Records[i] = S3Record{
			EventVersion:    w.EventVersion,
			EventSource:     w.EventSource,
			AWSRegion:       w.AWSRegion,
			EventTime:       t,
			EventName:       w.EventName,
			PrincipalID:     w.UserIdentity.PrincipalID,
			SourceIP:        w.RequestParameters.SourceIPAddress,
			ConfigurationID: w.S3.ConfigurationID,
			Bucket:          S3Bucket{Name: w.S3.Bucket.Name, ARN: w.S3.Bucket.ARN, OwnerID: w.S3.Bucket.OwnerIdentity.PrincipalID},
			Object: S3Object{
				Key: key, RawKey: *w.S3.Object.Key, Size: w.S3.Object.Size,
				ETag: w.S3.Object.ETag, VersionID: w.S3.Object.VersionID, Sequencer: w.S3.Object.Sequencer,
			},
		}
	}
	return n, nil
}
