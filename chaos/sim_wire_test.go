package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// simFault is one class of fault the simulation injects: a whole-call
// answer (sqstest's FailNext), failed entries of a batch call
// (FailNextEntries), a delay before the server runs the request
// (DelayNext), or an answer lost on its way back (the server ran the
// request; the client gets a connection error).
type simFault struct {
	class   string
	weight  int
	actions string // the actions it applies to: "all", "batch" or "receive"
	kind    int    // faultWhole, faultEntries, faultDelay, faultLost
	fault   sqstest.Fault
}

const (
	faultWhole = iota
	faultEntries
	faultDelay
	faultLost
)

// simFaults lists every class the sqstest server can inject, weighted.
// Permanent errors on ReceiveMessage end the Consumer's Run: the
// simulation then starts a new process, as a supervisor would.
var simFaults = []simFault{
	{"throttled", 6, "all", faultWhole, sqstest.FaultThrottled},
	{"internal-error", 6, "all", faultWhole, sqstest.FaultInternalError},
	{"unavailable", 4, "all", faultWhole, sqstest.FaultServiceUnavailable},
	{"over-limit", 2, "all", faultWhole, sqstest.FaultOverLimit},
	{"kms-throttled", 2, "all", faultWhole, sqstest.FaultKmsThrottled},
	{"access-denied", 1, "all", faultWhole, sqstest.FaultAccessDenied},
	{"queue-does-not-exist", 1, "all", faultWhole, sqstest.FaultQueueDoesNotExist},
	{"invalid-parameter", 1, "all", faultWhole, sqstest.FaultInvalidParameterValue},
	{"not-inflight", 2, "batch", faultWhole, sqstest.FaultMessageNotInflight},
	{"handle-invalid", 2, "batch", faultWhole, sqstest.FaultReceiptHandleIsInvalid},
	{"entry-throttled", 3, "batch", faultEntries, sqstest.FaultThrottled},
	{"entry-internal-error", 3, "batch", faultEntries, sqstest.FaultInternalError},
	{"entry-not-inflight", 2, "batch", faultEntries, sqstest.FaultMessageNotInflight},
	{"entry-handle-invalid", 2, "batch", faultEntries, sqstest.FaultReceiptHandleIsInvalid},
	{"entry-access-denied", 1, "batch", faultEntries, sqstest.FaultAccessDenied},
	{"delay", 6, "all", faultDelay, sqstest.Fault{}},
	{"lost-answer", 6, "all", faultLost, sqstest.Fault{}},
}

// faultExpire is the class of sqstest's Server.Expire, injected by the
// driver rather than on a call.
const faultExpire = "expire"

var (
	errCrashed    = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused (the simulated process has crashed)")}
	errLostAnswer = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer (answer lost)")}
)

// simWire is one simulated process's connection to the server: it injects
// faults on its calls, and records, for the batch calls that carry receipt
// handles, every call that did not simply succeed at once (whole-call
// error, failed entry, delay, lost answer) against the handles it named:
// the evidence a duplicate is explained by. A crashed process's wire fails
// every call without reaching the server.
type simWire struct {
	sim  *sim
	proc *simProc
	base http.RoundTripper
}

func (w *simWire) RoundTrip(req *http.Request) (*http.Response, error) {
	if w.proc.isDead() {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errCrashed
	}
	action := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "AmazonSQS.")
	batch := action == "DeleteMessageBatch" || action == "ChangeMessageVisibilityBatch"
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	f := w.sim.drawFault(action, batch)
	if f != nil {
		switch f.kind {
		case faultWhole:
			w.sim.srv.FailNext(action, 1, f.fault)
		case faultEntries:
			w.sim.srv.FailNextEntries(action, 1+int(w.sim.draw(tagEntries, uint64(len(body)))%3), f.fault)
		case faultDelay:
			w.sim.srv.DelayNext(action, 1, time.Second+time.Duration(w.sim.draw(tagDelay, uint64(len(body)))%40)*time.Second)
		}
	}
	start := time.Now()
	resp, err := w.base.RoundTrip(req)
	slow := time.Since(start) > 0 && action != "ReceiveMessage"
	if w.proc.isDead() {
		// The process died while the call was in flight: whatever the
		// server did, the answer reaches no one.
		if resp != nil {
			resp.Body.Close()
		}
		return nil, errCrashed
	}
	var rbody []byte
	if resp != nil {
		rbody, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(rbody))
	}
	lost := f != nil && f.kind == faultLost
	if batch {
		failedEntries := resp != nil && bytes.Contains(rbody, []byte(`"Failed":[{`))
		if lost || err != nil || slow || resp.StatusCode != http.StatusOK || failedEntries {
			w.sim.noteCall(action, body, rbody, lost, err != nil || slow || resp.StatusCode != http.StatusOK)
		}
	}
	if lost {
		return nil, errLostAnswer
	}
	return resp, err
}

type batchEntries struct {
	Entries []struct {
		ID            string `json:"Id"`
		ReceiptHandle string `json:"ReceiptHandle"`
	} `json:"Entries"`
}

type batchFailed struct {
	Failed []struct {
		ID   string `json:"Id"`
		Code string `json:"Code"`
	} `json:"Failed"`
}

// handlesOf returns the receipt handles a batch call named: all of them
// when the whole call went wrong, else those of its failed entries.
func handlesOf(body, rbody []byte, whole bool) []string {
	var in batchEntries
	if json.Unmarshal(body, &in) != nil {
		return nil
	}
	var hs []string
	if whole {
		for _, e := range in.Entries {
			hs = append(hs, e.ReceiptHandle)
		}
		return hs
	}
	var out batchFailed
	if json.Unmarshal(rbody, &out) != nil {
		return nil
	}
	for _, f := range out.Failed {
		for _, e := range in.Entries {
			if e.ID == f.ID {
				hs = append(hs, e.ReceiptHandle)
			}
		}
	}
	return hs
}
