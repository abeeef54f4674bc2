package explore

import "strings"

// knownIssue names the open issue a violation belongs to, "" for none: a
// temporary filter, so that bugs already known (and being fixed) do not
// hide new ones. Each entry goes once its fix has landed; with
// -explore.known=false none applies. seen is what the run saw happen.
func knownIssue(sc Scenario, seen map[string]bool, v violation) string {
	switch {
	// New: Pause and Resume (and the breaker's closing) restart Health's
	// stall clock at their instant (consumer.go, Pause and Resume:
	// stamp(&c.progress.resumed); run.go, breakerClosed), over the end
	// of a Throttled's pause that run.throttlePaused set: a Throttled
	// pause longer than the stall limit that spans one makes the
	// Consumer unhealthy, though it holds back on purpose.
	case v.Check == chkHealth && strings.Contains(v.Text, "a Throttled's pause holds until"):
		return "new: stall clock restarted over a Throttled pause"
	// New: under WithVisibilityTimeout (the queue's attributes optional)
	// and WithRequireDeadLetterQueue, an error that can heal (throttling,
	// 5xx) on Run's read of the attributes is not retried: Run refuses the
	// queue, which has a RedrivePolicy, as having no dead-letter queue
	// ("its RedrivePolicy could not be read"; run.go, setup: readQueue's
	// optional is WithVisibilityTimeout alone; deadletter.go,
	// requireDeadLetter).
	case v.Check == chkRunErr && strings.Contains(v.Text, "its RedrivePolicy could not be read"):
		return "new: a first contact that heals fails WithRequireDeadLetterQueue"
	// New: a redelivery released while its previous delivery winds down
	// lets the later messages of its FIFO group run.
	case v.Check == chkFIFO && strings.Contains(v.Text, "while its previous delivery wound down"):
		return "new: fifo order after a wind-down release"
	// New: a Batch member still gathering at the shutdown is released with
	// the open breaker's hold, not at once.
	case v.Check == chkStranded && strings.Contains(v.Text, "though the shutdown cancelled") && strings.Contains(v.Text, "still gathering for a batch"):
		return "new: gathering member held by the breaker at shutdown"
	}
	return ""
}
