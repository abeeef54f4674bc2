package ecsprotect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// loop is the Protector's goroutine: it makes every call to the agent and
// returns when ctx is cancelled, after clearing the protection if a call
// may have set it.
func (p *Protector) loop(ctx context.Context) {
	defer close(p.done)
	var (
		maybe   bool          // a call may have enabled protection; cleared by a successful clear
		renewAt time.Time     // when to renew the confirmed protection
		retryAt time.Time     // no call before this, after a failure
		lapse   time.Time     // when what may have been enabled lapses by itself
		backoff time.Duration // the last retry delay
	)
	failed := func(now time.Time) {
		backoff = min(max(2*backoff, retryMin), retryMax)
		retryAt = now.Add(backoff)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		p.mu.Lock()
		busy := p.held > 0
		idleSince := p.idleSince
		confirmed := p.stats.Protected
		p.mu.Unlock()
		now := time.Now()
		if maybe && !busy && !now.Before(lapse) {
			maybe = false // lapsed by itself: no clear left to retry
		}
		var due time.Time // when to look again; zero: only when woken
		switch {
		case busy && (!confirmed || !now.Before(renewAt)):
			if now.Before(retryAt) {
				due = retryAt
				break
			}
			maybe, lapse = true, now.Add(time.Duration(p.expires)*time.Minute)
			if err := p.call(ctx, true); err != nil {
				failed(time.Now()) // from the call's end: a slow failure is no reason to retry at once
			} else {
				renewAt = now.Add(time.Duration(p.expires) * time.Minute / 2)
				backoff, retryAt = 0, time.Time{}
			}
			continue // the count may have changed during the call
		case busy:
			due = renewAt
		case maybe && !now.Before(idleSince.Add(p.quiet)):
			if now.Before(retryAt) {
				due = retryAt
				break
			}
			if err := p.call(ctx, false); err != nil {
				failed(time.Now())
				renewAt = time.Time{} // the clear may have landed: enable again if busy
			} else {
				maybe = false
				backoff, retryAt = 0, time.Time{}
			}
			continue
		case maybe:
			due = idleSince.Add(p.quiet)
		}
		var tick <-chan time.Time
		if !due.IsZero() {
			timer.Reset(due.Sub(now))
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			if maybe {
				cctx := context.WithoutCancel(ctx)
				err := p.call(cctx, false)
				p.mu.Lock()
				p.closeErr = err
				p.mu.Unlock()
			}
			return
		case <-p.wake:
		case <-tick:
		}
		timer.Stop() // since Go 1.23 no stale fire remains after Stop
	}
}

// answer is the agent's JSON answer: one of protection, failure, error.
type answer struct {
	RequestID  string `json:"requestID"`
	Protection *struct {
		ExpirationDate    *time.Time
		ProtectionEnabled bool
		TaskArn           string
	} `json:"protection"`
	Failure *struct {
		Arn    *string
		Detail *string
		Reason *string
	} `json:"failure"`
	Error *struct {
		Arn     string
		Code    string
		Message string
	} `json:"error"`
}

// call makes one PUT to the agent, bounded by the call timeout, and
// records its outcome in the stats and the log.
func (p *Protector) call(ctx context.Context, enable bool) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	body := []byte(`{"ProtectionEnabled":false}`)
	if enable {
		body = fmt.Appendf(nil, `{"ProtectionEnabled":true,"ExpiresInMinutes":%d}`, p.expires)
	}
	ans, err := p.put(ctx, body)
	if err == nil && ans.Protection.ProtectionEnabled != enable {
		err = &AgentError{Status: http.StatusOK, Arn: ans.Protection.TaskArn,
			Message: fmt.Sprintf("answer's ProtectionEnabled is %v, asked %v", ans.Protection.ProtectionEnabled, enable)}
	}

	// The bookkeeping holds the lock; the log line is written after it is
	// released, so a slow log destination never delays Acquire or Release.
	logLine := p.record(ctx, start, enable, ans, err)
	if logLine != nil {
		logLine()
	}
	return err
}

// record counts a call's outcome and returns the log line to write, if
// any, once the lock is released.
func (p *Protector) record(ctx context.Context, start time.Time, enable bool, ans *answer, err error) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Calls++
	if err != nil {
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
			return nil // cancelled by Close: not the agent's failure
		}
		p.stats.Failures++
		p.stats.LastError = err
		p.stats.LastErrorAt = start
		p.unwarned++
		p.failing = true
		if !p.lastWarn.IsZero() && start.Sub(p.lastWarn) < warnEvery {
			return nil // rate-limited
		}
		n, total := p.unwarned, p.stats.Failures
		p.lastWarn, p.unwarned = start, 0
		return func() {
			p.logger.Warn("ecsprotect: task scale-in protection call failed",
				"enable", enable, "failures", n, "total_failures", total, "error", err)
		}
	}
	recovered := p.failing
	p.failing = false
	switch {
	case !enable:
		p.stats.Clears++
		p.stats.Protected = false
		p.expiresAt = time.Time{}
	case p.stats.Protected && time.Now().Before(p.expiresAt):
		p.stats.Renewals++
	default:
		p.stats.Enables++
	}
	if enable {
		p.stats.Protected = true
		p.expiresAt = start.Add(time.Duration(p.expires) * time.Minute)
		if e := ans.Protection.ExpirationDate; e != nil && !e.IsZero() {
			p.expiresAt = *e
		}
	}
	total, expiresAt, took := p.stats.Failures, p.expiresAt, time.Since(start)
	return func() {
		if recovered {
			p.logger.Info("ecsprotect: task scale-in protection calls succeed again",
				"total_failures", total)
		}
		p.logger.Debug("ecsprotect: task scale-in protection set",
			"enabled", enable, "expires_at", expiresAt, "took", took)
	}
}

// put sends body and decodes the agent's answer; a failure or error answer,
// or a status other than 2xx, is an *AgentError.
func (p *Protector) put(ctx context.Context, body []byte) (*answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("ecsprotect: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ecsprotect: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBodySize))
	if err != nil {
		return nil, fmt.Errorf("ecsprotect: reading the agent's answer: %w", err)
	}
	var ans answer
	jsonErr := json.Unmarshal(raw, &ans)
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	switch {
	case jsonErr == nil && ans.Error != nil:
		return nil, &AgentError{Status: resp.StatusCode, RequestID: ans.RequestID,
			Arn: ans.Error.Arn, Code: ans.Error.Code, Message: ans.Error.Message}
	case jsonErr == nil && ans.Failure != nil:
		return nil, &AgentError{Status: resp.StatusCode, Arn: deref(ans.Failure.Arn),
			Reason: deref(ans.Failure.Reason), Detail: deref(ans.Failure.Detail)}
	case ok && jsonErr == nil && ans.Protection != nil:
		return &ans, nil
	}
	msg := string(raw)
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if ok {
		msg = "answer has no protection: " + msg
	}
	return nil, &AgentError{Status: resp.StatusCode, Message: msg}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
