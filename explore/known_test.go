package explore

import "strings"

// knownIssue names the open issue a violation belongs to, "" for none: a
// temporary filter, so that bugs already known (and being fixed) do not
// hide new ones. Each entry goes once its fix has landed; with
// -explore.known=false none applies. seen is what the run saw happen.
func knownIssue(sc Scenario, seen map[string]bool, v violation) string {
	switch {
	// Issue 35, case 5: a paused Consumer is reported unhealthy; so is
	// one resumed after a long pause, until its first receive answers
	// (Resume does not restart the stall clock).
	case v.Check == chkHealth && (strings.Contains(v.Text, ", paused since ") || strings.Contains(v.Text, "resumed ")):
		return "35.5 paused unhealthy"
	// Issue 35, case 3: the breaker counts idempotency duplicates in
	// progress.
	case v.Check == chkBreaker && strings.Contains(v.Text, "inprogress"):
		return "35.3 breaker counts duplicates"
	// New: the breaker counts handlers cancelled at the lease ceiling.
	case v.Check == chkBreaker && strings.Contains(v.Text, "lease ceiling reached"):
		return "new: breaker counts the lease ceiling"
	// New: a handler that ignores its cancelled context past the hard
	// stop has its message left hidden (its release runs under the
	// cancelled settle context).
	case v.Check == chkStranded && strings.Contains(v.Text, "after the hard stop (it ignored"):
		return "new: stranded after the hard stop"
	// New: a redelivery released while its previous delivery winds down
	// lets the later messages of its FIFO group run.
	case v.Check == chkFIFO && strings.Contains(v.Text, "while its previous delivery wound down"):
		return "new: fifo order after a wind-down release"
	// New: once the shutdown's wait ends (nothing held) its hard stop is
	// disarmed; receives in flight and the releases of what they bring
	// are then bounded by nothing.
	case v.Check == chkReturn && strings.Contains(v.Text, "the shutdown's wait ended then"):
		return "new: hard stop disarmed once idle"
	// New: a Batch member still gathering at the shutdown is released with
	// the open breaker's hold, not at once.
	case v.Check == chkStranded && strings.Contains(v.Text, "though the shutdown cancelled") && strings.Contains(v.Text, "still gathering for a batch"):
		return "new: gathering member held by the breaker at shutdown"
	// New: a receive cut by the hard stop is not taken out of Stats.Asked.
	case v.Check == chkStats && strings.Contains(v.Text, "asked") && !strings.Contains(v.Text, "asked 0"):
		return "new: Stats.Asked after a receive cut by the hard stop"
	}
	return ""
}
