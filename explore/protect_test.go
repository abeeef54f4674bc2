package explore

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/ecsprotect"
)

// ecsAgent plays the ECS agent's task scale-in protection endpoint for
// one process's Protector (WithScaleInProtection): an in-memory
// http.RoundTripper that answers each PUT as the agent does on success,
// and keeps the protection's state.
type ecsAgent struct {
	mu      sync.Mutex
	enabled bool
	expires time.Time
	calls   int
}

const agentURI = "http://169.254.170.2/api/explore-task"

func (a *ecsAgent) RoundTrip(req *http.Request) (*http.Response, error) {
	var in struct {
		ProtectionEnabled *bool
		ExpiresInMinutes  *int
	}
	if req.Body != nil {
		_ = json.NewDecoder(req.Body).Decode(&in)
		req.Body.Close()
	}
	status, out := http.StatusOK, map[string]any{}
	if in.ProtectionEnabled == nil {
		status = http.StatusBadRequest
		out["error"] = map[string]any{"Code": "InvalidParameterException", "Message": "no ProtectionEnabled"}
	} else {
		now := time.Now()
		a.mu.Lock()
		a.calls++
		a.enabled = *in.ProtectionEnabled
		var exp any
		if a.enabled {
			m := 120
			if in.ExpiresInMinutes != nil {
				m = *in.ExpiresInMinutes
			}
			a.expires = now.Add(time.Duration(m) * time.Minute).Truncate(time.Second)
			exp = a.expires.UTC().Format(time.RFC3339)
		} else {
			a.expires = time.Time{}
		}
		a.mu.Unlock()
		out["protection"] = map[string]any{"ExpirationDate": exp, "ProtectionEnabled": *in.ProtectionEnabled,
			"TaskArn": "arn:aws:ecs:us-east-1:123456789012:task/explore/0"}
	}
	b, _ := json.Marshal(out)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: req}, nil
}

// protectedAt reports whether the task is protected at now, as ECS sees it.
func (a *ecsAgent) protectedAt(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.enabled && now.Before(a.expires)
}

// newProtector makes process p's Protector, over its own agent, with the
// scenario's quiet period.
func (r *run) newProtector(p *proc) (*ecsprotect.Protector, error) {
	p.agent = &ecsAgent{}
	return ecsprotect.New(ecsprotect.WithAgentURI(agentURI), ecsprotect.WithHTTPClient(&http.Client{Transport: p.agent}),
		ecsprotect.WithQuietPeriod(r.sc.Protect.D()))
}

// judgeProtectionLocked: while p has held a message for a while (from its
// EventReceived to its EventDone), the task is protected from scale-in.
func (r *run) judgeProtectionLocked(p *proc, st sqsconsumer.Stats, now time.Time) {
	if p.agent == nil {
		return
	}
	if p.held > 0 && now.Sub(p.heldSince) > time.Second {
		r.seen["protection:judged-held"] = true
		if !p.agent.protectedAt(now) {
			r.violateLocked(chkProtect, "%s: at %v it has held %d messages since %v, but the task is not protected from scale-in (Protector %+v)",
				p.name(), r.at(now), p.held, r.at(p.heldSince), st.ScaleInProtection)
		}
	}
}

// checkProtectionAfter: once Run has returned and the Protector is
// closed, nothing is held and the protection is cleared.
func (r *run) checkProtectionAfter(p *proc) {
	if p.agent == nil {
		return
	}
	err := p.protector.Close()
	st := p.protector.Stats()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.violateLocked(chkProtect, "%s: closing the Protector after Run: %v", p.name(), err)
	}
	if st.Held != 0 {
		r.violateLocked(chkProtect, "%s: after Run returned the Protector counts %d messages held", p.name(), st.Held)
	}
	if p.agent.protectedAt(time.Now()) {
		r.violateLocked(chkProtect, "%s: after Run returned and the Protector closed, the task is still protected from scale-in", p.name())
	}
	if p.agent.calls > 0 {
		r.seen["protection:agent-called"] = true
	}
}
