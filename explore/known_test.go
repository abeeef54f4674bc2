package explore

import "strings"

// knownIssue names the open issue a violation belongs to, "" for none: a
// temporary filter, so that bugs already known (and being fixed) do not
// hide new ones. Each entry goes once its fix has landed; with
// -explore.known=false none applies. seen is what the run saw happen.
func knownIssue(sc Scenario, seen map[string]bool, v violation) string {
	waitZero := sc.Options.WaitTime != nil && *sc.Options.WaitTime == 0 && sc.QueueWait > 0
	switch {
	// New: a redelivery released while its previous delivery winds down
	// lets the later messages of its FIFO group run.
	case v.Check == chkFIFO && strings.Contains(v.Text, "while its previous delivery wound down"):
		return "new: fifo order after a wind-down release"
	// New: WithWaitTime(0) leaves the queue's long poll to the queue, but
	// the receive's call timeout assumes no wait: idle polls time out, and
	// a poll in flight at shutdown outlasts the shutdown timeout.
	case waitZero && (v.Check == chkHealth && strings.Contains(v.Text, "deadline exceeded") || v.Check == chkReturn):
		return "new: WithWaitTime(0) with the queue's wait"
	// New: the flow takes long polls that waited for messages for round
	// trips; calls then wait seconds for a poller, and renewals, deletes
	// and releases miss their deadlines with no fault injected.
	case seen["symptom:calls-stalled"] && (v.Check == chkStranded || v.Check == chkBreaker || v.Check == chkFIFO || v.Check == chkReturn),
		v.Check == chkStranded && strings.Contains(v.Text, "its settling call waited until the hard stop"):
		return "new: round trip taken from long polls"
	}
	return ""
}
