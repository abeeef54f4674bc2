package payload

import (
	"fmt"
	"time"
)

// Event is an Amazon EventBridge event as a rule delivers it to an SQS
// target without an input transformer: the structure documented at
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html
// (top-level fields version, id, detail-type, source, account, time,
// region, resources and detail).
type Event struct {
	// Version is "0" for every event so far.
	Version string
	// ID is the event's ID, unique per event (a retried delivery keeps it).
	ID string
	// DetailType says what kind of event this is, e.g. "Object Created".
	DetailType string
	// Source is the emitting service or application, e.g. "aws.s3".
	Source string
	// Account and Region are where the event was emitted.
	Account string
	Region  string
	// Time is the event's time as its source stated it.
	Time time.Time
	// Resources are the ARNs the event concerns, possibly none.
	Resources []string
	// ReplayName is set when the event comes from an archive replay.
	ReplayName string
	// Detail is the event's detail object as raw JSON text: the body the
	// handler sees.
	Detail string
}

// eventKeys are the members every EventBridge event has; an object with
// all of them claims to be one.
var eventKeys = []string{"version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"}

func eventClaim(o object) bool { return o.has(eventKeys...) }

// parseEvent reads an EventBridge event from the members of its object.
func parseEvent(o object) (*Event, error) {
	e := &Event{}
	var ts string
	for _, f := range []struct {
		key string
		dst *string
	}{
		{"version", &e.Version}, {"id", &e.ID}, {"detail-type", &e.DetailType}, {"source", &e.Source},
		{"account", &e.Account}, {"time", &ts}, {"region", &e.Region},
	} {
		v, ok, err := o.str(f.key)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("no %q field", f.key)
		}
		*f.dst = v
	}
	if v, ok, err := o.str("replay-name"); err != nil {
		return nil, err
	} else if ok {
		e.ReplayName = v
	}
	if e.ID == "" || e.DetailType == "" || e.Source == "" {
		return nil, fmt.Errorf("id, detail-type and source must not be empty")
	}
	var err error
	if e.Time, err = time.Parse(time.RFC3339Nano, ts); err != nil {
		return nil, fmt.Errorf("time %q is not an RFC 3339 time", ts)
	}
	raw, _ := o.get("resources")
	if raw != "null" {
		if raw == "" || raw[0] != '[' {
			return nil, fmt.Errorf("resources is %s, want an array of strings", kindOf(raw))
		}
		elems, err := scanArray(raw)
		if err != nil {
			return nil, fmt.Errorf("resources: %w", err)
		}
		e.Resources = make([]string, 0, len(elems))
		for i, el := range elems {
			if el == "" || el[0] != '"' {
				return nil, fmt.Errorf("resources[%d] is %s, want a string", i, kindOf(el))
			}
			s, err := unquote(el, 0)
			if err != nil {
				return nil, fmt.Errorf("resources[%d]: %w", i, err)
			}
			e.Resources = append(e.Resources, s)
		}
	}
	e.Detail, _ = o.get("detail")
	if e.Detail == "" || e.Detail[0] != '{' {
		return nil, fmt.Errorf("detail is %s, want an object", kindOf(e.Detail))
	}
	return e, nil
}
