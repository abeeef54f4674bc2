package sqsconsumer

// EventKind says what happened to a message.
type EventKind int

// The events an Observer sees, in the order a message usually meets them.
const (
	EventReceived       EventKind = iota + 1 // ReceiveMessage returned the message
	EventAdopted                             // a redelivery of a message already leased here; the lease took the new handle
	EventStarted                             // the handler was called
	EventSucceeded                           // the handler returned nil
	EventFailed                              // the handler returned an error or panicked (Err says which)
	EventRenewed                             // SQS confirmed a visibility extension (Visibility = the new timeout)
	EventRenewalFailed                       // a renewal attempt failed; it is retried if the error is transient
	EventLeaseLost                           // SQS refused the receipt handle; the handler's context is cancelled
	EventLeaseExpired                        // the deadline passed with no confirmed renewal
	EventCeilingReached                      // the lease neared its maximum duration; the handler's context is cancelled
	EventDeleted                             // SQS confirmed the delete
	EventReleased                            // visibility was set for a redelivery (Visibility = when)
	EventDone                                // a Consumer's delivery ended: always its last event (see below)
	EventDeadLettered                        // a Permanent error's message was sent to the dead-letter queue (Err = the handler's error); its delete follows
	EventBatch                               // a BatchHandler returned (Batch = its messages, SinceStart = its time, Err = its error)
)

var eventNames = [...]string{
	EventReceived:       "received",
	EventAdopted:        "adopted",
	EventStarted:        "started",
	EventSucceeded:      "succeeded",
	EventFailed:         "failed",
	EventRenewed:        "renewed",
	EventRenewalFailed:  "renewal_failed",
	EventLeaseLost:      "lease_lost",
	EventLeaseExpired:   "lease_expired",
	EventCeilingReached: "ceiling_reached",
	EventDeleted:        "deleted",
	EventReleased:       "released",
	EventDone:           "done",
	EventDeadLettered:   "dead_lettered",
	EventBatch:          "batch",
}

// String returns the event's snake_case name, e.g. "renewal_failed".
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}
