package sqsconsumer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPlan(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	base := schedule{
		lease: 30 * time.Second, interval: 10 * time.Second, grace: 10 * time.Second,
		ceiling: at(12 * time.Hour), deadline: at(30 * time.Second), nextRenew: at(10 * time.Second),
	}
	with := func(f func(*schedule)) schedule { s := base; f(&s); return s }
	tests := []struct {
		name string
		now  time.Time
		s    schedule
		want step
	}{
		{"before the first renewal: sleep until a third of the lease", at(0), base,
			step{wake: at(10 * time.Second), deadline: at(30 * time.Second)}},
		{"renewal due: ask for the full lease", at(10 * time.Second), base,
			step{renewNow: true, renewFor: 30 * time.Second, deadline: at(30 * time.Second)}},
		{"late renewal still asks for the full lease", at(25 * time.Second), base,
			step{renewNow: true, renewFor: 30 * time.Second, deadline: at(30 * time.Second)}},
		{"deadline passed after SQS was asked: expired", at(30 * time.Second),
			with(func(s *schedule) { s.asked = true }),
			step{expired: true, deadline: at(30 * time.Second)}},
		{"deadline passed before SQS was ever asked: renew at once, not expired", at(30 * time.Second), base,
			step{renewNow: true, late: true, renewFor: 30 * time.Second, deadline: at(30 * time.Second)}},
		{"long past an estimated deadline: still ask SQS", at(40 * time.Second), base,
			step{renewNow: true, late: true, renewFor: 30 * time.Second, deadline: at(30 * time.Second)}},
		{"past an estimated deadline with the ceiling too near to renew: expired", at(12*time.Hour - 2*time.Second),
			with(func(s *schedule) { s.deadline = at(12*time.Hour - 3*time.Second); s.ceilingFired = true }),
			step{expired: true, deadline: at(12*time.Hour - 3*time.Second)}},
		{"past an estimated deadline after SQS refused to go further: expired", at(31 * time.Second),
			with(func(s *schedule) { s.noRenew = true }),
			step{expired: true, deadline: at(31*time.Second - time.Second)}},
		{"near the ceiling: clip to ceiling minus margin", at(12*time.Hour - 20*time.Second),
			with(func(s *schedule) {
				s.deadline = at(12*time.Hour - 10*time.Second)
				s.nextRenew = at(12*time.Hour - 20*time.Second)
				s.ceilingFired = true
			}),
			step{renewNow: true, renewFor: 18 * time.Second, deadline: at(12*time.Hour - 10*time.Second)}},
		{"grace reached: fire the ceiling cancellation", at(12*time.Hour - 10*time.Second),
			with(func(s *schedule) {
				s.deadline = at(12*time.Hour - 2*time.Second)
				s.nextRenew = at(12*time.Hour - 22*time.Second)
			}),
			step{fireCeiling: true, wake: at(12*time.Hour - 2*time.Second), deadline: at(12*time.Hour - 2*time.Second)}},
		{"wake for the grace before the renewal when it comes first", at(12*time.Hour - 15*time.Second),
			with(func(s *schedule) {
				s.deadline = at(12*time.Hour + 5*time.Second)
				s.nextRenew = at(12*time.Hour - 5*time.Second)
				s.ceiling = at(12 * time.Hour)
			}),
			step{wake: at(12*time.Hour - 10*time.Second), deadline: at(12*time.Hour + 5*time.Second)}},
		{"at the ceiling a renewal that would not extend is not sent", at(12*time.Hour - 10*time.Second),
			with(func(s *schedule) {
				s.deadline = at(12*time.Hour - 2*time.Second)
				s.nextRenew = at(12*time.Hour - 22*time.Second)
				s.ceilingFired = true
			}),
			step{wake: at(12*time.Hour - 2*time.Second), deadline: at(12*time.Hour - 2*time.Second)}},
		{"SQS refused (noRenew): wait for the deadline", at(15 * time.Second),
			with(func(s *schedule) { s.noRenew = true }),
			step{wake: at(30 * time.Second), deadline: at(30 * time.Second)}},
		{"whole seconds only", at(12*time.Hour - 20*time.Second - 300*time.Millisecond),
			with(func(s *schedule) {
				s.deadline = at(12*time.Hour - 10*time.Second)
				s.nextRenew = at(0)
				s.ceilingFired = true
			}),
			step{renewNow: true, renewFor: 18 * time.Second, deadline: at(12*time.Hour - 10*time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan(tt.now, tt.s)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestClassifyCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code, msg string
		want      errorKind
	}{
		{"ReceiptHandleIsInvalid", `The input receipt handle "x" is not a valid receipt handle.`, kindLost},
		{"AWS.SimpleQueueService.MessageNotInflight", "", kindLost},
		{"MessageNotInflight", "", kindLost},
		{"InvalidParameterValue", "Value x for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", kindLost},
		{"InvalidParameterValueException", "Value x for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", kindLost},
		{"ReceiptHandleIsInvalid", "The receipt handle has expired", kindLost},
		{"InvalidParameterValue", "Value 43200 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]", kindCeiling},
		{"InvalidParameterValue", "Value 50000 for parameter VisibilityTimeout is invalid.", kindPermanent},
		{"AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.", kindPermanent},
		{"RequestThrottled", "", kindTransient},
		{"InternalError", "", kindTransient},
		{"ServiceUnavailable", "", kindTransient},
	}
	for _, tt := range tests {
		t.Run(tt.code+"/"+tt.msg, func(t *testing.T) {
			require.Equal(t, tt.want, classifyCode(tt.code, tt.msg))
		})
	}
}

func TestHandoverTime(t *testing.T) {
	t.Parallel()
	sent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		answered time.Duration // after sent
		want     time.Duration // after sent
	}{
		{"instant answer: the request's sending", 0, 0},
		{"answer within the slack: the request's sending", 800 * time.Millisecond, 0},
		{"answer exactly one slack later", time.Second, 0},
		{"message arrived 8 s into a long poll", 8 * time.Second, 7 * time.Second},
		{"whole 20 s poll", 20 * time.Second, 19 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := HandoverTime(sent, sent.Add(tt.answered))
			require.Equal(t, sent.Add(tt.want), got, "HandoverTime(sent, sent+%v)", tt.answered)
		})
	}
}
